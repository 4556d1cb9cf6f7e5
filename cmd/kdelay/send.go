package main

import (
	"context"
	"errors"
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

	"github.com/kdelay/kdelay/config"
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
	force     bool
	asJSON    bool
	id        string
	replace   bool
	every     string
	cron      string
	timezone  string
	until     string
	times     int
}

// interruptGrace bounds how long send waits, once interrupted, for the
// records already in flight to be acknowledged.
const interruptGrace = 1500 * time.Millisecond

// pastSlack is how far in the past --at may lie without --force: a script
// passing "now" as epoch milliseconds is a moment late by the time it runs.
const pastSlack = time.Minute

func (a *app) newSendCmd() *cobra.Command {
	var f sendFlags
	cmd := &cobra.Command{
		Use:   "send --target TOPIC (--delay D | --at TIME | --level N | --every D | --cron EXPR) [flags]",
		Short: "Produce delayed records to the delay topic",
		Long: `Produce delayed records to the delay topic, stamped as the producer contract
says (levels.Table.Stamp): the kdelay headers, and the partition of the
record's level chosen by key hash.

The value is --value, or else everything read from stdin. In --key and
--value, "{i}" is replaced by the record's index (0-based), so --count 1000
--key "order-{i}" sends 1000 distinct keys.

Before sending it checks what a relay with the same configuration would
dead-letter, and refuses it (exit 2) unless --force: a target that does not
exist or that KDELAY_TARGET_ALLOW/DENY refuse, a --partition the target does
not have, a delay over KDELAY_MAX_DELAY. It also refuses an --at more than
a minute in the past (the relay would deliver it at once). A bare number
given to --delay is milliseconds (as the kdelay-delay header says); send
warns when it is under 1000.

Ctrl-C stops sending: send waits at most 1.5s for the records in flight,
prints how many were acknowledged and exits 1.

--id sets the record's kdelay-id ("{i}" = record index), the id a cancel on
the cancel topic names (see kdelay cancel). --replace reschedules: for each
record it first writes a cancel of the id, cut-off now (rounded up to the
next millisecond), waits for its ack, then sends the new record with that
timestamp, so only earlier records with the id are cancelled.

--every or --cron sends a recurring series (needs --id): each occurrence is
forwarded once and the next one scheduled through the delay topic. --every
is a Go duration of at least 1s (occurrences at first + n x every); --cron
is five fields, or six with seconds first, read in --timezone (IANA, default
UTC). The first occurrence is --delay/--at when given, else the first one
after now. --until ends the series, --times limits its firings; kdelay
cancel --id stops it.`,
		Example: `  kdelay send --target orders --delay 30s --key order-42 --value '{"id":42}'
  echo hello | kdelay send --target demo --level 3 -H trace-id=abc
  kdelay send --target demo --at 2030-01-01T00:00:00Z --value new-year
  kdelay send --target demo --delay 1m --count 100000 --key "k{i}" --value "v{i}" --progress
  kdelay send --target orders --delay 30m --id order-42 --value '{"id":42}'
  kdelay send --target orders --delay 1h --id order-42 --replace --value '{"id":42}'
  kdelay send --target reports --every 1h --id hourly-report --value run
  kdelay send --target reports --cron "0 30 9 * * MON-FRI" --timezone Europe/Berlin --id standup --value ping`,
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
	fl.BoolVar(&f.force, "force", false, "send even what a relay would dead-letter (missing target, refused target, bad partition, delay over KDELAY_MAX_DELAY) or an --at in the past")
	fl.BoolVar(&f.asJSON, "json", false, "print the summary as JSON")
	fl.StringVar(&f.id, "id", "", `the records' kdelay-id, 1-255 bytes ("{i}" = record index); default none`)
	fl.BoolVar(&f.replace, "replace", false, "reschedule: cancel the earlier records with the --id first, then send")
	fl.StringVar(&f.every, "every", "", "a recurring series every this Go duration (at least 1s); needs --id")
	fl.StringVar(&f.cron, "cron", "", `a recurring series on a cron expression, five fields or six with seconds first ("*/10 * * * * *"); needs --id`)
	fl.StringVar(&f.timezone, "timezone", "", "IANA time zone of --cron (default UTC)")
	fl.StringVar(&f.until, "until", "", "end of the series: RFC 3339 or epoch milliseconds")
	fl.IntVar(&f.times, "times", 0, "number of firings of the series (kdelay-count); default no limit")
	cmd.MarkFlagRequired("target")
	cmd.MarkFlagsMutuallyExclusive("delay", "at", "level")
	cmd.MarkFlagsMutuallyExclusive("every", "cron")
	cmd.MarkFlagsOneRequired("delay", "at", "level", "every", "cron")
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
func (f sendFlags) schedule(tab *levels.Table) (schedule, error) {
	d := schedule{Target: f.target}
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
	case f.level != 0 || (f.every == "" && f.cron == ""):
		if f.level < 1 || f.level > tab.Levels() {
			return d, usageErrorf("invalid --level %d: levels are 1..%d (see kdelay levels)", f.level, tab.Levels())
		}
		d.Level = f.level
	}
	if err := f.series(&d); err != nil {
		return d, err
	}
	if f.partition >= 0 {
		p := f.partition
		d.Partition = &p
	} else if f.partition != -1 {
		return d, usageErrorf("invalid --partition %d: must be 0 or more", f.partition)
	}
	return d, nil
}

// series adds --every, --cron, --timezone, --until and --times to d.
func (f sendFlags) series(d *schedule) error {
	if f.every == "" && f.cron == "" {
		if f.timezone != "" || f.until != "" || f.times != 0 {
			return usageErrorf("--timezone, --until and --times need --every or --cron")
		}
		return nil
	}
	if f.every != "" {
		every, err := time.ParseDuration(strings.TrimSpace(f.every))
		if err != nil || every < levels.MinEvery {
			return usageErrorf("invalid --every %q: a Go duration of at least 1s (examples: 30s, 1h)", f.every)
		}
		d.Every = every
	}
	if f.timezone != "" && f.cron == "" {
		return usageErrorf("--timezone needs --cron (an --every series is a fixed grid)")
	}
	d.Cron, d.Timezone = f.cron, f.timezone
	if f.until != "" {
		u, err := parseAt(f.until)
		if err != nil {
			return usageErrorf("invalid --until %q: want RFC 3339 or epoch milliseconds", f.until)
		}
		d.Until = u
	}
	if f.times < 0 {
		return usageErrorf("invalid --times %d: must be 1 or more", f.times)
	}
	d.Count = f.times
	return nil
}

// base returns the schedule of a record sent at now: --delay 0 becomes an
// absolute due time of now (a series without a first time starts on its
// own).
func (d schedule) base(now time.Time) levels.Delay {
	ld := levels.Delay(d)
	if ld.Delay == 0 && ld.At.IsZero() && ld.Level == 0 && ld.Every == 0 && ld.Cron == "" {
		ld.At = now
	}
	return ld
}

// schedule is a levels.Delay without its time base.
type schedule levels.Delay

func parseHeaders(kvs []string) ([]kgo.RecordHeader, error) {
	var hs []kgo.RecordHeader
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErrorf("invalid --header %q: want key=value", kv)
		}
		if levels.IsControl(k) {
			return nil, usageErrorf("invalid --header %q: kdelay-* headers are set by --target, --delay, --at, --level, --partition, --id and the series flags", kv)
		}
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return hs, nil
}

func (a *app) send(cmd *cobra.Command, f sendFlags) error {
	cfg, err := a.loadClientConfig(cmd)
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
	if f.replace && f.id == "" {
		return usageErrorf("--replace needs --id: the id of the records to reschedule")
	}
	if n := len(strings.ReplaceAll(f.id, "{i}", strconv.Itoa(f.count-1))); n > levels.MaxIDLen {
		return usageErrorf("invalid --id: %d bytes, at most %d", n, levels.MaxIDLen)
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
	if f.delay != "" {
		if ms, err := strconv.ParseInt(strings.TrimSpace(f.delay), 10, 64); err == nil && ms > 0 && ms < 1000 {
			log.Warn(fmt.Sprintf("--delay %s is %dms: a bare number is milliseconds; write %ss for seconds", f.delay, ms, f.delay))
		}
	}

	cl, err := newClient(cfg, log, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := cmd.Context()
	adm := kadm.NewClient(cl)
	actx, cancel := context.WithTimeout(ctx, adminTimeout)
	n, exists, err := partitionCount(actx, adm, cfg.Topic)
	cancel()
	switch {
	case err != nil:
		return err
	case !exists:
		return fmt.Errorf("delay topic %s does not exist; create it with `kdelay topic create`", cfg.Topic)
	case n != tab.Partitions():
		return mismatchError(cfg, n)
	}
	var cx *kgo.Client // cancels of --replace, partitioned by key
	if f.replace {
		actx, cancel := context.WithTimeout(ctx, adminTimeout)
		_, exists, err := partitionCount(actx, adm, cfg.CancelTopic)
		cancel()
		switch {
		case err != nil:
			return err
		case !exists:
			return fmt.Errorf("cancel topic %s does not exist; create it with `kdelay topic create`", cfg.CancelTopic)
		}
		if cx, err = newClient(cfg, log); err != nil {
			return err
		}
		defer cx.Close()
	}
	id := func(i int) string { return strings.ReplaceAll(f.id, "{i}", strconv.Itoa(i)) }

	// What the relay would do with these records: refuse what it would
	// dead-letter, before anything is sent.
	probe := &kgo.Record{Key: []byte(f.key), Headers: slices.Clone(headers)}
	pd := sched.base(time.Now())
	pd.ID = id(0)
	if err := tab.Stamp(probe, cfg.Topic, pd, time.Now()); err != nil {
		return usageErrorf("%v", err)
	}
	ps, err := tab.Parse(probe.Headers, probe.Timestamp)
	if err != nil {
		return fmt.Errorf("stamped record does not parse: %w", err)
	}
	if err := f.check(ctx, adm, cfg, ps, time.Now()); err != nil {
		var ue *usageError
		if !f.force || !errors.As(err, &ue) {
			return err
		}
		log.Warn("--force: sending anyway", "refused", strings.TrimSuffix(err.Error(), " (--force sends anyway)"))
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
		sum      = sendSummary{Topic: cfg.Topic, Target: f.target, Requested: f.count, Partitions: make(map[int32]int)}
		firstErr error
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
		if ctx.Err() != nil {
			break
		}
		rec := &kgo.Record{
			Key:     key(i),
			Value:   []byte(strings.ReplaceAll(f.value, "{i}", strconv.Itoa(i))),
			Headers: slices.Clone(headers),
		}
		now := time.Now()
		d := sched.base(now)
		d.ID = id(i)
		if f.replace {
			c, err := tab.Replace(rec, cfg.Topic, cfg.CancelTopic, d.ID, d, now)
			if err != nil {
				return usageErrorf("%v", err)
			}
			if err := cx.ProduceSync(ctx, c).FirstErr(); err != nil {
				return fmt.Errorf("cancel of id %s: %w", d.ID, err)
			}
			sum.Replaced++
		} else if err := tab.Stamp(rec, cfg.Topic, d, now); err != nil {
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
				sum.Failed++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			sum.Acked++
			sum.Partitions[r.Partition]++
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
	if ctx.Err() != nil {
		// Interrupted: drop what is still buffered, wait (briefly) for
		// what is in flight, and report what the brokers acknowledged.
		sum.Interrupted = true
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptGrace)
		if err := cl.AbortBufferedRecords(actx); err != nil {
			log.Warn("records still in flight when send gave up waiting; they may or may not have been written", "err", err)
		}
		cancel()
	} else if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if bar != nil {
		if sum.Interrupted {
			bar.Exit()
		} else {
			bar.Finish()
		}
		fmt.Fprintln(a.stderr)
	}
	took := time.Since(start)

	mu.Lock()
	defer mu.Unlock()
	sum.TookMs = took.Milliseconds()
	if sum.Acked > 0 {
		sum.DueFirst, sum.DueLast = ptr(due[0].UTC()), ptr(due[1].UTC())
	}
	if f.asJSON {
		if err := writeJSON(a.stdout, sum); err != nil {
			return err
		}
	} else {
		printSendSummary(a.stdout, sum, tab, took)
	}
	switch {
	case sum.Interrupted:
		return fmt.Errorf("interrupted: %d of %d records acknowledged", sum.Acked, f.count)
	case sum.Failed > 0:
		return fmt.Errorf("%d of %d records failed; first error: %w", sum.Failed, f.count, firstErr)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// sendSummary is what send reports (--json prints it as is).
type sendSummary struct {
	Topic       string        `json:"topic"`
	Target      string        `json:"target"`
	Requested   int           `json:"requested"`
	Acked       int           `json:"acked"`  // acknowledged by the brokers
	Failed      int           `json:"failed"` // produce failed (not counting those never sent after an interrupt)
	Interrupted bool          `json:"interrupted"`
	TookMs      int64         `json:"took_ms"`
	Partitions  map[int32]int `json:"partitions"` // delay-topic partition: records acked
	DueFirst    *time.Time    `json:"due_first,omitempty"`
	DueLast     *time.Time    `json:"due_last,omitempty"`
	Replaced    int           `json:"replaced,omitempty"` // cancels written first (--replace)
}

func printSendSummary(w io.Writer, sum sendSummary, tab *levels.Table, took time.Duration) {
	fmt.Fprintf(w, "sent %s to %s for target %s in %s\n", plural(sum.Acked, "record"), sum.Topic, sum.Target, took.Round(time.Millisecond))
	if sum.Replaced > 0 {
		fmt.Fprintf(w, "replacing: %s written first\n", plural(sum.Replaced, "cancel"))
	}
	if sum.Acked == 0 {
		return
	}
	ps := make([]string, 0, len(sum.Partitions))
	for _, p := range slices.Sorted(maps.Keys(sum.Partitions)) {
		l := tab.LevelOf(p)
		ps = append(ps, fmt.Sprintf("%d (level %d, %s): %d", p, l, levels.FormatDuration(tab.Duration(l)), sum.Partitions[p]))
	}
	fmt.Fprintf(w, "  partitions  %s\n", strings.Join(ps, "; "))
	when := fmtTime(*sum.DueFirst)
	if !sum.DueLast.Equal(*sum.DueFirst) {
		when += " .. " + fmtTime(*sum.DueLast)
	}
	fmt.Fprintf(w, "  due         %s (%s)\n", when, relative(time.Until(*sum.DueFirst)))
}

// check refuses (a usage error, exit 2) what a relay with cfg would
// dead-letter, and an --at in the past; s is the schedule of a record
// stamped now.
func (f sendFlags) check(ctx context.Context, adm *kadm.Client, cfg config.Config, s levels.Schedule, now time.Time) error {
	const hint = " (--force sends anyway)"
	if ok, why := cfg.TargetAllowed(f.target); !ok {
		return usageErrorf("target %s refused: %s; a relay with this configuration dead-letters it%s", f.target, why, hint)
	}
	if s.Delay > cfg.MaxDelay {
		return usageErrorf("delay %s exceeds KDELAY_MAX_DELAY %s; a relay dead-letters it%s",
			levels.FormatDuration(s.Delay.Round(time.Second)), levels.FormatDuration(cfg.MaxDelay), hint)
	}
	if f.at != "" && s.Due.Before(now.Add(-pastSlack)) {
		return usageErrorf("--at %s is %s in the past: a relay would deliver it at once; use --delay 0 to send for now%s",
			f.at, levels.FormatDuration(now.Sub(s.Due).Round(time.Second)), hint)
	}
	actx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	n, exists, err := partitionCount(actx, adm, f.target)
	switch {
	case err != nil:
		return fmt.Errorf("check target: %w", err)
	case !exists:
		return usageErrorf("target topic %s does not exist; a relay retries it for KDELAY_TARGET_MISSING_TIMEOUT (%s), then dead-letters it%s",
			f.target, levels.FormatDuration(cfg.TargetMissingTimeout), hint)
	case f.partition >= n:
		return usageErrorf("invalid --partition %d: target topic %s has %s (0..%d); a relay dead-letters it%s",
			f.partition, f.target, plural(int(n), "partition"), n-1, hint)
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
