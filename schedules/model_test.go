package schedules

// model is the index in its plainest form (a pointer per record, maps by
// id and by fingerprint, every query a full walk): the reference the
// compact Index must agree with (TestIndexAgreesWithModel).

import (
	"container/heap"
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
)

// mEntry is one delay-topic record in the index: its schedule, never its
// value.
type mEntry struct {
	id, target, key string // target interned: targets repeat
	series          string // a recurring series: levels.Recurrence.String, "" otherwise
	due, ts, orig   int64  // epoch ms: due time, record timestamp, original timestamp
	offset          int64
	fp              uint64  // identifies a schedule across its cascaded copies
	nextID          *mEntry // the next record with the same id (model.byID's chain)
	partition       int32
	level           int16
	cascaded        bool
	invalid         bool // breaks the contract: its error is in model.errs
}

// mPart is one partition of the delay topic: its commit, its done set and
// its records from the committed offset on, in offset order.
type mPart struct {
	committed int64 // -1: no commit
	done      offsetmap.Set
	entries   []*mEntry
}

// model holds the records of the delay topic above the relay group's
// commits and answers queries about them. The zero value is not usable;
// create one with [newModel]. Its methods are safe for concurrent use.
type model struct {
	tab     *levels.Table
	horizon time.Duration
	cancels Cancels
	seed    maphash.Seed

	mu      sync.RWMutex
	parts   map[int32]*mPart
	byID    map[string]*mEntry   // the first record with the id; the others chained by nextID
	copies  map[uint64][]*mEntry // cascaded copies by fingerprint, oldest first
	errs    map[*mEntry]string   // why an invalid record breaks the contract
	targets map[string]string    // interned target names
	n       int
}

// newModel returns an empty index for records scheduled under tab.
// horizon is the relays' wheel horizon (KDELAY_WHEEL_HORIZON; 0 means the
// table's largest gap, the relays' default); cancels may be nil (none).
func newModel(tab *levels.Table, horizon time.Duration, cancels Cancels) *model {
	if horizon <= 0 {
		horizon = tab.MaxGap()
	}
	return &model{
		tab: tab, horizon: horizon, cancels: cancels, seed: maphash.MakeSeed(),
		parts: make(map[int32]*mPart), byID: make(map[string]*mEntry), copies: make(map[uint64][]*mEntry),
		errs: make(map[*mEntry]string), targets: make(map[string]string),
	}
}

func (x *model) mPart(p int32) *mPart {
	pt := x.parts[p]
	if pt == nil {
		pt = &mPart{committed: -1}
		x.parts[p] = pt
	}
	return pt
}

// Len returns the number of records held (pending or not).
func (x *model) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.n
}

// Add indexes a record of the delay topic. Control records, records below
// the partition's committed offset and records at or below the last one
// indexed for the partition (a re-read) are ignored; Add reports whether
// the record was taken.
func (x *model) Add(rec *kgo.Record) bool {
	if rec.Attrs.IsControl() {
		return false
	}
	e, why := x.entryOf(rec)
	x.mu.Lock()
	defer x.mu.Unlock()
	pt := x.mPart(rec.Partition)
	if rec.Offset < pt.committed || (len(pt.entries) > 0 && rec.Offset <= pt.entries[len(pt.entries)-1].offset) {
		return false
	}
	if t, ok := x.targets[e.target]; ok {
		e.target = t
	} else {
		x.targets[e.target] = e.target
	}
	pt.entries = append(pt.entries, e)
	x.n++
	if e.invalid {
		x.errs[e] = why
	}
	if e.id != "" {
		if head := x.byID[e.id]; head == nil {
			x.byID[e.id] = e
		} else {
			for head.nextID != nil {
				head = head.nextID
			}
			head.nextID = e
		}
	}
	if e.cascaded {
		x.copies[e.fp] = append(x.copies[e.fp], e)
	}
	return true
}

// entryOf reads the schedule of rec, by the relay's rules, and the
// contract error of an invalid one.
func (x *model) entryOf(rec *kgo.Record) (*mEntry, string) {
	e := &mEntry{
		key: string(rec.Key), offset: rec.Offset, partition: rec.Partition,
		level: int16(x.tab.LevelOf(rec.Partition)), ts: rec.Timestamp.UnixMilli(),
	}
	orig := levels.OriginalTimestamp(rec.Headers, time.Time{})
	e.cascaded = !orig.IsZero()
	if !e.cascaded {
		orig = rec.Timestamp
	}
	e.orig = orig.UnixMilli()
	s, err := x.tab.Parse(rec.Headers, rec.Timestamp)
	e.id, e.target = s.ID, s.Target
	if err != nil {
		e.invalid = true
		if e.id == "" {
			e.id = levels.ID(rec.Headers)
		}
		return e, err.Error()
	}
	e.due = s.Due.UnixMilli()
	if s.Recur != nil {
		e.series = s.Recur.String()
	}
	var h maphash.Hash
	h.SetSeed(x.seed)
	for _, s := range []string{e.key, e.target, e.id} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	h.Write(rec.Value)
	h.WriteString(strconv.FormatInt(e.due, 10) + "/" + strconv.FormatInt(e.orig, 10))
	e.fp = h.Sum64()
	return e, ""
}

// Commit records the relay group's commit of partition p: its committed
// offset (-1: none) and the done set of its metadata (empty when none).
// Records below the committed offset are dropped. It reports whether the
// commit went back below an offset already dropped: the caller must then
// re-read the partition from the new committed offset ([model.Reset]).
func (x *model) Commit(p int32, committed int64, done offsetmap.Set) (back bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	pt := x.mPart(p)
	if committed < pt.committed {
		back = true
	}
	pt.committed, pt.done = committed, done
	i := 0
	for i < len(pt.entries) && pt.entries[i].offset < committed {
		x.drop(pt.entries[i])
		i++
	}
	if i > 0 {
		pt.entries = append(pt.entries[:0:0], pt.entries[i:]...)
	}
	return back
}

// Reset drops every record of partition p, to be read again.
func (x *model) Reset(p int32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	pt := x.mPart(p)
	for _, e := range pt.entries {
		x.drop(e)
	}
	pt.entries = nil
}

// drop removes e from the maps. x.mu is held.
func (x *model) drop(e *mEntry) {
	x.n--
	delete(x.errs, e)
	if e.id != "" {
		if head := x.byID[e.id]; head == e {
			if e.nextID == nil {
				delete(x.byID, e.id)
			} else {
				x.byID[e.id] = e.nextID
			}
		} else {
			for ; head != nil; head = head.nextID {
				if head.nextID == e {
					head.nextID = e.nextID
					break
				}
			}
		}
		e.nextID = nil
	}
	if e.cascaded {
		if l := mRemove(x.copies[e.fp], e); len(l) == 0 {
			delete(x.copies, e.fp)
		} else {
			x.copies[e.fp] = l
		}
	}
}

func mRemove(l []*mEntry, e *mEntry) []*mEntry {
	for i, o := range l {
		if o == e {
			return append(l[:i], l[i+1:]...)
		}
	}
	return l
}

// hidden reports whether e is not reported because another record stands
// for the same schedule: an original whose cascaded copy is indexed, or a
// copy cascaded again. x.mu is held.
func (x *model) hidden(e *mEntry) bool {
	if e.invalid {
		return false
	}
	l := x.copies[e.fp]
	if len(l) == 0 {
		return false
	}
	return !e.cascaded || l[len(l)-1] != e
}

// state returns e's state at now (epoch ms), and the cut-off of the cancel
// that matches it (0 when none). x.mu is held.
func (x *model) state(e *mEntry, pt *mPart, now int64) (string, int64) {
	var cutoff int64
	cancelled := false
	if e.id != "" && x.cancels != nil {
		cutoff, cancelled = x.cancels.Cancelled([]byte(e.id), e.orig)
	}
	if !cancelled {
		cutoff = 0
	}
	switch {
	case pt.done.Done(e.offset):
		return StateDone, cutoff
	case e.invalid:
		return StateInvalid, cutoff
	case cancelled:
		return StateCancelled, cutoff
	case e.due <= now:
		return StateDue, 0
	case now < e.ts+x.tab.Duration(int(e.level)).Milliseconds():
		return StateWaiting, 0
	case e.due-now <= x.horizon.Milliseconds():
		return StateWheel, 0
	default:
		return StateWaiting, 0 // read, about to cascade
	}
}

func (x *model) schedule(e *mEntry, state string, cutoff int64) Schedule {
	s := Schedule{
		ID: e.id, Target: e.target, Key: e.key, Level: int(e.level), Partition: e.partition, Offset: e.offset,
		OriginalTimestamp: time.UnixMilli(e.orig).UTC(), State: state, Location: LocationLevel, Error: x.errs[e],
		Recurring: e.series,
	}
	if !e.invalid {
		s.DueAt = time.UnixMilli(e.due).UTC()
	}
	if e.cascaded {
		s.Location = LocationCascaded
	}
	if cutoff != 0 {
		c := time.UnixMilli(cutoff).UTC()
		s.CancelCutoff = &c
	}
	return s
}

// Get returns every record with the kdelay-id id held by the index, in
// every state (pending, cancelled, done, invalid), in offset order per
// partition; nil when there is none.
func (x *model) Get(id string, now time.Time) []Schedule {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []Schedule
	for e := x.byID[id]; e != nil; e = e.nextID {
		if x.hidden(e) {
			continue
		}
		st, cut := x.state(e, x.parts[e.partition], now.UnixMilli())
		out = append(out, x.schedule(e, st, cut))
	}
	return out
}

// Query returns the records that match f at now, ordered by due time (then
// partition and offset), at most f.Limit of them (all when 0), and the
// cursor of the next page ("" when there is none).
func (x *model) Query(f Filter, now time.Time) ([]Schedule, string) {
	after, hasAfter := f.after()
	nowMs := now.UnixMilli()
	x.mu.RLock()
	defer x.mu.RUnlock()
	var h mHeap
	keep := f.Limit + 1
	visit := func(e *mEntry, pt *mPart) {
		if f.Level != 0 && int(e.level) != f.Level ||
			f.Target != "" && e.target != f.Target ||
			f.Key != "" && e.key != f.Key ||
			!f.DueFrom.IsZero() && e.due < f.DueFrom.UnixMilli() ||
			!f.DueTo.IsZero() && e.due >= f.DueTo.UnixMilli() {
			return
		}
		k := sortKey{e.due, e.partition, e.offset}
		if hasAfter && !after.less(k) {
			return
		}
		if f.Limit > 0 && len(h) == keep && !k.less(h[0].k) {
			return
		}
		if x.hidden(e) {
			return
		}
		st, cut := x.state(e, pt, nowMs)
		if !f.wants(st) {
			return
		}
		heap.Push(&h, mResult{k, e, st, cut})
		if f.Limit > 0 && len(h) > keep {
			heap.Pop(&h)
		}
	}
	if f.ID != "" {
		for e := x.byID[f.ID]; e != nil; e = e.nextID {
			visit(e, x.parts[e.partition])
		}
	} else {
		for _, pt := range x.parts {
			for _, e := range pt.entries {
				visit(e, pt)
			}
		}
	}
	rs := make([]mResult, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		rs[i] = heap.Pop(&h).(mResult)
	}
	next := ""
	if f.Limit > 0 && len(rs) > f.Limit {
		rs = rs[:f.Limit]
		next = rs[len(rs)-1].k.cursor()
	}
	out := make([]Schedule, len(rs))
	for i, r := range rs {
		out[i] = x.schedule(r.e, r.state, r.cutoff)
	}
	return out, next
}

type mResult struct {
	k      sortKey
	e      *mEntry
	state  string
	cutoff int64
}

// mHeap is a max-heap by sort key: its root is the last mResult kept.
type mHeap []mResult

func (h mHeap) Len() int           { return len(h) }
func (h mHeap) Less(i, j int) bool { return h[j].k.less(h[i].k) }
func (h mHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *mHeap) Push(v any)        { *h = append(*h, v.(mResult)) }
func (h *mHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

// Due returns the histogram of the pending schedules at now, in buckets of
// width bucket (> 0) up to horizon, at most MaxBuckets of them (the caller
// checks: Due returns none when there would be more).
func (x *model) Due(now time.Time, bucket, horizon time.Duration) Histogram {
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
	for _, pt := range x.parts {
		for _, e := range pt.entries {
			if x.hidden(e) {
				continue
			}
			st, _ := x.state(e, pt, nowMs)
			switch {
			case !Pending(st):
			case st == StateDue:
				h.Overdue++
			default:
				i := int((e.due - startMs) / max(bMs, 1))
				if i >= n {
					h.Later++
					continue
				}
				h.Buckets[i].Count++
				h.Buckets[i].ByLevel[strconv.Itoa(int(e.level))]++
			}
		}
	}
	return h
}

// Levels returns per level the pending schedules and the earliest due
// time at now, level 1 first.
func (x *model) Levels(now time.Time) []LevelStats {
	out := make([]LevelStats, x.tab.Levels())
	for i := range out {
		out[i] = LevelStats{Level: i + 1, States: map[string]int{}}
	}
	nowMs := now.UnixMilli()
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, pt := range x.parts {
		for _, e := range pt.entries {
			if e.level < 1 || int(e.level) > len(out) || x.hidden(e) {
				continue
			}
			st, _ := x.state(e, pt, nowMs)
			ls := &out[e.level-1]
			ls.States[st]++
			if !Pending(st) {
				continue
			}
			ls.Pending++
			if d := time.UnixMilli(e.due).UTC(); ls.NextDue == nil || d.Before(*ls.NextDue) {
				ls.NextDue = &d
			}
		}
	}
	return out
}

// Windows counts the pending schedules at now per level by when they come
// due: counts[level][0] those due already, counts[level][i] those due
// within bounds[i-1] (and not an earlier bound), the last those due later.
// bounds ascend.
func (x *model) Windows(now time.Time, bounds []time.Duration) map[int][]int {
	out := make(map[int][]int, x.tab.Levels())
	for l := 1; l <= x.tab.Levels(); l++ {
		out[l] = make([]int, len(bounds)+2)
	}
	nowMs := now.UnixMilli()
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, pt := range x.parts {
		for _, e := range pt.entries {
			c := out[int(e.level)]
			if c == nil || x.hidden(e) {
				continue
			}
			st, _ := x.state(e, pt, nowMs)
			if !Pending(st) {
				continue
			}
			if st == StateDue {
				c[0]++
				continue
			}
			i := 0
			for i < len(bounds) && e.due-nowMs > bounds[i].Milliseconds() {
				i++
			}
			c[i+1]++
		}
	}
	return out
}
