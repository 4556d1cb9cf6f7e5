package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// breakdown is where a run's lateness lies, from the relay's own
// histograms and, with --broker-gc-log, the broker's GC pauses: the
// relay's send (due time to its produce call), the produce round trip
// (produce call to ack), or the broker's GC. Printed for every due-rate
// and sustained run whose lateness p99 is above lateWindowMs.
type breakdown struct {
	// SendP99Ms and AckP99Ms are the upper bounds of the buckets holding
	// the 99th percentile of kdelay_send_lateness_seconds (due time to the
	// relay's produce call) and kdelay_lateness_seconds (due time to the
	// ack); -1 above the last bound. SendMeanMs and AckMeanMs
	// are their means; their difference is the mean produce round trip.
	SendP99Ms  float64 `json:"relay_send_p99_le_ms"`
	AckP99Ms   float64 `json:"relay_ack_p99_le_ms"`
	SendMeanMs float64 `json:"relay_send_mean_ms"`
	AckMeanMs  float64 `json:"relay_ack_mean_ms"`
	// Late is the number of records later than lateWindowMs at the
	// target's append; NearBrokerGC how many of them were due in a 100 ms
	// window in which a broker GC pause ended (within pauseReach of its
	// start); -1 without the broker's GC log.
	Late         int `json:"late"`
	NearBrokerGC int `json:"late_near_broker_gc"`
}

// relayBreakdown reads the relay's lateness histograms from its metrics;
// nil without samples.
func relayBreakdown(m map[string]float64) *breakdown {
	sn, an := m["kdelay_send_lateness_seconds_count"], m["kdelay_lateness_seconds_count"]
	if sn == 0 || an == 0 {
		return nil
	}
	bound := func(v float64) float64 {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return -1 // JSON has no +Inf
		}
		return 1000 * v
	}
	return &breakdown{
		SendP99Ms:    bound(histQuantile(m, "kdelay_send_lateness_seconds", 0.99)),
		AckP99Ms:     bound(histQuantile(m, "kdelay_lateness_seconds", 0.99)),
		SendMeanMs:   1000 * m["kdelay_send_lateness_seconds_sum"] / sn,
		AckMeanMs:    1000 * m["kdelay_lateness_seconds_sum"] / an,
		NearBrokerGC: -1,
	}
}

// histQuantile is the upper bound of the bucket of the Prometheus
// histogram name (summed over its labels) that holds quantile q; +Inf
// above the last bound, NaN without samples.
func histQuantile(m map[string]float64, name string, q float64) float64 {
	by := map[float64]float64{}
	prefix := name + "_bucket{"
	for k, v := range m {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		i := strings.Index(k, `le="`)
		if i < 0 {
			continue
		}
		rest := k[i+4:]
		j := strings.IndexByte(rest, '"')
		if j < 0 {
			continue
		}
		le, err := strconv.ParseFloat(rest[:j], 64) // "+Inf" parses
		if err != nil {
			continue
		}
		by[le] += v
	}
	les := make([]float64, 0, len(by))
	for le := range by {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 || by[les[len(les)-1]] == 0 {
		return math.NaN()
	}
	want := q * by[les[len(les)-1]]
	for _, le := range les {
		if by[le] >= want {
			return le
		}
	}
	return math.Inf(1)
}

// lateCause names the part that held most late records: the relay's send
// when at least half of them were late at its produce call already, else
// the broker's GC when at least half were due in a window a GC pause ended
// in, else the produce round trip.
func (r *result) lateCause() string {
	bd := r.Breakdown
	switch {
	case r.LateShare > 0 && r.RelaySendLateShare >= r.LateShare/2:
		return "the relay's send"
	case bd != nil && bd.NearBrokerGC >= 0 && bd.Late > 0 && 2*bd.NearBrokerGC >= bd.Late:
		return "broker GC"
	default:
		return "the produce round trip (client, network, broker)"
	}
}

// breakdownLine is the breakdown of a run whose lateness p99 is above
// lateWindowMs; "" otherwise, and for other than due-rate and sustained
// runs.
func (r *result) breakdownLine() string {
	if (r.Scenario != "duerate" && r.Scenario != "sustained") || r.Lateness == nil || r.Lateness.P99 <= lateWindowMs {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "lateness p99 %s > %dms: ", ms(r.Lateness.P99), lateWindowMs)
	if bd := r.Breakdown; bd != nil {
		fmt.Fprintf(&sb, "relay send p99 ≤ %s (mean %.1fms), ack p99 ≤ %s (mean %.1fms; produce round trip mean %.1fms); ",
			leMs(bd.SendP99Ms), bd.SendMeanMs, leMs(bd.AckP99Ms), bd.AckMeanMs, bd.AckMeanMs-bd.SendMeanMs)
	}
	fmt.Fprintf(&sb, "later than %dms: %.2f%% at the relay's send, %.2f%% at its ack, %.2f%% at the append", lateWindowMs, 100*r.RelaySendLateShare, 100*r.RelayAckLateShare, 100*r.LateShare)
	if bd := r.Breakdown; bd != nil && bd.NearBrokerGC >= 0 {
		fmt.Fprintf(&sb, "; %d of %d late records due in a window a broker GC pause ended in", bd.NearBrokerGC, bd.Late)
		if p := r.BrokerPauses; p != nil {
			fmt.Fprintf(&sb, " (%d pauses, longest %s)", p.Count, ms(p.MaxMs))
		}
	} else {
		sb.WriteString("; broker GC: not read (--broker-gc-log)")
	}
	fmt.Fprintf(&sb, ": mostly %s", r.lateCause())
	return sb.String()
}

// leMs is a bucket bound in milliseconds.
func leMs(v float64) string {
	if v < 0 {
		return "+Inf"
	}
	return ms(v)
}
