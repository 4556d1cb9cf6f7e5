package wheel

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"
)

// SyncPolicy says when Flush calls fsync.
type SyncPolicy int

const (
	// SyncBatch fsyncs on every Flush: after Flush returns, everything
	// buffered before it survives kill -9 and power loss.
	SyncBatch SyncPolicy = iota
	// SyncInterval fsyncs at most every Options.SyncInterval (measured with
	// the times passed to Add and Expire). Written data survives kill -9.
	SyncInterval
	// SyncNone never fsyncs before Close. Written data survives kill -9, not
	// power loss.
	SyncNone
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncBatch:
		return "batch"
	case SyncInterval:
		return "interval"
	case SyncNone:
		return "none"
	case SyncManual:
		return "manual"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// Defaults of Options.
const (
	DefaultHorizon      = time.Hour
	DefaultTick         = 100 * time.Millisecond
	DefaultSyncInterval = time.Second
	DefaultSegmentBytes = 64 << 20
)

// Options configure a wheel. The zero value is valid: every field has a
// default.
type Options struct {
	// Horizon is the largest due-now distance Add accepts, default 1h.
	Horizon time.Duration
	// Tick is the slot width, a whole number of milliseconds, default
	// 100ms. Entries come out in millisecond order whatever the tick; the
	// tick sets how many slots there are (Horizon/Tick + 2) and how many
	// entries one scan loads. It is fixed when the directory is created: a
	// directory keeps the tick and slot count it was created with.
	Tick time.Duration
	// Sync is the fsync policy, default SyncBatch.
	Sync SyncPolicy
	// SyncInterval is the fsync period of SyncInterval, default 1s.
	SyncInterval time.Duration
	// SegmentBytes is the segment size before rolling, default 64 MiB,
	// between 4 KiB and 1 GiB.
	SegmentBytes int64
	// NoCompaction turns off the background rewrite of sealed segments
	// grouped by slot (default: on; see the package documentation). Without
	// it, Expire reads each entry from wherever Add appended it, which costs
	// more per entry and keeps more segment pages resident; with it, each
	// entry is written once more, off the caller's goroutine. Segments
	// already compacted stay readable either way.
	NoCompaction bool
}

func (o Options) withDefaults() (Options, error) {
	if o.Horizon == 0 {
		o.Horizon = DefaultHorizon
	}
	if o.Tick == 0 {
		o.Tick = DefaultTick
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	var errs []error
	if o.Tick < time.Millisecond || o.Tick%time.Millisecond != 0 || o.Tick > 24*time.Hour {
		errs = append(errs, fmt.Errorf("wheel: Tick %v must be a whole number of milliseconds, at most 24h", o.Tick))
	}
	if o.Horizon < o.Tick {
		errs = append(errs, fmt.Errorf("wheel: Horizon %v shorter than Tick %v", o.Horizon, o.Tick))
	} else if o.Tick >= time.Millisecond && int64(o.Horizon/o.Tick)+2 > maxSlots {
		errs = append(errs, fmt.Errorf("wheel: Horizon/Tick = %d slots, at most %d", o.Horizon/o.Tick, maxSlots-2))
	}
	if o.Sync < SyncBatch || o.Sync > SyncManual {
		errs = append(errs, fmt.Errorf("wheel: unknown sync policy %d", int(o.Sync)))
	}
	if o.SyncInterval < 0 {
		errs = append(errs, fmt.Errorf("wheel: negative SyncInterval %v", o.SyncInterval))
	}
	if o.SegmentBytes < 4<<10 || o.SegmentBytes > maxSegmentSize {
		errs = append(errs, fmt.Errorf("wheel: SegmentBytes %d not in [4 KiB, 1 GiB]", o.SegmentBytes))
	}
	return o, errors.Join(errs...)
}

func (o Options) geometry() geometry {
	t := o.Tick.Milliseconds()
	h := o.Horizon.Milliseconds()
	return geometry{tick: t, nslots: int((h+t-1)/t) + 2}
}

// Entry is one delayed record.
type Entry struct {
	Due       int64  // unix milliseconds
	Partition int32  // source partition in the delay topic
	Offset    int64  // source offset
	Payload   []byte // opaque
}

// Range is an inclusive range of offsets of one source partition.
type Range struct {
	Partition int32
	From, To  int64
}

// Report tells what Open recovered and what it could not.
type Report struct {
	Recovered  int64    // pending entries after recovery
	Lost       int64    // entries found in the cut-off tail
	LostRanges []Range  // their offsets, merged (may cover more than Lost)
	Truncated  int64    // bytes cut off or removed
	Problems   []string // everything unusual, one line each
}

var (
	// ErrBeyondHorizon is wrapped by Add for a due time too far ahead.
	ErrBeyondHorizon = errors.New("wheel: due time beyond horizon")
	// ErrClosed is returned by every method of a closed wheel.
	ErrClosed = errors.New("wheel: closed")
	// ErrInvalid is wrapped by Add for a negative due time, partition or
	// offset, or a payload larger than MaxPayload.
	ErrInvalid = errors.New("wheel: invalid entry")
)

const (
	writeAhead   = 1 << 20 // write buffered records once this many are buffered
	reclaimEvery = 4096    // look for free segments after this many dones
	maxProblems  = 100
)

// Wheel is a file-backed timer wheel. See the package documentation.
type Wheel struct {
	dir       string
	opt       Options
	g         geometry
	horizon   int64 // ms
	segBytes  int64
	ckptEvery int64
	lock      *os.File

	segs   []*segment // by id; the last one is active
	active *segment
	heads  []uint32 // slot heads of the active segment
	wbuf   []byte   // records not yet written; they follow active.size

	sum       []span // per slot, bounds of pending not yet scanned dues
	cur       int64  // ticks < cur are scanned
	nextT     int64
	nextOK    bool
	nextKnown bool

	parts   map[int32]*partState
	dense   []*partState // parts by id, for ids below denseParts
	last    *partState   // lookup cache
	dirty   []*partState
	pending int64

	q          tickQueue // scanned entries of one tick, sorted
	cursors    []chainCursor
	sc         scanState  // the scan under way, if any (Stage)
	noStage    int64      // 1 + a tick Stage gave up (adds for it came late): not staged again
	stage      []staged   // entries of the tick being scanned, to check pending
	stageWords []*uint64  // drainStage's pointers to their bitset words
	touched    byte       // keeps the prefetching loads of scan
	late       candHeap   // entries added for ticks already scanned
	flight     flightRing // handed out, maybe not done
	lastK      key
	lastOK     bool
	slab       []byte      // what is left of the allocation payloads are cut from
	blocks     blockReader // readActive's reads of the active segment
	recs       []byte      // records of the active segment kept by the scan (cand.rec)
	scans      int64       // ticks scanned since Open
	mappedRead int64       // bytes handed out from the mappings since the last releaseMapped
	removed    bool        // a pending bit was cleared since the last scan began

	lastNow      int64
	lastSync     int64
	dirDirty     bool
	ckptGen      uint64
	ckptSeg      uint32
	ckptSegs     [2]uint32 // segment of the position of checkpoint.0 and .1
	sinceCkpt    int64
	sinceReclaim int64
	ckptBuf      []byte

	job            *compactJob // running or finished, not installed
	retired        chan error  // the last retire's result, nil when none is pending
	syncer         *Syncer     // the outstanding SyncStart, nil when none
	compactQ       []uint32    // sealed segments to compact, by id
	compacted      int         // compactions installed since Open
	compactEntries int64
	compactCPU     time.Duration // CPU time of the installed compactions

	problems []string
	corrupt  int64
	err      error // sticky write error
	closed   bool
}

func (w *Wheel) usable() error {
	if w.closed {
		return ErrClosed
	}
	return w.err
}

func (w *Wheel) fail(err error) error {
	if w.err == nil {
		w.err = fmt.Errorf("wheel: failed, reopen to recover: %w", err)
	}
	return w.err
}

func (w *Wheel) observe(now int64) { w.lastNow = max(w.lastNow, now) }

func (w *Wheel) problem(format string, args ...any) {
	if len(w.problems) < maxProblems {
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
	}
}

// Corrupt returns how many damaged records (bad checksums, broken
// chains) Expire has met since Open. The entries behind a damaged record
// of a slot chain are not handed out; a caller that sees the count grow
// should rebuild what it keeps in the wheel from its source.
func (w *Wheel) Corrupt() int64 { return w.corrupt }

// Compacted returns the compactions installed since Open (sealed segments
// rewritten with their live entries grouped by slot, docs/dev/wheel-internals.md) and
// the entries they copied.
func (w *Wheel) Compacted() (segments int, entries int64) { return w.compacted, w.compactEntries }

// Problems returns what went wrong since Open without stopping the wheel,
// such as a checksum error in a slot chain (bit rot), at most 100 lines.
func (w *Wheel) Problems() []string { return slices.Clone(w.problems) }

// part returns the state of partition id, creating it.
func (w *Wheel) part(id int32) *partState {
	if p := w.lookup(id); p != nil {
		return p
	}
	p := newPartState(id)
	w.setPart(p)
	return p
}

func (w *Wheel) setPart(p *partState) {
	w.parts[p.id] = p
	if p.id < denseParts {
		if int(p.id) >= len(w.dense) {
			w.dense = append(w.dense, make([]*partState, int(p.id)+1-len(w.dense))...)
		}
		w.dense[p.id] = p
	}
}

// denseParts: partitions below it are found through a slice.
const denseParts = 1 << 12

func (w *Wheel) lookup(id int32) *partState {
	if uint32(id) < uint32(len(w.dense)) {
		return w.dense[id]
	}
	if p := w.last; p != nil && p.id == id {
		return p
	}
	p := w.parts[id]
	if p != nil {
		w.last = p
	}
	return p
}

func (w *Wheel) markDirty(p *partState) {
	if !p.dirty {
		p.dirty = true
		w.dirty = append(w.dirty, p)
	}
}

// Add buffers e; it is written by the next Flush. Due may be in the past:
// such an entry comes out on the next Expire. Adding an offset that is
// already pending is a no-op. Add copies the payload.
func (w *Wheel) Add(now int64, e Entry) error {
	if err := w.usable(); err != nil {
		return err
	}
	w.observe(now)
	if now < math.MaxInt64-w.horizon && e.Due > now+w.horizon {
		return fmt.Errorf("%w: due %d is %v after now %d, horizon %v",
			ErrBeyondHorizon, e.Due, time.Duration(e.Due-now)*time.Millisecond, now, w.opt.Horizon)
	}
	if e.Due < 0 || e.Partition < 0 || e.Offset < 0 || len(e.Payload) > MaxPayload {
		return fmt.Errorf("%w: due %d partition %d offset %d payload %d bytes (max %d)",
			ErrInvalid, e.Due, e.Partition, e.Offset, len(e.Payload), MaxPayload)
	}
	p := w.part(e.Partition)
	if !p.pending.add(e.Offset) { // one look-up: set now, cleared again on failure
		return nil
	}
	if len(p.dones) > 0 {
		if err := w.emitDones(p); err != nil {
			p.pending.remove(e.Offset)
			w.removed = true
			return w.fail(err)
		}
	}
	size := alignUp(entryHeaderSize + len(e.Payload))
	if err := w.ensureRoom(size); err != nil {
		p.pending.remove(e.Offset)
		w.removed = true
		return w.fail(err)
	}
	a := w.active
	pos := uint32(a.size + int64(len(w.wbuf)))
	t := w.tickOf(e.Due)
	s := w.slotOf(t)
	// The slot's head and span are two cache misses (random slots, a
	// megabyte of them): load both here, together, so that they overlap.
	prev, sp := w.heads[s], &w.sum[s]
	w.touched += byte(sp.min)
	w.wbuf = appendEntry(w.wbuf, entryHeader{
		part: e.Partition, epoch: p.epoch, prev: prev, off: e.Offset, due: e.Due,
	}, e.Payload)
	w.heads[s] = pos
	if prev == 0 {
		a.chains++
	}
	if prev == 0 || prev != a.lastEntry {
		a.runs++
	}
	if a.added > 0 && t < a.lastTick {
		a.descents++
	}
	a.added++
	a.lastEntry, a.lastTick = pos, t
	a.noteEntry(e.Due)
	w.pending++
	p.high = max(p.high, e.Offset)
	p.noteSegment(a.id, e.Offset)
	if t < w.cur {
		w.late.push(cand{due: e.Due, off: e.Offset, part: e.Partition, seg: a.id, pos: pos})
		if len(w.late) > maxLateAhead {
			w.checkLate() // a tick staged ahead may be undone
		}
	} else {
		w.noteFuture(t, s, e.Due)
	}
	w.sinceCkpt += int64(size)
	if len(w.wbuf) >= writeAhead {
		if err := w.writeBuffered(); err != nil {
			return w.fail(err)
		}
	}
	return nil
}

// Done marks an entry forwarded; it is persisted by the next Flush. Done of
// an entry that is not pending is a no-op.
func (w *Wheel) Done(partition int32, offset int64) error {
	if err := w.usable(); err != nil {
		return err
	}
	p := w.lookup(partition)
	if p == nil || !p.pending.remove(offset) {
		return nil
	}
	w.removed = true
	if f := &w.flight; f.head < len(f.items) && f.items[f.head].part == partition && f.items[f.head].off == offset {
		f.head++ // done in hand-out order, the usual case: compact need not look it up
	}
	if w.lastOK && w.lastK.part == partition && w.lastK.off == offset {
		w.lastOK = false // added again, it is a new entry, not the one handed out twice
	}
	w.pending--
	w.sinceReclaim++
	p.dones = append(p.dones, offset)
	w.markDirty(p)
	return nil
}

// SetHandled records that the relay finished every record of partition up
// to offset. It is written by the next Flush, after every entry added
// before it; Handled returns it once that Flush is done. A value lower than
// the current one is ignored.
func (w *Wheel) SetHandled(partition int32, offset int64) {
	if w.usable() != nil {
		return
	}
	p := w.part(partition)
	if offset > p.handled {
		p.handled = offset
		p.handledDirty = true
		w.markDirty(p)
	}
}

// Handled returns the watermark of partition as of the last Flush, -1 if
// unknown. Open lowers it below any offset lost from a torn tail.
func (w *Wheel) Handled(partition int32) int64 {
	if p := w.lookup(partition); p != nil {
		return p.durable
	}
	return -1
}

// Highest returns the highest offset of partition added in its current
// epoch (persisted).
func (w *Wheel) Highest(partition int32) (int64, bool) {
	if p := w.lookup(partition); p != nil && p.high >= 0 {
		return p.high, true
	}
	return 0, false
}

// LowestPending returns the lowest offset of partition still pending
// (added, not done, trimmed or dropped), in flight ones included.
func (w *Wheel) LowestPending(partition int32) (int64, bool) {
	if p := w.lookup(partition); p != nil {
		return p.pending.min()
	}
	return 0, false
}

// EachPending calls fn for every pending offset of partition in [lo, hi],
// in order, until fn returns false.
func (w *Wheel) EachPending(partition int32, lo, hi int64, fn func(offset int64) bool) {
	if p := w.lookup(partition); p != nil {
		p.pending.each(lo, hi, fn)
	}
}

// Holds reports whether the entry of partition at offset is pending (added,
// not done, trimmed or dropped), in flight ones included.
func (w *Wheel) Holds(partition int32, offset int64) bool { return w.pendingOff(partition, offset) }

// Pending returns the number of live entries.
func (w *Wheel) Pending() int64 { return w.pending }

// Trim marks every entry of partition with an offset below below done.
func (w *Wheel) Trim(partition int32, below int64) error {
	if err := w.usable(); err != nil {
		return err
	}
	p := w.lookup(partition)
	if p == nil {
		return nil
	}
	if err := w.emitDones(p); err != nil {
		return w.fail(err)
	}
	if err := w.emitMark(kindTrim, p, below); err != nil {
		return w.fail(err)
	}
	n := p.pending.removeBelow(below)
	w.removed = true
	w.pending -= n
	w.sinceReclaim += n
	return nil
}

// Drop forgets partition: its entries and its watermark.
func (w *Wheel) Drop(partition int32) error {
	if err := w.usable(); err != nil {
		return err
	}
	p := w.lookup(partition)
	if p == nil {
		return nil
	}
	p.dones = p.dones[:0]
	n := p.pending.count
	p.drop(p.epoch + 1)
	w.removed = true
	if err := w.emitMark(kindDrop, p, 0); err != nil {
		return w.fail(err)
	}
	w.pending -= n
	w.sinceReclaim += n
	return nil
}

// Flush writes everything buffered (group commit) and fsyncs as the sync
// policy says. Under SyncBatch, all of it survives kill -9 once Flush
// returns.
func (w *Wheel) Flush() error { return w.checkedFlush(false) }

// checkedFlush is Flush, and with forceSync Sync: it refuses an unusable
// wheel, and a failure fails the wheel.
func (w *Wheel) checkedFlush(forceSync bool) error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := w.flush(forceSync); err != nil {
		return w.fail(err)
	}
	return nil
}

func (w *Wheel) flush(forceSync bool) error {
	for _, p := range w.dirty {
		p.dirty = false
		if err := w.emitDones(p); err != nil {
			return err
		}
		if p.handledDirty {
			p.handledDirty = false
			if err := w.emitMark(kindHandled, p, p.handled); err != nil {
				return err
			}
		}
	}
	w.dirty = w.dirty[:0]
	if err := w.writeBuffered(); err != nil {
		return err
	}
	// Before the fsync: it makes the rename, the new index and the segment
	// under its own name durable before any later checkpoint lists it.
	if err := w.finishCompaction(); err != nil {
		return err
	}
	durable := w.opt.Sync == SyncNone
	if forceSync || w.opt.Sync == SyncBatch ||
		(w.opt.Sync == SyncInterval && w.lastNow-w.lastSync >= w.opt.SyncInterval.Milliseconds()) {
		if err := w.syncAll(); err != nil {
			return err
		}
		durable = true
	}
	if !durable {
		return nil
	}
	for _, p := range w.parts {
		p.durable = p.handled
	}
	if w.sinceCkpt >= w.ckptEvery || w.compactWaits() {
		if err := w.writeCheckpoint(); err != nil {
			return err
		}
	}
	if w.sinceReclaim >= reclaimEvery || (w.pending == 0 && len(w.segs) > 1) {
		if err := w.reclaim(); err != nil {
			return err
		}
	}
	w.startCompaction()
	return nil
}

// emitDones writes the buffered done marks of p.
func (w *Wheel) emitDones(p *partState) error {
	if len(p.dones) == 0 {
		return nil
	}
	d := p.dones // in hand-out order: not sorting them is cheaper
	const perRecord = 1 << 16
	for len(d) > 0 {
		n := min(len(d), perRecord)
		size := markHeaderSize
		for i := 1; i < n; i++ {
			size += varintLen(d[i] - d[i-1])
		}
		if err := w.ensureRoom(alignUp(size)); err != nil {
			return err
		}
		before := len(w.wbuf)
		w.wbuf = appendMark(w.wbuf, kindDone, p.id, p.epoch, 0, d[:n])
		w.sinceCkpt += int64(len(w.wbuf) - before)
		d = d[n:]
	}
	p.dones = p.dones[:0]
	return nil
}

func (w *Wheel) emitMark(kind byte, p *partState, value int64) error {
	if err := w.ensureRoom(markHeaderSize); err != nil {
		return err
	}
	w.wbuf = appendMark(w.wbuf, kind, p.id, p.epoch, value, nil)
	w.sinceCkpt += markHeaderSize
	return nil
}

// ensureRoom rolls the active segment if n more bytes would not fit.
func (w *Wheel) ensureRoom(n int) error {
	a := w.active
	end := a.size + int64(len(w.wbuf))
	if end+int64(n) > w.segBytes && end > segHeaderSize {
		return w.roll(n)
	}
	if end+int64(n) > int64(len(a.data)) { // one record larger than a segment
		if err := w.writeBuffered(); err != nil {
			return err
		}
		return a.remap(int(end)+n, false)
	}
	return nil
}

// roll seals the active segment and starts the next one.
func (w *Wheel) roll(n int) error {
	if err := w.writeBuffered(); err != nil {
		return err
	}
	a := w.active
	a.ranges = a.ranges[:0]
	for _, p := range w.parts {
		if p.segID == a.id {
			a.ranges = append(a.ranges, partRange{p.id, p.segMin, p.segMax})
		}
	}
	a.laidOut = a.grouped() // noted in its index: a restart does not compact it either
	if err := writeIdx(w.dir, a, w.g, w.heads); err != nil {
		return err
	}
	if !a.laidOut {
		w.queueCompaction(a.id)
	}
	// Map exactly what is there. Not populated, because filling the page
	// tables of every sealed segment would count all of them in the relay's
	// RSS; pages come in as their slots fire, and the kernel may reclaim
	// them.
	if mappedWrites {
		if err := a.remap(int(a.size), false); err != nil {
			return err
		}
	}
	ns, err := createSegment(w.dir, a.id+1, w.g, max(int(w.segBytes), segHeaderSize+n))
	if err != nil {
		return err
	}
	w.segs = append(w.segs, ns)
	w.active = ns
	clear(w.heads)
	w.dirDirty = true
	return nil
}

func (w *Wheel) writeBuffered() error {
	if len(w.wbuf) == 0 {
		return nil
	}
	if err := w.active.write(w.wbuf); err != nil {
		return err
	}
	if cap(w.wbuf) > 4*writeAhead {
		w.wbuf = nil
	} else {
		w.wbuf = w.wbuf[:0]
	}
	return nil
}

func (w *Wheel) syncAll() error {
	if err := w.awaitSyncer(); err != nil {
		return err
	}
	for _, s := range w.segs {
		if err := s.sync(); err != nil {
			return err
		}
	}
	if w.dirDirty {
		if err := syncDir(w.dir); err != nil {
			return err
		}
		w.dirDirty = false
	}
	w.lastSync = w.lastNow
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("wheel: sync dir: %w", err)
	}
	err = fsync(d)
	if e := d.Close(); err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("wheel: sync dir %s: %w", dir, err)
	}
	return nil
}

// reclaim deletes sealed segments none of whose entries is pending. They
// are deleted after a checkpoint that lies past them and no longer lists
// them: recovery replays the marks after the checkpoint and checks that the
// sealed segments it lists are whole.
func (w *Wheel) reclaim() error {
	w.sinceReclaim = 0
	free := w.freeSegments()
	if j := w.job; j != nil && slices.Contains(free, j.seg) {
		w.stopCompaction() // nothing left in it worth compacting
	}
	if len(free) == 0 {
		return nil
	}
	// the checkpoint must no longer list them before they go
	if err := w.writeCheckpoint(free...); err != nil {
		return err
	}
	var errs []error
	for _, s := range free {
		errs = append(errs, s.remove(w.dir))
	}
	w.segs = slices.DeleteFunc(w.segs, func(s *segment) bool { return slices.Contains(free, s) })
	// a scan under way (Stage) walks no chain of a segment removed: none
	// of its entries is pending
	w.cursors = slices.DeleteFunc(w.cursors, func(c chainCursor) bool { return slices.Contains(free, c.seg) })
	w.dirDirty = true
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("wheel: reclaim: %w", err)
	}
	return nil
}

// freeSegments returns the sealed segments none of whose entries is
// pending.
func (w *Wheel) freeSegments() []*segment {
	var free []*segment
	for _, s := range w.segs[:len(w.segs)-1] {
		if w.segFree(s) {
			free = append(free, s)
		}
	}
	return free
}

func (w *Wheel) segFree(s *segment) bool {
	for _, r := range s.ranges {
		if p := w.parts[r.part]; p != nil && p.pending.anyIn(r.min, r.max) {
			return false
		}
	}
	return true
}

// SegmentCount returns the number of segment files, for metrics and tests.
func (w *Wheel) SegmentCount() int { return len(w.segs) }

// Close flushes, fsyncs, writes a checkpoint and releases the directory.
// Entries handed out but not done come back on the next Open.
func (w *Wheel) Close() error {
	if w.closed {
		return ErrClosed
	}
	w.stopCompaction()
	var err error
	if w.err == nil {
		err = w.flush(true)
		if err == nil && w.pending == 0 && len(w.segs) > 1 {
			err = w.reclaim()
		}
		if err == nil {
			saved := w.opt.Sync
			w.opt.Sync = SyncBatch // Close always syncs its checkpoint
			err = w.writeCheckpoint()
			w.opt.Sync = saved
		}
		if err == nil && w.dirDirty {
			err = syncDir(w.dir)
		}
	}
	err = errors.Join(err, w.closeFiles())
	w.closed = true
	return err
}

func (w *Wheel) closeFiles() error {
	w.stopCompaction()
	errs := []error{w.waitRetired(), w.awaitSyncer()}
	for _, s := range w.segs {
		errs = append(errs, s.close())
	}
	w.segs, w.active = nil, nil
	errs = append(errs, w.q.close())
	if w.lock != nil {
		errs = append(errs, w.lock.Close())
		w.lock = nil
	}
	return errors.Join(errs...)
}
