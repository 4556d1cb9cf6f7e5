package wheel

import (
	"math"
)

// cand is a pending entry found by a scan or added late: enough to order it
// and to read it back.
type cand struct {
	due  int64
	off  int64
	part int32
	seg  uint32
	pos  uint32
	rec  uint32 // 1 + where the scan kept a copy of the record in Wheel.recs, 0 none
}

type key struct {
	due  int64
	off  int64
	part int32
}

func (c cand) key() key { return key{c.due, c.off, c.part} }

// cmpCand orders by due time, then partition, then offset.
func cmpCand(a, b cand) int {
	switch {
	case a.due != b.due:
		if a.due < b.due {
			return -1
		}
		return 1
	case a.part != b.part:
		if a.part < b.part {
			return -1
		}
		return 1
	case a.off != b.off:
		if a.off < b.off {
			return -1
		}
		return 1
	}
	return 0
}

// candHeap is a min-heap of entries added for ticks already scanned.
type candHeap []cand

func (h *candHeap) push(c cand) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if cmpCand(s[i], s[p]) >= 0 {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *candHeap) pop() {
	s := *h
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && cmpCand(s[r], s[l]) < 0 {
			m = r
		}
		if cmpCand(s[m], s[i]) >= 0 {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
}

// inflight is an entry handed out by Expire.
type inflight struct {
	due  int64
	off  int64
	part int32
}

// flightRing keeps handed-out entries in hand-out order until they are no
// longer pending, so that a checkpoint knows which ticks a restart must scan
// again. It holds the relay's in-flight window, not the pending entries.
type flightRing struct {
	items []inflight
	head  int
}

func (r *flightRing) push(e inflight) { r.items = append(r.items, e) }

// compact drops the entries at the head that are no longer pending. Their
// bits are checked in batches, as in drainStage: words located first, then
// loaded in a short loop so that their cache misses overlap, then tested.
func (r *flightRing) compact(w *Wheel) {
	var words [64]*uint64
	for r.head < len(r.items) {
		if e := &r.items[r.head]; w.pendingOff(e.part, e.off) {
			break // the usual case for a caller with entries in flight: one look-up
		}
		r.head++
		batch := r.items[r.head:min(r.head+len(words), len(r.items))]
		for i := range batch {
			words[i] = nil
			if p := w.lookup(batch[i].part); p != nil {
				words[i] = p.pending.word(batch[i].off)
			}
		}
		var touch uint64
		for _, wp := range words[:len(batch)] {
			if wp != nil {
				touch += *wp
			}
		}
		w.touched += byte(touch)
		n := 0
		for n < len(batch) && (words[n] == nil || *words[n]&(1<<(batch[n].off&63)) == 0) {
			n++
		}
		r.head += n
		if n < len(batch) {
			break
		}
	}
	if r.head == len(r.items) {
		r.items, r.head = r.items[:0], 0
	} else if r.head > 1024 && r.head > len(r.items)/2 {
		n := copy(r.items, r.items[r.head:])
		r.items, r.head = r.items[:n], 0
	}
}

func (w *Wheel) pendingOff(part int32, off int64) bool {
	p := w.lookup(part)
	return p != nil && p.pending.has(off)
}

// alive reports whether the entry read from the log is still pending.
func (w *Wheel) alive(h *entryHeader) bool {
	p := w.lookup(h.part)
	return p != nil && p.epoch == h.epoch && p.pending.has(h.off)
}

// Expire calls fn for up to max entries with Due <= now, in due order
// (milliseconds; ties by partition, then offset), and returns how many. The
// payload passed to fn is a copy. An entry handed out is in flight:
// it is not handed out again by this Wheel, but comes back after a reopen
// unless its Done was flushed. The payload is the caller's to keep and
// modify: its capacity is its length, and payloads up to 8 KiB are cut
// from allocations of 32 KiB shared with other payloads (such an
// allocation stays in memory while one of its payloads is referenced). fn
// may call Done, SetHandled and Add, not Expire.
func (w *Wheel) Expire(now int64, max int, fn func(Entry)) (int, error) {
	return w.expire(now, max, true, fn)
}

// ExpireView is [Wheel.Expire] without the copy of each payload: the
// payload passed to fn is the wheel's own storage (what it read, wrote or
// maps), not to be modified, and valid only until fn returns or calls Add,
// whichever comes first. A caller that copies each payload into storage of
// its own, reused once the entry is forwarded, saves an allocation per
// entry and the garbage collection of a burst's payloads.
func (w *Wheel) ExpireView(now int64, max int, fn func(Entry)) (int, error) {
	return w.expire(now, max, false, fn)
}

// expire is Expire, or ExpireView when keep is false.
func (w *Wheel) expire(now int64, max int, keep bool, fn func(Entry)) (int, error) {
	if err := w.usable(); err != nil {
		return 0, err
	}
	w.observe(now)
	w.flight.compact(w)
	nowTick := w.tickOf(now)
	if w.sc.on && w.sc.t <= nowTick { // staged ahead (Stage), now due: finish it
		if err := w.scanSteps(math.MaxInt); err != nil {
			return 0, w.fail(err)
		}
	}
	n := 0
	for n < max {
		if q := &w.q; len(w.late) == 0 && !q.spilled && q.head < len(q.mem) && !w.sc.on {
			// the usual case, first and pop inlined: the next scanned entry
			c := &q.mem[q.head]
			if c.due > now {
				break
			}
			q.head++
			if k := c.key(); !w.lastOK || k != w.lastK {
				if w.deliver(*c, w.removed, keep, fn) {
					w.lastK, w.lastOK = k, true
					n++
				}
			}
			continue
		}
		cp, fromLate := w.first()
		if cp != nil && cp.due <= now {
			c := *cp // a cand returned by value stalled on store forwarding
			if fromLate {
				w.late.pop()
			} else if err := w.q.pop(); err != nil {
				return n, w.fail(err)
			}
			k := c.key()
			if w.lastOK && k == w.lastK {
				continue // the same entry added twice
			}
			if w.deliver(c, fromLate || w.removed, keep, fn) {
				w.lastK, w.lastOK = k, true
				n++
			}
			continue
		}
		if w.q.has() || w.cur > nowTick {
			break
		}
		t, found := w.findTick(w.cur, nowTick)
		if !found {
			w.cur = nowTick + 1
			w.nextKnown = false
			break
		}
		w.cur = t + 1
		if err := w.scan(t); err != nil {
			return n, w.fail(err)
		}
	}
	return n, nil
}

// first returns the smallest of the scanned and the late entries, nil if
// none; valid until the next pop.
func (w *Wheel) first() (c *cand, fromLate bool) {
	var qc *cand
	if !w.sc.on { // else the tick queue holds part of a tick not yet due
		qc = w.q.first()
	}
	if len(w.late) > 0 && (qc == nil || cmpCand(w.late[0], *qc) < 0) {
		return &w.late[0], true
	}
	return qc, false
}

// NextExpiry returns a lower bound of the earliest due time among pending
// entries not yet handed out: exact for the tick being handed out, the
// slot's lowest due time (or the tick's start) further on. It never is later
// than the true earliest due time, but may be a time at which nothing comes
// out, when the entries there were done, trimmed or dropped before they were
// due. After Expire(now, max, ...) handed out
// fewer than max entries, it is later than now.
func (w *Wheel) NextExpiry() (int64, bool) {
	if w.closed || w.pending == 0 {
		return 0, false
	}
	w.dropDead()
	best, ok := int64(math.MaxInt64), false
	if c, has := w.q.peek(); has && !w.sc.on {
		best, ok = c.due, true
	}
	if len(w.late) > 0 && w.late[0].due < best {
		best, ok = w.late[0].due, true
	}
	if w.sc.on { // a tick being scanned ahead (Stage): bounded as before its scan
		best, ok = min(best, max(w.sc.t*w.g.tick, w.sum[w.sc.s].min)), true
	}
	if ok {
		return best, true // scanned and late entries precede every later tick
	}
	t, found := w.nextTick()
	if !found {
		return 0, false
	}
	return max(t*w.g.tick, w.sum[w.slotOf(t)].min), true
}

// dropDead pops entries done since they were scanned or added late.
func (w *Wheel) dropDead() {
	for len(w.late) > 0 && !w.pendingOff(w.late[0].part, w.late[0].off) {
		w.late.pop()
	}
	for !w.sc.on {
		c, ok := w.q.peek()
		if !ok || w.pendingOff(c.part, c.off) || w.q.pop() != nil {
			return
		}
	}
}

// scan loads the pending entries of tick t into the tick queue and narrows
// the slot's span to what is left for later laps.
func (w *Wheel) scan(t int64) error {
	w.beginScan(t)
	return w.scanSteps(math.MaxInt)
}

// scanState is the scan of one tick under way: begun by beginScan, its
// slot chains walked by scanSteps (Stage walks them a bounded number of
// records at a time, ahead of the tick). While it is on, the tick queue
// holds part of the tick, unsorted: nothing is handed out from it.
type scanState struct {
	on         bool
	t          int64 // the tick
	s          int   // its slot
	start, end int64 // its due times: [start, end)
	next       span  // the pending due times found for the slot's later laps
}

// beginScan starts the scan of tick t: the chain heads of its slot in
// every segment that may hold it, in w.cursors.
func (w *Wheel) beginScan(t int64) {
	w.scans++
	if w.scans%releaseEvery == 0 {
		w.releaseMapped()
	}
	s := w.slotOf(t)
	start, end := t*w.g.tick, (t+1)*w.g.tick
	later := (t + int64(w.g.nslots)) * w.g.tick // earliest due of this slot's next lap
	next := emptySpan()
	w.q.begin(t)
	w.removed = false // drainStage checks every entry of this scan
	if cap(w.recs) > 64<<10 {
		w.recs = nil // after a burst
	}
	w.recs = w.recs[:0]
	cur := w.cursors[:0]
	for _, seg := range w.segs {
		var h uint32
		if seg == w.active {
			h = w.heads[s]
		} else {
			h = seg.head(s)
		}
		if h == 0 || seg.maxDue < start {
			continue
		}
		if seg.minDue >= end { // only later laps here: bound them without reading
			if seg.maxDue >= later {
				next.extend(max(seg.minDue, later))
				next.extend(seg.maxDue)
			}
			continue
		}
		cur = append(cur, chainCursor{seg, h})
	}
	// A compacted segment holds the chain of slot s in one run of records
	// that ends at its head and starts after the head of slot s-1: touch
	// all of it in a tight loop first, so that its cache misses overlap.
	var touch byte
	prevSlot := (s + w.g.nslots - 1) % w.g.nslots
	for _, c := range cur {
		if !c.seg.compacted {
			continue
		}
		lo := int64(c.seg.head(prevSlot))
		hi := min(int64(c.pos)+128, c.seg.size)
		if lo == 0 || lo >= int64(c.pos) {
			lo = max(int64(c.pos)-4096, segHeaderSize)
		}
		c.seg.read(uint32(lo))
		for p := lo; p < hi; p += 64 {
			touch += c.seg.data[p]
		}
	}
	w.touched += touch
	w.cursors = cur
	w.sc = scanState{on: true, t: t, s: s, start: start, end: end, next: next}
}

// scanSteps walks the chains of the scan under way, about budget records
// of them (one round over every chain at least), and ends the scan once
// they are walked: the tick queue sorted, the slot's span narrowed.
func (w *Wheel) scanSteps(budget int) error {
	sc := &w.sc
	cur := w.cursors
	// Walk the chains of all segments side by side: touching the next
	// record of every chain first lets their cache misses overlap.
	for len(cur) > 0 && budget > 0 {
		budget -= len(cur)
		var touch byte
		for _, c := range cur {
			if c.seg.compacted || (c.seg == w.active && mappedWrites) {
				continue // touched above, or read with pread
			}
			if r := w.view(c.seg, c.pos); len(r) >= 128 {
				touch += r[0] + r[63] + r[127] // header and a small payload
			} else if len(r) > 0 {
				touch += r[0]
			}
		}
		w.touched += touch
		j := 0
		for _, c := range cur {
			pos, err := w.step(c.seg, c.pos, sc.start, sc.end, &sc.next)
			if err != nil {
				w.cursors = cur[:0]
				return err
			}
			if pos != 0 {
				cur[j] = chainCursor{c.seg, pos}
				j++
			}
		}
		cur = cur[:j]
		if w.mappedRead >= releaseBytes {
			w.releaseMapped() // a burst: its tick reads the segments whole
		}
		if len(w.stage) >= stageBatch {
			if err := w.drainStage(); err != nil {
				w.cursors = cur[:0]
				return err
			}
		}
	}
	w.cursors = cur
	if len(cur) > 0 {
		return nil // more next time
	}
	sc.on = false
	if err := w.drainStage(); err != nil {
		return err
	}
	if err := w.q.finish(); err != nil {
		return err
	}
	s, next := sc.s, sc.next
	old := w.sum[s]
	if next.empty() {
		w.sum[s] = emptySpan()
	} else {
		w.sum[s] = span{max(next.min, old.min), min(next.max, old.max)}
	}
	w.nextKnown = false
	return nil
}

// releaseEvery is how many scans go by between two releaseMapped (rarer
// releases cost less Expire CPU and no RSS, as a release covers whole 2 MiB
// blocks anyway); releaseBytes how much may be read through the mappings in
// between, because a burst can read every segment whole within fewer scans
// and grow the process's RSS by the whole wheel.
const (
	releaseEvery = 256
	releaseBytes = 32 << 20
)

// releaseMapped drops the pages read since the last call from the
// process's resident set. A scan reads a few pages of every segment;
// without this, the pages read stay mapped until the segment is closed, so
// over an hour every page of every segment counts in the RSS. Compacted
// segments are read almost sequentially, so mapping their pages again costs
// a fault per 64 KiB or so (the kernel's fault-around) every releaseEvery
// ticks. Only the range read is released: the cost of the call grows with
// the range.
func (w *Wheel) releaseMapped() {
	for _, s := range w.segs {
		lo := s.readLo &^ (faultAround - 1)
		if s.readHi > s.readLo && lo < int64(len(s.data)) && mappedWrites && s != w.active { // else data is a private copy, or read with pread
			hi := (s.readHi + faultAround - 1) &^ (faultAround - 1)
			release(s.data[lo:min(hi, int64(len(s.data)))])
		}
		s.readLo, s.readHi = math.MaxInt64, 0
	}
	w.mappedRead = 0
}

// noteRead counts grew, the growth of seg's range read, in mappedRead when
// seg is read through its mapping.
func (w *Wheel) noteRead(seg *segment, grew int64) {
	if mappedWrites && seg != w.active {
		w.mappedRead += grew
	}
}

// faultAround bounds the aligned block one read fault may map: 64 KiB by
// default (fault_around_bytes), but a large folio of the page cache can be
// mapped whole, so a release covers whole 2 MiB blocks.
const faultAround = 2 << 20

// staged is an entry of the tick being scanned, not yet checked pending.
type staged struct {
	c     cand
	epoch uint32
}

const stageBatch = 1024

// drainStage moves the staged entries that are still pending to the tick
// queue. The bitsets are megabytes, so each look-up is a cache miss (often
// a TLB miss too): the words are first located (cheap: the chunk keys stay
// in the cache), then loaded in a loop so short that many of its misses are
// in flight at once, then tested.
func (w *Wheel) drainStage() error {
	st := w.stage
	words := w.stageWords[:0]
	for i := range st {
		var wp *uint64
		if p := w.lookup(st[i].c.part); p != nil && p.epoch == st[i].epoch {
			wp = p.pending.word(st[i].c.off)
		}
		words = append(words, wp)
	}
	var touch uint64
	for _, wp := range words {
		if wp != nil {
			touch += *wp
		}
	}
	w.touched += byte(touch)
	var err error
	if q := &w.q; len(q.mem)+len(st) <= scanBatch {
		// room for all: appended without add's check for a spill
		mem := q.mem
		for i, wp := range words {
			if wp != nil && *wp&(1<<(st[i].c.off&63)) != 0 {
				mem = append(mem, st[i].c)
			}
		}
		q.mem = mem
	} else {
		for i, wp := range words {
			if wp != nil && *wp&(1<<(st[i].c.off&63)) != 0 {
				if err = q.add(st[i].c); err != nil {
					break
				}
			}
		}
	}
	clear(words) // they point into the bitsets
	w.stageWords = words[:0]
	w.stage = st[:0]
	return err
}

// chainCursor is the next record of a slot chain being walked.
type chainCursor struct {
	seg *segment
	pos uint32
}

// step reads the chain record at pos and returns the next position, 0 at
// the end of the chain.
func (w *Wheel) step(seg *segment, pos uint32, start, end int64, next *span) (uint32, error) {
	w.noteRead(seg, seg.read(pos))
	r := w.view(seg, pos)
	kind, size, ok := parseRecord(r)
	if !ok || kind != kindEntry {
		w.corrupt++
		w.problem("segment %d offset %d: bad record in a slot chain, rest of the chain skipped", seg.id, pos)
		return 0, nil
	}
	prev := le.Uint32(r[20:])
	if due := int64(le.Uint64(r[32:])); due >= start {
		if due < end {
			// Filled in place: building the 40-byte element on the stack
			// and copying it stalled on store forwarding.
			n := len(w.stage)
			if n == cap(w.stage) {
				w.stage = append(w.stage, staged{})
			} else {
				w.stage = w.stage[:n+1]
			}
			e := &w.stage[n]
			e.c.due, e.c.off, e.c.part = due, int64(le.Uint64(r[24:])), int32(le.Uint32(r[12:]))
			e.c.seg, e.c.pos, e.c.rec = seg.id, pos, 0
			e.epoch = le.Uint32(r[16:])
			if seg == w.active && mappedWrites {
				e.c.rec = w.keepRecord(r, size)
			}
		} else if h := decodeEntryHeader(r); w.alive(&h) {
			next.extend(due)
		}
	}
	if prev >= pos {
		if prev != 0 {
			w.corrupt++
			w.problem("segment %d offset %d: chain points forward, rest of the chain skipped", seg.id, pos)
		}
		return 0, nil
	}
	return prev, nil
}

// view returns the bytes from pos to the end of what is written or
// buffered in seg, nil if pos is outside. For the active segment it returns
// a copy of the record at pos (at least), valid until the next view.
func (w *Wheel) view(s *segment, pos uint32) []byte {
	p := int64(pos)
	if p < segHeaderSize {
		return nil
	}
	if p < s.size {
		if s == w.active && mappedWrites {
			if r := w.readActive(s, p); r != nil {
				return r
			}
		}
		return s.data[p:s.size]
	}
	if s == w.active {
		if o := p - s.size; o < int64(len(w.wbuf)) {
			return w.wbuf[o:]
		}
	}
	return nil
}

// readActive reads the record at p of the active segment with pread, nil
// on an error (the caller then reads the mapping). The active segment is
// not compacted: its entries lie scattered over it, so reading them
// through the mapping costs a page fault for many of them, and each
// releaseMapped then has most of the segment to unmap again. A pread
// costs about as much CPU as such a fault (the scan keeps a copy for the
// hand-out, see keepRecord), and keeps the segment's pages out of the
// resident set.
//
// It keeps what it read. When p lies within activeBlock of the previous
// record it had to read, it reads the aligned activeBlock around p:
// entries added close together in time (a burst, a partition read in
// order) lie close together in the segment, and the scan of one tick then
// reads them with one pread per block, not one or two per entry; entries
// far apart (random due times) take one small read each, as a block
// would copy 64 KiB for one record. The bytes below the
// segment's size never change once written (it is append-only; only
// recovery truncates, before any read), so the block stays valid while it
// lies below s.size.
func (w *Wheel) readActive(s *segment, p int64) []byte { return w.blocks.read(s, p) }

// blockReader is readActive's state: what it read last, and where.
type blockReader struct {
	seg     *segment // the segment buf was read from, nil when none
	off     int64    // buf's offset in seg
	buf     []byte   // what was read last (the backing array is reused)
	long    []byte   // the buffer for a record longer than what was read
	miss    int64    // the record the last read was for
	missSeg *segment // and its segment
	bytes   int64    // read in all, for the tests of what a scan reads
}

// read is readActive.
func (b *blockReader) read(s *segment, p int64) []byte {
	if r := b.at(s, p); r != nil {
		return r
	}
	start, n, near := b.span(s, p)
	b.miss, b.missSeg = p, s
	if cap(b.buf) < activeBlock {
		b.buf = make([]byte, activeBlock)
	}
	if !b.fill(s, start, n) {
		return nil
	}
	if r := b.at(s, p); r != nil {
		return r
	}
	if near && start < p&^(activePage-1) {
		// The record runs past the block's end: read the block from its
		// page on, which holds it and what follows it.
		start = p &^ (activePage - 1)
		if !b.fill(s, start, min(s.size-start, activeBlock)) {
			return nil
		}
		if r := b.at(s, p); r != nil {
			return r
		}
	}
	// A record longer than what was read: read it whole.
	r := b.buf[p-start:]
	if len(r) < 8 {
		return r
	}
	size := int64(alignUp(int(le.Uint32(r[4:]))))
	if size > s.size-p {
		return r // damaged: the caller's checks reject it
	}
	if int64(cap(b.long)) < size {
		b.long = make([]byte, size)
	}
	r = b.long[:size]
	b.bytes += size
	if _, err := s.f.ReadAt(r, p); err != nil {
		return nil
	}
	return r
}

// span returns what read reads for the record at p of s, which what was
// read last does not hold whole: next to what was read last, the block
// that continues it (a scan walks a slot's chain backwards, a hand-out
// goes forwards), so that each byte is read once; close to the previous
// miss, the aligned block around p; else a record alone. near reports a
// block.
func (b *blockReader) span(s *segment, p int64) (start, n int64, near bool) {
	end := b.off + int64(len(b.buf))
	switch {
	case b.seg == s && p >= b.off && p < end+activeBlock:
		// At or past what was read, or running past its end: the block
		// from p's page on.
		start = p &^ (activePage - 1)
		return start, min(s.size-start, activeBlock), true
	case b.seg == s && p < b.off && p >= b.off-activeBlock+activePage:
		// Just before it: the block that ends a page into it, so that a
		// record running into it by up to a page is read whole.
		start = max(b.off-activeBlock+activePage, 0)
		return start, min(s.size, b.off+activePage) - start, true
	case b.missSeg == s && p > b.miss-activeBlock && p < b.miss+activeBlock:
		start = p &^ (activeBlock - 1)
		return start, min(s.size-start, activeBlock), true
	}
	return p, min(s.size-p, activeRead), false
}

// fill reads n bytes of s at start into buf, and reports whether it could.
func (b *blockReader) fill(s *segment, start, n int64) bool {
	b.seg, b.buf = nil, b.buf[:n]
	b.bytes += n
	if _, err := s.f.ReadAt(b.buf, start); err != nil {
		return false
	}
	b.seg, b.off = s, start
	return true
}

// at returns the record at p of s from what was read last, nil when that
// does not hold the whole of it.
func (b *blockReader) at(s *segment, p int64) []byte {
	if b.seg != s || p < b.off || p+8 > b.off+int64(len(b.buf)) {
		return nil
	}
	r := b.buf[p-b.off:]
	if size := int64(alignUp(int(le.Uint32(r[4:])))); size <= int64(len(r)) {
		return r[:size]
	}
	return nil
}

// forget drops what was read (recovery cuts a segment).
func (b *blockReader) forget() { b.seg = nil }

// activeBlock is what readActive reads at once around records close
// together: 64 KiB, aligned, so that a burst of 1 KiB records takes one
// pread per 60 or so (a pread costs about a microsecond of system time
// whatever its size up to there); activePage the alignment of the block
// read again for a record that runs past the end of the first;
// activeRead what it reads of a record alone: a record header and a small
// payload (a larger record takes a second read).
const (
	activeBlock = 64 << 10
	activePage  = 4096
	activeRead  = 128
)

// maxRecs bounds the records of the active segment one scan keeps for the
// hand-out (Wheel.recs); beyond it, deliver reads them again.
const maxRecs = 1 << 20

// keepRecord copies r, a checked entry record of size bytes read by a scan
// from the active segment, for its hand-out, and returns where (see
// cand.rec), 0 when full.
func (w *Wheel) keepRecord(r []byte, size int) uint32 {
	if len(w.recs)+size > maxRecs {
		return 0
	}
	at := len(w.recs)
	w.recs = append(w.recs, r[:size]...)
	return uint32(at) + 1
}

func (w *Wheel) segment(id uint32) *segment {
	if a := w.active; a.id == id {
		return a
	}
	// ids are mostly contiguous: try the place they would have
	if len(w.segs) > 0 {
		if k := id - w.segs[0].id; k < uint32(len(w.segs)) && w.segs[k].id == id {
			return w.segs[k]
		}
	}
	lo, hi := 0, len(w.segs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if w.segs[m].id < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(w.segs) && w.segs[lo].id == id {
		return w.segs[lo]
	}
	return nil
}

// deliver reads c back and hands it to fn if it is still pending, its
// payload a copy the caller may keep when keep is true, else a view of the
// wheel's storage. check false says that it is pending: c was found so by
// the scan (drainStage), and nothing was done, trimmed or dropped since
// that scan began.
func (w *Wheel) deliver(c cand, check, keep bool, fn func(Entry)) bool {
	p := w.lookup(c.part)
	if p == nil || (check && !p.pending.has(c.off)) {
		return false
	}
	seg := w.segment(c.seg)
	if seg == nil {
		return false
	}
	var r []byte
	if c.rec != 0 && seg == w.active {
		r = w.recs[c.rec-1:]
	} else {
		r = w.view(seg, c.pos)
	}
	if len(r) < entryHeaderSize || r[8] != kindEntry {
		w.corrupt++
		w.problem("segment %d offset %d: entry vanished", c.seg, c.pos)
		return false
	}
	// fields read one by one: an entryHeader returned by value stalled on
	// store forwarding
	size := int(le.Uint32(r[4:]))
	w.noteRead(seg, seg.readRange(int64(c.pos), int64(c.pos)+int64(size)))
	if int32(le.Uint32(r[12:])) != c.part || int64(le.Uint64(r[24:])) != c.off ||
		int64(le.Uint64(r[32:])) != c.due || size > len(r) || size < entryHeaderSize {
		w.corrupt++
		w.problem("segment %d offset %d: entry changed on disk", c.seg, c.pos)
		return false
	}
	if le.Uint32(r[16:]) != p.epoch {
		return false
	}
	var payload []byte
	if n := size - entryHeaderSize; n > 0 {
		payload = r[entryHeaderSize:size:size]
		if keep {
			payload = append(w.payloadBuf(n)[:0], payload...)
		}
	}
	w.flight.push(inflight{due: c.due, off: c.off, part: c.part})
	fn(Entry{Due: c.due, Partition: c.part, Offset: c.off, Payload: payload})
	if w.mappedRead >= releaseBytes {
		w.releaseMapped() // a burst: handed out from one scan; after fn, which may read a view
	}
	return true
}

// payloadSlab is the size of the allocations payloads are cut from: one
// allocation serves many small payloads instead of one each. A payload
// keeps its slab in memory while it is referenced, so this bounds what a
// payload kept long by the caller holds on to.
const payloadSlab = 32 << 10

// payloadBuf returns a slice of n bytes for a payload handed out: cut from
// the current slab when it fits, its capacity limited to n, so that
// appending to it never reaches another payload. Payloads larger than a
// quarter slab get their own allocation.
func (w *Wheel) payloadBuf(n int) []byte {
	if n > payloadSlab/4 {
		return make([]byte, n)
	}
	if len(w.slab) < n {
		w.slab = make([]byte, payloadSlab)
	}
	b := w.slab[:n:n]
	w.slab = w.slab[n:]
	return b
}

// restartState returns the tick a restart must scan from, and the spans to
// add to the checkpoint for entries already scanned but not done: in
// flight, late, or waiting in the tick queue.
func (w *Wheel) restartState() (int64, map[int]span) {
	restart := w.cur
	ext := map[int]span{}
	add := func(due int64) {
		t := w.tickOf(due)
		restart = min(restart, t)
		s := w.slotOf(t)
		sp, ok := ext[s]
		if !ok {
			sp = emptySpan()
		}
		sp.extend(due)
		ext[s] = sp
	}
	w.flight.compact(w)
	for _, e := range w.flight.items[w.flight.head:] {
		if w.pendingOff(e.part, e.off) {
			add(e.due)
		}
	}
	for _, c := range w.late {
		add(c.due)
	}
	if w.q.has() || w.sc.on {
		add(w.q.tick * w.g.tick)
		add((w.q.tick+1)*w.g.tick - 1)
	}
	return restart, ext
}
