package cancel

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	s := NewSet(time.Hour)
	s.Put([]byte("a"), 500, t0)
	s.Put([]byte("b"), 900, t0)
	s.Put([]byte("b"), 700, t0) // the last one wins, as compaction keeps it
	for _, tc := range []struct {
		id   string
		ts   int64
		want bool
	}{
		{"a", 499, true},
		{"a", 500, false}, // the cut-off itself is not before the cut-off
		{"a", 501, false},
		{"b", 699, true},
		{"b", 800, false},
		{"c", 1, false},
		{"", 1, false},
	} {
		if _, got := s.Cancelled([]byte(tc.id), tc.ts); got != tc.want {
			t.Errorf("Cancelled(%q, %d) = %v, want %v", tc.id, tc.ts, got, tc.want)
		}
	}
	s.Delete([]byte("a"))
	if _, ok := s.Cancelled([]byte("a"), 1); ok || s.Len() != 1 {
		t.Errorf("after the tombstone: cancelled %v, len %d; want false, 1", ok, s.Len())
	}
	// Expiry: cut-off + retention before now.
	s.Put([]byte("old"), t0.UnixMilli(), t0)
	if n := s.Expire(t0.Add(time.Hour)); n != 1 { // b (700ms) + 1h < t0 + 1h; old is exactly at its limit
		t.Errorf("Expire at t0+1h forgot %d, want 1 (b)", n)
	}
	if n := s.Expire(t0.Add(time.Hour + time.Millisecond)); n != 1 || s.Len() != 0 {
		t.Errorf("Expire at t0+1h+1ms forgot %d, len %d; want 1, 0", n, s.Len())
	}
	if s.Put([]byte("dead"), 0, t0.Add(2*time.Hour)) || s.Len() != 0 {
		t.Errorf("Put of an expired cancel kept it")
	}
	s.Put([]byte("x"), t0.UnixMilli(), t0)
	s.Put([]byte("x"), 0, t0.Add(2*time.Hour)) // replaced by an expired one: gone
	if _, ok := s.Cancelled([]byte("x"), 1); ok {
		t.Errorf("a live cancel replaced by an expired one still cancels")
	}
}

// BenchmarkSetMemory1M measures the heap that 1M live cancels hold (ids of
// 16 bytes; an entry costs the same whatever the id's length), and the
// growth of the process's RSS while they are put (an upper bound: pages of
// the map's outgrown tables may stay resident).
func BenchmarkSetMemory1M(b *testing.B) {
	const n = 1_000_000
	now := time.Now()
	id := make([]byte, 0, 32)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rss0 := rss()
		s := NewSet(time.Hour)
		for i := range n {
			id = fmt.Appendf(id[:0], "order-%010d", i)
			s.Put(id, now.UnixMilli(), now)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB-heap")
		b.ReportMetric(float64(rss()-rss0)/(1<<20), "MiB-RSS-growth")
		runtime.KeepAlive(s)
	}
}

// rss is the process's resident set size in bytes (Linux), 0 if unknown.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res int64
	if _, err := fmt.Sscan(string(b), &size, &res); err != nil {
		return 0
	}
	return res * int64(os.Getpagesize())
}

func BenchmarkSetCancelled(b *testing.B) {
	s := NewSet(time.Hour)
	now := time.Now()
	for i := range 100_000 {
		s.Put(fmt.Appendf(nil, "order-%010d", i), now.UnixMilli(), now)
	}
	id := []byte("order-0000000042")
	for b.Loop() {
		s.Cancelled(id, 1)
	}
}
