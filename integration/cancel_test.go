package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// cancelOn writes cancels of ids to the scenario's cancel topic and waits
// for their acks.
func (s *scenario) cancelOn(ids ...string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recs []*kgo.Record
	for _, id := range ids {
		r, err := levels.Cancel(s.topic+".cancel", id, time.Time{}, time.Now())
		if err != nil {
			s.t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		s.t.Fatalf("cancels: %v", err)
	}
}

// sendIDs sends n records with kdelay-id = key, delays spread over
// [lo, hi), and returns the keys of every other one (to cancel) and the
// others (to keep).
func (s *scenario) sendIDs(prefix string, n int, lo, hi time.Duration) (cut, keep []string) {
	s.t.Helper()
	var recs []*kgo.Record
	for i, d := range spread(n, lo, hi) {
		k := fmt.Sprintf("%s-%04d", prefix, i)
		recs = append(recs, s.stamped(k, levels.Delay{Target: s.target("orders"), Delay: d, ID: k}))
		if i%2 == 0 {
			cut = append(cut, k)
		} else {
			keep = append(keep, k)
		}
	}
	s.send(recs...) // at once: every record's due time is well after the cancels
	return cut, keep
}

// neverArrived fails for every key of cut that arrived anywhere.
func (s *scenario) neverArrived(cut []string) {
	s.t.Helper()
	for _, k := range cut {
		if a := s.obs.arrivals(k); len(a) > 0 {
			s.t.Errorf("cancelled record %s arrived %d times (first at %s)", k, len(a), a[0].topic)
		}
	}
}

func waitMetric(t *testing.T, p *relayProc, name string, atLeast float64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for p.metric(name) < atLeast {
		p.checkAlive()
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed below %v for a minute (now %v)", name, atLeast, p.metric(name))
		}
		time.Sleep(50 * time.Millisecond) // polling the child's /metrics
	}
}

// TestCancelPaths: levels 1s 2s 4s on the real broker. Records with ids
// are cancelled while they wait in their level partition, while they rest
// in the wheel, and between cascades (delays up to 20s). The cancelled
// ones never arrive; the others arrive once, on time, which also measures
// what the fire barrier costs in lateness.
func TestCancelPaths(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "cancel", scenarioOpts{levels: "1s 2s 4s", targets: map[string]int32{"orders": 3}})
	p := s.startRelay("", time.Minute)
	// Level path: a delay of exactly level 2's duration is forwarded from
	// the level partition at its level time, without the wheel.
	lvCut, lvKeep := s.sendIDs("lv", 40, 2*time.Second, 2*time.Second)
	s.cancelOn(lvCut...)
	whCut, whKeep := s.sendIDs("wh", 40, 3*time.Second, 3900*time.Millisecond)
	csCut, csKeep := s.sendIDs("cs", 40, 12*time.Second, 20*time.Second)
	waitMetric(t, p, "kdelay_records_wheeled_total", 40) // the wh records (level 2's time: 2s)
	s.cancelOn(whCut...)
	waitMetric(t, p, "kdelay_records_cascaded_total", 40) // the cs records' first cascade (4s)
	s.cancelOn(csCut...)

	keep := append(append(append([]string(nil), lvKeep...), whKeep...), csKeep...)
	s.await(keep, s.lastDue(keep).Add(30*time.Second), p)
	s.check(t, "cancel paths", keep, 0)
	s.neverArrived(append(append(append([]string(nil), lvCut...), whCut...), csCut...))
	if n := p.metric("kdelay_records_cancelled_total"); n != 60 {
		t.Errorf("kdelay_records_cancelled_total = %v, want 60", n)
	}
	p.stop()
}

// TestCancelKill: cancels written while a relay holds the records in its
// wheel, then the relay is killed with SIGKILL and restarted with its data
// directory, and, in the second run, without it: the cancelled records
// stay cancelled, the others arrive (duplicates allowed after a kill).
func TestCancelKill(t *testing.T) {
	t.Parallel()
	for _, keepDir := range []bool{true, false} {
		name := map[bool]string{true: "with data dir", false: "without data dir"}[keepDir]
		t.Run(name, func(t *testing.T) {
			s := newScenario(t, "cancelkill", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 3}})
			p := s.startRelay("", time.Minute)
			// Level 3 (4s) puts them into the wheel (horizon 4s) 1.5s to
			// 3.9s before they are due; the cancels follow at once.
			cut, keep := s.sendIDs("k", 200, 5500*time.Millisecond, 7900*time.Millisecond)
			waitMetric(t, p, "kdelay_records_wheeled_total", 200) // level 3's time (4s): all in the wheel
			s.cancelOn(cut...)
			p.kill()
			dir := p.dataDir
			if !keepDir {
				dir = ""
			}
			p2 := s.startRelay(dir, restartReady)
			s.await(keep, s.lastDue(keep).Add(restartReady), p2)
			s.check(t, "cancel, kill -9, restart "+name, keep, -1)
			s.neverArrived(cut)
			p2.stop()
		})
	}
}

// TestCancelTwoRelays: two relays share the delay topic (2 partitions per
// level); one stops while the records wait, its partitions move to the
// other. Cancels written before and after the move hold.
func TestCancelTwoRelays(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "canceltwo", scenarioOpts{levels: "1s 2s 4s 8s", perLevel: 2, targets: map[string]int32{"orders": 3}})
	a := s.startRelay("", time.Minute)
	b := s.startRelay("", time.Minute)
	// Level 4 (8s), read 5s before its level time: from 3s on the records
	// rest in the wheels, 7s to 9.4s before they are due, which leaves the
	// stop and the second cancels seconds on a loaded machine.
	cut, keep := s.sendIDs("t", 200, 10*time.Second, 12400*time.Millisecond)
	s.cancelOn(cut[:len(cut)/2]...)
	acked1 := time.Now()
	deadline := time.Now().Add(time.Minute)
	for a.metric("kdelay_records_wheeled_total")+b.metric("kdelay_records_wheeled_total") < 100 {
		if time.Now().After(deadline) {
			t.Fatal("records not in the wheels within a minute")
		}
		time.Sleep(50 * time.Millisecond) // polling the children's /metrics
	}
	a.stop()
	s.cancelOn(cut[len(cut)/2:]...)
	acked2 := time.Now()
	s.await(keep, s.lastDue(keep).Add(time.Minute), b)
	s.check(t, "cancel, two relays, one stops", keep, -1)
	held := append(s.inTime(cut[:len(cut)/2], acked1), s.inTime(cut[len(cut)/2:], acked2)...)
	if len(held) < len(cut)*3/4 {
		t.Fatalf("only %d of %d cancels were acknowledged %s before their record's due time: too few to test the guarantee", len(held), len(cut), cancelMargin)
	}
	s.neverArrived(held)
	b.stop()
}

// cancelMargin is KDELAY_CANCEL_MARGIN's default: a cancel acknowledged at
// least this long before a record's due time holds; a later one is best
// effort.
const cancelMargin = 100 * time.Millisecond

// inTime returns the ids of cut whose cancel, acknowledged at acked, came
// at least cancelMargin before their record's due time; it logs the others.
func (s *scenario) inTime(cut []string, acked time.Time) []string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var ok []string
	for _, k := range cut {
		due := s.sent[k].due
		if due.Sub(acked) >= cancelMargin {
			ok = append(ok, k)
			continue
		}
		s.t.Logf("cancel of %s acknowledged %s before its due time, under the margin (%s): best effort, %d arrivals", k, fmtDur(due.Sub(acked)), cancelMargin, len(s.obs.arrivals(k)))
	}
	return ok
}

// TestCancelMargin measures how close to the due time a cancel still holds
// on the real broker: records due at one time T, cancels written at T - d
// for d from 150ms down to 0. A cancel acknowledged at least
// KDELAY_CANCEL_MARGIN (100ms) before T must hold; the later ones are best
// effort, and the figures say how they fared.
func TestCancelMargin(t *testing.T) {
	s := newScenario(t, "cancelmargin", scenarioOpts{levels: "1s 2s 4s", targets: map[string]int32{"orders": 3}})
	p := s.startRelay("", time.Minute)
	offsets := []time.Duration{150 * time.Millisecond, 100 * time.Millisecond, 75 * time.Millisecond, 50 * time.Millisecond,
		25 * time.Millisecond, 10 * time.Millisecond, 0}
	const per = 10
	due := time.Now().Add(4 * time.Second).Truncate(time.Millisecond)
	var recs []*kgo.Record
	for _, d := range offsets {
		for j := range per {
			k := fmt.Sprintf("m%03d-%d", d.Milliseconds(), j)
			recs = append(recs, s.stamped(k, levels.Delay{Target: s.target("orders"), At: due, ID: k}))
		}
	}
	s.send(recs...)
	acked := map[time.Duration]time.Time{}
	for _, d := range offsets {
		time.Sleep(time.Until(due.Add(-d)))
		var ids []string
		for j := range per {
			ids = append(ids, fmt.Sprintf("m%03d-%d", d.Milliseconds(), j))
		}
		s.cancelOn(ids...)
		acked[d] = time.Now()
	}
	time.Sleep(time.Until(due.Add(3 * time.Second)))
	s.waitSettled(time.Minute, p)
	for _, d := range offsets {
		held := 0
		for j := range per {
			if len(s.obs.arrivals(fmt.Sprintf("m%03d-%d", d.Milliseconds(), j))) == 0 {
				held++
			}
		}
		before := due.Sub(acked[d])
		t.Logf("MARGIN cancels written %s before the due time, acknowledged %s before it: %d of %d held",
			fmtDur(d), fmtDur(before), held, per)
		if before >= cancelMargin && held != per {
			t.Errorf("cancels acknowledged %s before the due time (margin %s): only %d of %d held", fmtDur(before), cancelMargin, held, per)
		}
	}
	p.stop()
}
