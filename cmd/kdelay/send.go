package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// progressMin is the record count from which send shows a progress bar on
// a terminal.
const progressMin = 1000

type sendFlags struct {
	target    string
	delay     string
	at        string
	level     int
	key       string
	headers   []string
	partition int32
	value     string
	count     int
	progress  bool
}

func (a *app) newSendCmd() *cobra.Command {
	var f sendFlags
	cmd := &cobra.Command{
		Use:   "send --target TOPIC (--delay D | --at TIME | --level N) [flags]",
		Short: "Produce delayed records to the delay topic",
		Long: `Produce delayed records to the delay topic, stamped as the producer contract
says (levels.Table.Stamp): the kdelay headers, and the partition of the
record's level chosen by key hash.

The value is --value, or else everything read from stdin. In --key and
--value, "{i}" is replaced by the record's index (0-based), so --count 1000
--key "order-{i}" sends 1000 distinct keys.`,
		Example: `  kdelay send --target orders --delay 30s --key order-42 --value '{"id":42}'
  echo hello | kdelay send --target demo --level 3 -H trace-id=abc
  kdelay send --target demo --at 2030-01-01T00:00:00Z --value new-year
  kdelay send --target demo --delay 1m --count 100000 --key "k{i}" --value "v{i}" --progress`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			return a.send(cmd, f)
		}),
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.target, "target", "t", "", "target topic to deliver to (required)")
	fl.StringVarP(&f.delay, "delay", "d", "", "delay after now: a Go duration (90s, 1h30m) or milliseconds")
	fl.StringVar(&f.at, "at", "", "absolute due time: RFC 3339 (2030-01-01T00:00:00Z) or epoch milliseconds")
	fl.IntVarP(&f.level, "level", "l", 0, "delay level, 1..levels (see kdelay levels)")
	fl.StringVarP(&f.key, "key", "k", "", `record key ("{i}" = record index); default no key`)
	fl.StringArrayVarP(&f.headers, "header", "H", nil, "header key=value, repeatable")
	fl.Int32VarP(&f.partition, "partition", "p", -1, "partition of the target topic; -1: the key decides")
	fl.StringVar(&f.value, "value", "", `record value ("{i}" = record index); default: read from stdin`)
	fl.IntVarP(&f.count, "count", "n", 1, "number of records to send")
	fl.BoolVar(&f.progress, "progress", false, fmt.Sprintf("show a progress bar on stderr (default: on a terminal from %d records)", progressMin))
	cmd.MarkFlagRequired("target")
	cmd.MarkFlagsMutuallyExclusive("delay", "at", "level")
	cmd.MarkFlagsOneRequired("delay", "at", "level")
	return cmd
}

// parseDelay accepts a Go duration or whole milliseconds, as the
// kdelay-delay header does.
func parseDelay(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(ms) * time.Millisecond, nil
	}
	return time.ParseDuration(s)
}

// parseAt accepts RFC 3339 or epoch milliseconds, as the kdelay-deliver-at
// header does.
func parseAt(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms >= 0 {
		return time.UnixMilli(ms), nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// schedule turns the flags into a levels.Delay (without its time base).
func (f sendFlags) schedule(tab *levels.Table) (levels.Delay, error) {
	d := levels.Delay{Target: f.target}
	if err := levels.ValidTopicName(f.target); err != nil {
		return d, usageErrorf("invalid --target %q: not a valid Kafka topic name", f.target)
	}
	switch {
	case f.delay != "":
		delay, err := parseDelay(f.delay)
		if err != nil {
			return d, usageErrorf("invalid --delay %q: not a duration (examples: 500ms, 90s, 1h30m) or milliseconds", f.delay)
		}
		if delay < 0 {
			return d, usageErrorf("invalid --delay %q: negative", f.delay)
		}
		d.Delay = delay
	case f.at != "":
		at, err := parseAt(f.at)
		if err != nil {
			return d, usageErrorf("invalid --at %q: want RFC 3339 (2030-01-01T00:00:00Z) or epoch milliseconds", f.at)
		}
		d.At = at
	default:
		if f.level < 1 || f.level > tab.Levels() {
			return d, usageErrorf("invalid --level %d: levels are 1..%d (see kdelay levels)", f.level, tab.Levels())
		}
		d.Level = f.level
	}
	if f.partition >= 0 {
		p := f.partition
		d.Partition = &p
	} else if f.partition != -1 {
		return d, usageErrorf("invalid --partition %d: must be 0 or more", f.partition)
	}
	return d, nil
}

func parseHeaders(kvs []string) ([]kgo.RecordHeader, error) {
	var hs []kgo.RecordHeader
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErrorf("invalid --header %q: want key=value", kv)
		}
		if levels.IsControl(k) {
			return nil, usageErrorf("invalid --header %q: kdelay-* headers are set by --target, --delay, --at, --level and --partition", kv)
		}
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return hs, nil
}

func (a *app) send(cmd *cobra.Command, f sendFlags) error {
	cfg, err := a.loadConfig(cmd, nil)
	if err != nil {
		return err
	}
	tab := cfg.Table()
	sched, err := f.schedule(tab)
	if err != nil {
		return err
	}
	headers, err := parseHeaders(f.headers)
	if err != nil {
		return err
	}
	if f.count < 1 {
		return usageErrorf("invalid --count %d: must be at least 1", f.count)
	}
	if !cmd.Flags().Changed("value") {
		if isTerminal(a.stdin) {
			return usageErrorf("no value: give --value, or pipe the value on stdin")
		}
		if a.stdin != nil {
			b, err := io.ReadAll(a.stdin)
			if err != nil {
				return fmt.Errorf("read value from stdin: %w", err)
			}
			f.value = string(b)
		}
	}
	log := cfg.Logger(a.stderr)
	if ok, why := cfg.TargetAllowed(f.target); !ok {
		log.Warn("a relay with this configuration dead-letters records for this target", "target", f.target, "reason", why)
	}

	cl, err := newClient(cfg, log, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := cmd.Context()
	actx, cancel := context.WithTimeout(ctx, adminTimeout)
	n, exists, err := partitionCount(actx, kadm.NewClient(cl), cfg.Topic)
	cancel()
	switch {
	case err != nil:
		return err
	case !exists:
		return fmt.Errorf("delay topic %s does not exist; create it with `kdelay topic create`", cfg.Topic)
	case n != tab.Partitions():
		return mismatchError(cfg, n)
	}

	var bar *progressbar.ProgressBar
	if f.progress || (f.count >= progressMin && isTerminal(a.stderr)) {
		bar = progressbar.NewOptions(f.count,
			progressbar.OptionSetWriter(a.stderr),
			progressbar.OptionSetDescription("sending"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("records"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetPredictTime(true),
		)
	}

	var (
		mu       sync.Mutex
		acked    int
		firstErr error
		failed   int
		parts    = make(map[int32]int)
		due      [2]time.Time // earliest, latest
	)
	start := time.Now()
	key := func(i int) []byte {
		if !cmd.Flags().Changed("key") {
			return nil
		}
		return []byte(strings.ReplaceAll(f.key, "{i}", strconv.Itoa(i)))
	}
	for i := range f.count {
		rec := &kgo.Record{
			Key:     key(i),
			Value:   []byte(strings.ReplaceAll(f.value, "{i}", strconv.Itoa(i))),
			Headers: slices.Clone(headers),
		}
		d, now := sched, time.Now()
		if d.Delay == 0 && d.At.IsZero() && d.Level == 0 {
			d.At = now // --delay 0: due at once, as an absolute time
		}
		if err := tab.Stamp(rec, cfg.Topic, d, now); err != nil {
			return usageErrorf("%v", err)
		}
		s, err := tab.Parse(rec.Headers, rec.Timestamp)
		if err != nil {
			return fmt.Errorf("stamped record does not parse: %w", err)
		}
		cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			acked++
			parts[r.Partition]++
			if due[0].IsZero() || s.Due.Before(due[0]) {
				due[0] = s.Due
			}
			if s.Due.After(due[1]) {
				due[1] = s.Due
			}
			if bar != nil {
				bar.Add(1)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(a.stderr)
	}
	took := time.Since(start)

	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(a.stdout, "sent %s to %s for target %s in %s\n", plural(acked, "record"), cfg.Topic, f.target, took.Round(time.Millisecond))
	if acked > 0 {
		ps := make([]string, 0, len(parts))
		for _, p := range slices.Sorted(maps.Keys(parts)) {
			l := tab.LevelOf(p)
			ps = append(ps, fmt.Sprintf("%d (level %d, %s): %d", p, l, levels.FormatDuration(tab.Duration(l)), parts[p]))
		}
		fmt.Fprintf(a.stdout, "  partitions  %s\n", strings.Join(ps, "; "))
		when := fmtTime(due[0])
		if !due[1].Equal(due[0]) {
			when += " .. " + fmtTime(due[1])
		}
		fmt.Fprintf(a.stdout, "  due         %s (%s)\n", when, relative(time.Until(due[0])))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d records failed; first error: %w", failed, f.count, firstErr)
	}
	return nil
}

// fmtTime writes t in UTC with milliseconds.
func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// relative says "in 10s" or "5s ago".
func relative(d time.Duration) string {
	if d >= 0 {
		return "in " + levels.FormatDuration(d.Round(time.Millisecond))
	}
	return levels.FormatDuration((-d).Round(time.Millisecond)) + " ago"
}
