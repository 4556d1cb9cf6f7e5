package main

import (
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseOptionsLists(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		modes     []string
		rates     []int
		errSubstr string
	}{
		{args: nil, modes: []string{atLeastOnce}, rates: []int{10_000, 50_000}},
		{args: []string{"--quick"}, modes: []string{atLeastOnce}, rates: []int{1000}},
		{args: []string{"--quick", "--due-rate", "2000"}, modes: []string{atLeastOnce}, rates: []int{2000}},
		{args: []string{"--delivery", "exactly-once, at-least-once", "--due-rate", "10000, 50000"}, modes: []string{exactlyOnce, atLeastOnce}, rates: []int{10_000, 50_000}},
		{args: []string{"--delivery", "exactly-once"}, modes: []string{exactlyOnce}, rates: []int{10_000, 50_000}},
		{args: []string{"--delivery", "at-least-once,at-least-once"}, errSubstr: "twice"},
		{args: []string{"--delivery", "at-most-once"}, errSubstr: "invalid --delivery"},
		{args: []string{"--delivery", ""}, errSubstr: "invalid --delivery"},
		{args: []string{"--due-rate", "10000,0"}, errSubstr: "invalid --due-rate"},
		{args: []string{"--due-rate", "10k"}, errSubstr: "invalid --due-rate"},
		{args: []string{"--size", "100,"}, errSubstr: "invalid --size"},
		{args: []string{"--due-load", "burst"}, errSubstr: "invalid --due-load"},
		{args: []string{"--due-delay", "0s"}, errSubstr: "invalid --due-delay"},
	} {
		o, err := parseOptions(tc.args, io.Discard, io.Discard)
		if tc.errSubstr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errSubstr) {
				t.Errorf("%q: got error %v, want one with %q", tc.args, err, tc.errSubstr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if o.dueLoad != "preload" {
			t.Errorf("%q: --due-load %q, want preload by default", tc.args, o.dueLoad)
		}
		if !slices.Equal(o.deliveries, tc.modes) || !slices.Equal(o.dueRates, tc.rates) {
			t.Errorf("%q: got modes %q rates %v, want %q %v", tc.args, o.deliveries, o.dueRates, tc.modes, tc.rates)
		}
	}
}

func TestRoundModes(t *testing.T) {
	modes := []string{atLeastOnce, exactlyOnce}
	for rep, want := range [][]string{modes, {exactlyOnce, atLeastOnce}, modes} {
		if got := roundModes(modes, rep); !slices.Equal(got, want) {
			t.Errorf("round %d: got %q, want %q", rep, got, want)
		}
	}
	if !slices.Equal(modes, []string{atLeastOnce, exactlyOnce}) {
		t.Errorf("roundModes changed its argument: %q", modes)
	}
}

func run1(scenario, mode string, size, rep int, rate float64) *result {
	return &result{Scenario: scenario, Delivery: mode, Size: size, Rep: rep, DrainRate: rate, Records: 1000}
}

func TestPairRatios(t *testing.T) {
	c1 := run1("ceiling", "", 100, 1, 200)
	l1 := run1("level", atLeastOnce, 100, 1, 180)
	e1 := run1("level", exactlyOnce, 100, 1, 90)
	s1 := run1("serial", "", 100, 1, 50)
	p1 := run1("pipelined", "", 100, 1, 100)
	w1k := run1("wheel", atLeastOnce, 1024, 1, 150) // no ceiling at 1 KB
	c2 := run1("ceiling", "", 100, 2, 100)
	c2.Err = "ceiling: only 10 of 1000 records delivered"
	e2 := run1("level", exactlyOnce, 100, 2, 150) // EOS first in round 2
	l2 := run1("level", atLeastOnce, 100, 2, 100)
	f2 := run1("wheel", exactlyOnce, 100, 2, 120)
	f2.Err = "wheel: failed"
	c3 := run1("ceiling", "", 100, 3, 400)
	w3 := run1("wheel", atLeastOnce, 100, 3, 100)
	rs := []*result{c1, l1, e1, s1, p1, w1k, c2, e2, l2, f2, w3, c3} // round 3's ceiling after its burst
	pairRatios(rs)
	for _, tc := range []struct {
		r              *result
		ceiling, toALO float64
		name           string
	}{
		{l1, 0.9, 0, "level round 1"},
		{e1, 0.45, 0.5, "level exactly-once round 1"},
		{s1, 0.25, 0, "serial pipe round 1"},
		{p1, 0.5, 0, "pipelined pipe round 1"},
		{c1, 0, 0, "the ceiling itself"},
		{w1k, 0, 0, "wheel 1KB without a ceiling of its size"},
		// Round 2's ceiling failed: no ratio, in particular not against round 1's.
		{l2, 0, 0, "level round 2"},
		{e2, 0, 1.5, "level exactly-once round 2, run before its at-least-once partner"},
		{f2, 0, 0, "failed run"},
		{w3, 0.25, 0, "wheel round 3, listed before its ceiling"},
	} {
		if tc.r.RatioToCeiling != tc.ceiling || tc.r.RatioToALO != tc.toALO {
			t.Errorf("%s: got %v / %v, want %v / %v", tc.name, tc.r.RatioToCeiling, tc.r.RatioToALO, tc.ceiling, tc.toALO)
		}
	}
}

// A burst's relay CPU per record is set against the ceiling client's of
// its size and round, whatever the ceiling's drain rate.
func TestCPUToClient(t *testing.T) {
	c1 := run1("ceiling", "", 100, 1, 0) // drain unknown (kfake): the CPU still pairs
	c1.ClientCPUSeconds = 0.0008         // 0.8 µs per record of 1000
	l1 := run1("level", atLeastOnce, 100, 1, 180)
	l1.RelayCPUSeconds = 0.003
	w1k := run1("wheel", atLeastOnce, 1024, 1, 150) // no ceiling of its size
	w1k.RelayCPUSeconds = 0.005
	c2 := run1("ceiling", "", 100, 2, 100)
	c2.ClientCPUSeconds, c2.Err = 0.001, "ceiling: failed"
	l2 := run1("level", atLeastOnce, 100, 2, 100)
	l2.RelayCPUSeconds = 0.003
	i3 := run1("wheel", atLeastOnce, 100, 3, 100) // the relay in process: no CPU of its own
	c3 := run1("ceiling", "", 100, 3, 100)
	c3.ClientCPUSeconds = 0.001
	rs := []*result{c1, l1, w1k, c2, l2, i3, c3}
	pairRatios(rs)
	for _, tc := range []struct {
		r    *result
		want float64
		name string
	}{
		{l1, 3.75, "level round 1"},
		{w1k, 0, "wheel 1KB without a ceiling of its size"},
		{l2, 0, "level round 2, its ceiling failed"},
		{i3, 0, "relay in process"},
		{c1, 0, "the ceiling itself"},
	} {
		if math.Abs(tc.r.CPUToClient-tc.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tc.name, tc.r.CPUToClient, tc.want)
		}
	}
	if got := cpuPerRecord(c1); math.Abs(got-0.8) > 1e-9 {
		t.Errorf("ceiling client CPU per record: got %v µs, want 0.8", got)
	}
	md := markdown(&results{Results: rs})
	if !strings.Contains(md, "| 3.00 | 3.75x |") {
		t.Errorf("runs table lacks the level run's CPU and its ratio to the client:\n%s", md)
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		vals []float64
		want string
	}{
		{nil, "-"},
		{[]float64{0.861}, "0.86x"},
		{[]float64{0.77, 0.93, 0.86}, "0.86x (0.77x, 0.93x, 0.86x; range 0.77x–0.93x)"},
		{[]float64{0.8, 1.0}, "0.90x (0.80x, 1.00x; range 0.80x–1.00x)"},
	} {
		if got := spread(tc.vals, ratioFmt); got != tc.want {
			t.Errorf("spread(%v): got %q, want %q", tc.vals, got, tc.want)
		}
	}
	if got := spread([]float64{4, 25, 1200}, ms); got != "25ms (4ms, 25ms, 1.20s; range 4ms–1.20s)" {
		t.Errorf("spread in ms: got %q", got)
	}
}

func TestGoalsTable(t *testing.T) {
	for i, g := range goals {
		if g.issue == 0 || g.what == "" || g.metric == nil {
			t.Errorf("goal %d (%q): needs an issue, a text and a metric", i, g.what)
		}
	}
}

// verdictOf finds the verdict of the goal whose text starts with what, on
// subject.
func verdictOf(t *testing.T, vs []verdict, what, subject string) verdict {
	t.Helper()
	for _, v := range vs {
		if strings.HasPrefix(v.goal.what, what) && v.subject == subject {
			return v
		}
	}
	t.Fatalf("no verdict for %q on %q", what, subject)
	return verdict{}
}

func TestEvaluate(t *testing.T) {
	var rs []*result
	add := func(r *result) *result { rs = append(rs, r); return r }
	// Level 100B: ratios 0.55, 0.45, 0.52 -> median 0.52, met; relay CPU
	// 2, 3, 2.4 µs per record -> median 2.4, met.
	// First record 5, 12, 8 ms after its due time -> median 8, met.
	for i, ratio := range []float64{0.55, 0.45, 0.52} {
		r := add(run1("level", atLeastOnce, 100, i+1, 1))
		r.RatioToCeiling = ratio
		r.RelayCPUSeconds = []float64{0.002, 0.003, 0.0024}[i]
		r.FirstLatenessMs = &[]float64{5, 12, 8}[i]
	}
	// Direct 100B (the level path read at its level time): 0.6x, met; its
	// first record (30 ms late) has no goal: it is not read ahead.
	dr := add(run1("direct", atLeastOnce, 100, 1, 1))
	dr.RatioToCeiling = 0.6
	dr.FirstLatenessMs = new(float64)
	*dr.FirstLatenessMs = 30
	// Level 1KB: 0.3, 0.45, 0.4 -> median 0.4, missed by 0.1; its CPU
	// (5 µs per record) has no goal.
	for i, ratio := range []float64{0.3, 0.45, 0.4} {
		r := add(run1("level", atLeastOnce, 1024, i+1, 1))
		r.RatioToCeiling = ratio
		r.RelayCPUSeconds = 0.005
	}
	// Exactly-once level 100B: one failed run is left out of the median.
	for i, ratio := range []float64{0.85, 0.5, 0.81} {
		r := add(run1("level", exactlyOnce, 100, i+1, 1))
		r.RatioToCeiling, r.RatioToALO = ratio*0.9, ratio
		if i == 1 {
			r.Err = "level: only 900 of 1000 records delivered"
		}
	}
	// Exactly-once wheel 1KB: its only run failed.
	bad := add(run1("wheel", exactlyOnce, 1024, 1, 1))
	bad.Err = "wheel: relay exited"
	bad.Early = 2
	// Due rate 50k/s: p99 120 ms, missed; 10k/s did not run.
	d := add(&result{Scenario: "duerate", DueRate: 50_000, Records: 250_000, Rep: 1, Lateness: &dist{P99: 120, P999: 400}})
	d.Early = 1
	// Recovery with 20k records: the 1M goals are n/a.
	add(&result{Scenario: "recovery", Records: 20_000, Delivered: 100, RelayPeakRSS: 100 << 20,
		Recovery: &recovery{RSSPending: 90 << 20, RestartToFirstDeliveryMs: 300}})
	vs := evaluate(&results{Results: rs})

	for _, tc := range []struct {
		what, subject, status, measured, note string
	}{
		{"level burst", "level 100B", met, "0.52x (0.55x, 0.45x, 0.52x; range 0.45x–0.55x)", ""},
		{"level burst", "level 1KB", missed, "0.40x (0.30x, 0.45x, 0.40x; range 0.30x–0.45x)", "by 0.10x"},
		{"wheel burst", "-", notRun, "-", ""},
		{"relay CPU per record", "level 100B", met, "2.40µs (2.00µs, 3.00µs, 2.40µs; range 2.00µs–3.00µs)", ""},
		{"level-path burst read at its level time", "direct 100B", met, "0.60x", ""},
		{"first record of a burst read ahead", "level 100B", met, "8ms (5ms, 12ms, 8ms; range 5ms–12ms)", ""},
		{"exactly-once / at-least-once", "level 100B exactly-once", met, "0.83x (0.85x, 0.81x; range 0.81x–0.85x)", "failed: level 100B exactly-once #2"},
		{"exactly-once / at-least-once", "wheel 1KB exactly-once", missed, "-", "failed: wheel 1KB exactly-once"},
		{"lateness p99 at 10k", "-", notRun, "-", ""},
		{"lateness p99 at 50k", "duerate 50k/s", missed, "120ms", "by 20ms"},
		{"relay RSS with 1M", "recovery", notApp, "-", "20000 records; the goal is for 1000000"},
		{"restart with 1M", "recovery", notApp, "-", "20000 records; the goal is for 1000000"},
		{"early deliveries", "all runs", missed, "3", "by 3; wheel 1KB exactly-once: 2; duerate 50k/s: 1"},
		{"duplicates in exactly-once", "all runs", met, "0", ""},
	} {
		v := verdictOf(t, vs, tc.what, tc.subject)
		if v.status != tc.status || v.measured() != tc.measured || v.note != tc.note {
			t.Errorf("%s on %s: got %s, %q, note %q; want %s, %q, note %q", tc.what, tc.subject, v.status, v.measured(), v.note, tc.status, tc.measured, tc.note)
		}
	}
	// The level goals never take exactly-once runs.
	for _, v := range vs {
		if strings.HasPrefix(v.goal.what, "level burst") && strings.Contains(v.subject, exactlyOnce) {
			t.Errorf("level goal checked on %s", v.subject)
		}
	}
	// The CPU goal is for 100 B records only; the first-record goal for
	// the bursts read ahead.
	for _, v := range vs {
		if strings.HasPrefix(v.goal.what, "relay CPU") && v.subject != "level 100B" && (v.subject != "direct 100B" || v.status != notApp) {
			t.Errorf("CPU goal checked on %s", v.subject)
		}
		if strings.HasPrefix(v.goal.what, "first record") && v.subject != "level 100B" && v.subject != "level 1KB" {
			t.Errorf("first-record goal checked on %s", v.subject)
		}
	}
	if got := missedLines(vs); len(got) != 4 || !strings.HasPrefix(got[0], "MISSED level 1KB: 0.40x (") {
		t.Errorf("missed lines: %q", got)
	}
	md := goalsMarkdown(vs)
	if !strings.Contains(md, "| level burst / ceiling (drain, median of same-round ratios) ≥ 0.50x | issue 37 | level 1KB | 0.40x (0.30x, 0.45x, 0.40x; range 0.30x–0.45x) | **MISSED** (by 0.10x) |") {
		t.Errorf("goals table lacks the missed level 1KB row:\n%s", md)
	}
	if !strings.HasPrefix(md, "### Goals: 4 MISSED, 6 met, 8 not run or n/a\n") {
		t.Errorf("goals table header: %q", strings.SplitN(md, "\n", 2)[0])
	}
}

// A miss smaller than the printed precision still says by how much.
func TestEvaluateNarrowMiss(t *testing.T) {
	r := run1("wheel", atLeastOnce, 100, 1, 1)
	r.RatioToCeiling = 0.498
	v := verdictOf(t, evaluate(&results{Results: []*result{r}}), "wheel burst", "wheel 100B")
	if v.status != missed || v.measured() != "0.50x" || v.note != "by 0.002x: 0.498x" {
		t.Errorf("got %s, %q, note %q", v.status, v.measured(), v.note)
	}
}

func TestEvaluateRecoveryAt1M(t *testing.T) {
	r := &result{Scenario: "recovery", Records: 1_000_000, Delivered: 5000, RelayPeakRSS: 80 << 20, RelayPeakAnon: 50 << 20, RelayPeakFile: 30 << 20,
		Recovery: &recovery{RSSPending: 60 << 20, RSSAnonPending: 40 << 20, RSSFilePending: 20 << 20, RestartToFirstDeliveryMs: 6200}}
	vs := evaluate(&results{Results: []*result{r}})
	for _, tc := range []struct{ what, status, measured, note string }{
		{"relay RSS with 1M", met, "60 MB", "anon 40 MB + file-backed 20 MB"},
		{"relay peak RSS", missed, "80 MB", "by 16 MB; sampled peaks: anon 50 MB, file-backed 30 MB"},
		{"restart with 1M", missed, "6.20s", "by 1.20s"},
	} {
		v := verdictOf(t, vs, tc.what, "recovery")
		if v.status != tc.status || v.measured() != tc.measured || v.note != tc.note {
			t.Errorf("%s: got %s, %q, note %q; want %s, %q, note %q", tc.what, v.status, v.measured(), v.note, tc.status, tc.measured, tc.note)
		}
	}
}

// With GOMEMLIMIT (or GOGC...) passed to the relay from outside, the RSS
// goals, set for the defaults, are n/a; the others still hold.
func TestEvaluateRelayGoEnv(t *testing.T) {
	r := &result{Scenario: "recovery", Records: 1_000_000, Delivered: 5000, RelayPeakRSS: 60 << 20,
		Recovery: &recovery{RSSPending: 50 << 20, RestartToFirstDeliveryMs: 300}}
	vs := evaluate(&results{RelayGoEnv: "GOMEMLIMIT=48MiB", Results: []*result{r}})
	for _, tc := range []struct{ what, status string }{
		{"relay RSS with 1M", notApp},
		{"relay peak RSS", notApp},
		{"restart with 1M", met},
	} {
		if v := verdictOf(t, vs, tc.what, "recovery"); v.status != tc.status {
			t.Errorf("%s: got %s (%s), want %s", tc.what, v.status, v.note, tc.status)
		}
	}
	if got := missedLines(vs); len(got) != 0 {
		t.Errorf("missed lines: %q", got)
	}
}

func TestRepetitions(t *testing.T) {
	rs := []*result{
		run1("ceiling", "", 100, 1, 200),
		run1("level", atLeastOnce, 100, 1, 180),
		run1("ceiling", "", 100, 2, 100),
		run1("level", atLeastOnce, 100, 2, 90),
		{Scenario: "duerate", DueRate: 10_000, Rep: 1, Lateness: &dist{P99: 9}},
		{Scenario: "duerate", DueRate: 10_000, Rep: 2, Lateness: &dist{P99: 12}, Err: "failed"},
		{Scenario: "recovery"},
	}
	pairRatios(rs)
	rows := repetitions(&results{Results: rs})
	var names []string
	for _, r := range rows {
		names = append(names, r.name)
	}
	if want := []string{"ceiling 100B", "level 100B", "duerate 10k/s"}; !slices.Equal(names, want) {
		t.Fatalf("groups: got %q, want %q", names, want)
	}
	if got := spread(rows[1].ratio, ratioFmt); got != "0.90x (0.90x, 0.90x; range 0.90x–0.90x)" {
		t.Errorf("level ratios: %s", got)
	}
	if d := rows[2]; d.n != 2 || d.failed != 1 || !slices.Equal(d.p99, []float64{9}) {
		t.Errorf("duerate row: %+v", d)
	}
}

func TestRateName(t *testing.T) {
	for n, want := range map[int]string{500: "500/s", 1000: "1k/s", 10_000: "10k/s", 12_500: "12.5k/s", 50_000: "50k/s", 1234: "1234/s"} {
		if got := rateName(n); got != want {
			t.Errorf("rateName(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLateWindows(t *testing.T) {
	const first = 1_000_000
	recs := []delivery{
		{dueMs: first + 50, tsMs: first + 50 + 40},     // +0 ms window, 40 ms late
		{dueMs: first + 120, tsMs: first + 120 + 11},   // +100 ms window
		{dueMs: first + 150, tsMs: first + 150 + 90},   // +100 ms window, the largest
		{dueMs: first + 180, tsMs: first + 180 + 10},   // exactly at the bound: not late
		{dueMs: first + 950, tsMs: first + 950 + 3},    // on time
		{dueMs: -1, tsMs: first + 5000},                // no due time: ignored
		{dueMs: first + 2010, tsMs: first + 2010 + 12}, // +2000 ms window
	}
	got := lateWindows(recs, first, 2)
	want := []lateWindow{{StartMs: 100, Late: 2, MaxMs: 90}, {StartMs: 0, Late: 1, MaxMs: 40}}
	if !slices.Equal(got, want) {
		t.Fatalf("lateWindows = %+v, want %+v", got, want)
	}
	if all := lateWindows(recs, first, 10); len(all) != 3 || all[2].StartMs != 2000 {
		t.Fatalf("all windows = %+v, want 3 ending with +2000ms", all)
	}
	if none := lateWindows(recs[4:6], first, 5); len(none) != 0 {
		t.Fatalf("on-time records gave windows %+v", none)
	}
	r := &result{Scenario: "duerate", DueMs: first}
	r.fill(recs, 0, 0)
	if !strings.Contains(r.summary(), "+100ms: 2 (max 90ms)") {
		t.Fatalf("summary does not name the worst window:\n%s", r.summary())
	}
}

func TestBrokerPauses(t *testing.T) {
	dir := t.TempDir()
	log := dir + "/gc.log"
	lines := []string{
		"[2026-12-03T19:15:05.618+0000] Using G1",
		"[2026-12-03T19:15:05.618+0000] GC(105) Pause Young (Normal) (G1 Evacuation Pause) 203M->83M(256M) 29.278ms",
		"[2026-12-03T19:15:05.900+0000] GC(106) Concurrent Mark Cycle 12.500ms",
		"[2026-12-03T19:15:06.050+0000] GC(107) Pause Remark 90M->90M(256M) 4.000ms",
		"[2026-12-03T19:15:09.000+0000][12.5s] GC(108) Pause Young (Normal) (G1 Evacuation Pause) 220M->86M(256M) 11.5ms",
		"not a log line",
	}
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pauses, err := readBrokerPauses(log)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Date(2026, 12, 3, 19, 15, 5, 500_000_000, time.UTC).UnixMilli()
	want := []brokerPause{{first + 118, 29.278}, {first + 550, 4}, {first + 3500, 11.5}}
	if !slices.Equal(pauses, want) {
		t.Fatalf("pauses = %+v, want %+v", pauses, want)
	}
	r := &result{DueMs: first, CompletionMs: 1000, LateWindows: []lateWindow{{StartMs: 0, Late: 5}, {StartMs: 500, Late: 3}, {StartMs: 800, Late: 1}}}
	r.attributePauses(pauses)
	if got := *r.BrokerPauses; got != (pauseSummary{Count: 2, TotalMs: 33.278, MaxMs: 29.278}) {
		t.Fatalf("summary = %+v", got)
	}
	if got := []float64{r.LateWindows[0].BrokerPauseMs, r.LateWindows[1].BrokerPauseMs, r.LateWindows[2].BrokerPauseMs}; !slices.Equal(got, []float64{29.278, 4, 0}) {
		t.Fatalf("window pauses = %v, want [29.278 4 0]", got)
	}
	if s := r.summary(); !strings.Contains(s, "+0ms: 5 (max 0ms, broker GC pause 29ms)") || !strings.Contains(s, "2 pauses") {
		t.Fatalf("summary:\n%s", s)
	}
	if _, err := readBrokerPauses(dir + "/missing.log"); err == nil {
		t.Fatal("a missing GC log gave no error")
	}
}

func TestLateShare(t *testing.T) {
	text := `# TYPE kdelay_send_lateness_seconds histogram
kdelay_send_lateness_seconds_bucket{level="1",le="0.005"} 80
kdelay_send_lateness_seconds_bucket{level="1",le="0.01"} 90
kdelay_send_lateness_seconds_bucket{level="1",le="+Inf"} 100
kdelay_send_lateness_seconds_count{level="1"} 100
kdelay_send_lateness_seconds_bucket{level="3",le="0.01"} 290
kdelay_send_lateness_seconds_bucket{level="3",le="+Inf"} 300
kdelay_send_lateness_seconds_count{level="3"} 300
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := lateShare(m, "kdelay_send_lateness_seconds"); got != 20.0/400 {
		t.Fatalf("lateShare = %v, want %v", got, 20.0/400)
	}
	if got := lateShare(m, "kdelay_lateness_seconds"); got != 0 {
		t.Fatalf("lateShare without samples = %v, want 0", got)
	}
	r := &result{}
	r.fill([]delivery{{dueMs: 100, tsMs: 110}, {dueMs: 100, tsMs: 111}, {dueMs: 100, tsMs: 100}, {dueMs: 100, tsMs: 150}}, 0, 0)
	if r.LateShare != 0.5 {
		t.Fatalf("LateShare = %v, want 0.5 (11 and 50 ms of 4)", r.LateShare)
	}
}
