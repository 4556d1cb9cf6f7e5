package main

import (
	"strings"
	"testing"
)

// The breakdown reads the relay's histograms (summed over levels), counts
// the late records near a broker GC pause, and names the part that held
// most of them.
func TestBreakdown(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`kdelay_send_lateness_seconds_bucket{level="1",le="0.001"} 90
kdelay_send_lateness_seconds_bucket{level="1",le="0.005"} 99
kdelay_send_lateness_seconds_bucket{level="1",le="+Inf"} 100
kdelay_send_lateness_seconds_bucket{level="2",le="0.001"} 100
kdelay_send_lateness_seconds_bucket{level="2",le="0.005"} 100
kdelay_send_lateness_seconds_bucket{level="2",le="+Inf"} 100
kdelay_send_lateness_seconds_sum{level="1"} 0.1
kdelay_send_lateness_seconds_sum{level="2"} 0.1
kdelay_send_lateness_seconds_count{level="1"} 100
kdelay_send_lateness_seconds_count{level="2"} 100
kdelay_lateness_seconds_bucket{level="1",le="0.01"} 150
kdelay_lateness_seconds_bucket{level="1",le="0.025"} 190
kdelay_lateness_seconds_bucket{level="1",le="+Inf"} 200
kdelay_lateness_seconds_sum{level="1"} 1.6
kdelay_lateness_seconds_count{level="1"} 200
`))
	if err != nil {
		t.Fatal(err)
	}
	bd := relayBreakdown(m)
	// send: 190 of 200 within 1 ms, 199 within 5 ms: p99 (198) <= 5 ms;
	// ack: 190 within 25 ms, p99 above it: +Inf (-1).
	if bd == nil || bd.SendP99Ms != 5 || bd.AckP99Ms != -1 || bd.SendMeanMs != 1 || bd.AckMeanMs != 8 || bd.NearBrokerGC != -1 {
		t.Fatalf("breakdown %+v", bd)
	}
	if relayBreakdown(map[string]float64{}) != nil {
		t.Error("a breakdown without samples")
	}
	// 1000 records due from 10_000 ms, 40 late: 30 due in +0..100ms, 10 in
	// +500..600ms; a GC pause ends at +20 ms.
	r := &result{Scenario: "duerate", DueRate: 10_000, DueMs: 10_000, Breakdown: bd}
	var recs []delivery
	for i := range 1000 {
		d := delivery{idx: int32(i), dueMs: 10_000 + int64(i), tsMs: 10_000 + int64(i) + 1}
		if i < 30 || (i >= 500 && i < 510) {
			d.tsMs += 30
		}
		recs = append(recs, d)
	}
	r.fill(recs, 0, 0)
	r.attributePauses([]brokerPause{{EndMs: 10_020, Ms: 25}})
	if bd.Late != 40 || bd.NearBrokerGC != 30 {
		t.Fatalf("late %d, near broker GC %d", bd.Late, bd.NearBrokerGC)
	}
	r.RelaySendLateShare = 0.001 // 1 of 1000 late at the send: not the relay
	line := r.breakdownLine()
	for _, want := range []string{"lateness p99 31ms > 10ms", "relay send p99 ≤ 5ms (mean 1.0ms), ack p99 ≤ +Inf (mean 8.0ms; produce round trip mean 7.0ms)", "4.00% at the append", "30 of 40 late records", "mostly broker GC"} {
		if !strings.Contains(line, want) {
			t.Errorf("breakdown line lacks %q: %s", want, line)
		}
	}
	r.RelaySendLateShare = 0.03
	if got := r.lateCause(); got != "the relay's send" {
		t.Errorf("cause %q", got)
	}
	r.RelaySendLateShare, bd.NearBrokerGC = 0, 5
	if got := r.lateCause(); !strings.HasPrefix(got, "the produce round trip") {
		t.Errorf("cause %q", got)
	}
	r.Lateness.P99 = 9
	if l := r.breakdownLine(); l != "" {
		t.Errorf("breakdown for a p99 within the goal: %s", l)
	}
}

// The first record's lateness is that of the earliest delivery.
func TestFirstLateness(t *testing.T) {
	r := &result{Scenario: "wheel", DueMs: 1000}
	r.fill([]delivery{{idx: 0, dueMs: 1000, tsMs: 1040}, {idx: 1, dueMs: 1000, tsMs: 1007}, {idx: 2, dueMs: -1, tsMs: 1001}}, 0, 0)
	if f, ok := firstLate(r); !ok || f != 7 {
		t.Errorf("first lateness %v, %v", f, ok)
	}
	r.Scenario = "duerate"
	if _, ok := firstLate(r); ok {
		t.Error("a first-record figure for a due-rate run")
	}
}
