package relay

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kdelay/kdelay/config"
)

// gaugeRelay is a relay with the default 18 levels and one partition per
// level, each with a lag and a head waiting, for updateGauges alone.
func gaugeRelay(tb testing.TB) *Relay {
	tb.Helper()
	cfg, err := config.Load(map[string]string{"KDELAY_TOPIC": "delays"})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	r := &Relay{cfg: cfg, pol: policy{table: cfg.Table(), cfg: cfg}, m: m, parts: map[int32]*partState{}}
	t0 := time.UnixMilli(1_000_000)
	for p := range cfg.Table().Partitions() {
		r.parts[p] = &partState{p: p, level: cfg.Table().LevelOf(p), hwm: int64(100 + p), led: ledger{commit: 10}, waitFor: t0.Add(time.Duration(p) * time.Second)}
	}
	return r
}

// TestUpdateGauges: the per-level gauges carry each level's lag and its
// earliest waiting head.
func TestUpdateGauges(t *testing.T) {
	r := gaugeRelay(t)
	r.updateGauges(time.UnixMilli(1_000_000))
	for p, ps := range r.parts {
		l := levelLabel(ps.level)
		if got, want := testutil.ToFloat64(r.m.lag.WithLabelValues(l)), float64(90+p); got != want {
			t.Errorf("lag of level %s = %v, want %v", l, got, want)
		}
		if got, want := testutil.ToFloat64(r.m.nextDue.WithLabelValues(l)), float64(ps.waitFor.UnixMilli())/1000; got != want {
			t.Errorf("next due of level %s = %v, want %v", l, got, want)
		}
	}
	r.parts[0].waitFor = time.Time{} // nothing waiting any more: 0
	r.updateGauges(time.UnixMilli(1_000_000))
	if got := testutil.ToFloat64(r.m.nextDue.WithLabelValues(levelLabel(r.parts[0].level))); got != 0 {
		t.Errorf("next due of a level with nothing waiting = %v, want 0", got)
	}
}

// BenchmarkUpdateGauges is what every iteration of the loop spends on its
// gauges and health (18 levels, one partition each).
func BenchmarkUpdateGauges(b *testing.B) {
	r := gaugeRelay(b)
	now := time.UnixMilli(1_000_000)
	b.ReportAllocs()
	for b.Loop() {
		r.updateGauges(now)
	}
}

// compactingStore reports the compactions a test sets; updateGauges calls
// nothing else of it but Pending and NextExpiry.
type compactingStore struct {
	Store
	segments int
	entries  int64
}

func (s *compactingStore) Compacted() (int, int64)   { return s.segments, s.entries }
func (s *compactingStore) Pending() int64            { return 0 }
func (s *compactingStore) NextExpiry() (int64, bool) { return 0, false }

// TestCompactionsCounted: the wheel's compactions reach
// kdelay_wheel_compactions_total and kdelay_wheel_compacted_entries_total
// once each, and a new wheel's count adds to them from zero.
func TestCompactionsCounted(t *testing.T) {
	r := gaugeRelay(t)
	now := time.UnixMilli(1_000_000)
	check := func(when string, segs, entries float64) {
		t.Helper()
		if got := testutil.ToFloat64(r.m.compactions); got != segs {
			t.Errorf("%s: kdelay_wheel_compactions_total %v, want %v", when, got, segs)
		}
		if got := testutil.ToFloat64(r.m.compactedEntries); got != entries {
			t.Errorf("%s: kdelay_wheel_compacted_entries_total %v, want %v", when, got, entries)
		}
	}
	s := &compactingStore{segments: 2, entries: 100}
	r.wheel = s
	r.updateGauges(now)
	r.updateGauges(now)
	check("two compactions", 2, 100)
	s.segments, s.entries = 3, 160
	r.updateGauges(now)
	check("a third", 3, 160)
	// A reset: the new wheel counts from zero (openWheel sets what was seen).
	r.wheel, r.compactSeen, r.compactEntriesSeen = &compactingStore{segments: 1, entries: 7}, 0, 0
	r.updateGauges(now)
	check("after a new wheel", 4, 167)
}
