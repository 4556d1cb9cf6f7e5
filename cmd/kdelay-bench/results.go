package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// results is everything one run measured.
type results struct {
	Command    string            `json:"command"`
	Revision   string            `json:"revision"`
	Started    time.Time         `json:"started"`
	Finished   time.Time         `json:"finished"`
	Broker     string            `json:"broker"`
	Relay      string            `json:"relay"` // exec | inproc
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

	Delivered       int     `json:"delivered"`
	Duplicates      int     `json:"duplicates"`
	Foreign         int     `json:"foreign_records,omitempty"`
	Early           int     `json:"early"`
	DrainRate       float64 `json:"drain_rate_per_s"` // (delivered-1) / (last - first target timestamp)
	RatioToBaseline float64 `json:"ratio_to_baseline,omitempty"`
	// CompletionMs is the last delivery minus the first due time.
	CompletionMs   float64 `json:"completion_ms,omitempty"`
	ProduceSeconds float64 `json:"produce_seconds"`
	WallSeconds    float64 `json:"wall_seconds"`
	DueMs          int64   `json:"first_due_unix_ms,omitempty"`

	// Lateness: target record timestamp (LogAppendTime) minus kdelay-due-at.
	Lateness *dist `json:"lateness_ms,omitempty"`
	// ArrivalLateness: when the bench's consumer polled the record minus
	// kdelay-due-at (includes the consumer's fetch).
	ArrivalLateness *dist `json:"arrival_lateness_ms,omitempty"`

	ViaWheel     int   `json:"forwarded_via_wheel"`
	Direct       int   `json:"forwarded_direct"`
	Cascaded     int   `json:"cascaded,omitempty"`
	DeadLettered int   `json:"dead_lettered,omitempty"`
	PendingAtDue int   `json:"wheel_pending_at_due,omitempty"`
	RelayPeakRSS int64 `json:"relay_peak_rss_bytes,omitempty"` // VmHWM
	// Sampled every 50 ms: anonymous memory (heap, stacks) and file-backed
	// pages (the wheel's memory-mapped segments).
	RelayPeakAnon int64 `json:"relay_peak_rss_anon_bytes,omitempty"`
	RelayPeakFile int64 `json:"relay_peak_rss_file_bytes,omitempty"`
	// RelayHeapInuse is the relay's go_memstats_heap_inuse_bytes at the end.
	RelayHeapInuse int64 `json:"relay_heap_inuse_bytes_at_end,omitempty"`

	BurstRecords      int     `json:"burst_records,omitempty"`
	BurstDrainRate    float64 `json:"burst_drain_rate_per_s,omitempty"`
	BurstCompletionMs float64 `json:"burst_completion_ms,omitempty"`

	Recovery *recovery `json:"recovery,omitempty"`
	Notes    []string  `json:"notes,omitempty"`

	// CDF is the lateness CDF, downsampled: (lateness ms, fraction) points.
	CDF [][2]float64 `json:"lateness_cdf,omitempty"`
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
	for _, d := range recs {
		first, last = min(first, d.tsMs), max(last, d.tsMs)
		if d.dueMs < 0 {
			continue
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

func (r *result) name() string {
	switch r.Scenario {
	case "duerate":
		return fmt.Sprintf("duerate %g/s", float64(r.DueRate))
	case "recovery":
		return "recovery"
	}
	if r.Rep > 1 {
		return fmt.Sprintf("%s %s #%d", r.Scenario, sizeName(r.Size), r.Rep)
	}
	return fmt.Sprintf("%s %s", r.Scenario, sizeName(r.Size))
}

// medianRow is the median over the repetitions of one throughput run.
type medianRow struct {
	name                string
	n                   int
	rate, ratio         float64
	p50, p99, p999, max float64
	early, dups         int
	rss, anon, file     int64
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

func medians(res *results) []medianRow {
	var rows []medianRow
	seen := map[string]bool{}
	for _, r0 := range res.Results {
		key := fmt.Sprintf("%s %s", r0.Scenario, sizeName(r0.Size))
		if r0.Rep == 0 || seen[key] {
			continue
		}
		seen[key] = true
		row := medianRow{name: key}
		var rate, ratio, p50, p99, p999, mx []float64
		for _, r := range res.Results {
			if r.Rep == 0 || r.Scenario != r0.Scenario || r.Size != r0.Size {
				continue
			}
			row.n++
			rate = append(rate, r.DrainRate)
			if r.RatioToBaseline > 0 {
				ratio = append(ratio, r.RatioToBaseline)
			}
			if l := r.Lateness; l != nil {
				p50, p99, p999, mx = append(p50, l.P50), append(p99, l.P99), append(p999, l.P999), append(mx, l.Max)
			}
			row.early += r.Early
			row.dups += r.Duplicates
			row.rss, row.anon, row.file = max(row.rss, r.RelayPeakRSS), max(row.anon, r.RelayPeakAnon), max(row.file, r.RelayPeakFile)
		}
		row.rate, row.ratio = median(rate), median(ratio)
		row.p50, row.p99, row.p999, row.max = median(p50), median(p99), median(p999), median(mx)
		rows = append(rows, row)
	}
	return rows
}

func sizeName(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%dKB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

func (r *result) summary() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "== %s: %d/%d delivered, %.0f rec/s", r.name(), r.Delivered, r.Records, r.DrainRate)
	if r.RatioToBaseline > 0 {
		fmt.Fprintf(&sb, " (%.2fx baseline)", r.RatioToBaseline)
	}
	if l := r.Lateness; l != nil {
		fmt.Fprintf(&sb, ", lateness p50 %s p99 %s p99.9 %s max %s, early %d", ms(l.P50), ms(l.P99), ms(l.P999), ms(l.Max), r.Early)
	}
	if r.Duplicates > 0 {
		fmt.Fprintf(&sb, ", %d duplicates", r.Duplicates)
	}
	if r.RelayPeakRSS > 0 {
		fmt.Fprintf(&sb, ", relay peak RSS %s", mb(r.RelayPeakRSS))
	}
	if rc := r.Recovery; rc != nil {
		fmt.Fprintf(&sb, "\n   recovery: %d pending at stop, restart -> first delivery %s, restart -> ready %.2fs, RSS with pending %s",
			rc.PendingAtStop, ms(rc.RestartToFirstDeliveryMs), rc.RestartToReadySeconds, mb(rc.RSSPending))
	}
	for _, n := range r.Notes {
		if strings.HasPrefix(n, "WARNING") {
			fmt.Fprintf(&sb, "\n   %s", n)
		}
	}
	return sb.String()
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

func rssCell(r *result) string {
	if r.RelayPeakRSS == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s + %s)", mb(r.RelayPeakRSS), mb(r.RelayPeakAnon), mb(r.RelayPeakFile))
}

func markdown(res *results) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "## kdelay-bench %s\n\n", res.Started.Format(time.RFC3339))
	fmt.Fprintf(&sb, "kdelay %s; broker %s; relay %s; %s CPUs (%s), %s memory, %s; load average %s before, %s after\n\n",
		res.Revision, res.Broker, res.Relay, res.Machine["nproc"], res.Machine["cpu"], res.Machine["memory"], res.Machine["go"], res.LoadBefore, res.LoadAfter)
	fmt.Fprintf(&sb, "| run | records | rec/s | vs baseline | lateness p50 | p99 | p99.9 | max | early | dups | via wheel / direct | relay peak RSS (anon + file) |\n")
	fmt.Fprintf(&sb, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range res.Results {
		ratio := "-"
		if r.RatioToBaseline > 0 {
			ratio = fmt.Sprintf("%.2fx", r.RatioToBaseline)
		}
		l := r.Lateness
		p50, p99, p999, mx := "-", "-", "-", "-"
		if l != nil {
			p50, p99, p999, mx = ms(l.P50), ms(l.P99), ms(l.P999), ms(l.Max)
		}
		paths := "-"
		if r.Scenario != "baseline" {
			paths = fmt.Sprintf("%d / %d", r.ViaWheel, r.Direct)
		}
		rate := fmt.Sprintf("%.0f", r.DrainRate)
		if r.Scenario == "recovery" || r.Scenario == "duerate" || r.Scenario == "shape" {
			rate = "-"
		}
		fmt.Fprintf(&sb, "| %s | %d/%d | %s | %s | %s | %s | %s | %s | %d | %d | %s | %s |\n",
			r.name(), r.Delivered, r.Records, rate, ratio, p50, p99, p999, mx, r.Early, r.Duplicates, paths, rssCell(r))
	}
	if rows := medians(res); len(rows) > 0 && rows[0].n > 1 {
		fmt.Fprintf(&sb, "\nMedians over the repetitions (ratio: median of each repetition's ratio to the baseline of the same repetition; RSS: the largest):\n\n")
		fmt.Fprintf(&sb, "| run | reps | rec/s | vs baseline | lateness p50 | p99 | p99.9 | max | early | dups | relay peak RSS (anon + file) |\n")
		fmt.Fprintf(&sb, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, m := range rows {
			ratio, p50, p99, p999, mx, rss := "-", "-", "-", "-", "-", "-"
			if m.ratio > 0 {
				ratio = fmt.Sprintf("%.2fx", m.ratio)
			}
			if !strings.HasPrefix(m.name, "baseline") {
				p50, p99, p999, mx = ms(m.p50), ms(m.p99), ms(m.p999), ms(m.max)
				rss = fmt.Sprintf("%s (%s + %s)", mb(m.rss), mb(m.anon), mb(m.file))
			}
			fmt.Fprintf(&sb, "| %s | %d | %.0f | %s | %s | %s | %s | %s | %d | %d | %s |\n", m.name, m.n, m.rate, ratio, p50, p99, p999, mx, m.early, m.dups, rss)
		}
	}
	for _, r := range res.Results {
		if r.Scenario == "shape" && r.BurstRecords > 0 {
			fmt.Fprintf(&sb, "\n%s: burst of %d records due within one second drained at %.0f records/s (first to last delivery); last burst delivery %s after the burst's first due time\n",
				r.name(), r.BurstRecords, r.BurstDrainRate, ms(r.BurstCompletionMs))
		}
		if rc := r.Recovery; rc != nil {
			fmt.Fprintf(&sb, "\nrecovery: %d records pending in the wheel (%s on disk) after a %.0f s pre-load; relay RSS %s (anon %s, file-backed %s; peak %s; Go heap in use %s); SIGTERM to exit %.2f s; restart to ready %.2f s; restart to first delivery %s (first due time to first delivery %s); %d entries recovered; peak RSS after restart %s\n",
				rc.PendingAtStop, mb(rc.WheelBytes), rc.IngestSeconds, mb(rc.RSSPending), mb(rc.RSSAnonPending), mb(rc.RSSFilePending), mb(rc.PeakRSSBeforeRestart), mb(rc.HeapInusePending), rc.StopSeconds,
				rc.RestartToReadySeconds, ms(rc.RestartToFirstDeliveryMs), ms(rc.FirstDueToFirstDeliveryMs), rc.Recovered, mb(rc.PeakRSSAfterRestart))
		}
	}
	fmt.Fprintf(&sb, "\nrec/s: delivered records over the span from first to last target timestamp. Lateness: target record timestamp (broker LogAppendTime) minus kdelay-due-at.\n")
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
