package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// results is everything one run measured.
type results struct {
	Command  string    `json:"command"`
	Revision string    `json:"revision"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Broker   string    `json:"broker"`
	Relay    string    `json:"relay"` // exec | inproc
	// RelayGoEnv lists the Go runtime variables (GOMEMLIMIT, GOGC,
	// GODEBUG, GOMAXPROCS) the relay inherited from the bench's
	// environment; empty: the runtime's defaults.
	RelayGoEnv string `json:"relay_go_env,omitempty"`
	// Warmup is how many rounds of the bursts ran before the measured
	// ones, not kept (--warmup).
	Warmup     int               `json:"warmup_rounds,omitempty"`
	Machine    map[string]string `json:"machine"`
	LoadBefore string            `json:"loadavg_before"`
	LoadAfter  string            `json:"loadavg_after"`
	Results    []*result         `json:"results"`
}

// result is one scenario run.
type result struct {
	Scenario   string `json:"scenario"`
	Rep        int    `json:"repetition,omitempty"`
	Size       int    `json:"size_bytes"`
	Records    int    `json:"records"`
	Partitions int    `json:"partitions_per_level"`
	Levels     string `json:"levels,omitempty"`
	DueRate    int    `json:"due_rate_per_s,omitempty"`
	// Delivery is the relay's KDELAY_DELIVERY; empty (the ceiling, the
	// reference pipes): at-least-once.
	Delivery string `json:"delivery,omitempty"`
	// Err is why the run failed (not every record delivered, ...); its
	// figures are partial and no goal takes them.
	Err string `json:"error,omitempty"`

	Delivered  int     `json:"delivered"`
	Duplicates int     `json:"duplicates"`
	Foreign    int     `json:"foreign_records,omitempty"`
	Early      int     `json:"early"`
	DrainRate  float64 `json:"drain_rate_per_s"` // (delivered-1) / (last - first target timestamp)
	// RatioToCeiling is DrainRate over the drain rate of the ceiling run
	// (produce only) of the same size and round (every burst: level,
	// wheel, serial, pipelined).
	RatioToCeiling float64 `json:"ratio_to_ceiling,omitempty"`
	// RatioToALO is, for an exactly-once run, DrainRate over that of the
	// at-least-once run of the same path, size and round.
	RatioToALO float64 `json:"ratio_to_at_least_once,omitempty"`
	// CompletionMs is the last delivery minus the first due time.
	CompletionMs float64 `json:"completion_ms,omitempty"`
	// FirstLatenessMs is the lateness of the first record delivered (the
	// earliest target timestamp): in a burst, how long after the common
	// due time the first record was out. nil: no record with a due time.
	FirstLatenessMs *float64 `json:"first_lateness_ms,omitempty"`
	ProduceSeconds  float64  `json:"produce_seconds"`
	WallSeconds     float64  `json:"wall_seconds"`
	DueMs           int64    `json:"first_due_unix_ms,omitempty"`
	// ProduceRate is Records over ProduceSeconds. LeadMs is the first due
	// time minus the end of the produce (negative: the load was still being
	// produced when records came due); AckedAfterDue counts records whose
	// produce was acked after their own due time (kdelay-deliver-at loads).
	// DueLoad is the duerate load: paced or preload (older results:
	// preload). MinAheadMs is the least time from a record's produce ack to
	// its due time.
	DueLoad       string  `json:"due_load,omitempty"`
	MinAheadMs    float64 `json:"min_ack_ahead_of_due_ms,omitempty"`
	ProduceRate   float64 `json:"produce_rate_per_s,omitempty"`
	LeadMs        float64 `json:"lead_ms,omitempty"`
	AckedAfterDue int     `json:"acked_after_due,omitempty"`

	// Lateness: target record timestamp (LogAppendTime) minus kdelay-due-at.
	Lateness *dist `json:"lateness_ms,omitempty"`
	// ArrivalLateness: when the bench's consumer polled the record minus
	// kdelay-due-at (includes the consumer's fetch).
	ArrivalLateness *dist `json:"arrival_lateness_ms,omitempty"`

	ViaWheel     int `json:"forwarded_via_wheel"`
	Direct       int `json:"forwarded_direct"`
	Cascaded     int `json:"cascaded,omitempty"`
	DeadLettered int `json:"dead_lettered,omitempty"`
	PendingAtDue int `json:"wheel_pending_at_due,omitempty"`
	// TxnCommitted and TxnAborted are the relay's
	// kdelay_transactions_total (exactly-once mode) at the end of the run.
	TxnCommitted int   `json:"transactions_committed,omitempty"`
	TxnAborted   int   `json:"transactions_aborted,omitempty"`
	RelayPeakRSS int64 `json:"relay_peak_rss_bytes,omitempty"` // VmHWM
	// Sampled every 50 ms: anonymous memory (heap, stacks) and file-backed
	// pages (the wheel's memory-mapped segments).
	RelayPeakAnon int64 `json:"relay_peak_rss_anon_bytes,omitempty"`
	RelayPeakFile int64 `json:"relay_peak_rss_file_bytes,omitempty"`
	// RelayCPUSeconds is the CPU time the relay process spent on the run's
	// records, end to end: its process_cpu_seconds_total (user and system,
	// every thread) scraped just before the first record is produced and
	// again once the last one was delivered, so reading, deciding, the
	// wheel, producing and committing are in it, and the process's start
	// and group join are not. 0: not measured (the relay in process, the
	// recovery scenario). Steadier than rec/s on a shared machine.
	RelayCPUSeconds float64 `json:"relay_cpu_seconds,omitempty"`
	// ClientCPUSeconds, of a ceiling run, is the CPU time (user and
	// system) of the bench's process while its producer sent the burst's
	// records once more, nothing else running in the process: one
	// produce-only client with the relay's producer settings, the
	// reference for the relay's CPU per record on the same machine. Of a
	// serial or pipelined run, it is the same while the pipe consumed,
	// produced and committed the burst once more (a fresh group, to a
	// spare topic): what franz-go's consume and produce paths cost without
	// any scheduling, the floor under the relay's CPU per record.
	ClientCPUSeconds float64 `json:"client_cpu_seconds,omitempty"`
	// CPUToClient is, for a burst, the relay's CPU per record over the
	// ceiling client's of the same size and round.
	CPUToClient float64 `json:"cpu_to_ceiling_client,omitempty"`
	// RelayCPUTotalSeconds is process_cpu_seconds_total at the end of the
	// run: from the process's start.
	RelayCPUTotalSeconds float64 `json:"relay_cpu_total_seconds,omitempty"`
	// RelayHeapInuse is the relay's go_memstats_heap_inuse_bytes at the end.
	RelayHeapInuse int64 `json:"relay_heap_inuse_bytes_at_end,omitempty"`

	BurstRecords      int     `json:"burst_records,omitempty"`
	BurstDrainRate    float64 `json:"burst_drain_rate_per_s,omitempty"`
	BurstCompletionMs float64 `json:"burst_completion_ms,omitempty"`

	Recovery  *recovery      `json:"recovery,omitempty"`
	Sustained *sustainedInfo `json:"sustained,omitempty"`
	Notes     []string       `json:"notes,omitempty"`

	// CDF is the lateness CDF, downsampled: (lateness ms, fraction) points.
	CDF [][2]float64 `json:"lateness_cdf,omitempty"`
	// LateWindows are the 100 ms windows of due time (from DueMs) holding
	// the most records later than lateWindowMs, most first: where in the
	// run the tail of the lateness lies.
	LateWindows []lateWindow `json:"late_windows,omitempty"`
	// Where the records later than lateWindowMs were held, as fractions of
	// the records forwarded: LateShare by the target's append time (the
	// lateness above), RelaySendLateShare by the relay's produce call
	// (kdelay_send_lateness_seconds: the relay's own part) and
	// RelayAckLateShare by its ack (kdelay_lateness_seconds: the relay and
	// the produce round trip). Histogram buckets, so exact at lateWindowMs.
	LateShare          float64 `json:"late_share,omitempty"`
	RelaySendLateShare float64 `json:"relay_send_late_share,omitempty"`
	RelayAckLateShare  float64 `json:"relay_ack_late_share,omitempty"`
	// BrokerPauses is what the broker's JVM paused for GC between the
	// first due time and the last delivery (--broker-gc-log).
	BrokerPauses *pauseSummary `json:"broker_gc_pauses,omitempty"`
	// DrainCPU is where the machine's CPU went while a burst drained
	// (--broker-pid; draincpu.go).
	DrainCPU *drainCPU `json:"drain_cpu,omitempty"`
	// Breakdown says where the lateness lies: the relay's send, the
	// produce round trip, the broker's GC (breakdown.go).
	Breakdown *breakdown `json:"lateness_breakdown,omitempty"`
	// lateAll is every late window (fill), for attributePauses.
	lateAll []lateWindow

	// primedWheel and primedDirect are the relay's forwards of the primer
	// (bench.prime), by path; the run's ViaWheel and Direct are net of them.
	primedWheel, primedDirect int
}

// lateWindowMs is the lateness from which a record counts in LateWindows:
// the p99 goal at 10k/s due (docs/benchmarks.md).
const lateWindowMs = 10

// lateWindow is a 100 ms window of due time: its start after the first
// due time, the records due in it later than lateWindowMs, and the
// largest lateness among them; with --broker-gc-log, the longest broker GC
// pause that ended within pauseReach of its start (0: none).
type lateWindow struct {
	StartMs       int64   `json:"start_ms"`
	Late          int     `json:"late"`
	MaxMs         float64 `json:"max_ms"`
	BrokerPauseMs float64 `json:"broker_pause_ms,omitempty"`
}

// lateWindows groups recs later than lateWindowMs by 100 ms of due time
// after first and returns the top most crowded windows.
func lateWindows(recs []delivery, first int64, top int) []lateWindow {
	by := map[int64]*lateWindow{}
	for _, d := range recs {
		l := float64(d.tsMs - d.dueMs)
		if d.dueMs < 0 || l <= lateWindowMs {
			continue
		}
		k := (d.dueMs - first) / 100 * 100
		w := by[k]
		if w == nil {
			w = &lateWindow{StartMs: k}
			by[k] = w
		}
		w.Late++
		w.MaxMs = max(w.MaxMs, l)
	}
	out := make([]lateWindow, 0, len(by))
	for _, w := range by {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b lateWindow) int {
		if a.Late != b.Late {
			return b.Late - a.Late
		}
		return int(a.StartMs - b.StartMs)
	})
	return out[:min(top, len(out))]
}

// recovery is what the restart with a full wheel measured.
type recovery struct {
	PendingAtStop             int     `json:"pending_at_stop"`
	IngestSeconds             float64 `json:"preload_seconds"`
	WheelBytes                int64   `json:"wheel_bytes_on_disk"`
	RSSPending                int64   `json:"rss_with_pending_bytes"`
	RSSAnonPending            int64   `json:"rss_anon_with_pending_bytes"`
	RSSFilePending            int64   `json:"rss_file_with_pending_bytes"`
	HeapInusePending          int64   `json:"heap_inuse_with_pending_bytes"`
	PeakRSSBeforeRestart      int64   `json:"peak_rss_before_restart_bytes"`
	StopSeconds               float64 `json:"sigterm_to_exit_seconds"`
	RestartToReadySeconds     float64 `json:"restart_to_ready_seconds"`
	RestartToFirstDeliveryMs  float64 `json:"restart_to_first_delivery_ms"`
	FirstDueToFirstDeliveryMs float64 `json:"first_due_to_first_delivery_ms"`
	Recovered                 int     `json:"recovered_entries"`
	PendingAfterRestart       int     `json:"pending_after_restart"`
	PeakRSSAfterRestart       int64   `json:"peak_rss_after_restart_bytes"`
}

// dist is a distribution summary in milliseconds.
type dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func summarize(sorted []float64) *dist {
	if len(sorted) == 0 {
		return nil
	}
	var sum float64
	for _, v := range sorted {
		sum += v
	}
	return &dist{N: len(sorted), P50: quantile(sorted, 0.5), P99: quantile(sorted, 0.99),
		P999: quantile(sorted, 0.999), Max: sorted[len(sorted)-1], Mean: sum / float64(len(sorted))}
}

// quantile is the nearest-rank quantile of sorted.
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// fill computes the delivery figures from what the collector saw.
func (r *result) fill(recs []delivery, dups, bad int) {
	r.Delivered, r.Duplicates, r.Foreign = len(recs), dups, bad
	if len(recs) == 0 {
		return
	}
	first, last := recs[0].tsMs, recs[0].tsMs
	var late, arr []float64
	var firstLate *float64
	firstTs := int64(math.MaxInt64)
	for _, d := range recs {
		first, last = min(first, d.tsMs), max(last, d.tsMs)
		if d.dueMs < 0 {
			continue
		}
		if d.tsMs < firstTs {
			firstTs = d.tsMs
			v := float64(d.tsMs - d.dueMs)
			firstLate = &v
		}
		l := float64(d.tsMs - d.dueMs)
		if l < 0 {
			r.Early++
		}
		late = append(late, l)
		arr = append(arr, float64(d.arrUs-d.dueMs*1000)/1000)
	}
	if last > first {
		r.DrainRate = float64(len(recs)-1) / (float64(last-first) / 1000)
	}
	if r.DueMs > 0 {
		r.CompletionMs = float64(last - r.DueMs)
	}
	slices.Sort(late)
	slices.Sort(arr)
	r.CDF = cdfPoints(late)
	r.Lateness = summarize(late)
	r.ArrivalLateness = summarize(arr)
	r.FirstLatenessMs = firstLate
	if r.DueMs > 0 {
		r.lateAll = lateWindows(recs, r.DueMs, math.MaxInt)
		r.LateWindows = r.lateAll[:min(5, len(r.lateAll))]
	}
	if n := len(late); n > 0 {
		over := n - sort.SearchFloat64s(late, lateWindowMs+0.5) // whole ms: later than lateWindowMs
		r.LateShare = float64(over) / float64(n)
		if r.Breakdown != nil {
			r.Breakdown.Late = over
		}
	}
}

// cdfPoints picks about 400 evenly ranked points of sorted, plus the tail
// quantiles and the maximum.
func cdfPoints(sorted []float64) [][2]float64 {
	n := len(sorted)
	if n == 0 {
		return nil
	}
	idx := []int{0, n - 1}
	for k := 0; k < n; k += max(n/400, 1) {
		idx = append(idx, k)
	}
	for _, q := range []float64{0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999} {
		idx = append(idx, min(int(q*float64(n)), n-1))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	pts := make([][2]float64, 0, len(idx))
	for _, k := range idx {
		pts = append(pts, [2]float64{sorted[k], float64(k+1) / float64(n)})
	}
	return pts
}

// mode is the run's delivery mode.
func (r *result) mode() string {
	if r.Delivery == "" {
		return atLeastOnce
	}
	return r.Delivery
}

// group names the runs that repeat each other: scenario, size (or due
// rate) and, in exactly-once mode, the mode.
func (r *result) group() string {
	var g string
	switch r.Scenario {
	case "duerate":
		g = "duerate " + rateName(r.DueRate)
	case "recovery":
		g = "recovery"
	case "sustained":
		g = "sustained " + rateName(r.DueRate)
		if r.Sustained != nil {
			g += fmt.Sprintf(" x%d relays", r.Sustained.Relays)
		}
	default:
		g = fmt.Sprintf("%s %s", r.Scenario, sizeName(r.Size))
	}
	if r.mode() != atLeastOnce {
		g += " " + r.mode()
	}
	return g
}

func (r *result) name() string {
	if r.Rep > 1 {
		return fmt.Sprintf("%s #%d", r.group(), r.Rep)
	}
	return r.group()
}

// rateName is a rate per second: 500/s, 10k/s, 12.5k/s.
func rateName(n int) string {
	if n >= 1000 && n%100 == 0 {
		return fmt.Sprintf("%gk/s", float64(n)/1000)
	}
	return fmt.Sprintf("%d/s", n)
}

// burstScenarios are the runs taken as a ratio to the ceiling.
var burstScenarios = []string{"serial", "pipelined", "direct", "level", "wheel"}

// pairRatios sets each complete burst's ratio to the ceiling of its size
// and round (its drain rate, and its CPU per record to the ceiling
// client's), and each complete exactly-once run's ratio to the
// at-least-once run of its path, size and round. Runs without a complete
// partner that has the figure keep 0.
func pairRatios(rs []*result) {
	find := func(scenario, mode string, size, rep int, has func(*result) bool) *result {
		for _, p := range rs {
			if p.Scenario == scenario && p.mode() == mode && p.Size == size && p.Rep == rep && p.Err == "" && has(p) {
				return p
			}
		}
		return nil
	}
	drain := func(p *result) bool { return p.DrainRate > 0 }
	cpu := func(p *result) bool { return cpuPerRecord(p) > 0 }
	for _, r := range rs {
		if !slices.Contains(burstScenarios, r.Scenario) || r.Err != "" {
			continue
		}
		r.RatioToCeiling, r.RatioToALO, r.CPUToClient = 0, 0, 0
		if c := find("ceiling", atLeastOnce, r.Size, r.Rep, drain); c != nil {
			r.RatioToCeiling = r.DrainRate / c.DrainRate
		}
		if c := find("ceiling", atLeastOnce, r.Size, r.Rep, cpu); c != nil && cpu(r) {
			r.CPUToClient = cpuPerRecord(r) / cpuPerRecord(c)
		}
		if r.mode() == exactlyOnce {
			if a := find(r.Scenario, atLeastOnce, r.Size, r.Rep, drain); a != nil {
				r.RatioToALO = r.DrainRate / a.DrainRate
			}
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// repRow is one group of repeated runs (same scenario, size or due rate,
// and mode): every complete run's figures in run order.
type repRow struct {
	name                      string
	n, failed                 int
	rate, ratio, ratioALO     []float64
	cpu                       []float64 // relay CPU µs per record (ceiling, serial, pipelined: the bench's client's)
	cpuRatio                  []float64 // relay CPU over the ceiling client's
	first                     []float64 // lateness of the first record delivered (bursts)
	p50, p99, p999, max, cp99 []float64
	early, dups               int
}

// repetitions groups the runs that were repeated (more than one run in the
// group); failed runs count in failed and early/dups only.
func repetitions(res *results) []repRow {
	var rows []*repRow
	by := map[string]*repRow{}
	for _, r := range res.Results {
		k := r.group()
		row := by[k]
		if row == nil {
			row = &repRow{name: k}
			by[k] = row
			rows = append(rows, row)
		}
		row.n++
		row.early += r.Early
		row.dups += r.Duplicates
		if r.Err != "" {
			row.failed++
			continue
		}
		row.rate = append(row.rate, r.DrainRate)
		if r.RatioToCeiling > 0 {
			row.ratio = append(row.ratio, r.RatioToCeiling)
		}
		if c := cpuPerRecord(r); c > 0 {
			row.cpu = append(row.cpu, c)
		}
		if r.CPUToClient > 0 {
			row.cpuRatio = append(row.cpuRatio, r.CPUToClient)
		}
		if f, ok := firstLate(r); ok {
			row.first = append(row.first, f)
		}
		if r.RatioToALO > 0 {
			row.ratioALO = append(row.ratioALO, r.RatioToALO)
		}
		if l := r.Lateness; l != nil {
			row.p50, row.p99, row.p999, row.max = append(row.p50, l.P50), append(row.p99, l.P99), append(row.p999, l.P999), append(row.max, l.Max)
		}
		if l := r.ArrivalLateness; l != nil {
			row.cp99 = append(row.cp99, l.P99)
		}
	}
	var out []repRow
	for _, row := range rows {
		if row.n > 1 {
			out = append(out, *row)
		}
	}
	return out
}

func ratioFmt(v float64) string { return fmt.Sprintf("%.2fx", v) }

func rateFmt(v float64) string { return fmt.Sprintf("%.0f", v) }

func sizeName(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%dKB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

func (r *result) summary() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "== %s: %d/%d delivered, %.0f rec/s", r.name(), r.Delivered, r.Records, r.DrainRate)
	if r.RatioToCeiling > 0 {
		fmt.Fprintf(&sb, " (%.2fx ceiling", r.RatioToCeiling)
		if r.RatioToALO > 0 {
			fmt.Fprintf(&sb, ", %.2fx at-least-once", r.RatioToALO)
		}
		sb.WriteString(")")
	}
	if l := r.Lateness; l != nil {
		fmt.Fprintf(&sb, ", lateness p50 %s p99 %s p99.9 %s max %s, early %d", ms(l.P50), ms(l.P99), ms(l.P999), ms(l.Max), r.Early)
	}
	if r.Duplicates > 0 {
		fmt.Fprintf(&sb, ", %d duplicates", r.Duplicates)
	}
	if f, ok := firstLate(r); ok {
		fmt.Fprintf(&sb, ", first record %s after its due time", ms(f))
	}
	if c := cpuPerRecord(r); c > 0 {
		who := "relay"
		switch r.Scenario {
		case "ceiling":
			who = "client"
		case "serial", "pipelined":
			who = "pipe"
		}
		fmt.Fprintf(&sb, ", %s CPU %.2f µs/record", who, c)
		if r.CPUToClient > 0 {
			fmt.Fprintf(&sb, " (%.2fx the ceiling client's)", r.CPUToClient)
		}
	}
	if r.RelayPeakRSS > 0 {
		fmt.Fprintf(&sb, ", relay peak RSS %s", mb(r.RelayPeakRSS))
	}
	if r.mode() == exactlyOnce {
		fmt.Fprintf(&sb, ", transactions %d committed / %d aborted", r.TxnCommitted, r.TxnAborted)
	}
	if r.Scenario == "duerate" {
		fmt.Fprintf(&sb, "\n   load: %s", r.loadLine())
	}
	if info := r.Sustained; info != nil {
		if info.Held {
			fmt.Fprintf(&sb, "\n   sustained: held by %d relay(s) (load offered at %.0f/s)", info.Relays, info.OfferedRate)
		} else {
			fmt.Fprintf(&sb, "\n   sustained: NOT held by %d relay(s): %s (load offered at %.0f/s)", info.Relays, info.Why, info.OfferedRate)
		}
	}
	if len(r.LateWindows) > 0 {
		sb.WriteString("\n   records later than " + strconv.Itoa(lateWindowMs) + "ms, by 100ms of due time after the first:")
		for _, w := range r.LateWindows {
			fmt.Fprintf(&sb, " +%dms: %d (max %s", w.StartMs, w.Late, ms(w.MaxMs))
			if w.BrokerPauseMs > 0 {
				fmt.Fprintf(&sb, ", broker GC pause %s", ms(w.BrokerPauseMs))
			}
			sb.WriteString(");")
		}
	}
	if r.LateShare > 0 || r.RelaySendLateShare > 0 || r.RelayAckLateShare > 0 {
		fmt.Fprintf(&sb, "\n   later than %dms: %.2f%% of the records at the target's append; at the relay's produce call %.2f%%, at its ack %.2f%%", lateWindowMs, 100*r.LateShare, 100*r.RelaySendLateShare, 100*r.RelayAckLateShare)
	}
	if p := r.BrokerPauses; p != nil {
		fmt.Fprintf(&sb, "\n   broker GC from the first due time to the last delivery: %d pauses, %s in all, longest %s", p.Count, ms(p.TotalMs), ms(p.MaxMs))
	}
	if l := r.breakdownLine(); l != "" {
		fmt.Fprintf(&sb, "\n   %s", l)
	}
	if l := r.drainCPULine(); l != "" {
		fmt.Fprintf(&sb, "\n   %s", l)
	}
	if rc := r.Recovery; rc != nil {
		fmt.Fprintf(&sb, "\n   recovery: %d pending at stop, restart -> first delivery %s, restart -> ready %.2fs, VmRSS with pending %s",
			rc.PendingAtStop, ms(rc.RestartToFirstDeliveryMs), rc.RestartToReadySeconds, mb(rc.RSSPending))
	}
	for _, n := range r.Notes {
		if strings.HasPrefix(n, "WARNING") {
			fmt.Fprintf(&sb, "\n   %s", n)
		}
	}
	if r.Err != "" {
		fmt.Fprintf(&sb, "\n   FAILED: %s", r.Err)
	}
	return sb.String()
}

// loadLine says whether the load generator kept up: how fast it produced,
// how long before the first due time it was done, and the due rate it
// achieved (records in Kafka before their due time, per second of the
// scenario).
func (r *result) loadLine() string {
	secs := 0.0
	if r.DueRate > 0 {
		secs = float64(r.Records) / float64(r.DueRate)
	}
	how := "paced"
	when := fmt.Sprintf("each acked at least %s before its due time", ms(r.MinAheadMs))
	if r.MinAheadMs < 0 {
		when = fmt.Sprintf("the latest acked %s after its due time", ms(-r.MinAheadMs))
	}
	if r.DueLoad != "paced" {
		how = "preload"
		when = fmt.Sprintf("done %s before the first due time", ms(r.LeadMs))
		if r.LeadMs < 0 {
			when = fmt.Sprintf("still producing %s after the first due time", ms(-r.LeadMs))
		}
	}
	achieved := "-"
	if secs > 0 {
		achieved = rateName(int(math.Round(float64(r.Records-r.AckedAfterDue) / secs)))
	}
	return fmt.Sprintf("%s: %d records produced in %.1f s (%.0f/s), %s; %d acked after their due time: due rate achieved %s of %s",
		how, r.Records, r.ProduceSeconds, r.ProduceRate, when, r.AckedAfterDue, achieved, rateName(r.DueRate))
}

func ms(v float64) string {
	if math.Abs(v) >= 1000 {
		return fmt.Sprintf("%.2fs", v/1000)
	}
	return fmt.Sprintf("%.0fms", v)
}

func mb(b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MB", float64(b)/(1<<20))
}

// firstLate is the lateness of the first record of a burst (direct, level,
// wheel: every record due at once) in ms; ok is false for other runs.
func firstLate(r *result) (float64, bool) {
	if r.FirstLatenessMs == nil || (r.Scenario != "direct" && r.Scenario != "level" && r.Scenario != "wheel") {
		return 0, false
	}
	return *r.FirstLatenessMs, true
}

// firstCell is firstLate for the tables ("-" without a figure).
func firstCell(r *result) string {
	if f, ok := firstLate(r); ok {
		return ms(f)
	}
	return "-"
}

// cpuPerRecord is the relay's CPU time per record of the run, in
// microseconds, end to end (RelayCPUSeconds: from the first produce to the
// last delivery), and for a ceiling run its client's (ClientCPUSeconds);
// 0 without a figure (the relay in process: its CPU is not its own).
func cpuPerRecord(r *result) float64 {
	cpu := r.RelayCPUSeconds
	if r.Scenario == "ceiling" || r.Scenario == "serial" || r.Scenario == "pipelined" {
		cpu = r.ClientCPUSeconds
	}
	if cpu == 0 || r.Records == 0 {
		return 0
	}
	return cpu * 1e6 / float64(r.Records)
}

func usFmt(v float64) string { return fmt.Sprintf("%.2fµs", v) }

// cpuCell is cpuPerRecord for the tables ("-" without a figure).
func cpuCell(r *result) string {
	if c := cpuPerRecord(r); c > 0 {
		return fmt.Sprintf("%.2f", c)
	}
	return "-"
}

func rssCell(r *result) string {
	if r.RelayPeakRSS == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s + %s)", mb(r.RelayPeakRSS), mb(r.RelayPeakAnon), mb(r.RelayPeakFile))
}

func markdown(res *results) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "## kdelay-bench %s\n\n", res.Started.Format(time.RFC3339))
	goEnv := "Go runtime defaults"
	if res.RelayGoEnv != "" {
		goEnv = res.RelayGoEnv
	}
	warm := ""
	if res.Warmup > 0 {
		warm = fmt.Sprintf("; %d warm-up round(s) of the bursts not kept", res.Warmup)
	}
	fmt.Fprintf(&sb, "kdelay %s; broker %s; relay %s (%s); %s CPUs (%s), %s memory, %s; load average %s before, %s after%s\n\n",
		res.Revision, res.Broker, res.Relay, goEnv, res.Machine["nproc"], res.Machine["cpu"], res.Machine["memory"], res.Machine["go"], res.LoadBefore, res.LoadAfter, warm)
	sb.WriteString(goalsMarkdown(evaluate(res)))
	fmt.Fprintf(&sb, "\n### Runs\n\n")
	fmt.Fprintf(&sb, "| run | records | rec/s | vs ceiling | vs at-least-once | first record late | lateness p50 | p99 | p99.9 | max | p99 at consumer | early | dups | via wheel / direct | CPU µs/record (relay; ceiling, serial, pipelined: the bench's client) | CPU vs ceiling client | relay peak RSS (anon + file) |\n")
	fmt.Fprintf(&sb, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range res.Results {
		ratio, ratioALO := "-", "-"
		if r.RatioToCeiling > 0 {
			ratio = ratioFmt(r.RatioToCeiling)
		}
		if r.RatioToALO > 0 {
			ratioALO = ratioFmt(r.RatioToALO)
		}
		p50, p99, p999, mx, cp99 := "-", "-", "-", "-", "-"
		if l := r.Lateness; l != nil {
			p50, p99, p999, mx = ms(l.P50), ms(l.P99), ms(l.P999), ms(l.Max)
		}
		if l := r.ArrivalLateness; l != nil {
			cp99 = ms(l.P99)
		}
		paths := "-"
		if r.Scenario != "ceiling" && r.Scenario != "serial" && r.Scenario != "pipelined" {
			paths = fmt.Sprintf("%d / %d", r.ViaWheel, r.Direct)
		}
		rate := rateFmt(r.DrainRate)
		if r.Scenario == "recovery" || r.Scenario == "duerate" || r.Scenario == "shape" || r.Scenario == "sustained" {
			rate = "-"
		}
		name := r.name()
		if r.Err != "" {
			name += " (FAILED)"
		}
		cpuRatio := "-"
		if r.CPUToClient > 0 {
			cpuRatio = ratioFmt(r.CPUToClient)
		}
		fmt.Fprintf(&sb, "| %s | %d/%d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %s | %s | %s | %s |\n",
			name, r.Delivered, r.Records, rate, ratio, ratioALO, firstCell(r), p50, p99, p999, mx, cp99, r.Early, r.Duplicates, paths, cpuCell(r), cpuRatio, rssCell(r))
	}
	if rows := repetitions(res); len(rows) > 0 {
		fmt.Fprintf(&sb, "\n### Repetitions\n\nEach cell: the median, then every complete run's value in run order, and the range. Ratios are per round: each run against the ceiling (or the at-least-once run) of its own round.\n\n")
		fmt.Fprintf(&sb, "| run | runs | rec/s | vs ceiling | vs at-least-once | CPU µs/record (relay; ceiling, serial, pipelined: the bench's client) | CPU vs ceiling client | first record late | lateness p50 | p99 | p99.9 | max | p99 at consumer | early | dups |\n")
		fmt.Fprintf(&sb, "|---|---:|---|---|---|---|---|---|---|---|---|---|---|---:|---:|\n")
		for _, m := range rows {
			runs := strconv.Itoa(m.n)
			if m.failed > 0 {
				runs += fmt.Sprintf(" (%d failed)", m.failed)
			}
			rate := spread(m.rate, rateFmt)
			if strings.HasPrefix(m.name, "duerate") {
				rate = "-"
			}
			fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d |\n", m.name, runs, rate,
				spread(m.ratio, ratioFmt), spread(m.ratioALO, ratioFmt), spread(m.cpu, usFmt), spread(m.cpuRatio, ratioFmt), spread(m.first, ms),
				spread(m.p50, ms), spread(m.p99, ms), spread(m.p999, ms), spread(m.max, ms), spread(m.cp99, ms), m.early, m.dups)
		}
	}
	var loads []string
	for _, r := range res.Results {
		if r.Scenario == "duerate" && r.ProduceRate > 0 {
			loads = append(loads, fmt.Sprintf("- %s: %s", r.name(), r.loadLine()))
		}
	}
	sb.WriteString(sustainedMarkdown(res))
	sb.WriteString(drainCPUMarkdown(res))
	var bds []string
	for _, r := range res.Results {
		if l := r.breakdownLine(); l != "" {
			bds = append(bds, fmt.Sprintf("- %s: %s", r.name(), l))
		}
	}
	if len(bds) > 0 {
		fmt.Fprintf(&sb, "\nWhere the lateness lies, for the runs whose p99 is above %dms (relay send: due time to the relay's produce call; ack: to the produce's ack, the rest is the produce round trip; broker GC: late records due in a 100 ms window in which a broker GC pause ended):\n\n%s\n", lateWindowMs, strings.Join(bds, "\n"))
	}
	if len(loads) > 0 {
		fmt.Fprintf(&sb, "\nDue-rate loads (paced: each record produced --due-delay before its due time, at the due rate; preload: all produced before the first due time):\n\n%s\n", strings.Join(loads, "\n"))
	}
	for _, r := range res.Results {
		if r.Scenario == "shape" && r.BurstRecords > 0 {
			fmt.Fprintf(&sb, "\n%s: burst of %d records due within one second drained at %.0f records/s (first to last delivery); last burst delivery %s after the burst's first due time\n",
				r.name(), r.BurstRecords, r.BurstDrainRate, ms(r.BurstCompletionMs))
		}
		if rc := r.Recovery; rc != nil {
			fmt.Fprintf(&sb, "\nrecovery: %d records pending in the wheel (%s on disk) after a %.0f s pre-load; relay VmRSS %s (RssAnon %s, RssFile %s; peak VmHWM %s; Go heap in use %s); SIGTERM to exit %.2f s; restart to ready %.2f s; restart to first delivery %s (first due time to first delivery %s); %d entries recovered; peak VmHWM after restart %s\n",
				rc.PendingAtStop, mb(rc.WheelBytes), rc.IngestSeconds, mb(rc.RSSPending), mb(rc.RSSAnonPending), mb(rc.RSSFilePending), mb(rc.PeakRSSBeforeRestart), mb(rc.HeapInusePending), rc.StopSeconds,
				rc.RestartToReadySeconds, ms(rc.RestartToFirstDeliveryMs), ms(rc.FirstDueToFirstDeliveryMs), rc.Recovered, mb(rc.PeakRSSAfterRestart))
		}
	}
	fmt.Fprintf(&sb, "\nrec/s: delivered records over the span from first to last target timestamp. vs ceiling: over the rec/s of the ceiling run (produce only, the relay's producer settings) of the same size and round. Lateness: target record timestamp (broker LogAppendTime) minus kdelay-due-at. p99 at consumer: when the bench's read_committed consumer polled the record minus kdelay-due-at; in exactly-once mode a record is appended (its timestamp) before its transaction commits and becomes visible, so this column includes the commit. First record late: in a burst (direct, level, wheel: every record due at once), the first delivery's lateness. Relay CPU: the relay process's CPU time (process_cpu_seconds_total: every thread, user and system) from just before the run's first produce to its last delivery, per record of the run: the end-to-end cost, without the process's start and group join. Ceiling client CPU: the bench's own CPU time (user and system) while its producer sent the ceiling's records once more with nothing else running in it: one produce-only client with the relay's producer settings, on the same machine in the same round; CPU vs ceiling client is the relay's CPU per record over it. Serial and pipelined CPU: the same while the pipe consumed, produced and committed its burst once more (a fresh group, to a spare topic): franz-go's consume and produce paths without scheduling, the floor under the relay's.\n")
	return sb.String()
}

// mergeResults reads results.json files and appends their results in
// order; the header (machine, broker, command) is the first file's, the
// commands and load averages of all are joined.
func mergeResults(files []string) (*results, error) {
	var out *results
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r results
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if out == nil {
			out = &r
			continue
		}
		out.Command += "; " + r.Command
		out.LoadBefore += "; " + r.LoadBefore
		out.LoadAfter += "; " + r.LoadAfter
		out.Finished = r.Finished
		if r.Revision != out.Revision {
			out.Revision += ", " + r.Revision
		}
		if r.RelayGoEnv != "" && !strings.Contains(out.RelayGoEnv, r.RelayGoEnv) {
			out.RelayGoEnv = strings.TrimSpace(out.RelayGoEnv + " " + r.RelayGoEnv)
		}
		out.Warmup = min(out.Warmup, r.Warmup) // what every merged run had at least
		out.Results = append(out.Results, r.Results...)
	}
	if out == nil {
		return nil, errors.New("no results files")
	}
	return out, nil
}

func writeResults(dir string, res *results) error {
	j, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(markdown(res)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "lateness-cdf.svg"), []byte(cdfSVG(res)), 0o644)
}
