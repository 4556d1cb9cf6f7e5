package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
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
	Topic       string        `json:"topic"`
	Group       string        `json:"group"`
	GroupState  string        `json:"group_state"`
	Members     int           `json:"members"`
	CheckedAt   time.Time     `json:"checked_at"`
	Lag         int64         `json:"lag"`
	Levels      []levelStatus `json:"levels"`
	DLQTopic    string        `json:"dlq_topic"`
	DeadLetters int64         `json:"dead_letters"` // records in the dead-letter topic (end - start offsets)
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
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show per level: offsets, lag, when the next record is due, dead letters",
		Long: `Show the relays' progress per level of the delay topic: the group's
committed offsets and the high watermarks, the lag between them, and when
the next record is due. The next record is the one at the committed offset
of each partition, read with a short-lived consumer outside the group; its
due time comes from its headers.

States: idle (no lag), waiting (lag, and the next record is due later: the
relay holds it), due (the next record is due now or overdue: the relay is
about to forward it, or is behind or down), unknown (the head could not be
read). Whether a relay has paused a partition is not visible from outside;
"waiting" is the same thing seen from the offsets.`,
		Example: `  kdelay status
  kdelay status --by-partition
  kdelay status --json | jq '.levels[] | select(.lag > 0)'`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			log := cfg.Logger(a.stderr)
			rep, err := collectStatus(cmd.Context(), cfg, log, time.Now())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printStatus(a.stdout, rep, byPartition)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (always per partition)")
	cmd.Flags().BoolVar(&byPartition, "by-partition", false, "one row per partition rather than per level")
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
}
