package wheel

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

// Compaction. A log segment holds its entries in the order they were added,
// so the entries of one tick lie scattered over the whole segment: every
// entry Expire reads costs a cache miss, a TLB miss and often a page fault,
// and over an hour every page of every segment gets mapped (resident). A
// background goroutine therefore rewrites each sealed segment with its
// entries grouped by slot, slot after slot: the chain of a slot becomes one
// contiguous run of records, and consecutive ticks are neighbours in the
// file, so Expire reads each segment almost sequentially.
//
// The rewrite keeps the segment's id, record format and index format: every
// entry is copied (done or not: the copy is the same set of entries, so
// nothing that recovery may need is lost), only the prev links and
// checksums change, and the marks are left out. Marks in a sealed segment
// are only read by a rebuild without a usable checkpoint (which already
// forgets watermarks and may hand out entries done before); a checkpoint
// replays the log after its position only. Hence the rule that a compacted
// segment replaces the original only once both checkpoint files lie past it
// (a torn newest checkpoint falls back to the older one, which must not
// replay the segment either).
//
// Steps: the goroutine writes NNNNNNNN.seg.tmp and fsyncs it (not under
// SyncNone); the wheel, in Flush, renames it over the segment, maps it,
// writes its index, fixes the positions of already scanned entries (tick
// queue and late heap) and marks the segment and directory for the next
// fsync. A crash before the rename leaves the original and a .tmp that Open
// removes; after it, the compacted segment, whose header carries its exact
// size, and an index that Open rebuilds if it is stale.

const (
	compactSuffix = ".seg.tmp"
	gatherAhead   = 64 // records touched ahead of the copy
)

type compactJob struct {
	seg   *segment // sealed: immutable while the job runs
	g     geometry
	sync  bool
	path  string
	abort atomic.Bool
	done  chan struct{}

	// set by the goroutine before done is closed
	size    int64
	heads   []uint32
	err     error // I/O error
	bad     string
	cpu     time.Duration // CPU time of the goroutine's thread (Linux)
	entries int64
	touched byte // keeps the early loads
}

// A sealed segment counts as grouped, and is not compacted, when its ticks
// already read as a few runs of records each, as they would from the
// compacted copy: rewriting it would only cost a read and a write of the
// whole segment (and map all of it into the process while it runs). Two
// shapes are grouped:
//
//   - slot chains in at most groupedRuns runs on average (runs: entries
//     appended one after the other to the same chain), with at least
//     groupedChain entries each: entries due together (a burst) or dense
//     in due order;
//   - entries added in due order in stretches of groupedAscending or more
//     on average (a descent: an entry due at an earlier tick than the one
//     added before it): the partitions of a preload or of a read ahead,
//     each in due order, read in turn a fetched batch at a time. Their
//     ticks lie in one run per stretch that covers them, and consecutive
//     ticks lie next to each other, which is what compaction would make of
//     them; compacting sparse due times there (chains shorter than
//     groupedChain) would read a whole segment for nothing.
//
// Random due times make runs of one entry and stretches of two: those
// segments are compacted, and there the copy puts the entries of
// consecutive ticks next to each other.
const (
	groupedRuns      = 2
	groupedChain     = 4
	groupedAscending = 16
)

// grouped reports whether s, the segment being sealed, is grouped (see
// groupedRuns). A segment that holds entries this process did not add
// (recovered) is not known to be grouped.
func (s *segment) grouped() bool {
	if s.chains == 0 || s.added != s.entries {
		return false
	}
	dense := s.runs <= groupedRuns*s.chains && s.added >= groupedChain*s.chains
	ordered := s.added >= groupedAscending*(s.descents+1)
	return dense || ordered
}

// queueCompaction asks for segment id to be compacted.
func (w *Wheel) queueCompaction(id uint32) {
	if !w.opt.NoCompaction {
		w.compactQ = append(w.compactQ, id)
	}
}

// startCompaction starts the next queued compaction unless one is running.
func (w *Wheel) startCompaction() {
	for w.job == nil && len(w.compactQ) > 0 {
		id := w.compactQ[0]
		w.compactQ = w.compactQ[1:]
		s := w.segment(id)
		if s == nil || s == w.active || !s.sealed || s.compacted {
			continue
		}
		j := &compactJob{
			seg:  s,
			g:    w.g,
			sync: w.opt.Sync != SyncNone,
			path: s.path[:len(s.path)-len(".seg")] + compactSuffix,
			done: make(chan struct{}),
		}
		w.job = j
		go j.run()
	}
}

// finishCompaction installs a finished compaction when the checkpoints
// allow it. It does not block.
func (w *Wheel) finishCompaction() error {
	if err := w.pollRetired(); err != nil {
		return err
	}
	j := w.job
	if j == nil {
		return nil
	}
	select {
	case <-j.done:
	default:
		return nil
	}
	if w.segment(j.seg.id) != j.seg || j.err != nil || j.bad != "" {
		w.job = nil
		os.Remove(j.path)
		if j.bad != "" {
			w.problem("segment %d: not compacted: %s", j.seg.id, j.bad)
		}
		if j.err != nil {
			return fmt.Errorf("wheel: compact segment %d: %w", j.seg.id, j.err)
		}
		return nil
	}
	if !w.compactable(j.seg) || w.q.spilled || w.sc.on {
		return nil // wait for the checkpoints, for the spilled tick to drain, or for the scan under way
	}
	w.job = nil
	return w.install(j)
}

// compactable reports whether both checkpoint files lie past s.
func (w *Wheel) compactable(s *segment) bool {
	return s.id < w.ckptSegs[0] && s.id < w.ckptSegs[1]
}

// compactWaits reports whether a finished compaction waits for a checkpoint.
func (w *Wheel) compactWaits() bool {
	if w.job == nil {
		return false
	}
	select {
	case <-w.job.done:
		return w.job.err == nil && w.job.bad == "" && !w.compactable(w.job.seg)
	default:
		return false
	}
}

// install replaces s by its compacted copy.
func (w *Wheel) install(j *compactJob) error {
	s := j.seg
	if err := os.Rename(j.path, s.path); err != nil {
		os.Remove(j.path)
		return fmt.Errorf("wheel: compact: %w", err)
	}
	w.dirDirty = true
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("wheel: compact: %w", err)
	}
	data, err := mapFile(f, int(j.size), false)
	if err != nil {
		f.Close()
		return err
	}
	if err := w.waitRetired(); err != nil {
		f.Close()
		unmapFile(data)
		return err
	}
	w.retire(s.data, s.f, s.path)
	s.f, s.data, s.size = f, data, j.size
	s.compacted, s.dirty = true, true // the fsync by its own name makes it durable under this name
	if err := writeIdx(w.dir, s, w.g, j.heads); err != nil {
		return err
	}
	w.compacted++
	w.compactEntries += j.entries
	w.compactCPU += j.cpu
	w.relocate(s)
	return nil
}

// retire unmaps and closes, on a goroutine of its own, the mapping and file
// of a segment that a compaction replaced. Closing the last descriptor of
// the renamed-over file evicts its pages from the page cache, and the
// mapping has every page of it mapped (the compaction read them all): both
// cost milliseconds that need not hold up the caller. Its error comes back
// through the next Flush (pollRetired) or Close (waitRetired).
func (w *Wheel) retire(data []byte, f *os.File, path string) {
	done := make(chan error, 1)
	w.retired = done
	go func() {
		err := errors.Join(unmapFile(data), f.Close())
		if err != nil {
			err = fmt.Errorf("wheel: compact: close %s: %w", path, err)
		}
		done <- err
	}()
}

// waitRetired waits for the last retire and returns its error.
func (w *Wheel) waitRetired() error {
	if w.retired == nil {
		return nil
	}
	err := <-w.retired
	w.retired = nil
	return err
}

// pollRetired returns the error of the last retire if it has finished,
// without waiting.
func (w *Wheel) pollRetired() error {
	select {
	case err := <-w.retired: // a nil channel is never ready
		w.retired = nil
		return err
	default:
		return nil
	}
}

// relocate fixes the positions of the scanned and late entries that point
// into s, which was just compacted: their records moved within the file.
func (w *Wheel) relocate(s *segment) {
	want := map[key]uint32{}
	slots := map[int]bool{}
	note := func(c cand) {
		if c.seg == s.id {
			want[c.key()] = 0
			slots[w.slotOf(w.tickOf(c.due))] = true
		}
	}
	for _, c := range w.late {
		note(c)
	}
	for _, c := range w.q.mem[w.q.head:] {
		note(c)
	}
	if len(want) == 0 {
		return
	}
	for slot := range slots {
		pos := s.head(slot)
		for n := int64(0); pos != 0 && n <= s.entries; n++ {
			r := w.view(s, pos)
			if len(r) < entryHeaderSize {
				break
			}
			h := decodeEntryHeader(r)
			k := key{h.due, h.off, h.part}
			if _, ok := want[k]; ok {
				want[k] = pos
			}
			if h.prev >= pos {
				break
			}
			pos = h.prev
		}
	}
	fix := func(c *cand) {
		if c.seg == s.id {
			c.pos = want[c.key()] // 0 if not found: deliver reports it
		}
	}
	for i := range w.late {
		fix(&w.late[i])
	}
	for i := range w.q.mem[w.q.head:] {
		fix(&w.q.mem[w.q.head+i])
	}
}

// stopCompaction stops a running compaction and waits for it.
func (w *Wheel) stopCompaction() {
	if j := w.job; j != nil {
		j.abort.Store(true)
		<-j.done
		os.Remove(j.path)
		w.job = nil
	}
}

var errAborted = errors.New("wheel: compaction aborted")

// run rewrites j.seg grouped by slot into j.path. It reads only the
// segment's mapping and the geometry, both immutable while it runs.
func (j *compactJob) run() {
	defer close(j.done)
	// Its own thread, so that its CPU time can be read (threadCPU); the
	// thread ends with the goroutine.
	runtime.LockOSThread()
	cpu := threadCPU()
	err := j.compact()
	j.cpu = threadCPU() - cpu
	if errors.Is(err, errAborted) {
		err = nil
		j.bad = "aborted"
	}
	j.err = err
}

func (j *compactJob) compact() error {
	s, g := j.seg, j.g
	data := s.data[:s.size]
	n := int64(g.nslots)
	slotOf := func(due int64) uint32 {
		t := floorDiv(due, g.tick)
		m := t % n
		if m < 0 {
			m += n
		}
		return uint32(m)
	}
	// Pass 1, sequential, headers only: every entry's position and slot,
	// and the counts per slot. Checksums are checked in pass 2, before a
	// record is copied: a damaged record stops the compaction there.
	// The arrays are outside the Go heap (allocWords): megabytes for a
	// segment, needed for a moment.
	n0 := max(int(s.entries), 1)
	count, posA, slotA := allocWords(g.nslots+1), allocWords(n0), allocWords(n0)
	defer func() { freeWords(count); freeWords(posA); freeWords(slotA) }()
	pos0, slot0 := posA[:0], slotA[:0]
	out := int64(segHeaderSize)
	for pos := int64(segHeaderSize); pos < s.size; {
		if s.size-pos < markHeaderSize {
			j.bad = fmt.Sprintf("short record at offset %d", pos)
			return nil
		}
		size, kind := int64(le.Uint32(data[pos+4:])), data[pos+8]
		next := pos + int64(alignUp(int(size)))
		if size < markHeaderSize || size > entryHeaderSize+MaxPayload || next > s.size ||
			(kind == kindEntry && size < entryHeaderSize) {
			j.bad = fmt.Sprintf("bad record at offset %d", pos)
			return nil
		}
		if kind != kindEntry {
			// marks are left out: check them in full, so that a damaged
			// entry cannot pass for a mark and be dropped
			if _, _, ok := parseRecord(data[pos:s.size]); !ok {
				j.bad = fmt.Sprintf("bad record at offset %d", pos)
				return nil
			}
		} else {
			sl := slotOf(int64(le.Uint64(data[pos+32:])))
			if len(pos0) == cap(pos0) { // never grow them onto the heap
				j.bad = "more entries than its index counts"
				return nil
			}
			pos0 = append(pos0, uint32(pos))
			slot0 = append(slot0, sl)
			count[sl+1]++
			out += next - pos
		}
		pos = next
		if len(pos0)%65536 == 0 && j.abort.Load() {
			return errAborted
		}
	}
	if out > math.MaxUint32 {
		j.bad = "too large"
		return nil
	}
	// Counting sort by slot, stable: add order inside a slot.
	for i := 1; i <= g.nslots; i++ {
		count[i] += count[i-1]
	}
	order := allocWords(len(pos0))
	defer freeWords(order)
	for i, p := range pos0 {
		order[count[slot0[i]]] = p
		count[slot0[i]]++
	}

	f, err := os.OpenFile(j.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	const bufSize = 1 << 20
	buf := make([]byte, 0, bufSize)
	buf = append(buf, encodeSegHeader(s.id, g, uint32(out))...)
	written := int64(0)
	heads := make([]uint32, g.nslots)
	var crcs prevPatcher
	var touch byte
	last := len(data) - 1
	sl, groupEnd := 0, int(count[0]) // count[s] is now where group s ends
	for i, p := range order {
		if i%gatherAhead == 0 {
			// Touch the next records in a tight loop first: their cache
			// and TLB misses then overlap instead of coming one by one.
			for _, q := range order[i:min(i+gatherAhead, len(order))] {
				touch += data[q] + data[min(int(q)+63, last)] + data[min(int(q)+127, last)]
			}
		}
		for i >= groupEnd {
			sl++
			groupEnd = int(count[sl])
		}
		r := data[p:]
		size := int(le.Uint32(r[4:]))
		padded := alignUp(size)
		if len(buf)+padded > bufSize && len(buf) > 0 {
			if _, err := f.WriteAt(buf, written); err != nil {
				return err
			}
			written += int64(len(buf))
			buf = buf[:0]
			if j.abort.Load() {
				return errAborted
			}
		}
		if le.Uint32(r) != checksum(r[4:size]) {
			j.bad = fmt.Sprintf("checksum of the record at offset %d", p)
			return nil
		}
		npos := uint32(written + int64(len(buf)))
		start := len(buf)
		var zeros [recordAlign]byte
		buf = append(buf, r[:size]...)
		buf = append(buf, zeros[:padded-size]...)
		rec := buf[start : start+size]
		old := le.Uint32(rec[20:])
		le.PutUint32(rec[20:], heads[sl])
		le.PutUint32(rec[0:], crcs.patch(le.Uint32(rec[0:]), rec[4:], old^heads[sl]))
		heads[sl] = npos
	}
	j.touched = touch
	if _, err := f.WriteAt(buf, written); err != nil {
		return err
	}
	if written+int64(len(buf)) != out {
		return fmt.Errorf("compacted %d bytes, expected %d", written+int64(len(buf)), out)
	}
	if j.sync {
		if err := fsync(f); err != nil {
			return err
		}
	}
	err = f.Close()
	f = nil
	if err != nil {
		return err
	}
	j.size, j.heads, j.entries = out, heads, int64(len(order))
	return nil
}

// prevPatcher updates the checksum of an entry record whose prev field
// changed, without reading the record again. CRC-32C is linear: for
// messages of equal length, crc(m xor d) = crc(m) xor raw(d), where raw is
// the CRC without its initial and final inversion, and d is zero but for the
// 4 bytes of prev (at offset 16 of the checksummed part [4, size)). raw(d)
// is linear in those 4 bytes: one table of 4 x 256 values per message
// length, built from 32 basis values. Lengths beyond the first 64 seen are
// checksummed in full.
type prevPatcher struct {
	tables map[int]*[4][256]uint32
	lastN  int
	last   *[4][256]uint32
}

const prevAt = 16 // offset of prev in the checksummed part of an entry

func (pp *prevPatcher) patch(crc uint32, msg []byte, delta uint32) uint32 {
	if delta == 0 {
		return crc
	}
	t := pp.last
	if len(msg) != pp.lastN || t == nil {
		t = pp.table(len(msg))
		pp.lastN, pp.last = len(msg), t
	}
	if t == nil {
		return checksum(msg)
	}
	return crc ^ t[0][byte(delta)] ^ t[1][byte(delta>>8)] ^ t[2][byte(delta>>16)] ^ t[3][byte(delta>>24)]
}

func (pp *prevPatcher) table(n int) *[4][256]uint32 {
	if t, ok := pp.tables[n]; ok {
		return t
	}
	if pp.tables == nil {
		pp.tables = map[int]*[4][256]uint32{}
	}
	if len(pp.tables) >= 64 {
		return nil
	}
	// raw(q) = ^crc32.Update(^0, q): the register without inversions.
	msg := make([]byte, n-prevAt)
	var basis [32]uint32
	for i := range basis {
		clear(msg[:4])
		msg[i/8] = 1 << (i % 8)
		basis[i] = ^crc32.Update(0xFFFFFFFF, castagnoli, msg)
	}
	t := new([4][256]uint32)
	for b := range 4 {
		for x := 1; x < 256; x++ {
			var v uint32
			for bit := range 8 {
				if x&(1<<bit) != 0 {
					v ^= basis[8*b+bit]
				}
			}
			t[b][x] = v
		}
	}
	pp.tables[n] = t
	return t
}
