package relay

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// sendID stamps a record with the Go helper, with a kdelay-id, and
// produces it.
func (h *harness) sendID(key, id string, d levels.Delay) sent {
	h.t.Helper()
	d.ID = id
	return h.send(key, d)
}

// cancel produces a cancel of id (cut-off: its timestamp, or before when
// set) and waits for its ack; it returns the time of the ack. Its
// timestamp is a millisecond ahead, so that a record sent in the same
// millisecond is before the cut-off, as the caller means.
func (h *harness) cancel(id string, before time.Time) time.Time {
	h.t.Helper()
	r, err := levels.Cancel(h.cfg.CancelTopic, id, before, time.Now().Add(time.Millisecond))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
	return time.Now()
}

func (rr *relayRun) cancelled() float64 { return sumCounter(rr.r.cx.cancelled) }

// expectCancelled collects the target until every key of keep has arrived
// and the last due time of cut has passed by a second, then checks that
// keep arrived once and on time and cut never.
func (h *harness) expectCancelled(keep, cut []string, lastDue time.Time, maxDup int) map[string][]received {
	h.t.Helper()
	got := h.collect(time.Until(lastDue)+30*time.Second, func(got map[string][]received) bool {
		return allKeys(keep...)(got) && time.Now().After(lastDue.Add(time.Second))
	}, "orders")
	h.report(got, keep, maxDup)
	for _, k := range cut {
		if n := len(got[k]); n > 0 {
			h.t.Errorf("cancelled record %s delivered %d times", k, n)
		}
	}
	return got
}

// TestCancelPaths: levels 1s 2s 4s (wheel horizon 2s). Records with ids
// are cancelled while they wait in their level partition, while they rest
// in the wheel, and between two cascades (by a cut-off before the
// cascaded copy's own timestamp: only the original timestamp matches).
// The cancelled ones are never delivered, the others arrive once, on time,
// with their kdelay-id.
func TestCancelPaths(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	if testing.Short() {
		t.Skip("20s scenario")
	}
	h := newHarness(t, map[string]string{"KDELAY_LEVELS": "1s 2s 4s"}, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	var keep, cut []string
	add := func(k, c string) { keep, cut = append(keep, k), append(cut, c) }

	// Level path: due at 2s, level 2's time, waiting in its partition and
	// forwarded from there.
	add("lv-keep", "lv-cut")
	h.sendID("lv-keep", "lv-keep", levels.Delay{Target: "orders", Delay: 2 * time.Second})
	h.sendID("lv-cut", "lv-cut", levels.Delay{Target: "orders", Delay: 2 * time.Second})
	h.send("no-id", levels.Delay{Target: "orders", Delay: 2 * time.Second})
	keep = append(keep, "no-id")
	// Wheel path: due at 3.5s, wheeled at level 2's time (2s).
	add("wh-keep", "wh-cut")
	h.sendID("wh-keep", "wh-keep", levels.Delay{Target: "orders", Delay: 3500 * time.Millisecond})
	h.sendID("wh-cut", "wh-cut", levels.Delay{Target: "orders", Delay: 3500 * time.Millisecond})
	// Cascade: due at 20s, cascades from level 3 every 4s.
	add("cs-keep", "cs-cut")
	h.sendID("cs-keep", "cs-keep", levels.Delay{Target: "orders", Delay: 20 * time.Second})
	cs := h.sendID("cs-cut", "cs-cut", levels.Delay{Target: "orders", Delay: 20 * time.Second})
	sentAt := time.Now()

	h.cancel("lv-cut", time.Time{})
	waitFor(t, func() bool { return testutil.ToFloat64(rr.r.m.wheelAdded.WithLabelValues("2")) >= 2 })
	h.cancel("wh-cut", time.Time{})
	waitFor(t, func() bool { return testutil.ToFloat64(rr.r.m.cascaded.WithLabelValues("3")) >= 2 })
	// A cut-off just after the original record, before its cascaded copy.
	h.cancel("cs-cut", sentAt.Add(time.Millisecond))

	got := h.expectCancelled(keep, cut, cs.due, 0)
	for _, k := range []string{"lv-keep", "wh-keep", "cs-keep"} {
		if rs := got[k]; len(rs) > 0 && rs[0].headers[levels.HeaderID] != k {
			t.Errorf("%s forwarded with kdelay-id %q, want %q", k, rs[0].headers[levels.HeaderID], k)
		}
	}
	// The last drop may be counted just after its record's due time.
	if !t.Failed() {
		waitFor(t, func() bool { return rr.cancelled() >= 3 })
	}
	if n := rr.cancelled(); n != 3 {
		t.Errorf("kdelay_records_cancelled_total = %v, want 3", n)
	}
}

// TestCancelReschedule: cancel then reschedule with the same id (Replace):
// only the new record arrives, at its new due time.
func TestCancelReschedule(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	h.sendID("old", "order-17", levels.Delay{Target: "orders", Delay: 1500 * time.Millisecond})
	r := &kgo.Record{Key: []byte("new"), Value: []byte("v-new")}
	c, err := h.cfg.Table().Replace(r, h.cfg.Topic, h.cfg.CancelTopic, "order-17", levels.Delay{Target: "orders", Delay: 3 * time.Second}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.prod.ProduceSync(context.Background(), c).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s := h.produce(r)
	h.expectCancelled([]string{"new"}, []string{"old"}, s.due, 0)
	if n := rr.cancelled(); n != 1 {
		t.Errorf("kdelay_records_cancelled_total = %v, want 1", n)
	}
}

// TestCancelRestart: cancels written while a relay holds the records (in
// the wheel and in level partitions), then the relay stops; a restart with
// its data directory, and one without it, keeps them cancelled: the set is
// rebuilt from the topic before anything is forwarded.
func TestCancelRestart(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	for _, wipe := range []bool{false, true} {
		name := map[bool]string{false: "with data dir", true: "without data dir"}[wipe]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil, "orders")
			rr := h.start(nil)
			rr.waitReady(t)
			var keep, cut []string
			var last time.Time
			for i, k := range keysOf("rs", 40) {
				s := h.sendID(k, k, levels.Delay{Target: "orders", Delay: time.Duration(2500+i*30) * time.Millisecond})
				last = s.due
				if i%2 == 0 {
					cut = append(cut, k)
				} else {
					keep = append(keep, k)
				}
			}
			// Level 2's time (2s) puts them into the wheel (horizon 4s).
			waitFor(t, func() bool { return sumCounter(rr.r.m.wheelAdded) >= 40 })
			for _, k := range cut {
				h.cancel(k, time.Time{})
			}
			rr.stop(t)
			if wipe {
				if err := os.RemoveAll(h.cfg.DataDir); err != nil {
					t.Fatal(err)
				}
			}
			h.start(nil)
			h.expectCancelled(keep, cut, last, map[bool]int{false: 0, true: len(keep)}[wipe])
		})
	}
}

// TestCancelTwoRelays: two relays share the delay topic, one stops while
// records wait; cancels written before and after the stop hold wherever
// the partitions go.
func TestCancelTwoRelays(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, map[string]string{"KDELAY_PARTITIONS_PER_LEVEL": "2"}, "orders")
	a := h.start(nil)
	b := h.start(func(c *config.Config) { c.DataDir = t.TempDir() })
	a.waitReady(t)
	b.waitReady(t)
	var keep, cut []string
	var last time.Time
	keys := keysOf("two", 80)
	for i, k := range keys {
		s := h.sendID(k, k, levels.Delay{Target: "orders", Delay: time.Duration(1500+i*60) * time.Millisecond})
		last = s.due
		if i%2 == 0 {
			cut = append(cut, k)
		} else {
			keep = append(keep, k)
		}
	}
	for _, k := range cut[:len(cut)/2] {
		h.cancel(k, time.Time{})
	}
	a.stop(t)
	for _, k := range cut[len(cut)/2:] {
		h.cancel(k, time.Time{})
	}
	h.expectCancelled(keep, cut, last, len(keep))
}

// TestCancelAfterDelivery: a cancel written after its record was
// delivered does nothing (no error, nothing counted), and a record with
// the same id written after the cancel is delivered.
func TestCancelAfterDelivery(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	h.sendID("first", "o-1", levels.Delay{Target: "orders", Delay: 200 * time.Millisecond})
	h.collect(20*time.Second, allKeys("first"), "orders")
	h.cancel("o-1", time.Time{})
	time.Sleep(2 * time.Millisecond) // the next record's timestamp must be after the cut-off (ms)
	s := h.sendID("second", "o-1", levels.Delay{Target: "orders", Delay: 500 * time.Millisecond})
	got := h.expectCancelled([]string{"first", "second"}, nil, s.due, 0)
	if n := len(got["first"]); n != 1 {
		t.Errorf("first delivered %d times, want 1", n)
	}
	if n := rr.cancelled(); n != 0 {
		t.Errorf("kdelay_records_cancelled_total = %v, want 0", n)
	}
	if rr.r.Why() != "" {
		t.Errorf("relay not healthy after the cancel: %s", rr.r.Why())
	}
}

// TestCancelExactMargin: a cancel acknowledged exactly KDELAY_CANCEL_MARGIN
// before its record's due time, by the relay's clock, is honoured even
// though the cancel reader reads nothing for 3s after the ack: the fire barrier
// holds the record until the reader has read past the cancel. Without the
// barrier the record would go at the due time, 100ms after the ack, before
// the reader sees the cancel. A record due at the same time without a
// cancel arrives, late by about the slowed read. (The relay wakes up to a second late after
// its clock jumps: its poll deadlines are absolute times of its clock.)
func TestCancelExactMargin(t *testing.T) {
	h := newHarness(t, nil, "orders")
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	rr := h.start(nil, func(o *Options) { o.Now = clock })
	rr.waitReady(t)
	blind, unblind := h.cancelReaderBlinds()
	// Due in 3s (relay time): level 2 (2s) puts them in the wheel.
	due := clock().Add(3 * time.Second).Truncate(time.Millisecond)
	h.sendID("cut", "m-1", levels.Delay{Target: "orders", At: due})
	h.sendID("keep", "m-2", levels.Delay{Target: "orders", At: due})
	waitFor(t, func() bool { return testutil.ToFloat64(rr.r.m.wheelAdded.WithLabelValues("2")) >= 2 })
	blind()
	h.cancel("m-1", time.Time{})
	time.AfterFunc(3*time.Second, unblind)
	// Move the relay's clock to exactly the margin before the due time,
	// counted from the ack.
	acked := clock()
	skew.Add(int64(due.Add(-h.cfg.CancelMargin).Sub(acked)))
	got := h.collect(30*time.Second, func(got map[string][]received) bool {
		return len(got["keep"]) > 0 && clock().After(due.Add(time.Second))
	}, "orders")
	if n := len(got["cut"]); n != 0 {
		t.Errorf("record cancelled exactly the margin before its due time delivered %d times", n)
	}
	if len(got["keep"]) != 1 {
		t.Fatalf("uncancelled record delivered %d times, want 1", len(got["keep"]))
	}
	t.Logf("uncancelled record forwarded %s after its due time (relay clock; the cancel reader blind for 3s after the ack)",
		got["keep"][0].ts.Add(time.Duration(skew.Load())).Sub(due).Round(time.Millisecond))
	if n := rr.cancelled(); n != 1 {
		t.Errorf("kdelay_records_cancelled_total = %v, want 1", n)
	}
}

// cancelReaderBlinds sets kfake up to answer the cancel reader's fetches
// "not leader" while the reader is blind: it reads nothing, as a reader
// far behind would. blind blinds it and waits until its fetches are
// answered blind; unblind lets it read again.
func (h *harness) cancelReaderBlinds() (blind, unblind func()) {
	t := h.t
	t.Helper()
	tds, err := h.adm.ListTopics(context.Background(), h.cfg.CancelTopic)
	if err != nil {
		t.Fatal(err)
	}
	cancelID := tds[h.cfg.CancelTopic].ID
	var blinded atomic.Int32 // fetches answered blind
	var on atomic.Bool
	h.c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		freq := req.(*kmsg.FetchRequest)
		resp := freq.ResponseKind().(*kmsg.FetchResponse)
		resp.Version = freq.Version
		mine := false
		for _, rt := range freq.Topics {
			if rt.Topic != h.cfg.CancelTopic && rt.TopicID != cancelID {
				continue
			}
			mine = true
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotLeaderForPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		if !mine {
			return nil, nil, false
		}
		blinded.Add(1)
		return resp, nil, true
	})
	return func() {
		t.Helper()
		on.Store(true)
		// A fetch waiting in kfake when blinding starts is not
		// controlled: a tombstone of another id ends it, the next ones
		// are blind.
		nudge := &kgo.Record{Topic: h.cfg.CancelTopic, Key: []byte("nudge")}
		if err := h.prod.ProduceSync(context.Background(), nudge).FirstErr(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return blinded.Load() >= 2 })
	}, func() { on.Store(false) }
}
