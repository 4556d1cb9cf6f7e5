package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// headTimeout bounds how long status waits for the head records.
const headTimeout = 10 * time.Second

// States of a level or partition in kdelay status.
const (
	stateIdle    = "idle"    // nothing behind the committed offset
	stateWaiting = "waiting" // records behind it, the next one due later
	stateDue     = "due"     // the next record is due now or overdue
	stateUnknown = "unknown" // the head record could not be read
)

// statusReport is the output of kdelay status (--json prints it as is).
type statusReport struct {
	Topic       string         `json:"topic"`
	Group       string         `json:"group"`
	GroupState  string         `json:"group_state"`
	Members     int            `json:"members"`
	CheckedAt   time.Time      `json:"checked_at"`
	Lag         int64          `json:"lag"`
	Levels      []levelStatus  `json:"levels"`
	DLQTopic    string         `json:"dlq_topic"`
	DeadLetters int64          `json:"dead_letters"` // records in the dead-letter topic (end - start offsets)
	CancelTopic string         `json:"cancel_topic"`
	Cancels     int            `json:"cancels"`           // live cancels, as a relay's cancel set holds them; -1 unknown
	Pending     *pendingReport `json:"pending,omitempty"` // with --pending
}

// pendingBuckets are the due-time buckets of status --pending: due now or
// overdue, then due within each bound.
var pendingBuckets = []struct {
	name  string
	bound time.Duration
}{
	{"due", 0}, {"<1m", time.Minute}, {"<10m", 10 * time.Minute}, {"<1h", time.Hour}, {"<1d", 24 * time.Hour}, {"later", 1<<63 - 1},
}

// pendingReport counts the records behind the committed offsets by due
// time, per level.
type pendingReport struct {
	Buckets   []string       `json:"buckets"`
	Levels    []pendingLevel `json:"levels"`
	Total     int64          `json:"total"`
	Truncated bool           `json:"truncated"` // --pending-max or the time bound stopped the read
}

type pendingLevel struct {
	Level   int     `json:"level"`
	Counts  []int64 `json:"counts"`  // per bucket
	Invalid int64   `json:"invalid"` // headers break the contract: dead-lettered next
}

type levelStatus struct {
	Level      int          `json:"level"`
	Delay      string       `json:"delay"`
	DelayMs    int64        `json:"delay_ms"`
	Lag        int64        `json:"lag"`
	NextDue    *time.Time   `json:"next_due,omitempty"`
	State      string       `json:"state"`
	Partitions []partStatus `json:"partitions"`
}

type partStatus struct {
	Partition int32      `json:"partition"`
	Start     int64      `json:"start"`     // log start offset
	End       int64      `json:"end"`       // high watermark
	Committed int64      `json:"committed"` // the group's committed offset, -1 if none
	Lag       int64      `json:"lag"`       // end - max(committed, start)
	NextDue   *time.Time `json:"next_due,omitempty"`
	HeadError string     `json:"head_error,omitempty"` // the head record breaks the contract (it goes to the dead-letter topic)
	State     string     `json:"state"`
}

func (a *app) newStatusCmd() *cobra.Command {
	var (
		asJSON      bool
		byPartition bool
		pending     bool
		pendingMax  int64
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show per level: offsets, lag, when the next record is due, dead letters",
		Long: `Show the relays' progress per level of the delay topic: the group's
committed offsets and the high watermarks, the lag between them, and when
the next record is due; the dead letters, and the size of the cancel set
(the live cancels of the cancel topic, read through as a relay does). The next record is the one at the committed offset
of each partition, read with a short-lived consumer outside the group; its
due time comes from its headers.

States: idle (no lag), waiting (lag, and the next record is due later: the
relay holds it), due (the next record is due now or overdue: the relay is
about to forward it, or is behind or down), unknown (the head could not be
read). Whether a relay has paused a partition is not visible from outside;
"waiting" is the same thing seen from the offsets.

--pending reads every record behind the committed offsets (at most
--pending-max, within a minute) and counts them per level by when they are
due: due (now or overdue), <1m, <10m, <1h, <1d, later. Records resting in a
relay's wheel are among them (commits never pass them); records a relay has
already forwarded beyond one its wheel holds are counted until the commit
passes them, so the counts are an upper bound.`,
		Example: `  kdelay status
  kdelay status --by-partition
  kdelay status --json | jq '.levels[] | select(.lag > 0)'
  kdelay status --pending`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			log := cfg.Logger(a.stderr)
			if pendingMax < 1 {
				return usageErrorf("invalid --pending-max %d: must be at least 1", pendingMax)
			}
			rep, err := collectStatus(cmd.Context(), cfg, log, time.Now())
			if err != nil {
				return err
			}
			if pending {
				rep.Pending = collectPending(cmd.Context(), cfg, log, rep, pendingMax)
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printStatus(a.stdout, rep, byPartition)
			if rep.Pending != nil {
				printPending(a.stdout, rep)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (always per partition)")
	cmd.Flags().BoolVar(&byPartition, "by-partition", false, "one row per partition rather than per level")
	cmd.Flags().BoolVar(&pending, "pending", false, "count the records behind the committed offsets by due time, per level")
	cmd.Flags().Int64Var(&pendingMax, "pending-max", 1_000_000, "read at most this many records for --pending")
	a.addSetting(cmd.Flags(), findSetting("group"), "")
	return cmd
}

func collectStatus(ctx context.Context, cfg config.Config, log *slog.Logger, now time.Time) (*statusReport, error) {
	tab := cfg.Table()
	cl, err := newClient(cfg, log)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	actx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()

	n, ok, err := partitionCount(actx, adm, cfg.Topic)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, fmt.Errorf("delay topic %s does not exist; create it with `kdelay topic create`", cfg.Topic)
	case n != tab.Partitions():
		return nil, mismatchError(cfg, n)
	}
	starts, err := adm.ListStartOffsets(actx, cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", brokerErr(err))
	}
	ends, err := adm.ListEndOffsets(actx, cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", brokerErr(err))
	}
	committed, err := adm.FetchOffsets(actx, cfg.Group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("fetch committed offsets of group %s: %w", cfg.Group, brokerErr(err))
	}
	rep := &statusReport{Topic: cfg.Topic, Group: cfg.Group, DLQTopic: cfg.DLQTopic, CheckedAt: now.UTC()}
	if groups, err := adm.DescribeGroups(actx, cfg.Group); err == nil {
		if g, ok := groups[cfg.Group]; ok && g.Err == nil {
			rep.GroupState, rep.Members = g.State, len(g.Members)
		}
	}
	if rep.GroupState == "" {
		rep.GroupState = "unknown"
	}

	// Partitions with lag: where their head record is.
	parts := make(map[int32]*partStatus, n)
	heads := make(map[int32]int64)
	for p := range n {
		ps := &partStatus{Partition: p, Committed: -1}
		if o, ok := starts.Lookup(cfg.Topic, p); ok && o.Err == nil {
			ps.Start = o.Offset
		}
		if o, ok := ends.Lookup(cfg.Topic, p); ok && o.Err == nil {
			ps.End = o.Offset
		}
		if o, ok := committed.Lookup(cfg.Topic, p); ok && o.Err == nil && o.At >= 0 {
			ps.Committed = o.At
		}
		pos := max(ps.Committed, ps.Start)
		ps.Lag = max(ps.End-pos, 0)
		if ps.Lag > 0 {
			heads[p] = pos
		}
		parts[p] = ps
	}
	headRecs, err := readHeads(ctx, cfg, log, heads)
	if err != nil {
		log.Warn("could not read every head record", "err", err)
	}
	for p, ps := range parts {
		switch rec, ok := headRecs[p]; {
		case ps.Lag == 0:
			ps.State = stateIdle
		case !ok:
			ps.State = stateUnknown
		default:
			s, err := tab.Parse(rec.Headers, rec.Timestamp)
			if err != nil {
				ps.HeadError, ps.State = err.Error(), stateDue
				break
			}
			due := s.Due.UTC()
			ps.NextDue = &due
			ps.State = stateWaiting
			if !due.After(now) {
				ps.State = stateDue
			}
		}
	}

	for l := 1; l <= tab.Levels(); l++ {
		ls := levelStatus{Level: l, Delay: levels.FormatDuration(tab.Duration(l)), DelayMs: tab.Duration(l).Milliseconds(), State: stateIdle}
		from, to := tab.Range(l)
		for p := from; p < to; p++ {
			ps := parts[p]
			ls.Partitions = append(ls.Partitions, *ps)
			ls.Lag += ps.Lag
			if ps.NextDue != nil && (ls.NextDue == nil || ps.NextDue.Before(*ls.NextDue)) {
				ls.NextDue = ps.NextDue
			}
			ls.State = worse(ls.State, ps.State)
		}
		rep.Lag += ls.Lag
		rep.Levels = append(rep.Levels, ls)
	}

	dstarts, err1 := adm.ListStartOffsets(actx, cfg.DLQTopic)
	dends, err2 := adm.ListEndOffsets(actx, cfg.DLQTopic)
	if err := errors.Join(err1, err2); err != nil {
		log.Warn("could not count dead letters", "topic", cfg.DLQTopic, "err", err)
		rep.DeadLetters = -1
	} else {
		dends.Each(func(o kadm.ListedOffset) {
			if s, ok := dstarts.Lookup(o.Topic, o.Partition); ok && o.Err == nil && s.Err == nil {
				rep.DeadLetters += o.Offset - s.Offset
			}
		})
	}
	rep.CancelTopic = cfg.CancelTopic
	if n, err := countCancels(actx, cfg, log); err != nil {
		log.Warn("could not count the cancels", "topic", cfg.CancelTopic, "err", err)
		rep.Cancels = -1
	} else {
		rep.Cancels = n
	}
	return rep, nil
}

// worse returns the state a level shows for two partition states.
func worse(a, b string) string {
	rank := map[string]int{stateIdle: 0, stateWaiting: 1, stateDue: 2, stateUnknown: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// readHeads reads, outside the group, the first record at or after the
// given offset of each partition.
func readHeads(ctx context.Context, cfg config.Config, log *slog.Logger, at map[int32]int64) (map[int32]*kgo.Record, error) {
	out := make(map[int32]*kgo.Record, len(at))
	if len(at) == 0 {
		return out, nil
	}
	offsets := make(map[int32]kgo.Offset, len(at))
	for p, o := range at {
		offsets[p] = kgo.NewOffset().At(o)
	}
	cl, err := newClient(cfg, log,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: offsets}),
		kgo.FetchMaxPartitionBytes(1<<20),
	)
	if err != nil {
		return out, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, headTimeout)
	defer cancel()
	for len(out) < len(at) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, fmt.Errorf("%d of %d head records read within %s", len(out), len(at), headTimeout)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := out[r.Partition]; !ok && r.Offset >= at[r.Partition] {
				out[r.Partition] = r
			}
		})
	}
	return out, nil
}

func printStatus(w io.Writer, rep *statusReport, byPartition bool) {
	fmt.Fprintf(w, "delay topic %s, group %s (%s, %s), checked %s\n\n",
		rep.Topic, rep.Group, rep.GroupState, plural(rep.Members, "member"), fmtTime(rep.CheckedAt))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEVEL\tDELAY\tPARTITION\tCOMMITTED\tEND\tLAG\tNEXT DUE\tSTATE")
	row := func(level int, delay, part string, committed, end string, lag int64, next *time.Time, state string) {
		nd := "-"
		if next != nil {
			nd = fmtTime(*next) + " (" + relative(next.Sub(rep.CheckedAt)) + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", level, delay, part, committed, end, lag, nd, state)
	}
	for _, ls := range rep.Levels {
		if byPartition || len(ls.Partitions) == 1 {
			for _, ps := range ls.Partitions {
				c := "-"
				if ps.Committed >= 0 {
					c = strconv.FormatInt(ps.Committed, 10)
				}
				state := ps.State
				if ps.HeadError != "" {
					state += " (invalid head: dead-lettered next)"
				}
				row(ls.Level, ls.Delay, strconv.Itoa(int(ps.Partition)), c, strconv.FormatInt(ps.End, 10), ps.Lag, ps.NextDue, state)
			}
			continue
		}
		var committed, end int64
		none := true
		for _, ps := range ls.Partitions {
			if ps.Committed >= 0 {
				committed += ps.Committed
				none = false
			}
			end += ps.End
		}
		c := "-"
		if !none {
			c = "Σ " + strconv.FormatInt(committed, 10)
		}
		first, last := ls.Partitions[0].Partition, ls.Partitions[len(ls.Partitions)-1].Partition
		row(ls.Level, ls.Delay, fmt.Sprintf("%d-%d", first, last), c, "Σ "+strconv.FormatInt(end, 10), ls.Lag, ls.NextDue, ls.State)
	}
	tw.Flush()
	fmt.Fprintln(w)
	dl := strconv.FormatInt(rep.DeadLetters, 10)
	if rep.DeadLetters < 0 {
		dl = "unknown"
	}
	fmt.Fprintf(w, "lag %d; dead letters in %s: %s\n", rep.Lag, rep.DLQTopic, dl)
	cx := strconv.Itoa(rep.Cancels)
	if rep.Cancels < 0 {
		cx = "unknown"
	}
	fmt.Fprintf(w, "cancel set (%s): %s live\n", rep.CancelTopic, cx)
}

// pendingTimeout bounds the read of status --pending.
const pendingTimeout = time.Minute

// collectPending reads, outside the group, the records of each partition
// from max(committed, start) to its end as of rep, at most max of them, and
// counts them by due time relative to rep.CheckedAt.
func collectPending(ctx context.Context, cfg config.Config, log *slog.Logger, rep *statusReport, max int64) *pendingReport {
	tab := cfg.Table()
	pr := &pendingReport{}
	for _, b := range pendingBuckets {
		pr.Buckets = append(pr.Buckets, b.name)
	}
	byLevel := make(map[int]*pendingLevel)
	offsets := make(map[int32]kgo.Offset)
	ends := make(map[int32]int64)
	for _, ls := range rep.Levels {
		pl := &pendingLevel{Level: ls.Level, Counts: make([]int64, len(pendingBuckets))}
		byLevel[ls.Level] = pl
		for _, ps := range ls.Partitions {
			if ps.Lag > 0 {
				offsets[ps.Partition] = kgo.NewOffset().At(ps.End - ps.Lag)
				ends[ps.Partition] = ps.End
			}
		}
	}
	defer func() {
		for l := 1; l <= tab.Levels(); l++ {
			pr.Levels = append(pr.Levels, *byLevel[l])
		}
	}()
	if len(offsets) == 0 {
		return pr
	}
	cl, err := newClient(cfg, log, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: offsets}))
	if err != nil {
		log.Warn("cannot read the pending records", "err", err)
		pr.Truncated = true
		return pr
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, pendingTimeout)
	defer cancel()
	for len(ends) > 0 {
		if pr.Total >= max {
			pr.Truncated = true
			return pr
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			pr.Truncated = true
			return pr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := ends[r.Partition]
			if !ok || r.Offset >= end || pr.Total >= max {
				return
			}
			if r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
			pr.Total++
			pl := byLevel[tab.LevelOf(r.Partition)]
			s, err := tab.Parse(r.Headers, r.Timestamp)
			if err != nil {
				pl.Invalid++
				return
			}
			in := s.Due.Sub(rep.CheckedAt)
			for i, b := range pendingBuckets {
				if in <= b.bound || i == len(pendingBuckets)-1 {
					pl.Counts[i]++
					break
				}
			}
		})
	}
	return pr
}

func printPending(w io.Writer, rep *statusReport) {
	pr := rep.Pending
	fmt.Fprintf(w, "\npending records by due time (%d read", pr.Total)
	if pr.Truncated {
		fmt.Fprint(w, ", TRUNCATED by --pending-max or the 1m bound")
	}
	fmt.Fprintln(w, ")")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "LEVEL\t")
	for _, b := range pr.Buckets {
		fmt.Fprintf(tw, "%s\t", strings.ToUpper(b))
	}
	fmt.Fprintln(tw, "INVALID\t")
	for _, pl := range pr.Levels {
		var n int64
		for _, c := range pl.Counts {
			n += c
		}
		if n+pl.Invalid == 0 {
			continue
		}
		fmt.Fprintf(tw, "%d\t", pl.Level)
		for _, c := range pl.Counts {
			fmt.Fprintf(tw, "%d\t", c)
		}
		fmt.Fprintf(tw, "%d\t\n", pl.Invalid)
	}
	tw.Flush()
}
