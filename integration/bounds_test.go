package integration

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kdelay/kdelay/offsetmap"
)

// noFaultP99 bounds the p99 lateness (forwarded timestamp - due time) of a
// scenario without faults. Real-broker runs measure 8-120 ms on an idle
// machine (docs/dev/testing.md) and up to 409 ms (TestScaledLevels) with
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

// committedState is a delay-topic partition's committed state: the
// committed offset and the done set its commit metadata carries (relay
// commit.go, package offsetmap).
type committedState struct {
	offset int64
	done   offsetmap.Set // empty when the metadata carries none
}

// covers reports whether the committed state says offset o is done: below
// the committed offset, or in the done set above it. A next owner skips
// exactly these.
func (c committedState) covers(o int64) bool { return o < c.offset || c.done.Done(o) }

// commitMetaPrefix and commitMetaDone are the documented form of the
// relay's commit metadata (relay/commit.go, docs/architecture.md):
//
//	kdelay/1 levels=<table> / <k>[;done=<offsetmap>]
const (
	commitMetaPrefix = "kdelay/1 levels="
	commitMetaDone   = ";done="
)

// committedNow reads the group's committed offsets of the delay topic and
// the done sets in their metadata (partitions without a commit are
// absent). A done set that does not decode fails the test: the relay wrote
// it, and a next owner would ignore it.
func (s *scenario) committedNow(t *testing.T) map[int32]committedState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := s.adm.FetchOffsets(ctx, s.group)
	if err != nil {
		t.Fatalf("fetch committed offsets: %v", err)
	}
	out := map[int32]committedState{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic != s.topic || o.Err != nil || o.At < 0 {
			return
		}
		c := committedState{offset: o.At}
		if !strings.HasPrefix(o.Metadata, commitMetaPrefix) {
			t.Logf("partition %d committed at %d with metadata %q, not the relay's %q...: no done set", o.Partition, o.At, o.Metadata, commitMetaPrefix)
		} else if _, enc, ok := strings.Cut(o.Metadata, commitMetaDone); ok {
			done, err := offsetmap.Decode(enc, o.At)
			if err != nil {
				t.Errorf("partition %d committed at %d: done set %q: %v", o.Partition, o.At, enc, err)
			}
			c.done = done
		}
		out[o.Partition] = c
	})
	return out
}

// fault is what a test knows of a fault: when it happened (nothing the
// failed relay forwards is stamped later, except a zombie's after it
// wakes) and the group's committed state read right after it (before any
// other relay could take over the partitions).
type fault struct {
	what      string
	at        time.Time
	committed map[int32]committedState
}

// faultNow marks a fault that has just happened: the time, then the
// committed state.
func (s *scenario) faultNow(t *testing.T, what string) fault {
	t.Helper()
	at := time.Now()
	return fault{what: what, at: at, committed: s.committedNow(t)}
}

func (f fault) String() string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(f.committed)) {
		c := f.committed[p]
		fmt.Fprintf(&b, " %d:%d", p, c.offset)
		if c.done.End > c.done.Base {
			fmt.Fprintf(&b, "+done[%d,%d)-%d open", c.done.Base, c.done.End, len(c.done.Open))
		}
	}
	return fmt.Sprintf("%s at %s, committed%s", f.what, fmtTime(f.at), b.String())
}

// sourceOf parses a forwarded copy's kdelay-source ("<topic>/<partition>/
// <offset>": the delay-topic record it was forwarded from).
func (s *scenario) sourceOf(a arrival) (int32, int64, bool) {
	rest, ok := strings.CutPrefix(a.source, s.topic+"/")
	if !ok {
		return 0, 0, false
	}
	pt, ot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	p, err1 := strconv.ParseInt(pt, 10, 32)
	o, err2 := strconv.ParseInt(ot, 10, 64)
	return int32(p), o, err1 == nil && err2 == nil
}

// byForwarded sorts the copies of a record by their timestamp, the time
// the relay forwarded them (an arrival order may differ: a zombie's copy
// stamped before it froze lands after it resumes, behind the copy of the
// relay that took over).
func byForwarded(a []arrival) []arrival {
	slices.SortStableFunc(a, func(x, y arrival) int { return x.ts.Compare(y.ts) })
	return a
}

// checkInFlight checks the at-least-once duplicate bound of faults: every
// duplicated record was in flight at one of them, that is
//
//	(a) its first copy was forwarded (stamped by the relay's producer:
//	    the earliest timestamp of its copies) before the fault, and
//	(b) the delay-topic record it came from was not covered by the
//	    group's committed state read right after the fault: at or above
//	    the committed offset and not in the done set of the commit
//	    metadata (what a next owner skips).
//
// Every copy of a duplicated record must come from the same delay-topic
// record (a cascade duplicated would need the cascade's own state). It
// logs how many records were in flight (forwarded before the fault and
// not covered: the most that may come twice) and returns that number for
// the last fault.
func (s *scenario) checkInFlight(t *testing.T, label string, keys []string, f figures, faults ...fault) int {
	t.Helper()
	inFlight := func(ft fault, first arrival, p int32, o int64) bool {
		c, ok := ft.committed[p]
		return first.ts.Before(ft.at) && (!ok || !c.covers(o))
	}
	counts := make([]int, len(faults))
	for _, k := range keys {
		a := s.obs.arrivals(k)
		if len(a) == 0 {
			continue
		}
		a = byForwarded(a)
		p, o, ok := s.sourceOf(a[0])
		if !ok {
			continue // a dead letter: its source is checked by check
		}
		for i, ft := range faults {
			if inFlight(ft, a[0], p, o) {
				counts[i]++
			}
		}
	}
	for _, k := range f.dupKeys {
		a := byForwarded(s.obs.arrivals(k))
		p, o, ok := s.sourceOf(a[0])
		if !ok {
			t.Errorf("%s: duplicated record %s: kdelay-source %q not of the delay topic", label, k, a[0].source)
			continue
		}
		for _, c := range a[1:] {
			if cp, co, _ := s.sourceOf(c); cp != p || co != o {
				t.Errorf("%s: duplicated record %s: copies from %s and %s (a duplicated cascade)", label, k, a[0].source, c.source)
			}
		}
		ok = false
		for _, ft := range faults {
			ok = ok || inFlight(ft, a[0], p, o)
		}
		if ok {
			continue
		}
		for _, ft := range faults {
			c, has := ft.committed[p]
			var why []string
			if !a[0].ts.Before(ft.at) {
				why = append(why, fmt.Sprintf("first copy forwarded at %s, %s after the fault", fmtTime(a[0].ts), fmtDur(a[0].ts.Sub(ft.at))))
			}
			if again := a[1].ts; again.Before(ft.at) {
				why = append(why, fmt.Sprintf("its second copy was forwarded at %s, %s before the fault: something else (a rebalance?) re-delivered it",
					fmtTime(again), fmtDur(ft.at.Sub(again))))
			}
			if has && c.covers(o) {
				if o < c.offset {
					why = append(why, fmt.Sprintf("below the committed offset %d", c.offset))
				} else {
					why = append(why, fmt.Sprintf("in the committed done set [%d,%d) above offset %d", c.done.Base, c.done.End, c.offset))
				}
			}
			t.Errorf("%s: record %s (delay-topic %d/%d) delivered %d times, but it was not in flight at the %s: %s",
				label, k, p, o, len(a), ft.what, strings.Join(why, "; "))
		}
	}
	for i, ft := range faults {
		t.Logf("%s: %d records in flight at the %s (forwarded before it, not covered by the committed state read right after it)", label, counts[i], ft)
	}
	t.Logf("%s: %d duplicates, each checked to be a record in flight at a fault", label, f.duplicated)
	if len(counts) == 0 {
		return 0
	}
	return counts[len(counts)-1]
}

// checkFIFO checks FIFO per level (docs/guarantees.md): in each target
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
