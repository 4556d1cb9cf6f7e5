package relay

import (
	"context"
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
