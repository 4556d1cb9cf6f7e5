package relay

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/offsetmap"
)

// pendingEvery is how often kdelay_pending_records is counted: four
// ListOffsets and one FetchOffsets round trip each time, so that the
// gauge costs the loop nothing.
const pendingEvery = 15 * time.Second

// dueWindows are the values of kdelay_pending_records' window label, as
// kdelay_console_pending's: a record counts in the first window whose end
// (that long after now) lies past its level time; the last, "later", has
// no end.
var dueWindows = [...]struct {
	label string
	end   time.Duration
}{{"due", 0}, {"1m", time.Minute}, {"10m", 10 * time.Minute}, {"1h", time.Hour}, {"1d", 24 * time.Hour}, {"later", 0}}

// windowCount is one count per due window, in the order of dueWindows.
type windowCount [len(dueWindows)]int64

// pendingSpan is what counting needs of one owned partition: its pending
// offsets [from, end), for each window with an end the first offset whose
// level time lies at or past that end, and the done set above the commit.
type pendingSpan struct {
	from, end int64
	edges     [len(dueWindows) - 1]int64
	done      offsetmap.Set
}

// windows counts the span's pending offsets per due window, leaving out
// the ones the done set marks. Edges are taken as rising with the window
// (a partition whose timestamps go back and forth is counted as if they
// rose), and clamped to [from, end).
func (s pendingSpan) windows() windowCount {
	var c windowCount
	lo := s.from
	for i := range c {
		hi := s.end
		if i < len(s.edges) {
			hi = min(max(s.edges[i], lo), s.end)
		}
		if hi > lo {
			c[i] = hi - lo - doneIn(s.done, lo, hi)
		}
		lo = max(lo, hi)
	}
	return c
}

// doneIn counts the offsets of [lo, hi) that done marks.
func doneIn(done offsetmap.Set, lo, hi int64) int64 {
	lo, hi = max(lo, done.Base), min(hi, done.End)
	if hi <= lo {
		return 0
	}
	a, _ := slices.BinarySearch(done.Open, lo)
	b, _ := slices.BinarySearch(done.Open, hi)
	return hi - lo - int64(b-a)
}

// watchPending keeps kdelay_pending_records current until ctx ends: every
// second until the relay owns partitions, then every pendingEvery.
func (r *Relay) watchPending(ctx context.Context) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		owned, err := r.countPending(ctx, r.now())
		if err != nil && ctx.Err() == nil {
			r.log.Warn("could not count pending records by due window; kdelay_pending_records keeps its last values", "err", err)
		}
		if owned > 0 {
			t.Reset(pendingEvery)
		} else {
			t.Reset(time.Second)
		}
	}
}

// countPending sets kdelay_pending_records from Kafka: for each owned
// partition, the records from its committed offset to its high watermark
// that its commit's done set does not mark, by the window their level time
// (record timestamp plus the level's delay: the earliest they can go) falls
// in. The broker finds each window's first offset by timestamp, so the
// relay reads no record for it.
// It returns how many partitions the relay owns.
func (r *Relay) countPending(ctx context.Context, now time.Time) (int, error) {
	owned := r.ownedPartitions()
	spans, err := r.pendingSpans(ctx, owned, now)
	if err != nil {
		return len(owned), err
	}
	byLevel := make(map[int]windowCount)
	for p, s := range spans {
		c := byLevel[r.pol.table.LevelOf(p)]
		for i, n := range s.windows() {
			c[i] += n
		}
		byLevel[r.pol.table.LevelOf(p)] = c
	}
	for level := 1; level <= r.pol.table.Levels(); level++ {
		c := byLevel[level]
		for i, w := range dueWindows {
			r.m.pending.WithLabelValues(levelLabel(level), w.label).Set(float64(c[i]))
		}
	}
	return len(owned), nil
}

// ownedPartitions lists the delay-topic partitions the relay owns now.
func (r *Relay) ownedPartitions() []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ps := make([]int32, 0, len(r.parts))
	for p := range r.parts {
		ps = append(ps, p)
	}
	return ps
}

// pendingSpans asks the brokers for the spans of the owned partitions.
func (r *Relay) pendingSpans(ctx context.Context, owned []int32, now time.Time) (map[int32]pendingSpan, error) {
	spans := make(map[int32]pendingSpan, len(owned))
	if len(owned) == 0 {
		return spans, nil
	}
	adm := kadm.NewClient(r.cl)
	topic := r.cfg.Topic
	commits, err := adm.FetchOffsets(kadm.RequireStable(ctx), r.cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("relay: fetch the group's offsets: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("relay: list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("relay: list end offsets: %w", err)
	}
	for _, p := range owned {
		st, ok1 := starts.Lookup(topic, p)
		en, ok2 := ends.Lookup(topic, p)
		if !ok1 || !ok2 || st.Err != nil || en.Err != nil {
			return nil, fmt.Errorf("relay: no start or end offset of %s[%d]", topic, p)
		}
		s := pendingSpan{from: st.Offset, end: en.Offset}
		if c, ok := commits.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
			s.from = max(s.from, c.At)
			if done, ok, err := doneOfMetadata(c.Metadata, c.At); err == nil && ok {
				s.done = done
			}
		}
		s.from = min(s.from, s.end)
		spans[p] = s
	}
	for i, w := range dueWindows[:len(dueWindows)-1] {
		first, err := r.firstOffsetsAfter(ctx, owned, func(p int32) int64 {
			return now.Add(w.end - r.pol.table.Duration(r.pol.table.LevelOf(p))).UnixMilli()
		})
		if err != nil {
			return nil, err
		}
		for p, s := range spans {
			if off, ok := first[p]; ok && off >= 0 {
				s.edges[i] = off
			} else {
				s.edges[i] = s.end // no record at or after the time: all lie before it
			}
			spans[p] = s
		}
	}
	return spans, nil
}

// firstOffsetsAfter asks, in one ListOffsets request (franz-go splits it
// by leader), for the first offset of each partition whose timestamp is
// at or after at(partition); -1 where there is none.
func (r *Relay) firstOffsetsAfter(ctx context.Context, parts []int32, at func(int32) int64) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = r.cfg.Topic
	for _, p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, at(p)
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		return nil, fmt.Errorf("relay: list offsets by time: %w", err)
	}
	out := make(map[int32]int64, len(parts))
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("relay: list offsets by time of %s[%d]: %w", t.Topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	return out, nil
}
