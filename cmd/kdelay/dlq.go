package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// dlqIdle is how long the dead-letter readers wait for more records before
// they take a partition as read to its end (transaction markers can sit
// between the last record and the high watermark).
const dlqIdle = 2 * time.Second

func (a *app) newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect and re-drive the records of the dead-letter topic",
		Long: `Inspect and re-drive the dead-letter topic. A dead letter is the delay-topic
record as it was, plus kdelay-error (why) and kdelay-source (where it was
read). Once the cause is fixed (the target topic created, an ACL granted,
KDELAY_MAX_DELAY raised), "kdelay dlq replay" writes the dead letters back to
the delay topic, each at most once.`,
		RunE: a.groupRunE,
	}
	cmd.AddCommand(a.newDLQListCmd(), a.newDLQReplayCmd())
	return cmd
}

// deadLetter is one record of the dead-letter topic, as dlq list shows it.
type deadLetter struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Timestamp time.Time         `json:"timestamp"`
	Key       string            `json:"key"`
	Target    string            `json:"target"`
	Source    string            `json:"source"`
	Error     string            `json:"error"`
	Headers   map[string]string `json:"headers"`
}

func toDeadLetter(r *kgo.Record) deadLetter {
	d := deadLetter{
		Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Key: string(r.Key),
		Target: header(r, levels.HeaderTarget), Source: header(r, levels.HeaderSource), Error: header(r, levels.HeaderError),
		Headers: make(map[string]string, len(r.Headers)),
	}
	for _, h := range r.Headers {
		d.Headers[h.Key] = string(h.Value)
	}
	return d
}

// reasonFilter selects dead letters by their kdelay-error.
type reasonFilter struct{ re *regexp.Regexp }

func newReasonFilter(s string) (reasonFilter, error) {
	if s == "" {
		return reasonFilter{}, nil
	}
	re, err := regexp.Compile("(?i)" + s)
	if err != nil {
		return reasonFilter{}, usageErrorf("invalid --reason %q: %v", s, err)
	}
	return reasonFilter{re}, nil
}

func (f reasonFilter) match(r *kgo.Record) bool {
	return f.re == nil || f.re.MatchString(header(r, levels.HeaderError))
}

func (a *app) newDLQListCmd() *cobra.Command {
	var (
		reason string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the dead letters: where they came from, their target and why",
		Long: `List the records of the dead-letter topic from its start: partition, offset,
timestamp, target, source (delay-topic partition/offset) and kdelay-error.
--reason keeps those whose kdelay-error matches a regular expression
(case-insensitive), e.g. --reason 'missing' or --reason 'orders-v2'.`,
		Example: `  kdelay dlq list
  kdelay dlq list --reason "target topic .* missing" --limit 10
  kdelay dlq list --json | jq -r '.[].error' | sort | uniq -c`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			filter, err := newReasonFilter(reason)
			if err != nil {
				return err
			}
			if limit < 0 {
				return usageErrorf("invalid --limit %d: must be 0 (all) or more", limit)
			}
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			log := cfg.Logger(a.stderr)
			var out []deadLetter
			err = readDLQ(cmd.Context(), cfg, log, nil, func(r *kgo.Record) bool {
				if filter.match(r) {
					out = append(out, toDeadLetter(r))
				}
				return limit == 0 || len(out) < limit
			})
			if err != nil {
				return err
			}
			if asJSON {
				if out == nil {
					out = []deadLetter{}
				}
				return writeJSON(a.stdout, out)
			}
			printDeadLetters(a.stdout, cfg.DLQTopic, out)
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "only dead letters whose kdelay-error matches this regular expression (case-insensitive)")
	cmd.Flags().IntVar(&limit, "limit", 100, "show at most this many (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func printDeadLetters(w io.Writer, topic string, ds []deadLetter) {
	if len(ds) == 0 {
		fmt.Fprintf(w, "no dead letters in %s\n", topic)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOFFSET\tTIMESTAMP\tTARGET\tSOURCE\tERROR")
	for _, d := range ds {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\n", d.Partition, d.Offset, fmtTime(d.Timestamp), orDash(d.Target), orDash(d.Source), d.Error)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", plural(len(ds), "dead letter"))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// dlqBounds returns, per partition of the dead-letter topic, the log start
// and the high watermark as of now.
func dlqBounds(ctx context.Context, adm *kadm.Client, cfg config.Config) (starts, ends map[int32]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	if _, ok, err := partitionCount(ctx, adm, cfg.DLQTopic); err != nil {
		return nil, nil, err
	} else if !ok {
		return nil, nil, fmt.Errorf("dead-letter topic %s does not exist; create it with `kdelay topic create`", cfg.DLQTopic)
	}
	so, err1 := adm.ListStartOffsets(ctx, cfg.DLQTopic)
	eo, err2 := adm.ListEndOffsets(ctx, cfg.DLQTopic)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, fmt.Errorf("list offsets of %s: %w", cfg.DLQTopic, brokerErr(err))
	}
	starts, ends = make(map[int32]int64), make(map[int32]int64)
	eo.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			ends[o.Partition] = o.Offset
		}
	})
	so.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			starts[o.Partition] = o.Offset
		}
	})
	return starts, ends, nil
}

// readDLQ reads the dead-letter topic, from each partition's offset in
// from (its start when absent), up to the high watermark as of the call,
// and calls fn for each record until fn returns false.
func readDLQ(ctx context.Context, cfg config.Config, log *slog.Logger, from map[int32]int64, fn func(*kgo.Record) bool) error {
	cl, err := newClient(cfg, log)
	if err != nil {
		return err
	}
	defer cl.Close()
	starts, ends, err := dlqBounds(ctx, kadm.NewClient(cl), cfg)
	if err != nil {
		return err
	}
	offsets := make(map[int32]kgo.Offset)
	left := make(map[int32]int64) // partition -> end still to reach
	for p, end := range ends {
		pos := starts[p]
		if o, ok := from[p]; ok && o > pos {
			pos = o
		}
		if pos < end {
			offsets[p] = kgo.NewOffset().At(pos)
			left[p] = end
		}
	}
	if len(left) == 0 {
		return nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{cfg.DLQTopic: offsets})
	for len(left) > 0 {
		pctx, cancel := context.WithTimeout(ctx, dlqIdle)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.NumRecords() == 0 && errors.Is(pctx.Err(), context.DeadlineExceeded) {
			return nil // nothing more within dlqIdle: the rest are markers
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = errors.Join(ferr, fmt.Errorf("fetch %s/%d: %w", t, p, err))
			}
		})
		if ferr != nil {
			return ferr
		}
		stop := false
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if stop || !ok || r.Offset >= end {
				return
			}
			if !fn(r) {
				stop = true
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
		if stop {
			return nil
		}
	}
	return nil
}

func (a *app) newDLQReplayCmd() *cobra.Command {
	var (
		reason   string
		group    string
		dryRun   bool
		progress bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Write dead letters back to the delay topic, each at most once",
		Long: `Write the dead letters back to the delay topic, after their cause is fixed,
each at most once. A replayed record is the original delay-topic record
(kdelay-error and kdelay-source removed) with its schedule made absolute
(kdelay-deliver-at = its original due time, as a cascade does), so a record
whose time has passed is delivered at once and one still in the future at
its own time; it goes to the partition of the level of its remaining delay.

What was replayed is remembered as the committed offsets of a consumer
group of the dead-letter topic (--replay-group, default <group>.dlq-replay,
plus ".<reason>" with --reason): a second run goes on from where the last one
stopped and replays nothing twice. The records stay in the dead-letter
topic. A dead letter whose headers still break the contract (it would be
dead-lettered again) is counted and skipped. Each batch is committed once
the delay topic has acknowledged it; a replay killed between the two can
repeat at most that batch.

--reason keeps those whose kdelay-error matches a regular expression
(case-insensitive); the others are not replayed and not remembered by the
group of that --reason.`,
		Example: `  kdelay dlq replay --reason "target topic \"orders\" missing" --dry-run
  kdelay dlq replay --reason orders
  kdelay dlq replay`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			filter, err := newReasonFilter(reason)
			if err != nil {
				return err
			}
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			if group == "" {
				group = replayGroup(cfg.Group, reason)
			}
			r := replayer{cfg: cfg, log: cfg.Logger(a.stderr), group: group, filter: filter, dryRun: dryRun,
				progress: progress || isTerminal(a.stderr), stderr: a.stderr}
			sum, err := r.run(cmd.Context())
			verb := "replayed"
			if dryRun {
				verb = "would replay"
			}
			fmt.Fprintf(a.stdout, "%s %s from %s to %s (group %s); %d not matching --reason, %d still invalid, skipped\n",
				verb, plural(sum.replayed, "dead letter"), cfg.DLQTopic, cfg.Topic, group, sum.unmatched, sum.invalid)
			return err
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "only dead letters whose kdelay-error matches this regular expression (case-insensitive)")
	cmd.Flags().StringVar(&group, "replay-group", "", "consumer group remembering what was replayed (default <group>.dlq-replay[.<reason>])")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be replayed; write and commit nothing")
	cmd.Flags().BoolVar(&progress, "progress", false, "show a progress bar on stderr (default: on a terminal)")
	a.addSetting(cmd.Flags(), findSetting("group"), "")
	return cmd
}

// replayGroup is the default group of a replay: one per --reason, so that
// replaying one kind of dead letter does not mark the others as done.
func replayGroup(group, reason string) string {
	g := group + ".dlq-replay"
	if reason == "" {
		return g
	}
	slug := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, reason)
	return g + "." + slug
}

type replayer struct {
	cfg      config.Config
	log      *slog.Logger
	group    string
	filter   reasonFilter
	dryRun   bool
	progress bool
	stderr   io.Writer
}

type replaySummary struct{ replayed, unmatched, invalid int }

// replayRecord is the delay-topic record that re-drives dead letter d at
// now, or an error if its headers break the contract.
func replayRecord(tab *levels.Table, topic string, d *kgo.Record, now time.Time) (*kgo.Record, error) {
	var hs []kgo.RecordHeader
	for _, h := range d.Headers {
		if h.Key != levels.HeaderError && h.Key != levels.HeaderSource {
			hs = append(hs, h)
		}
	}
	s, err := tab.Parse(hs, d.Timestamp)
	if err != nil {
		return nil, err
	}
	level := tab.LevelFor(max(s.Due.Sub(now), 0))
	return &kgo.Record{
		Topic:     topic,
		Partition: tab.PartitionFor(level, d.Key),
		Key:       d.Key,
		Value:     d.Value,
		Headers:   levels.CascadeHeaders(hs, s.Due),
		Timestamp: now,
	}, nil
}

func (r replayer) run(ctx context.Context) (replaySummary, error) {
	var sum replaySummary
	tab := r.cfg.Table()
	cl, err := newClient(r.cfg, r.log, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return sum, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	actx, cancel := context.WithTimeout(ctx, adminTimeout)
	n, ok, err := partitionCount(actx, adm, r.cfg.Topic)
	cancel()
	switch {
	case err != nil:
		return sum, err
	case !ok:
		return sum, fmt.Errorf("delay topic %s does not exist; create it with `kdelay topic create`", r.cfg.Topic)
	case n != tab.Partitions():
		return sum, mismatchError(r.cfg, n)
	}
	from, err := r.committed(ctx, adm)
	if err != nil {
		return sum, err
	}
	starts, ends, err := dlqBounds(ctx, adm, r.cfg)
	if err != nil {
		return sum, err
	}
	var total int64
	for p, end := range ends {
		total += max(end-max(from[p], starts[p]), 0)
	}
	var bar *progressbar.ProgressBar
	if r.progress && total > 0 {
		bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(r.stderr), progressbar.OptionSetDescription("replaying"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond))
		defer func() { bar.Exit(); fmt.Fprintln(r.stderr) }()
	}

	// Batches of up to 1000 records: produce, wait for the acks, commit
	// the dead-letter offsets after them.
	var (
		batch []*kgo.Record
		next  = make(map[int32]int64) // partition -> offset after the last record of the batch
	)
	flush := func() error {
		if len(next) == 0 {
			return nil
		}
		if !r.dryRun && len(batch) > 0 {
			if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				return fmt.Errorf("produce to %s: %w (the batch is not marked as replayed; run again once fixed)", r.cfg.Topic, err)
			}
		}
		sum.replayed += len(batch)
		if !r.dryRun {
			if err := r.commit(ctx, adm, next); err != nil {
				return err
			}
		}
		if bar != nil {
			var done int64
			for p, o := range next {
				done += o - max(from[p], starts[p])
			}
			bar.Set64(done)
		}
		batch = batch[:0]
		return nil
	}
	var ferr error
	err = readDLQ(ctx, r.cfg, r.log, from, func(d *kgo.Record) bool {
		switch {
		case !r.filter.match(d):
			sum.unmatched++
		default:
			rec, err := replayRecord(tab, r.cfg.Topic, d, time.Now())
			if err != nil {
				sum.invalid++
				r.log.Warn("dead letter still breaks the contract; skipped", "partition", d.Partition, "offset", d.Offset, "err", err)
				break
			}
			batch = append(batch, rec)
		}
		next[d.Partition] = d.Offset + 1
		if len(batch) >= 1000 {
			if ferr = flush(); ferr != nil {
				return false
			}
		}
		return true
	})
	if ferr != nil {
		return sum, ferr
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return sum, err
	}
	if ferr = flush(); ferr != nil {
		return sum, ferr
	}
	if ctx.Err() != nil {
		return sum, errors.New("interrupted; what was replayed so far is committed, a new run goes on from there")
	}
	return sum, nil
}

// committed returns the replay group's committed offsets of the dead-letter
// topic.
func (r replayer) committed(ctx context.Context, adm *kadm.Client) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	out := make(map[int32]int64)
	os, err := adm.FetchOffsets(ctx, r.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fetch committed offsets of group %s: %w", r.group, brokerErr(err))
	}
	os.Each(func(o kadm.OffsetResponse) {
		if o.Topic == r.cfg.DLQTopic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out, nil
}

// commit commits offsets of the dead-letter topic for the replay group,
// outside any group membership (a simple consumer group).
func (r replayer) commit(ctx context.Context, adm *kadm.Client, next map[int32]int64) error {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	os := make(kadm.Offsets)
	for p, o := range next {
		os.Add(kadm.Offset{Topic: r.cfg.DLQTopic, Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(ctx, r.group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("commit replayed offsets for group %s: %w (the last batch was replayed but not recorded; a new run repeats it)", r.group, brokerErr(err))
	}
	return nil
}
