package schedules

import (
	"strconv"
	"time"
)

// MaxBuckets bounds the buckets of a histogram.
const MaxBuckets = 1000

// Histogram is what comes due when: the pending schedules by due time.
type Histogram struct {
	// Overdue counts those due already (state due).
	Overdue int `json:"overdue"`
	// Buckets cover [now truncated to the bucket, + horizon), in order.
	Buckets []Bucket `json:"buckets"`
	// Later counts those due after the last bucket.
	Later int `json:"later"`
}

// Bucket is one bucket of a Histogram.
type Bucket struct {
	Start time.Time `json:"start"`
	Count int       `json:"count"`
	// ByLevel counts per level number ("1", "2", ...), levels with none
	// left out.
	ByLevel map[string]int `json:"by_level"`
}

// Due returns the histogram of the pending schedules at now, in buckets of
// width bucket (> 0) up to horizon, at most MaxBuckets of them (the caller
// checks: Due returns none when there would be more).
func (x *Index) Due(now time.Time, bucket, horizon time.Duration) Histogram {
	h := Histogram{Buckets: []Bucket{}}
	n := int((horizon + bucket - 1) / bucket)
	if bucket <= 0 || n > MaxBuckets {
		return h
	}
	start := now.Truncate(bucket)
	for i := range n {
		h.Buckets = append(h.Buckets, Bucket{Start: start.Add(time.Duration(i) * bucket).UTC(), ByLevel: map[string]int{}})
	}
	nowMs, startMs, bMs := now.UnixMilli(), start.UnixMilli(), bucket.Milliseconds()
	x.mu.RLock()
	defer x.mu.RUnlock()
	x.each(nowMs, func(pt *part, e *entry, st string) {
		switch {
		case !Pending(st):
		case st == StateDue:
			h.Overdue++
		default:
			i := int((e.due - startMs) / max(bMs, 1))
			if i >= n {
				h.Later++
				return
			}
			h.Buckets[i].Count++
			h.Buckets[i].ByLevel[strconv.Itoa(pt.level)]++
		}
	})
	return h
}

// LevelStats is what the index holds of one level.
type LevelStats struct {
	Level int `json:"level"`
	// Pending counts the pending schedules, by state in States.
	Pending int            `json:"pending"`
	States  map[string]int `json:"states"`
	// NextDue is the earliest due time of a pending schedule.
	NextDue *time.Time `json:"next_due,omitempty"`
}

// Levels returns per level the pending schedules and the earliest due
// time at now, level 1 first.
func (x *Index) Levels(now time.Time) []LevelStats {
	out := make([]LevelStats, x.tab.Levels())
	for i := range out {
		out[i] = LevelStats{Level: i + 1, States: map[string]int{}}
	}
	nowMs := now.UnixMilli()
	x.mu.RLock()
	defer x.mu.RUnlock()
	x.each(nowMs, func(pt *part, e *entry, st string) {
		if pt.level < 1 || pt.level > len(out) {
			return
		}
		ls := &out[pt.level-1]
		ls.States[st]++
		if !Pending(st) {
			return
		}
		ls.Pending++
		if d := time.UnixMilli(e.due).UTC(); ls.NextDue == nil || d.Before(*ls.NextDue) {
			ls.NextDue = &d
		}
	})
	return out
}

// Windows counts the pending schedules at now per level by when they come
// due: counts[level][0] those due already, counts[level][i] those due
// within bounds[i-1] (and not an earlier bound), the last those due later.
// bounds ascend.
func (x *Index) Windows(now time.Time, bounds []time.Duration) map[int][]int {
	out := make(map[int][]int, x.tab.Levels())
	for l := 1; l <= x.tab.Levels(); l++ {
		out[l] = make([]int, len(bounds)+2)
	}
	nowMs := now.UnixMilli()
	x.mu.RLock()
	defer x.mu.RUnlock()
	x.each(nowMs, func(pt *part, e *entry, st string) {
		c := out[pt.level]
		if c == nil || !Pending(st) {
			return
		}
		if st == StateDue {
			c[0]++
			return
		}
		i := 0
		for i < len(bounds) && e.due-nowMs > bounds[i].Milliseconds() {
			i++
		}
		c[i+1]++
	})
	return out
}

// each calls fn with every record held that is not hidden, and its state
// at now (epoch ms), partition by partition in offset order. x.mu is
// held.
func (x *Index) each(now int64, fn func(pt *part, e *entry, state string)) {
	for p, pt := range x.parts {
		if pt == nil {
			continue
		}
		for i := pt.head; i < pt.n; i++ {
			c, e := pt.entry(i)
			if x.hidden(e, mkref(int32(p), pt.seqOf(i))) {
				continue
			}
			st, _ := x.state(found{pt, c, e}, now)
			fn(pt, e, st)
		}
	}
}
