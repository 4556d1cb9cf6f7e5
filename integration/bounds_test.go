package integration

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// noFaultP99 bounds the p99 lateness (forwarded timestamp - due time) of a
// scenario without faults. Real-broker runs measure 8-120 ms on an idle
// machine (docs/integration.md) and up to 409 ms (TestScaledLevels) with
// -race on two cores shared with other work: the bound leaves room for that
// and still catches a wheel or a level that fires seconds late.
const noFaultP99 = time.Second

// checkP99 fails when the p99 lateness of f is above bound.
func checkP99(t *testing.T, label string, f figures, bound time.Duration) {
	t.Helper()
	if len(f.late) == 0 {
		t.Errorf("%s: no lateness measured", label)
		return
	}
	if p := pct(f.late, 0.99); p > bound {
		t.Errorf("%s: p99 lateness %s, above the %s a run without faults allows", label, fmtDur(p), fmtDur(bound))
	}
}

// committedNow reads the group's committed offsets of the delay topic
// (partitions without a commit are absent).
func (s *scenario) committedNow(t *testing.T) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := s.adm.FetchOffsets(ctx, s.group)
	if err != nil {
		t.Fatalf("fetch committed offsets: %v", err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == s.topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// checkDupsAbove checks the duplicate bound of a fault: only records at or
// above their partition's committed offset, read right after the fault,
// may come twice (what the next owner re-reads; in at-least-once mode that
// is the batch in flight plus what the wheel held the commit back for).
// Anything below was done and committed, and must not come again.
func (s *scenario) checkDupsAbove(t *testing.T, label string, f figures, committed map[int32]int64) {
	t.Helper()
	for _, k := range f.dupKeys {
		s.mu.Lock()
		sr := s.sent[k]
		s.mu.Unlock()
		if c, ok := committed[sr.partition]; ok && sr.offset < c {
			t.Errorf("%s: record %s (delay-topic %d/%d) delivered %d times, but it was below the commit %d read right after the fault",
				label, k, sr.partition, sr.offset, len(s.obs.arrivals(k)), c)
		}
	}
	t.Logf("%s: %d duplicates, all at or above the commits read right after the fault %v", label, f.duplicated, committed)
}

// checkFIFO checks FIFO per level (README Guarantees): in each target
// partition, the first copies of the records of one delay-topic partition
// that are due at their level's own precision (delay = the level's
// duration) arrive in delay-topic offset order. It fails when fewer than
// minPairs ordered pairs could be compared (the scenario would test
// nothing).
func (s *scenario) checkFIFO(t *testing.T, label string, keys []string, minPairs int) {
	t.Helper()
	type tp struct {
		topic string
		part  int32
	}
	type rec struct {
		key      string
		offset   int64 // in the target partition
		srcPart  int32
		srcOffst int64
	}
	by := map[tp][]rec{}
	for _, k := range keys {
		s.mu.Lock()
		sr := s.sent[k]
		s.mu.Unlock()
		if sr == nil || sr.dest == s.dlq || sr.delay != s.tab.Duration(s.tab.LevelOf(sr.partition)) {
			continue
		}
		a := s.obs.arrivals(k)
		if len(a) == 0 {
			continue
		}
		by[tp{a[0].topic, a[0].partition}] = append(by[tp{a[0].topic, a[0].partition}], rec{k, a[0].offset, sr.partition, sr.offset})
	}
	pairs := 0
	for t0, rs := range by {
		slices.SortFunc(rs, func(a, b rec) int { return cmp.Compare(a.offset, b.offset) })
		last := map[int32]rec{}
		for _, r := range rs {
			if prev, ok := last[r.srcPart]; ok {
				pairs++
				if prev.srcOffst >= r.srcOffst {
					t.Errorf("%s: FIFO per level broken in %s/%d: %s (delay-topic %d/%d) at offset %d after %s (%d/%d) at offset %d",
						label, t0.topic, t0.part, r.key, r.srcPart, r.srcOffst, r.offset, prev.key, prev.srcPart, prev.srcOffst, prev.offset)
				}
			}
			last[r.srcPart] = r
		}
	}
	if pairs < minPairs {
		t.Errorf("%s: FIFO: only %d ordered pairs to compare, want at least %d", label, pairs, minPairs)
	}
	t.Logf("%s: FIFO per level: %d ordered pairs checked", label, pairs)
}
