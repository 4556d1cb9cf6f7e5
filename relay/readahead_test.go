package relay

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kdelay/kdelay/levels"
)

// TestReadAheadIntoWheel: records at the head of their level partition,
// due after their level time and within the horizon, are read ahead into
// the wheel long before that level time (levels 1s and 2s, read at once);
// the wheel still hands each out at its own due time, never when it was
// read.
func TestReadAheadIntoWheel(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	var keys []string
	for _, d := range []time.Duration{1900 * time.Millisecond, 2500 * time.Millisecond, 3 * time.Second} {
		for round := range 3 {
			k := "ra-" + strconv.Itoa(round) + "-" + d.String()
			keys = append(keys, k)
			h.send(k, levels.Delay{Target: "orders", Delay: d})
		}
	}
	got := h.collectAll(20*time.Second, keys, "orders")
	h.report(got, keys, 0)
	h.checkLateness(got, keys, noFaultP99)
	waitFor(t, func() bool { return sumCounter(rr.r.m.forwarded) == 9 })
	for level, want := range map[string]float64{"1": 3, "2": 6} {
		if n := testutil.ToFloat64(rr.r.m.forwarded.WithLabelValues(level, "wheel")); n != want {
			t.Errorf("level %s: %v forwarded via the wheel, want %v", level, n, want)
		}
	}
}
