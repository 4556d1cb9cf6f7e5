package relay

import "time"

// nextWake returns when the loop must run again at the latest: now if a
// head record is ready, else the earliest level time of a waiting head,
// retry or wheel expiry; zero when nothing waits.
func (r *Relay) nextWake(now time.Time) time.Time {
	var wake time.Time
	earlier := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	for _, ps := range r.parts {
		for _, it := range ps.retries {
			earlier(it.nextTry)
		}
		if len(ps.flight) > 0 {
			earlier(now.Add(20 * time.Millisecond)) // settle outcomes as they land
		}
		if len(ps.queue) == 0 || r.crowded(ps) {
			continue
		}
		if ps.waitFor.IsZero() {
			earlier(now) // not yet decided: work to do
			continue
		}
		earlier(ps.waitFor)
	}
	if _, due := r.mode.waits(); !due.IsZero() && r.committing == nil {
		earlier(due) // else the poll ends when the one in flight is done
	}
	if r.firstAsg && r.wheel != nil {
		if ms, ok := r.wheel.NextExpiry(); ok {
			earlier(r.fireWake(time.UnixMilli(ms), now))
		}
	}
	if !wake.IsZero() && !wake.After(now) {
		wake = now.Add(time.Millisecond) // poll without blocking
	}
	return wake
}

// The wheel scans the tick about to come due ahead of its time
// (wheel.Wheel.Stage) when it begins at most stageLead from now, at most
// stageBudget records per loop iteration, so that a burst's first record
// goes out at its due time, not after the scan of the whole burst (tens of
// milliseconds); the loop polls without blocking while a scan is under way.
const (
	stageLead   = time.Second
	stageBudget = 4096
)

// stageWheel lets the wheel scan ahead and reports whether the scan is
// under way. r.mu is held.
func (r *Relay) stageWheel(now time.Time) bool {
	if !r.firstAsg || r.wheel == nil || r.wheelErr != nil {
		return false
	}
	more, err := r.wheel.Stage(now.UnixMilli(), stageLead.Milliseconds(), stageBudget)
	if err != nil {
		r.wheelFailed("stage", err)
		return false
	}
	return more
}

// updatePauses pauses a partition while its head waits for its level time,
// while its queue holds more than queueCap records or maxBytes bytes, or
// while its retries fill its room, and resumes it otherwise. A partition
// being drained stays fetching, so the next batch is usually buffered by
// the time the loop polls again. A partition whose head waits within
// readAhead (holding) stays fetching too, until the queues of all such
// partitions hold Options.ReadAheadBytes (heldBytes).
func (r *Relay) updatePauses() {
	var pause, resume []int32
	held := 0
	for _, ps := range r.parts {
		if ps.holding {
			held += ps.heldBytes()
		}
	}
	for p, ps := range r.parts {
		full := len(ps.queue) >= r.queueCap() || ps.bytes >= r.maxBytes || r.crowded(ps)
		if ps.holding {
			full = held >= r.aheadMax || r.crowded(ps)
		}
		switch want := (!ps.waitFor.IsZero() && !ps.holding) || full; {
		case want && !ps.paused:
			pause = append(pause, p)
			ps.paused = true
		case !want && ps.paused:
			resume = append(resume, p)
			ps.paused = false
		}
	}
	if len(pause) > 0 {
		r.cl.PauseFetchPartitions(map[string][]int32{r.cfg.Topic: pause})
	}
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(map[string][]int32{r.cfg.Topic: resume})
	}
}

// queueCap bounds the records held per partition before it is paused.
func (r *Relay) queueCap() int { return 2 * r.maxBatch }

// crowded reports whether the partition's records in flight and set aside
// fill its room: it then takes no new heads, so failing records hold back
// their own partition only.
func (r *Relay) crowded(ps *partState) bool {
	return len(ps.retries)+len(ps.flight) >= r.queueCap()
}
