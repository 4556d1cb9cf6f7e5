package schedules

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
)

// Cancels is the cancel set an Index consults: [cancel.Set] is one.
// Cancelled reports whether a delayed record with the id and original
// timestamp ts (epoch ms) is cancelled, and by which cut-off.
type Cancels interface {
	Cancelled(id []byte, ts int64) (cutoff int64, ok bool)
}

// Index holds the records of the delay topic above the relay group's
// commits and answers queries about them. The zero value is not usable;
// create one with [NewIndex]. Its methods are safe for concurrent use.
//
// Memory: a record costs 48 bytes, its id and key (plus a varint length
// each), and 16 bytes in each of two orders (by due time, by id hash),
// all in chunks of fixed size (about 100 bytes a record with short ids
// and keys); no pointer per record, so the garbage collector has little
// to scan. Target names are interned. The strings of 1024 consecutive
// records of a partition are bounded by 4 GiB: Add refuses a record past
// that.
type Index struct {
	tab     *levels.Table
	horizon int64 // ms
	cancels Cancels
	seed    maphash.Seed

	mu      sync.RWMutex
	parts   []*part // by partition number, nil until a record or commit of it
	byDue   order   // (due, ref) of every record held
	byID    order   // (hash of the id, ref) of the records with an id
	copies  copies  // cascaded copies by fingerprint
	targets []string
	tidx    map[string]uint16
	n       int
}

// NewIndex returns an empty index for records scheduled under tab.
// horizon is the relays' wheel horizon (KDELAY_WHEEL_HORIZON; 0 means the
// table's largest gap, the relays' default); cancels may be nil (none).
func NewIndex(tab *levels.Table, horizon time.Duration, cancels Cancels) *Index {
	if horizon <= 0 {
		horizon = tab.MaxGap()
	}
	return &Index{
		tab: tab, horizon: horizon.Milliseconds(), cancels: cancels, seed: maphash.MakeSeed(),
		copies: newCopies(), tidx: make(map[string]uint16),
	}
}

// part returns partition p, created when absent; nil when p is out of
// the index's range.
func (x *Index) part(p int32) *part {
	if p < 0 || p > maxPart {
		return nil
	}
	if int(p) >= len(x.parts) {
		x.parts = append(x.parts, make([]*part, int(p)+1-len(x.parts))...)
	}
	pt := x.parts[p]
	if pt == nil {
		pt = &part{committed: -1, level: x.tab.LevelOf(p)}
		x.parts[p] = pt
	}
	return pt
}

// found is a record held: its partition, its chunk and its entry.
type found struct {
	pt *part
	c  *chunk
	e  *entry
}

// lookup returns the record r names while it is held. x.mu is held.
func (x *Index) lookup(r ref) (found, bool) {
	p := r.part()
	if int(p) >= len(x.parts) || x.parts[p] == nil {
		return found{}, false
	}
	pt := x.parts[p]
	c, e, ok := pt.at(r.seq())
	return found{pt, c, e}, ok
}

func (x *Index) alive(r ref) bool {
	_, ok := x.lookup(r)
	return ok
}

func (x *Index) idHash(id []byte) int64 { return int64(maphash.Bytes(x.seed, id)) }

// Len returns the number of records held (pending or not).
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.n
}

// parsed is what Add keeps of a record, read before taking the lock.
type parsed struct {
	e      entry
	s      strs
	target string
}

// Add indexes a record of the delay topic. Control records, records below
// the partition's committed offset and records at or below the last one
// indexed for the partition (a re-read) are ignored; Add reports whether
// the record was taken.
func (x *Index) Add(rec *kgo.Record) bool {
	if rec.Attrs.IsControl() {
		return false
	}
	r := x.parse(rec)
	x.mu.Lock()
	defer x.mu.Unlock()
	pt := x.part(rec.Partition)
	if pt == nil || rec.Offset < pt.committed {
		return false
	}
	if last, ok := pt.last(); ok && rec.Offset <= last.offset {
		return false
	}
	e := r.e
	t, ok := x.tidx[r.target]
	switch {
	case ok:
		e.target = t
	case len(x.targets) < targetInArena:
		e.target = uint16(len(x.targets))
		x.tidx[r.target] = e.target
		x.targets = append(x.targets, r.target)
	default:
		e.target = targetInArena
	}
	seq, ok := pt.add(e, r.s)
	if !ok {
		return false
	}
	rf := mkref(rec.Partition, seq)
	x.n++
	x.byDue.add(pair{e.due, rf}, x.alive)
	if e.flags&flagID != 0 {
		x.byID.add(pair{x.idHash(r.s.id), rf}, x.alive)
	}
	if e.flags&(flagCascaded|flagInvalid) == flagCascaded {
		x.copies.add(e.fp, rf)
	}
	return true
}

// parse reads the schedule of rec, by the relay's rules, and the contract
// error of an invalid one.
func (x *Index) parse(rec *kgo.Record) parsed {
	var r parsed
	e := &r.e
	e.offset, e.ts = rec.Offset, rec.Timestamp.UnixMilli()
	r.s.key = rec.Key
	orig := levels.OriginalTimestamp(rec.Headers, time.Time{})
	if !orig.IsZero() {
		e.flags |= flagCascaded
	} else {
		orig = rec.Timestamp
	}
	e.orig = orig.UnixMilli()
	s, err := x.tab.Parse(rec.Headers, rec.Timestamp)
	id := s.ID
	r.target = s.Target
	if err != nil {
		e.flags |= flagInvalid
		r.s.err = []byte(err.Error())
		if id == "" {
			id = levels.ID(rec.Headers)
		}
	} else {
		e.due = s.Due.UnixMilli()
		if s.Recur != nil {
			e.flags |= flagSeries
			r.s.series = []byte(s.Recur.String())
		}
		var h maphash.Hash
		h.SetSeed(x.seed)
		for _, s := range []string{string(rec.Key), s.Target, id} {
			h.WriteString(s)
			h.WriteByte(0)
		}
		h.Write(rec.Value)
		var b [48]byte
		h.Write(strconv.AppendInt(append(strconv.AppendInt(b[:0], e.due, 10), '/'), e.orig, 10))
		e.fp = h.Sum64()
	}
	if id != "" {
		e.flags |= flagID
		r.s.id = []byte(id)
	}
	r.s.target = []byte(r.target)
	return r
}

// Commit records the relay group's commit of partition p: its committed
// offset (-1: none) and the done set of its metadata (empty when none).
// Records below the committed offset are dropped. It reports whether the
// commit went back below an offset already dropped: the caller must then
// re-read the partition from the new committed offset ([Index.Reset]).
func (x *Index) Commit(p int32, committed int64, done offsetmap.Set) (back bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	pt := x.part(p)
	if pt == nil {
		return false
	}
	if committed < pt.committed {
		back = true
	}
	pt.committed, pt.done = committed, done
	i := pt.head
	for ; i < pt.n; i++ {
		if _, e := pt.entry(i); e.offset >= committed {
			break
		}
	}
	x.drop(p, pt, i)
	return back
}

// Reset drops every record of partition p, to be read again.
func (x *Index) Reset(p int32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if pt := x.part(p); pt != nil {
		x.drop(p, pt, pt.n)
		pt.reset()
	}
}

// drop lets go of the held records of pt before entries[end]. x.mu is
// held.
func (x *Index) drop(p int32, pt *part, end int) {
	if end <= pt.head {
		return
	}
	ids := 0
	for i := pt.head; i < end; i++ {
		_, e := pt.entry(i)
		if e.flags&flagID != 0 {
			ids++
		}
		if e.flags&(flagCascaded|flagInvalid) == flagCascaded {
			x.copies.remove(e.fp, mkref(p, pt.seqOf(i)))
		}
	}
	n := end - pt.head
	x.n -= n
	pt.dropHead(end)
	x.byDue.removed(n, x.alive)
	x.byID.removed(ids, x.alive)
}

// hidden reports whether e is not reported because another record stands
// for the same schedule: an original whose cascaded copy is indexed, or a
// copy cascaded again. x.mu is held.
func (x *Index) hidden(e *entry, r ref) bool {
	if e.flags&flagInvalid != 0 || x.copies.empty() {
		return false
	}
	last, ok := x.copies.lastOf(e.fp)
	if !ok {
		return false
	}
	return e.flags&flagCascaded == 0 || last != r
}

// state returns e's state at now (epoch ms), and the cut-off of the cancel
// that matches it (0 when none). x.mu is held.
func (x *Index) state(f found, now int64) (string, int64) {
	pt, e := f.pt, f.e
	var cutoff int64
	cancelled := false
	if e.flags&flagID != 0 && x.cancels != nil {
		cutoff, cancelled = x.cancels.Cancelled(f.c.id(e), e.orig)
	}
	if !cancelled {
		cutoff = 0
	}
	switch {
	case pt.done.Done(e.offset):
		return StateDone, cutoff
	case e.flags&flagInvalid != 0:
		return StateInvalid, cutoff
	case cancelled:
		return StateCancelled, cutoff
	case e.due <= now:
		return StateDue, 0
	case now < e.ts+x.tab.Duration(pt.level).Milliseconds():
		return StateWaiting, 0
	case e.due-now <= x.horizon:
		return StateWheel, 0
	default:
		return StateWaiting, 0 // read, about to cascade
	}
}

// targetOf returns e's target name. x.mu is held.
func (x *Index) targetOf(e *entry, s strs) string {
	if e.target == targetInArena {
		return string(s.target)
	}
	return x.targets[e.target]
}

// hasTarget reports whether e's target is t, without allocating. x.mu is
// held.
func (x *Index) hasTarget(f found, t string) bool {
	if f.e.target == targetInArena {
		return string(f.c.strs(f.e).target) == t
	}
	return x.targets[f.e.target] == t
}

func (x *Index) schedule(r ref, f found, state string, cutoff int64) Schedule {
	pt, e := f.pt, f.e
	st := f.c.strs(e)
	s := Schedule{
		ID: string(st.id), Target: x.targetOf(e, st), Key: string(st.key), Level: pt.level, Partition: r.part(), Offset: e.offset,
		OriginalTimestamp: time.UnixMilli(e.orig).UTC(), State: state, Location: LocationLevel, Error: string(st.err),
		Recurring: string(st.series),
	}
	if e.flags&flagInvalid == 0 {
		s.DueAt = time.UnixMilli(e.due).UTC()
	}
	if e.flags&flagCascaded != 0 {
		s.Location = LocationCascaded
	}
	if cutoff != 0 {
		c := time.UnixMilli(cutoff).UTC()
		s.CancelCutoff = &c
	}
	return s
}

// withID returns the refs of the records held with the kdelay-id id, in
// partition and offset order. x.mu is held.
func (x *Index) withID(id string) []ref {
	rs := x.byID.refs(nil, x.idHash([]byte(id)))
	return slices.DeleteFunc(rs, func(r ref) bool {
		f, ok := x.lookup(r)
		return !ok || string(f.c.id(f.e)) != id
	})
}

// Get returns every record with the kdelay-id id held by the index, in
// every state (pending, cancelled, done, invalid), in partition and offset
// order; nil when there is none.
func (x *Index) Get(id string, now time.Time) []Schedule {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []Schedule
	for _, r := range x.withID(id) {
		f, _ := x.lookup(r)
		if x.hidden(f.e, r) {
			continue
		}
		st, cut := x.state(f, now.UnixMilli())
		out = append(out, x.schedule(r, f, st, cut))
	}
	return out
}

// Query returns the records that match f at now, ordered by due time (then
// partition and offset), at most f.Limit of them (all when 0), and the
// cursor of the next page ("" when there is none). It walks the records
// in due order from the cursor (or due_from) on and stops once the page
// is full: the first page of what comes due next reads about a page of
// records, whatever the index holds.
func (x *Index) Query(f Filter, now time.Time) ([]Schedule, string) {
	after, hasAfter := f.after()
	nowMs := now.UnixMilli()
	hasFrom, hasTo := !f.DueFrom.IsZero(), !f.DueTo.IsZero()
	from, to := f.DueFrom.UnixMilli(), f.DueTo.UnixMilli()
	x.mu.RLock()
	defer x.mu.RUnlock()
	type result struct {
		k      sortKey
		r      ref
		state  string
		cutoff int64
	}
	var rs []result
	full := func() bool { return f.Limit > 0 && len(rs) > f.Limit }
	// visit takes the record r when it matches; false: the page is full.
	visit := func(r ref) bool {
		h, ok := x.lookup(r)
		e := h.e
		if !ok || f.Level != 0 && h.pt.level != f.Level ||
			f.Target != "" && !x.hasTarget(h, f.Target) ||
			f.Key != "" && string(h.c.strs(e).key) != f.Key ||
			hasFrom && e.due < from || hasTo && e.due >= to {
			return true
		}
		k := sortKey{e.due, r.part(), e.offset}
		if hasAfter && !after.less(k) || x.hidden(e, r) {
			return true
		}
		st, cut := x.state(h, nowMs)
		if !f.wants(st) {
			return true
		}
		rs = append(rs, result{k, r, st, cut})
		return !full()
	}
	if f.ID != "" {
		for _, r := range x.withID(f.ID) {
			visit(r)
		}
		slices.SortFunc(rs, func(a, b result) int { return a.k.compare(b.k) })
	} else {
		start := int64(math.MinInt64)
		if hasFrom {
			start = from
		}
		if hasAfter && after.due > start {
			start = after.due
		}
		x.byDue.walk(start, func(p pair) bool {
			if hasTo && p.k >= to {
				return false
			}
			return visit(p.r)
		})
	}
	next := ""
	if full() {
		rs = rs[:f.Limit]
		next = rs[len(rs)-1].k.cursor()
	}
	out := make([]Schedule, len(rs))
	for i, r := range rs {
		h, _ := x.lookup(r.r)
		out[i] = x.schedule(r.r, h, r.state, r.cutoff)
	}
	return out, next
}

// sortKey orders query results: due time, partition, offset.
type sortKey struct {
	due    int64
	part   int32
	offset int64
}

func (a sortKey) less(b sortKey) bool { return a.compare(b) < 0 }

func (a sortKey) compare(b sortKey) int {
	if c := cmp.Compare(a.due, b.due); c != 0 {
		return c
	}
	if c := cmp.Compare(a.part, b.part); c != 0 {
		return c
	}
	return cmp.Compare(a.offset, b.offset)
}

// copies tracks the cascaded copies held, by fingerprint, in the order
// they were added: the last one stands for the schedule, hiding its
// original and the earlier copies.
type copies struct {
	last  map[uint64]ref
	older map[uint64][]ref // the others still held, oldest first
}

func newCopies() copies {
	return copies{last: make(map[uint64]ref), older: make(map[uint64][]ref)}
}

func (c copies) empty() bool { return len(c.last) == 0 }

func (c copies) add(fp uint64, r ref) {
	if l, ok := c.last[fp]; ok {
		c.older[fp] = append(c.older[fp], l)
	}
	c.last[fp] = r
}

func (c copies) remove(fp uint64, r ref) {
	o := c.older[fp]
	if l, ok := c.last[fp]; ok && l == r {
		if len(o) == 0 {
			delete(c.last, fp)
			return
		}
		c.last[fp] = o[len(o)-1]
		o = o[:len(o)-1]
	} else if i := slices.Index(o, r); i >= 0 {
		o = slices.Delete(o, i, i+1)
	}
	if len(o) == 0 {
		delete(c.older, fp)
	} else {
		c.older[fp] = o
	}
}

func (c copies) lastOf(fp uint64) (ref, bool) {
	r, ok := c.last[fp]
	return r, ok
}
