package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/kdelay/kdelay/levels"
)

// dueRate: records of 100 B whose due times are spread evenly so that
// rate of them come due each second for --due-seconds, with the default
// levels and arbitrary delays (kdelay-deliver-at), the relay in delivery
// mode mode, in round rep (from 0).
//
// --due-load preload (the default, as in every earlier figure) produces
// them all before the first due time, as fast as the broker takes them
// (the lead scales with the record count at the measured produce rate):
// the relay reads each level's share in a burst at its level time, at
// many times the due rate, while earlier records come due. --due-load
// paced produces each record --due-delay before its due time, so records
// enter the delay topic at the rate they come due: the steady state of a
// producer with a constant delay. The result says whether every record was in
// Kafka before its due time, and by how much at least.
func (b *bench) dueRate(ctx context.Context, rate int, mode string, rep int) (*result, error) {
	secs := b.o.dueSeconds
	n := rate * secs
	tag := runTag("duerate-"+strconv.Itoa(rate), mode, rep)
	nm := b.names(tag)
	r := &result{Scenario: "duerate", Size: 100, Records: n, Partitions: b.o.partitions, Levels: "default (18 RocketMQ levels)", DueRate: rate, Delivery: mode, Rep: rep + 1, DueLoad: b.o.dueLoad}
	if b.o.dueLoad == "paced" {
		r.Notes = append(r.Notes, fmt.Sprintf("%d records/s due for %d s; each produced %s before its due time (timestamp: produce time; kdelay-deliver-at spread evenly)", rate, secs, b.o.dueDelay))
	} else {
		r.Notes = append(r.Notes, fmt.Sprintf("%d records/s due for %d s; all produced before the first due time (timestamps at produce time, kdelay-deliver-at spread evenly)", rate, secs))
	}
	tab := b.table(prodLevels)
	if err := b.createTopics(ctx, map[string]int{nm.delay: int(tab.Partitions()), nm.dlq: 1, nm.delay + ".cancel": 1, nm.target: b.o.partitions}, nm.target); err != nil {
		return r, err
	}
	rp, err := b.startRelay(ctx, tag, b.env(nm, prodLevels, mode))
	if err != nil {
		return r, err
	}
	defer rp.stop()
	col, err := b.newCollector(ctx, nm.target, n, "deliver "+tag)
	if err != nil {
		return r, err
	}
	cpu0, cpuOK := rp.cpuSeconds()
	start := time.Now()
	paced := b.o.dueLoad == "paced"
	t0 := start.Add(b.lead(n, 100) + b.o.margin)
	if paced {
		t0 = start.Add(b.o.dueDelay) // the first record is produced now
	}
	step := time.Second / time.Duration(rate)
	ps, err := b.produceLoad(ctx, tag, n, 100, tab, nm.delay, func(i int, _ time.Time) recSpec {
		s := recSpec{delay: levels.Delay{Target: nm.target, At: t0.Add(time.Duration(i) * step)}}
		if paced {
			s.sendAt = s.delay.At.Add(-b.o.dueDelay)
		}
		return s
	})
	r.ProduceSeconds = ps.took.Seconds()
	r.ProduceRate = float64(n) / ps.took.Seconds()
	r.LeadMs = float64(t0.Sub(start.Add(ps.took)).Milliseconds())
	r.MinAheadMs = float64(ps.minAhead.Milliseconds())
	r.AckedAfterDue = ps.ackedAfterDue
	if err != nil {
		return r, err
	}
	if ps.ackedAfterDue > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("WARNING: %d records acked after their due time: the load generator fell behind", ps.ackedAfterDue))
	}
	r.DueMs = t0.UnixMilli()
	werr := col.wait(ctx, t0.Add(time.Duration(secs)*time.Second+2*time.Minute), 15*time.Second)
	if cpu1, ok := rp.cpuSeconds(); ok && cpuOK {
		r.RelayCPUSeconds = cpu1 - cpu0
	}
	b.relayStats(r, rp)
	recs, dups, bad := col.finish(500 * time.Millisecond)
	r.fill(recs, dups, bad)
	return r, werr
}

// shape is the mixed load: n records of size, half due evenly over
// 20 s, half due within one second (10 s in), default levels, arbitrary
// delays.
func (b *bench) shape(ctx context.Context, size int, mode string) (*result, error) {
	n := b.o.shapeRecords[size]
	if n == 0 {
		n = b.o.records
	}
	tag := fmt.Sprintf("shape-%d", size)
	nm := b.names(tag)
	r := &result{Scenario: "shape", Size: size, Records: n, Partitions: b.o.partitions, Levels: "default (18 RocketMQ levels)", Delivery: mode}
	r.Notes = append(r.Notes, fmt.Sprintf("DESIGN.md §8 shape: half the records due evenly over %s, half due within one second (at +%s)", b.o.shapeSpread, b.o.shapeSpread/2))
	tab := b.table(prodLevels)
	if err := b.createTopics(ctx, map[string]int{nm.delay: int(tab.Partitions()), nm.dlq: 1, nm.delay + ".cancel": 1, nm.target: b.o.partitions}, nm.target); err != nil {
		return r, err
	}
	rp, err := b.startRelay(ctx, tag, b.env(nm, prodLevels, mode))
	if err != nil {
		return r, err
	}
	defer rp.stop()
	col, err := b.newCollector(ctx, nm.target, n, "deliver "+tag)
	if err != nil {
		return r, err
	}
	cpu0, cpuOK := rp.cpuSeconds()
	start := time.Now()
	t0 := start.Add(b.lead(n, size) + b.o.margin)
	half := max(n/2, 1)
	spread := b.o.shapeSpread
	burstAt := t0.Add(spread / 2)
	ps, err := b.produceLoad(ctx, tag, n, size, tab, nm.delay, func(i int, _ time.Time) recSpec {
		j := time.Duration(i / 2)
		due := t0.Add(j * spread / time.Duration(half))
		if i%2 == 1 {
			due = burstAt.Add(j * time.Second / time.Duration(half))
		}
		return recSpec{delay: levels.Delay{Target: nm.target, At: due}}
	})
	if err != nil {
		return r, err
	}
	r.ProduceSeconds = ps.took.Seconds()
	if start.Add(ps.took).After(t0) {
		r.Notes = append(r.Notes, "WARNING: producing ended after the first due time")
	}
	r.DueMs = t0.UnixMilli()
	werr := col.wait(ctx, t0.Add(spread+2*time.Minute), 15*time.Second)
	if cpu1, ok := rp.cpuSeconds(); ok && cpuOK {
		r.RelayCPUSeconds = cpu1 - cpu0
	}
	b.relayStats(r, rp)
	recs, dups, bad := col.finish(500 * time.Millisecond)
	r.fill(recs, dups, bad)
	var burst []delivery
	for _, d := range recs {
		if d.idx%2 == 1 {
			burst = append(burst, d)
		}
	}
	if len(burst) > 1 {
		first, last := burst[0].tsMs, burst[0].tsMs
		for _, d := range burst {
			first, last = min(first, d.tsMs), max(last, d.tsMs)
		}
		r.BurstRecords = len(burst)
		if last > first {
			r.BurstDrainRate = float64(len(burst)-1) / (float64(last-first) / 1000)
		}
		r.BurstCompletionMs = float64(last - burstAt.UnixMilli())
	}
	return r, werr
}

var recoveredRe = regexp.MustCompile(`wheel (?:opened|recovered)[^\n]*recovered=(\d+)[^\n]*pending=(\d+)`)

// recovery pre-loads the wheel with --recovery-records records (levels 1s
// 1h, due 30 minutes apart in total, the first at --recovery-lead), stops
// the relay with SIGTERM once they are all pending, restarts it at the
// first due time and measures the time from the restart to the first
// delivery.
// pendingSettle is how long the recovery scenario lets the relay idle, once
// every record is pending, before it samples its RSS.
const pendingSettle = 5 * time.Second

func (b *bench) recovery(ctx context.Context, mode string) (*result, error) {
	n := b.o.recoveryRecords
	nm := b.names("recovery")
	r := &result{Scenario: "recovery", Size: 100, Records: n, Partitions: b.o.partitions, Levels: burstLevels, Delivery: mode}
	rec := &recovery{}
	r.Recovery = rec
	tab := b.table(burstLevels)
	if err := b.createTopics(ctx, map[string]int{nm.delay: int(tab.Partitions()), nm.dlq: 1, nm.delay + ".cancel": 1, nm.target: b.o.partitions}, nm.target); err != nil {
		return r, err
	}
	env := b.env(nm, burstLevels, mode)
	a, err := b.startRelay(ctx, "recovery-1", env)
	if err != nil {
		return r, err
	}
	start := time.Now()
	first := start.Add(b.o.recoveryLead).Truncate(time.Millisecond)
	spread := 30 * time.Minute
	if b.o.quick {
		spread = time.Minute
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%d records due from +%s over %s (timestamps at produce time, kdelay-deliver-at); relay stopped (SIGTERM) once all are pending in the wheel, restarted at the first due time", n, b.o.recoveryLead, spread))
	ps, err := b.produceLoad(ctx, "recovery pre-load", n, 100, tab, nm.delay, func(i int, _ time.Time) recSpec {
		return recSpec{delay: levels.Delay{Target: nm.target, At: first.Add(time.Duration(i) * (spread / time.Duration(n)))}}
	})
	if err != nil {
		a.stop()
		return r, err
	}
	r.ProduceSeconds = ps.took.Seconds()
	bar := b.bar(n, "wheel pending (pre-load)")
	pending := 0
	for ctx.Err() == nil && time.Until(first) > b.o.margin {
		m, err := a.metrics()
		if err == nil {
			pending = int(m["kdelay_wheel_pending_entries"])
			rec.HeapInusePending = int64(m["go_memstats_heap_inuse_bytes"])
			bar.Set(pending)
			if pending >= n {
				break
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	bar.Finish()
	rec.IngestSeconds = time.Since(start).Seconds()
	// The steady state with everything pending: the relay idle for
	// pendingSettle (it returns its memory to the OS 2s after its last
	// busy iteration, relay.Options.OnIdle), as long as the first due time
	// is not that close.
	if settle := min(pendingSettle, time.Until(first)-b.o.margin); settle > 0 && ctx.Err() == nil {
		time.Sleep(settle)
	}
	if m, err := a.metrics(); err == nil {
		rec.HeapInusePending = int64(m["go_memstats_heap_inuse_bytes"])
	}
	b.heapProfile("")
	rec.PendingAtStop = pending
	rec.RSSPending = a.rss()
	rec.RSSAnonPending = a.procStatus("RssAnon:")
	rec.RSSFilePending = a.procStatus("RssFile:")
	rec.PeakRSSBeforeRestart = a.peakRSS()
	rec.WheelBytes = dirSize(filepath.Join(nm.data, "wheel"))
	if pending < n {
		r.Notes = append(r.Notes, fmt.Sprintf("WARNING: only %d of %d pending shortly before the first due time", pending, n))
	}
	stopTook, err := a.stop()
	rec.StopSeconds = stopTook.Seconds()
	if err != nil {
		return r, fmt.Errorf("stop relay: %w", err)
	}
	col, err := b.newCollector(ctx, nm.target, n, "deliver after restart")
	if err != nil {
		return r, err
	}
	// Restart at the first due time: the first delivery then measures the
	// restart (process start, wheel recovery, group join) plus the firing.
	select {
	case <-time.After(time.Until(first)):
	case <-ctx.Done():
		col.finish(0)
		return r, ctx.Err()
	}
	restart := time.Now()
	bp, err := b.startRelay(ctx, "recovery-2", env)
	if err != nil {
		col.finish(0)
		return r, err
	}
	rec.RestartToReadySeconds = time.Since(restart).Seconds()
	deadline := time.Now().Add(60 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		col.mu.Lock()
		got := col.got
		col.mu.Unlock()
		if got > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(b.o.watch) // deliveries after the restart, for their lateness
	b.heapProfile(".restart")
	if m, err := bp.metrics(); err == nil {
		rec.PendingAfterRestart = int(m["kdelay_wheel_pending_entries"])
	}
	rec.PeakRSSAfterRestart = bp.peakRSS()
	r.RelayPeakRSS = max(rec.PeakRSSBeforeRestart, rec.PeakRSSAfterRestart)
	b.relayStats(r, bp)
	r.RelayPeakRSS = max(rec.PeakRSSBeforeRestart, rec.PeakRSSAfterRestart)
	r.RelayPeakAnon = max(r.RelayPeakAnon, a.peakAnon.Load())
	r.RelayPeakFile = max(r.RelayPeakFile, a.peakFile.Load())
	bp.stop()
	if lb, err := os.ReadFile(filepath.Join(b.o.out, "relay-recovery-2.log")); err == nil {
		if m := recoveredRe.FindSubmatch(lb); m != nil {
			rec.Recovered, _ = strconv.Atoi(string(m[1]))
		}
	}
	recs, dups, bad := col.finish(0)
	r.Records = len(recs) // lateness of what came due in the seconds after the restart
	r.fill(recs, dups, bad)
	r.Records = n
	if len(recs) == 0 {
		return r, errNoRecords
	}
	firstMs := recs[0].tsMs
	for _, d := range recs {
		firstMs = min(firstMs, d.tsMs)
	}
	rec.RestartToFirstDeliveryMs = float64(firstMs - restart.UnixMilli())
	rec.FirstDueToFirstDeliveryMs = float64(firstMs - first.UnixMilli())
	return r, nil
}

// heapProfile writes a heap profile (after a GC) to --memprofile+suffix.
func (b *bench) heapProfile(suffix string) {
	if b.o.memProfile == "" {
		return
	}
	f, err := os.Create(b.o.memProfile + suffix)
	if err != nil {
		fmt.Fprintln(b.o.stderr, "memprofile:", err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		fmt.Fprintln(b.o.stderr, "memprofile:", err)
	}
}

func dirSize(dir string) int64 {
	var s int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			s += fi.Size()
		}
		return nil
	})
	return s
}
