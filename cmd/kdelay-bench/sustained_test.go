package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The search climbs the rates until one is not held, then halves the
// interval between the last rate held and the first not held.
func TestSearchSustained(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int // highest rate held
		refine int
		want   []int
	}{
		{"refined", 50_000, 2, []int{10_000, 20_000, 40_000, 80_000, 60_000, 50_000}},
		{"every rate held", 1_000_000, 2, []int{10_000, 20_000, 40_000, 80_000}},
		{"none held", 5_000, 2, []int{10_000, 5_000, 7_500}},
		{"no refinement", 30_000, 0, []int{10_000, 20_000, 40_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tried []int
			searchSustained([]int{10_000, 20_000, 40_000, 80_000}, tc.refine, func(rate int) *result {
				tried = append(tried, rate)
				return &result{DueRate: rate, Sustained: &sustainedInfo{Held: rate <= tc.limit}}
			})
			if !slices.Equal(tried, tc.want) {
				t.Errorf("tried %v, want %v", tried, tc.want)
			}
		})
	}
	// A step that could not run ends the search.
	n := 0
	searchSustained([]int{1, 2, 3}, 2, func(int) *result { n++; return nil })
	if n != 1 {
		t.Errorf("%d steps after one that could not run", n)
	}
}

// held takes a rate only with every record, a load offered at the rate
// and the arrival p99 within the limit; a short load is the generator's.
func TestHeld(t *testing.T) {
	ok := func() *result {
		return &result{DueRate: 10_000, Sustained: &sustainedInfo{OfferedRate: 9_990}, ArrivalLateness: &dist{P99: 80}}
	}
	for _, tc := range []struct {
		name     string
		mod      func(*result)
		werr     error
		held, lb bool
		why      string
	}{
		{"held", func(*result) {}, nil, true, false, ""},
		{"slow", func(r *result) { r.ArrivalLateness.P99 = 101 }, nil, false, false, "arrival p99 101ms"},
		{"missing", func(*result) {}, errors.New("only 5 of 6 records delivered"), false, false, "only 5 of 6 records delivered"},
		{"short load", func(r *result) { r.Sustained.OfferedRate = 9_000 }, nil, false, true, "load offered at 9k/s only"},
		{"acked late", func(r *result) { r.AckedAfterDue = 3 }, nil, false, true, "3 records acked after their due time"},
	} {
		r := ok()
		tc.mod(r)
		h, lb, why := held(r, tc.werr)
		if h != tc.held || lb != tc.lb || why != tc.why {
			t.Errorf("%s: held %v, load-bound %v, %q", tc.name, h, lb, why)
		}
	}
}

// The table gives each relay count's highest rate held, its scale against
// one relay, and every step.
func TestSustainedMarkdown(t *testing.T) {
	step := func(relays, rate int, held, lb bool, p99 float64) *result {
		return &result{Scenario: "sustained", DueRate: rate, ArrivalLateness: &dist{P99: p99}, Lateness: &dist{P99: p99 / 2},
			Sustained: &sustainedInfo{Relays: relays, Held: held, LoadBound: lb, Why: map[bool]string{false: "arrival p99 x"}[held]}}
	}
	res := &results{Results: []*result{
		step(1, 10_000, true, false, 20), step(1, 20_000, false, false, 300), step(1, 15_000, true, false, 60),
		step(2, 10_000, true, false, 10), step(2, 20_000, true, false, 30), step(2, 40_000, false, true, 900),
		step(4, 10_000, true, false, 10),
	}}
	md := sustainedMarkdown(res)
	for _, want := range []string{
		"| 1 | 15k/s | 1.00x | 10k/s: p99 20ms (append 10ms) held; 20k/s: p99 300ms (append 150ms) not held (arrival p99 x); 15k/s: p99 60ms (append 30ms) held |",
		"| 2 | ≥ 20k/s (load-bound) | 1.33x |",
		"| 4 | ≥ 10k/s (every rate tried held) | 0.67x |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	if sustainedMarkdown(&results{}) != "" {
		t.Error("a sustained table without sustained runs")
	}
}
