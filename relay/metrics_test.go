package relay

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFlushCounts: the loop's per-level counts reach their series on
// flushCounts, once, and a series counted nothing is not created.
func TestFlushCounts(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ls := m.level(3)
	ls.nConsumed, ls.nDirect, ls.nWheel, ls.nWheeled = 5, 2, 1, 4
	m.level(4).nConsumed = 7

	series := func() map[string]float64 {
		return map[string]float64{
			"consumed 3": testutil.ToFloat64(m.consumed.WithLabelValues("3")),
			"consumed 4": testutil.ToFloat64(m.consumed.WithLabelValues("4")),
			"direct 3":   testutil.ToFloat64(m.forwarded.WithLabelValues("3", "direct")),
			"wheel 3":    testutil.ToFloat64(m.forwarded.WithLabelValues("3", "wheel")),
			"wheeled 3":  testutil.ToFloat64(m.wheelAdded.WithLabelValues("3")),
		}
	}
	if n := testutil.CollectAndCount(m.wheelAdded); n != 0 {
		t.Fatalf("before the flush: %d wheeled series, want 0", n)
	}
	want := map[string]float64{"consumed 3": 0, "consumed 4": 0, "direct 3": 0, "wheel 3": 0, "wheeled 3": 0}
	for k, v := range series() {
		if v != want[k] {
			t.Errorf("before the flush: %s = %v, want %v", k, v, want[k])
		}
	}
	m.wheelAdded.Reset() // WithLabelValues above created it: only flushCounts may

	m.flushCounts()
	if n := testutil.CollectAndCount(m.wheelAdded); n != 1 {
		t.Errorf("after the flush: %d wheeled series, want 1 (level 4 wheeled nothing)", n)
	}
	m.flushCounts() // nothing counted since: nothing added twice
	want = map[string]float64{"consumed 3": 5, "consumed 4": 7, "direct 3": 2, "wheel 3": 1, "wheeled 3": 4}
	for k, v := range series() {
		if v != want[k] {
			t.Errorf("after the flush: %s = %v, want %v", k, v, want[k])
		}
	}
}
