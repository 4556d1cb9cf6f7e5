package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
)

// TestPendingWindows: a span's offsets go to the window of the first edge
// above them, less the offsets its done set marks.
func TestPendingWindows(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    pendingSpan
		want windowCount
	}{
		{"empty", pendingSpan{from: 5, end: 5, edges: [5]int64{5, 5, 5, 5, 5}}, windowCount{}},
		{"one per window", pendingSpan{from: 10, end: 16, edges: [5]int64{11, 12, 13, 14, 15}}, windowCount{1, 1, 1, 1, 1, 1}},
		{"all later", pendingSpan{from: 10, end: 20, edges: [5]int64{10, 10, 10, 10, 10}}, windowCount{0, 0, 0, 0, 0, 10}},
		{"all due", pendingSpan{from: 10, end: 20, edges: [5]int64{20, 20, 20, 20, 20}}, windowCount{10}},
		{"edges below the commit", pendingSpan{from: 10, end: 20, edges: [5]int64{2, 3, 4, 15, 20}}, windowCount{0, 0, 0, 5, 5, 0}},
		{"edges past the end", pendingSpan{from: 10, end: 20, edges: [5]int64{10, 12, 99, 99, 99}}, windowCount{0, 2, 8}},
		{"falling edges", pendingSpan{from: 0, end: 10, edges: [5]int64{0, 6, 2, 8, 4}}, windowCount{0, 6, 0, 2, 0, 2}},
		{"done set", pendingSpan{from: 10, end: 20, edges: [5]int64{10, 12, 14, 16, 18},
			done: offsetmap.Set{Base: 10, End: 17, Open: []int64{10, 13}}}, windowCount{0, 1, 1, 0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.windows(); got != tc.want {
				t.Errorf("windows() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCountPending: records waiting in level partitions (one read into the
// wheel) are counted by the window of their level time, from Kafka; a
// delivered record leaves the count once committed.
func TestCountPending(t *testing.T) {
	h := newHarness(t, map[string]string{"KDELAY_LEVELS": "1s 1h 2h", "KDELAY_MAX_DELAY": "48h"}, "out")
	now := time.Now()
	put := func(key string, level int, ts time.Time) {
		rec := &kgo.Record{Key: []byte(key), Value: []byte("v"), Timestamp: ts}
		if err := h.cfg.Table().Stamp(rec, h.cfg.Topic, levels.Delay{Target: "out", Level: level}, now); err != nil {
			t.Fatal(err)
		}
		h.produce(rec)
	}
	put("soon", 2, now.Add(-time.Hour+30*time.Second)) // level time now+30s: 1m
	put("in5m", 2, now.Add(-55*time.Minute))           // 10m
	put("in1h", 2, now.Add(-time.Second))              // 1h
	put("in2h", 3, now)                                // 1d
	put("tomorrow", 3, now.Add(23*time.Hour))          // later
	put("now", 1, now)                                 // delivered at once
	rr := h.start(nil)
	rr.waitReady(t)
	h.collect(30*time.Second, allKeys("now"), "out")

	want := map[[2]string]float64{
		{levelLabel(1), "due"}: 0, {levelLabel(2), "1m"}: 1, {levelLabel(2), "10m"}: 1, {levelLabel(2), "1h"}: 1,
		{levelLabel(3), "1d"}: 1, {levelLabel(3), "later"}: 1,
	}
	check := func() []string {
		var bad []string
		for level := 1; level <= h.cfg.Table().Levels(); level++ {
			for _, w := range dueWindows {
				k := [2]string{levelLabel(level), w.label}
				if got := testutil.ToFloat64(rr.r.m.pending.WithLabelValues(k[0], k[1])); got != want[k] {
					bad = append(bad, fmt.Sprintf("%s/%s=%v", k[0], k[1], got))
				}
			}
		}
		return bad
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		owned, err := rr.r.countPending(context.Background(), now)
		if err != nil {
			t.Fatal(err)
		}
		if owned != int(h.cfg.Table().Partitions()) {
			t.Fatalf("countPending saw %d owned partitions, want %d", owned, h.cfg.Table().Partitions())
		}
		bad := check()
		if len(bad) == 0 {
			break
		}
		if time.Now().After(deadline) { // the delivered record's commit is awaited
			t.Fatalf("kdelay_pending_records wrong for %v", bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
