package relay

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

func exactlyOnce(c *config.Config) { c.Delivery = ExactlyOnce }

// TestExactlyOnce: in exactly-once mode, a read_committed consumer sees
// every record once, none early, across a clean restart, a lost data
// directory and a spell of failing produces (aborted transactions).
func TestExactlyOnce(t *testing.T) {
	h := newHarness(t, nil, "orders")
	h.readCommitted = true
	rr := h.start(exactlyOnce)
	rr.waitReady(t)
	keys := keysOf("eo", 300)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(i%60) * 100 * time.Millisecond})
	}
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 80 }, "orders")
	rr.stop(t) // clean restart
	rr = h.start(exactlyOnce)
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 160 }, "orders")

	// Produces to the target fail for a while: every transaction of that
	// spell aborts, its records are produced again in the next one.
	var fail atomic.Bool
	fail.Store(true)
	h.failProduces("orders", kerr.NotEnoughReplicas.Code, &fail)
	time.Sleep(time.Second) // the spell of failures: a duration, not a condition
	fail.Store(false)
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 220 }, "orders")
	aborted := testutil.ToFloat64(rr.r.m.txns.WithLabelValues("aborted"))
	rr.stop(t)
	if err := os.RemoveAll(h.cfg.DataDir); err != nil { // lost data directory
		t.Fatal(err)
	}
	h.start(exactlyOnce)
	got := h.collect(40*time.Second, allKeys(keys...), "orders")
	h.report(got, keys, 0)
	t.Logf("aborted transactions during the failing spell: %v", aborted)
}
