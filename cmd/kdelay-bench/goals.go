package main

import (
	"fmt"
	"slices"
	"strings"
)

// unit says how a goal's figures are printed.
type unit int

const (
	unitRatio  unit = iota // 0.86x
	unitMs                 // 25ms, 1.20s
	unitBytes              // 64 MB
	unitCount              // 0
	unitMicros             // 2.50µs
)

// precise formats v with more digits than format, for a miss that format
// would round to nothing.
func (u unit) precise(v float64) string {
	switch u {
	case unitRatio:
		return fmt.Sprintf("%.3fx", v)
	case unitMs:
		return fmt.Sprintf("%.2fms", v)
	case unitBytes:
		return fmt.Sprintf("%.2f MB", v/(1<<20))
	case unitMicros:
		return fmt.Sprintf("%.3fµs", v)
	default:
		return fmt.Sprintf("%g", v)
	}
}

func (u unit) format(v float64) string {
	switch u {
	case unitRatio:
		return fmt.Sprintf("%.2fx", v)
	case unitMs:
		return ms(v)
	case unitBytes:
		return fmt.Sprintf("%.0f MB", v/(1<<20))
	case unitMicros:
		return usFmt(v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// goal is one target of the bench, as an issue set it. A goal applies to
// the runs of its scenarios (in its delivery mode, at its due rate, where
// given); the runs of one path, size, mode and due rate form one group,
// and the goal is checked on the group's median. With whole, it is
// checked once, on the sum over every run it applies to.
type goal struct {
	issue     int
	what      string
	scenarios []string // nil: every scenario
	delivery  string   // "": either mode
	dueRate   int      // duerate runs at this rate only; 0: any
	size      int      // runs with records of this size only; 0: any
	atRecords int      // applies to runs of at least this many records; fewer: n/a
	whole     bool
	defaults  bool // holds for the relay with the Go runtime's defaults only (no GOMEMLIMIT from outside)
	atMost    bool // limit is an upper bound (≤); else a lower bound (≥)
	limit     float64
	unit      unit
	metric    func(*result) (float64, bool)
	detail    func(*result) string // optional, printed after a single run's value
}

// goals are every goal the bench checks, in the order they are printed:
// the one place where they are written down.
var goals = []goal{
	{issue: 37, what: "level burst / ceiling (drain, median of same-round ratios)", scenarios: []string{"level"}, delivery: atLeastOnce,
		limit: 0.5, unit: unitRatio, metric: toCeiling},
	{issue: 37, what: "wheel burst / ceiling (drain, median of same-round ratios)", scenarios: []string{"wheel"}, delivery: atLeastOnce,
		limit: 0.5, unit: unitRatio, metric: toCeiling},
	{issue: 37, what: "level-path burst read at its level time (direct) / ceiling (drain, median of same-round ratios)", scenarios: []string{"direct"}, delivery: atLeastOnce,
		limit: 0.5, unit: unitRatio, metric: toCeiling},
	{issue: 37, what: "relay CPU per record at 100 B (bursts, end to end: first produce to last delivery)", scenarios: []string{"direct", "level", "wheel"}, delivery: atLeastOnce, size: 100,
		atMost: true, limit: 2.5, unit: unitMicros,
		metric: func(r *result) (float64, bool) { c := cpuPerRecord(r); return c, c > 0 }},
	{issue: 37, what: "first record of a burst read ahead: lateness after its due time", scenarios: []string{"level", "wheel"}, delivery: atLeastOnce,
		atMost: true, limit: 10, unit: unitMs, metric: firstLate},
	{issue: 12, what: "exactly-once / at-least-once (throughput, median of same-round ratios)", scenarios: []string{"level", "wheel"}, delivery: exactlyOnce,
		limit: 0.8, unit: unitRatio, metric: func(r *result) (float64, bool) { return r.RatioToALO, r.RatioToALO > 0 }},
	{issue: 14, what: "lateness p99 at 10k records/s due", scenarios: []string{"duerate"}, dueRate: 10_000,
		atMost: true, limit: 10, unit: unitMs, metric: latenessOf(func(d *dist) float64 { return d.P99 })},
	{issue: 14, what: "lateness p99.9 at 10k records/s due", scenarios: []string{"duerate"}, dueRate: 10_000,
		atMost: true, limit: 50, unit: unitMs, metric: latenessOf(func(d *dist) float64 { return d.P999 })},
	{issue: 14, what: "lateness p99 at 50k records/s due", scenarios: []string{"duerate"}, dueRate: 50_000,
		atMost: true, limit: 100, unit: unitMs, metric: latenessOf(func(d *dist) float64 { return d.P99 })},
	{issue: 14, what: "relay RSS with 1M records pending in the wheel (VmRSS, `kdelay run` defaults)", scenarios: []string{"recovery"}, atRecords: 1_000_000, defaults: true,
		atMost: true, limit: 64 << 20, unit: unitBytes,
		metric: func(r *result) (float64, bool) {
			if r.Recovery == nil {
				return 0, false
			}
			return float64(r.Recovery.RSSPending), r.Recovery.RSSPending > 0
		},
		detail: func(r *result) string {
			rc := r.Recovery
			return fmt.Sprintf("anon %s + file-backed %s", mb(rc.RSSAnonPending), mb(rc.RSSFilePending))
		}},
	{issue: 14, what: "relay peak RSS over the pre-load of 1M records and the restart (VmHWM)", scenarios: []string{"recovery"}, atRecords: 1_000_000, defaults: true,
		atMost: true, limit: 64 << 20, unit: unitBytes,
		metric: func(r *result) (float64, bool) { return float64(r.RelayPeakRSS), r.RelayPeakRSS > 0 },
		detail: func(r *result) string {
			return fmt.Sprintf("sampled peaks: anon %s, file-backed %s", mb(r.RelayPeakAnon), mb(r.RelayPeakFile))
		}},
	{issue: 8, what: "restart with 1M records pending: restart to first delivery", scenarios: []string{"recovery"}, atRecords: 1_000_000,
		atMost: true, limit: 5000, unit: unitMs,
		metric: func(r *result) (float64, bool) {
			if r.Recovery == nil {
				return 0, false
			}
			return r.Recovery.RestartToFirstDeliveryMs, r.Delivered > 0
		}},
	{issue: 8, what: "early deliveries, sum over every run", whole: true,
		atMost: true, limit: 0, unit: unitCount, metric: func(r *result) (float64, bool) { return float64(r.Early), true }},
	{issue: 12, what: "duplicates in exactly-once mode, sum over every run", delivery: exactlyOnce, whole: true,
		atMost: true, limit: 0, unit: unitCount, metric: func(r *result) (float64, bool) { return float64(r.Duplicates), true }},
}

func toCeiling(r *result) (float64, bool) { return r.RatioToCeiling, r.RatioToCeiling > 0 }

func latenessOf(f func(*dist) float64) func(*result) (float64, bool) {
	return func(r *result) (float64, bool) {
		if r.Lateness == nil {
			return 0, false
		}
		return f(r.Lateness), true
	}
}

func (g *goal) String() string {
	op := "≥"
	if g.atMost {
		op = "≤"
	}
	return fmt.Sprintf("%s %s %s", g.what, op, g.unit.format(g.limit))
}

func (g *goal) appliesTo(r *result) bool {
	if g.scenarios != nil && !slices.Contains(g.scenarios, r.Scenario) {
		return false
	}
	if g.delivery != "" && r.mode() != g.delivery {
		return false
	}
	if g.size != 0 && r.Size != g.size {
		return false
	}
	return g.dueRate == 0 || r.DueRate == g.dueRate
}

// Verdicts.
const (
	met    = "met"
	missed = "MISSED"
	notApp = "n/a"
	notRun = "not run"
)

// verdict is a goal checked on one group of runs.
type verdict struct {
	goal    *goal
	subject string    // the group: "level 100B", "duerate 10k/s exactly-once", "all runs"
	values  []float64 // one per complete run, in run order
	value   float64   // the median of values; with whole, their sum
	status  string    // met, MISSED, n/a or not run
	note    string
}

// evaluate checks every goal against res. A goal no run applies to is
// "not run"; a group below the goal's record count is "n/a"; a group
// whose runs all failed is MISSED.
func evaluate(res *results) []verdict {
	var out []verdict
	for i := range goals {
		g := &goals[i]
		var groups []string
		runs := map[string][]*result{}
		for _, r := range res.Results {
			if !g.appliesTo(r) {
				continue
			}
			k := r.group()
			if g.whole {
				k = "all runs"
			}
			if runs[k] == nil {
				groups = append(groups, k)
			}
			runs[k] = append(runs[k], r)
		}
		if len(groups) == 0 {
			out = append(out, verdict{goal: g, subject: "-", status: notRun})
			continue
		}
		for _, k := range groups {
			v := check(g, k, runs[k])
			if g.defaults && res.RelayGoEnv != "" && v.status != notApp {
				v.status, v.note = notApp, "the relay ran with "+res.RelayGoEnv+"; the goal is for the defaults"
			}
			out = append(out, v)
		}
	}
	return out
}

func check(g *goal, subject string, runs []*result) verdict {
	v := verdict{goal: g, subject: subject}
	var failed, small []string
	var hits []string // whole: the runs with a non-zero value
	for _, r := range runs {
		if g.atRecords > 0 && r.Records < g.atRecords {
			small = append(small, fmt.Sprintf("%d records; the goal is for %d", r.Records, g.atRecords))
			continue
		}
		x, ok := g.metric(r)
		if g.whole {
			// Counts hold for failed runs too: an early delivery is early.
			if ok {
				v.value += x
				if x != 0 {
					hits = append(hits, fmt.Sprintf("%s: %s", r.name(), g.unit.format(x)))
				}
			}
			continue
		}
		if r.Err != "" {
			failed = append(failed, r.name())
			continue
		}
		if ok {
			v.values = append(v.values, x)
		}
	}
	var notes []string
	switch {
	case g.whole:
		notes = hits
	case len(v.values) > 0:
		v.value = median(v.values)
	}
	if len(failed) > 0 {
		notes = append(notes, "failed: "+strings.Join(failed, ", "))
	}
	switch {
	case len(small) > 0 && len(v.values) == 0:
		v.status = notApp
		notes = append(notes, small[0])
	case !g.whole && len(v.values) == 0 && len(failed) > 0:
		v.status = missed
	case !g.whole && len(v.values) == 0:
		v.status = notApp
		notes = append(notes, "no figure")
	case g.atMost && v.value <= g.limit, !g.atMost && v.value >= g.limit:
		v.status = met
	default:
		v.status = missed
		by := v.value - g.limit
		if !g.atMost {
			by = -by
		}
		byS := "by " + g.unit.format(by)
		if g.unit.format(by) == g.unit.format(0) {
			byS = fmt.Sprintf("by %s: %s", g.unit.precise(by), g.unit.precise(v.value))
		}
		notes = append([]string{byS}, notes...)
	}
	if g.detail != nil && len(runs) == 1 && v.status != notApp {
		notes = append(notes, g.detail(runs[0]))
	}
	v.note = strings.Join(notes, "; ")
	return v
}

// tally counts the verdicts: "2 MISSED, 5 met, 4 not run or n/a".
func tally(vs []verdict) string {
	var nMissed, nMet int
	for _, v := range vs {
		switch v.status {
		case missed:
			nMissed++
		case met:
			nMet++
		}
	}
	return fmt.Sprintf("%d MISSED, %d met, %d not run or n/a", nMissed, nMet, len(vs)-nMissed-nMet)
}

// missedLines is one line per missed goal, for the end of the terminal
// output.
func missedLines(vs []verdict) []string {
	var out []string
	for _, v := range vs {
		if v.status == missed {
			out = append(out, fmt.Sprintf("MISSED %s: %s, goal %s (issue %d; %s)", v.subject, v.measured(), v.goal, v.goal.issue, v.note))
		}
	}
	return out
}

// measured is the verdict's figure with its spread: the median, then every
// run's value in run order and their range ("0.86x (0.77x, 0.86x, 0.93x;
// range 0.77x–0.93x)"); one run: its value alone.
func (v verdict) measured() string {
	switch {
	case v.status == notRun:
		return "-"
	case v.goal.whole:
		return v.goal.unit.format(v.value)
	case len(v.values) == 0:
		return "-"
	}
	return spread(v.values, v.goal.unit.format)
}

// spread formats the median of vals, then with more than one value every
// value in order and the range.
func spread(vals []float64, f func(float64) string) string {
	if len(vals) == 0 {
		return "-"
	}
	m := f(median(vals))
	if len(vals) == 1 {
		return m
	}
	each := make([]string, len(vals))
	for i, x := range vals {
		each[i] = f(x)
	}
	return fmt.Sprintf("%s (%s; range %s–%s)", m, strings.Join(each, ", "), f(slices.Min(vals)), f(slices.Max(vals)))
}

// goalsMarkdown is the table of every goal: the figure next to its goal,
// missed ones in bold capitals.
func goalsMarkdown(vs []verdict) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Goals: %s\n\n", tally(vs))
	fmt.Fprintf(&sb, "| goal | source | runs | measured (median; each run; range) | verdict |\n")
	fmt.Fprintf(&sb, "|---|---|---|---|---|\n")
	for _, v := range vs {
		st := v.status
		if st == missed {
			st = "**MISSED**"
		}
		if v.note != "" {
			st += " (" + v.note + ")"
		}
		fmt.Fprintf(&sb, "| %s | issue %d | %s | %s | %s |\n", v.goal, v.goal.issue, v.subject, v.measured(), st)
	}
	return sb.String()
}
