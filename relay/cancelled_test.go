package relay

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// TestCancelledTopic: with KDELAY_CANCELLED_TOPIC set, a cancelled record
// is written there (key, value and headers kept, plus kdelay-source and
// kdelay-cancelled-at) and never to its target; a bad cancel (an
// unparseable kdelay-cancel-before) is counted and changes nothing.
func TestCancelledTopic(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders", "audit")
	rr := h.start(func(c *config.Config) { c.CancelledTopic = "audit" })
	rr.waitReady(t)
	h.sendID("cut", "a-1", levels.Delay{Target: "orders", Delay: 1500 * time.Millisecond})
	s := h.sendID("kept", "a-2", levels.Delay{Target: "orders", Delay: 1500 * time.Millisecond})
	h.cancel("a-1", time.Time{})
	bad := &kgo.Record{Topic: h.cfg.CancelTopic, Key: []byte("a-2"), Value: []byte("x"),
		Headers: []kgo.RecordHeader{{Key: levels.HeaderCancelBefore, Value: []byte("tomorrow")}}}
	if err := h.prod.ProduceSync(context.Background(), bad).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := h.collect(30*time.Second, func(got map[string][]received) bool {
		return len(got["kept"]) > 0 && len(got["cut"]) > 0 && time.Now().After(s.due.Add(time.Second))
	}, "orders", "audit")
	if rs := got["cut"]; len(rs) != 1 || rs[0].topic != "audit" {
		t.Fatalf("cancelled record: %+v, want one copy on audit", rs)
	} else {
		a := rs[0]
		if a.value != "v-cut" || a.headers["own"] != "cut" || a.headers[levels.HeaderID] != "a-1" ||
			a.headers[levels.HeaderCancelledAt] == "" || a.source == "" {
			t.Errorf("audit copy %+v: want value, own header, kdelay-id, kdelay-cancelled-at and kdelay-source", a)
		}
	}
	if rs := got["kept"]; len(rs) != 1 || rs[0].topic != "orders" {
		t.Errorf("record with a bad cancel: %+v, want one copy on orders", rs)
	}
	if n := testutil.ToFloat64(rr.r.cx.invalid.WithLabelValues("bad_cancel_before")); n != 1 {
		t.Errorf("kdelay_cancels_invalid_total{reason=bad_cancel_before} = %v, want 1", n)
	}
	if n := rr.cancelled(); n != 1 {
		t.Errorf("kdelay_records_cancelled_total = %v, want 1", n)
	}
}

// TestCancelExactlyOnce: in exactly-once mode cancelled records are part
// of the batch outcome: a read_committed consumer sees the kept records
// once and the cancelled ones never (level path and wheel path), across a
// restart that loses the data directory, and the audit copies arrive
// inside the transactions.
func TestCancelExactlyOnce(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders", "audit")
	h.readCommitted = true
	withAudit := func(c *config.Config) { exactlyOnce(c); c.CancelledTopic = "audit" }
	rr := h.start(withAudit)
	rr.waitReady(t)
	var keep, cut []string
	var last time.Time
	for i, k := range keysOf("xo", 40) {
		// 2s: level 2's own duration (forwarded from the partition);
		// 3s: level 2, then the wheel.
		s := h.sendID(k, k, levels.Delay{Target: "orders", Delay: time.Duration(2000+(i%2)*1000) * time.Millisecond})
		last = s.due
		if i%4 < 2 {
			cut = append(cut, k)
		} else {
			keep = append(keep, k)
		}
	}
	for _, k := range cut {
		h.cancel(k, time.Time{})
	}
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 10 }, "orders", "audit")
	rr.stop(t)
	if err := os.RemoveAll(h.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	h.start(withAudit)
	got := h.collect(time.Until(last)+30*time.Second, func(got map[string][]received) bool {
		return allKeys(append(append([]string(nil), keep...), cut...)...)(got) && time.Now().After(last.Add(time.Second))
	}, "orders", "audit")
	h.report(filterTopic(got, "orders"), keep, 0)
	for _, k := range cut {
		for _, r := range got[k] {
			if r.topic == "orders" {
				t.Errorf("cancelled record %s delivered to orders", k)
			}
		}
		if n := len(filterTopic(got, "audit")[k]); n != 1 {
			t.Errorf("cancelled record %s on audit %d times, want 1", k, n)
		}
	}
}

func filterTopic(got map[string][]received, topic string) map[string][]received {
	out := make(map[string][]received)
	for k, rs := range got {
		for _, r := range rs {
			if r.topic == topic {
				out[k] = append(out[k], r)
			}
		}
	}
	return out
}
