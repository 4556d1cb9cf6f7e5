package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kdelay/kdelay/levels"
)

// sustainedP99Ms is the arrival lateness p99 a due rate must keep to be
// held in the sustained scenario.
const sustainedP99Ms = 100

// sustainedInfo is what one step of the sustained search found.
type sustainedInfo struct {
	Relays int `json:"relays"`
	// Held: every record delivered, none acked after its due time, the
	// load offered at the rate, and the arrival lateness p99 at most
	// sustainedP99Ms.
	Held bool `json:"held"`
	// Why the rate was not held; "" when it was.
	Why string `json:"why,omitempty"`
	// LoadBound: the load generator, not the relays, fell short (the
	// records were not produced at the rate): the step says nothing about
	// the relays.
	LoadBound bool `json:"load_bound,omitempty"`
	// OfferedRate is the rate the records were produced at.
	OfferedRate float64 `json:"offered_rate_per_s"`
}

// sustainedStep runs relays relays in one group for --sustained-seconds
// while records of 100 B come due at rate per second, each produced
// --due-delay before its due time at that rate (a paced load, default
// levels, arbitrary delays), and says whether they held it.
func (b *bench) sustainedStep(ctx context.Context, rate, relays int) (*result, error) {
	secs := b.o.sustainedSeconds
	n := rate * secs
	tag := fmt.Sprintf("sustained-%d-x%d", rate, relays)
	nm := b.names(tag)
	info := &sustainedInfo{Relays: relays}
	r := &result{Scenario: "sustained", Size: 100, Records: n, Partitions: b.o.partitions, Levels: "default (18 RocketMQ levels)", DueRate: rate, Delivery: atLeastOnce, DueLoad: "paced", Sustained: info}
	r.Notes = append(r.Notes, fmt.Sprintf("%d records/s due for %d s, %d relay(s) in one group; each record produced %s before its due time", rate, secs, relays, b.o.dueDelay))
	tab := b.table(prodLevels)
	topics := map[string]int{nm.delay: int(tab.Partitions()), nm.dlq: 1, nm.delay + ".cancel": 1, nm.target: b.o.partitions}
	if err := b.createTopics(ctx, topics, nm.target); err != nil {
		return r, err
	}
	rps, err := b.startGroup(ctx, tag, nm, relays, int(tab.Partitions()))
	defer func() {
		for _, rp := range rps {
			rp.stop()
		}
		// A step at a high rate writes gigabytes: free the broker's disk.
		var names []string
		for t := range topics {
			names = append(names, t)
		}
		if _, err := b.adm.DeleteTopics(context.WithoutCancel(ctx), names...); err != nil {
			fmt.Fprintln(b.o.stderr, "warning: delete topics:", err)
		}
	}()
	if err != nil {
		return r, err
	}
	col, err := b.newCollector(ctx, nm.target, n, "deliver "+tag)
	if err != nil {
		return r, err
	}
	cpu0, cpuOK := groupCPU(rps)
	start := time.Now()
	t0 := start.Add(b.o.dueDelay)
	step := time.Second / time.Duration(rate)
	ps, err := b.produceLoad(ctx, tag, n, 100, tab, nm.delay, func(i int, _ time.Time) recSpec {
		due := t0.Add(time.Duration(i) * step)
		return recSpec{delay: levels.Delay{Target: nm.target, At: due}, sendAt: due.Add(-b.o.dueDelay)}
	})
	r.ProduceSeconds = ps.took.Seconds()
	r.ProduceRate = float64(n) / ps.took.Seconds()
	r.MinAheadMs = float64(ps.minAhead.Milliseconds())
	r.AckedAfterDue = ps.ackedAfterDue
	if err != nil {
		col.finish(0)
		return r, err
	}
	// The last record is sent (secs - 1/rate) after the first: the rate
	// offered is n over that span, the produce's own time past it counted.
	span := time.Duration(secs)*time.Second - step
	info.OfferedRate = float64(n) / max(ps.took, span).Seconds()
	r.DueMs = t0.UnixMilli()
	werr := col.wait(ctx, t0.Add(time.Duration(secs)*time.Second+b.o.sustainedDrain), 5*time.Second)
	if cpu1, ok := groupCPU(rps); ok && cpuOK {
		r.RelayCPUSeconds = cpu1 - cpu0
	}
	b.groupStats(r, rps)
	recs, dups, bad := col.finish(200 * time.Millisecond)
	r.fill(recs, dups, bad)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	info.Held, info.LoadBound, info.Why = held(r, werr)
	return r, nil
}

// held judges a sustained step: why it was not held ("" if it was), and
// whether that was the load generator's doing.
func held(r *result, werr error) (ok, loadBound bool, why string) {
	info := r.Sustained
	switch {
	case info.OfferedRate < 0.95*float64(r.DueRate):
		return false, true, fmt.Sprintf("load offered at %s only", rateName(int(info.OfferedRate)))
	case r.AckedAfterDue > 0:
		return false, true, fmt.Sprintf("%d records acked after their due time", r.AckedAfterDue)
	case werr != nil:
		return false, false, werr.Error()
	case r.ArrivalLateness == nil:
		return false, false, "no records delivered"
	case r.ArrivalLateness.P99 > sustainedP99Ms:
		return false, false, fmt.Sprintf("arrival p99 %s", ms(r.ArrivalLateness.P99))
	}
	return true, false, ""
}

// startGroup starts relays relays of one group (their own data
// directories, client IDs and HTTP addresses) and waits until the group
// has settled: every relay owns partitions and together they own all
// parts. On error it returns the relays started, to be stopped.
func (b *bench) startGroup(ctx context.Context, tag string, nm names, relays, parts int) ([]*relayProc, error) {
	rps := make([]*relayProc, relays)
	errs := make([]error, relays)
	var wg sync.WaitGroup
	for i := range relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := b.env(nm, prodLevels, atLeastOnce)
			env["KDELAY_DATA_DIR"] = nm.data + "-" + strconv.Itoa(i)
			env["KDELAY_CLIENT_ID"] += "-" + strconv.Itoa(i)
			rps[i], errs[i] = b.startRelay(ctx, tag+"-"+strconv.Itoa(i), env)
		}()
	}
	wg.Wait()
	started := slices.DeleteFunc(slices.Clone(rps), func(rp *relayProc) bool { return rp == nil })
	for _, err := range errs {
		if err != nil {
			return started, err
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		total, each := 0, true
		for _, rp := range rps {
			m, err := rp.metrics()
			if err != nil {
				return started, err
			}
			a := int(m["kdelay_assigned_partitions"])
			total += a
			each = each && a > 0
		}
		if total == parts && each {
			return started, nil
		}
		if time.Now().After(deadline) {
			return started, fmt.Errorf("group of %d relays not settled after 60s: %d of %d partitions assigned", relays, total, parts)
		}
		select {
		case <-ctx.Done():
			return started, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// searchSustained finds the highest due rate relays relays hold: it tries
// the rates of --sustained-rates in order until one is not held, then
// halves the interval between the last rate held and the first not held
// --sustained-refine times (rounded to 1000/s, or 100/s below 10k/s).
// try runs one step; nil: the step could not run (stop).
func searchSustained(rates []int, refine int, try func(rate int) *result) {
	pass, fail := 0, 0
	for _, rate := range rates {
		r := try(rate)
		if r == nil || r.Sustained == nil {
			return
		}
		if !r.Sustained.Held {
			fail = rate
			break
		}
		pass = rate
	}
	for range refine {
		if fail == 0 {
			return // every rate held
		}
		mid := (pass + fail) / 2
		unit := 1000
		if mid < 10_000 {
			unit = 100
		}
		mid = mid / unit * unit
		if mid <= pass || mid >= fail {
			return
		}
		r := try(mid)
		if r == nil || r.Sustained == nil {
			return
		}
		if r.Sustained.Held {
			pass = mid
		} else {
			fail = mid
		}
	}
}

// sustainedRow is one relay count's outcome.
type sustainedRow struct {
	relays int
	best   int // highest rate held; 0: none
	// bound: a step above best was not held for the load generator's
	// reasons: best is a lower bound of what the relays hold.
	bound bool
	// notHeld: some step was not held; without one, best is only a lower
	// bound (every rate tried held).
	notHeld bool
	steps   []string
}

// sustainedRows summarises the sustained steps by relay count, in run
// order.
func sustainedRows(res *results) []sustainedRow {
	var rows []sustainedRow
	idx := map[int]int{}
	for _, r := range res.Results {
		info := r.Sustained
		if info == nil {
			continue
		}
		i, ok := idx[info.Relays]
		if !ok {
			i = len(rows)
			idx[info.Relays] = i
			rows = append(rows, sustainedRow{relays: info.Relays})
		}
		row := &rows[i]
		p99, ap99 := "-", "-"
		if l := r.ArrivalLateness; l != nil {
			p99 = ms(l.P99)
		}
		if l := r.Lateness; l != nil {
			ap99 = ms(l.P99)
		}
		step := fmt.Sprintf("%s: p99 %s (append %s)", rateName(r.DueRate), p99, ap99)
		switch {
		case r.Err != "":
			step += " (FAILED)"
		case info.Held:
			step += " held"
			row.best = max(row.best, r.DueRate)
		default:
			step += " not held (" + info.Why + ")"
			row.notHeld = true
		}
		row.steps = append(row.steps, step)
	}
	for _, r := range res.Results {
		if info := r.Sustained; info != nil && info.LoadBound {
			row := &rows[idx[info.Relays]]
			row.bound = row.bound || r.DueRate > row.best
		}
	}
	return rows
}

// sustainedMarkdown is the table of the sustained search; "" without it.
func sustainedMarkdown(res *results) string {
	rows := sustainedRows(res)
	if len(rows) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n### Sustained due rate\n\nThe highest due rate held for the run's seconds with the arrival lateness p99 (when the bench's consumer polled a record, minus its due time) at most %dms, every record delivered, the load offered at the rate; one broker, records of 100 B, default levels, a paced load.\n\n", sustainedP99Ms)
	sb.WriteString("| relays | highest rate held | vs 1 relay | steps: arrival p99 (lateness p99 at the target's append) |\n|---:|---:|---:|---|\n")
	one := 0
	for _, row := range rows {
		if row.relays == 1 {
			one = row.best
		}
	}
	for _, row := range rows {
		best, vs := "none", "-"
		if row.best > 0 {
			best = rateName(row.best)
			switch {
			case row.bound:
				best = "≥ " + best + " (load-bound)"
			case !row.notHeld:
				best = "≥ " + best + " (every rate tried held)"
			}
			if one > 0 {
				vs = fmt.Sprintf("%.2fx", float64(row.best)/float64(one))
			}
		}
		fmt.Fprintf(&sb, "| %d | %s | %s | %s |\n", row.relays, best, vs, strings.Join(row.steps, "; "))
	}
	return sb.String()
}
