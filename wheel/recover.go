package wheel

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Open opens the wheel in dir, creating dir if needed, and recovers it.
//
// Recovery loads the newest valid checkpoint and replays the log after it:
// work proportional to the tail written since the last checkpoint, not to
// the pending entries. A torn or corrupt tail is found by checksum and cut
// off; the entries that can still be identified in it are reported (Lost,
// LostRanges) and their partitions' Handled watermarks lowered below them,
// so that the relay reads them again from Kafka. Files that are corrupt or
// not the wheel's own are reported in Report.Problems and moved aside
// (renamed *.bad) or cut; without a usable checkpoint the wheel rebuilds
// itself from every segment and forgets all watermarks (Handled returns -1),
// so the relay restarts from the Kafka commit. Open fails only when the
// directory is unusable (permissions, I/O errors, locked by another
// process), never because of its content.
//
// now is the current time in unix milliseconds.
func Open(dir string, opt Options, now int64) (*Wheel, Report, error) {
	var rep Report
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, rep, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, rep, fmt.Errorf("wheel: open: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, rep, fmt.Errorf("wheel: open: %w", err)
	}
	if err := lockDir(lock); err != nil {
		lock.Close()
		return nil, rep, err
	}
	w := &Wheel{
		dir:      dir,
		opt:      opt,
		horizon:  opt.Horizon.Milliseconds(),
		segBytes: opt.SegmentBytes,
		lock:     lock,
		parts:    map[int32]*partState{},
		lastNow:  now,
		lastSync: now,
	}
	w.ckptEvery = min(max(opt.SegmentBytes/4, 256<<10), 16<<20)
	w.q.dir = dir
	r := &recovery{w: w, rep: &rep, now: now, minTick: math.MaxInt64}
	if err := r.run(); err != nil {
		w.closeFiles()
		return nil, rep, err
	}
	for _, s := range w.segs {
		release(s.data) // what recovery read
	}
	rep.Recovered = w.pending
	rep.Problems = append(rep.Problems, w.problems...)
	w.problems = nil
	return w, rep, nil
}

type recovery struct {
	w       *Wheel
	rep     *Report
	now     int64
	minTick int64 // lowest tick of the replayed live entries
	maxID   uint32
	bad     []uint32 // segment ids moved aside
	lost    []lostEntry
	chains  int // chain mismatches seen
}

type lostEntry struct {
	part  int32
	epoch uint32
	off   int64
}

func (r *recovery) problem(format string, args ...any) {
	r.rep.Problems = append(r.rep.Problems, fmt.Sprintf(format, args...))
}

// moveAside renames a file the wheel cannot use to *.bad.
func (r *recovery) moveAside(path, why string) error {
	if err := os.Rename(path, path+".bad"); err != nil {
		return fmt.Errorf("wheel: move aside %s: %w", path, err)
	}
	r.problem("%s: %s; moved aside to %s.bad", filepath.Base(path), why, filepath.Base(path))
	return nil
}

func (r *recovery) run() error {
	w := r.w
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("wheel: open: %w", err)
	}
	var ids []uint32
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == spillName || strings.HasSuffix(name, compactSuffix):
			os.Remove(filepath.Join(w.dir, name)) // a compaction cut short
		case strings.HasSuffix(name, ".seg") && len(name) == 12 && e.Type().IsRegular():
			id, err := strconv.ParseUint(name[:8], 16, 32)
			if err == nil && id > 0 {
				ids = append(ids, uint32(id))
				r.maxID = max(r.maxID, uint32(id))
			}
		}
	}
	slices.Sort(ids)

	cp, err := r.loadCheckpoints()
	if err != nil {
		return err
	}
	want := w.opt.geometry()
	w.g = want
	if cp != nil {
		w.g = cp.g
		r.maxID = max(r.maxID, cp.seg)
	}
	segs, err := r.openSegments(ids, cp != nil)
	if err != nil {
		return err
	}
	if w.g != want {
		r.problem("keeping the directory's tick %dms and %d slots (options ask for %dms and %d)",
			w.g.tick, w.g.nslots, want.tick, want.nslots)
	}
	w.q.width = w.g.tick
	w.heads = make([]uint32, w.g.nslots)
	w.sum = make([]span, w.g.nslots)
	for i := range w.sum {
		w.sum[i] = emptySpan()
	}

	normal := cp != nil && r.canReplay(cp, segs)
	if normal {
		segs, err = r.replayCheckpoint(cp, segs)
		if err != nil {
			return err
		}
		w.cur = min(cp.restart, r.minTick)
	} else {
		if cp != nil || len(segs) > 0 || len(r.bad) > 0 {
			r.problem("no usable checkpoint: rebuilt from %d segment(s); watermarks forgotten, entries done before may come out again", len(segs))
		}
		w.resetState()
		segs, err = r.rebuild(segs)
		if err != nil {
			return err
		}
		w.cur = min(r.minTick, w.tickOf(r.now))
		for _, p := range w.parts {
			p.handled, p.durable = -1, -1
		}
	}
	if r.chains > 0 {
		r.problem("%d entries did not continue their slot chain", r.chains)
	}
	if err := r.finish(segs); err != nil {
		return err
	}
	r.reportLost()
	// Start from a fresh checkpoint so that the cut and the rebuilt indexes
	// are not replayed again.
	if err := w.syncAll(); err != nil {
		return err
	}
	saved := w.opt.Sync
	w.opt.Sync = SyncBatch
	err = w.writeCheckpoint()
	w.opt.Sync = saved
	if err != nil {
		return err
	}
	return syncDir(w.dir)
}

func (w *Wheel) resetState() {
	w.parts = map[int32]*partState{}
	w.dense, w.last = nil, nil
	w.pending = 0
	for i := range w.sum {
		w.sum[i] = emptySpan()
	}
	clear(w.heads)
}

// loadCheckpoints returns the newest valid checkpoint, nil if none.
func (r *recovery) loadCheckpoints() (*checkpoint, error) {
	var best *checkpoint
	for i := range uint64(2) {
		r.w.ckptSegs[i] = math.MaxUint32 // no file: it cannot replay anything
		path := ckptPath(r.w.dir, i)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("wheel: open: %w", err)
		}
		c, err := decodeCheckpoint(b)
		if err != nil {
			if err := r.moveAside(path, err.Error()); err != nil {
				return nil, err
			}
			continue
		}
		r.w.ckptSegs[i] = c.seg
		if best == nil || c.gen > best.gen {
			best = c
		}
	}
	if best != nil {
		r.w.ckptGen = best.gen
	}
	return best, nil
}

// openSegments opens and maps every segment with a valid header and moves
// the others aside. Without a checkpoint the first valid segment sets the
// geometry.
func (r *recovery) openSegments(ids []uint32, haveGeometry bool) ([]*segment, error) {
	w := r.w
	var segs []*segment
	for _, id := range ids {
		path := segPath(w.dir, id)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			closeAll(segs)
			return nil, fmt.Errorf("wheel: open: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			closeAll(segs)
			return nil, fmt.Errorf("wheel: open: %w", err)
		}
		hdr := make([]byte, segHeaderSize)
		n, _ := f.ReadAt(hdr, 0)
		g, compacted, herr := decodeSegHeader(hdr[:n], id)
		if herr == nil && compacted != 0 && int64(compacted) != st.Size() {
			herr = fmt.Errorf("compacted segment of %d bytes, its header says %d", st.Size(), compacted)
		}
		if herr == nil && haveGeometry && g != w.g {
			herr = fmt.Errorf("geometry tick %dms slots %d differs from the checkpoint's", g.tick, g.nslots)
		}
		if herr == nil && st.Size() > maxSegmentSize+MaxPayload+segHeaderSize {
			herr = fmt.Errorf("segment of %d bytes is too large", st.Size())
		}
		if herr != nil {
			f.Close()
			r.bad = append(r.bad, id)
			r.rep.Truncated += st.Size()
			if st.Size() <= segHeaderSize { // torn while being created
				r.problem("%s: %v; removed", filepath.Base(path), herr)
				if err := os.Remove(path); err != nil {
					closeAll(segs)
					return nil, fmt.Errorf("wheel: open: %w", err)
				}
			} else if err := r.moveAside(path, herr.Error()); err != nil {
				closeAll(segs)
				return nil, err
			}
			os.Remove(idxPath(w.dir, id))
			continue
		}
		if !haveGeometry {
			w.g, haveGeometry = g, true
		}
		s := newSegmentState(id, path)
		s.f, s.size, s.compacted = f, st.Size(), compacted != 0
		if s.data, err = mapFile(f, int(s.size), false); err != nil {
			f.Close()
			closeAll(segs)
			return nil, err
		}
		segs = append(segs, s)
	}
	return segs, nil
}

func closeAll(segs []*segment) {
	for _, s := range segs {
		s.close()
	}
}

// canReplay reports whether the checkpoint can be used: its segment is
// there, nothing before it was lost, and every sealed segment before it has
// a valid index or can be indexed again.
func (r *recovery) canReplay(cp *checkpoint, segs []*segment) bool {
	for _, id := range r.bad {
		if id < cp.seg {
			return false
		}
	}
	found := false
	for _, s := range segs {
		if s.id == cp.seg {
			found = int64(cp.off) <= s.size
			break
		}
	}
	if !found {
		r.problem("checkpoint position %d:%d is not in the log", cp.seg, cp.off)
		return false
	}
	have := map[uint32]bool{}
	for _, s := range segs {
		if s.id >= cp.seg {
			if s.compacted { // compaction waits for both checkpoints to pass a segment
				r.problem("segment %d is compacted but the checkpoint replays it", s.id)
				return false
			}
			continue
		}
		have[s.id] = true
		// A compacted segment checks its own size (its header); the
		// checkpoint may predate the compaction.
		if want, ok := cp.sealed[s.id]; ok && want != s.size && !s.compacted {
			r.problem("segment %d is %d bytes, the checkpoint says %d", s.id, s.size, want)
			return false
		}
	}
	for id := range cp.sealed {
		if !have[id] {
			r.problem("segment %d is missing", id)
			return false
		}
	}
	for _, s := range segs {
		if s.id >= cp.seg {
			break
		}
		if err := loadIdx(r.w.dir, s, r.w.g); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			r.problem("%s: %v; indexing the segment again", filepath.Base(idxPath(r.w.dir, s.id)), err)
		}
		if !r.reindex(s) {
			return false
		}
	}
	return true
}

// reindex rebuilds the index of a sealed segment by reading it.
func (r *recovery) reindex(s *segment) bool {
	w := r.w
	heads := make([]uint32, w.g.nslots)
	ranges := map[int32]partRange{}
	s.minDue, s.maxDue, s.entries = math.MaxInt64, math.MinInt64, 0
	pos := int64(segHeaderSize)
	for pos < s.size {
		kind, size, ok := parseRecord(s.data[pos:s.size])
		if !ok || pos+int64(alignUp(size)) > s.size {
			r.problem("segment %d: bad record at %d in a sealed segment", s.id, pos)
			return false
		}
		if kind == kindEntry {
			h := decodeEntryHeader(s.data[pos:])
			heads[w.slotOf(w.tickOf(h.due))] = uint32(pos)
			s.noteEntry(h.due)
			pr, ok := ranges[h.part]
			if !ok {
				pr = partRange{h.part, h.off, h.off}
			}
			pr.min, pr.max = min(pr.min, h.off), max(pr.max, h.off)
			ranges[h.part] = pr
		}
		pos += int64(alignUp(size))
	}
	s.ranges = s.ranges[:0]
	for _, pr := range ranges {
		s.ranges = append(s.ranges, pr)
	}
	if err := writeIdx(w.dir, s, w.g, heads); err != nil {
		r.problem("segment %d: %v", s.id, err)
		return false
	}
	return true
}

// replayCheckpoint restores the checkpoint and replays the log after it.
// The first record that fails its checksum ends the log: it and everything
// after it are cut off.
func (r *recovery) replayCheckpoint(cp *checkpoint, segs []*segment) ([]*segment, error) {
	w := r.w
	for _, p := range cp.parts {
		w.setPart(p)
	}
	w.pending = cp.pendingSum
	copy(w.sum, cp.sum)
	w.ckptSeg = cp.seg
	var kept []*segment
	for _, s := range segs {
		if s.id < cp.seg {
			kept = append(kept, s)
		}
	}
	rest := segs[len(kept):]
	for i, s := range rest {
		from := int64(segHeaderSize)
		if s.id == cp.seg {
			from = int64(cp.off)
			copy(w.heads, cp.heads)
			s.minDue, s.maxDue, s.entries = cp.minDue, cp.maxDue, cp.entries
			for _, pr := range cp.ranges {
				p := w.part(pr.part)
				p.segID, p.segMin, p.segMax = s.id, pr.min, pr.max
			}
		} else if s.id != kept[len(kept)-1].id+1 {
			r.problem("segment %d missing: the log ends at segment %d", kept[len(kept)-1].id+1, kept[len(kept)-1].id)
			r.cut(nil, 0, rest[i:])
			return kept, nil
		} else {
			clear(w.heads)
		}
		end, clean := r.replay(s, from)
		kept = append(kept, s)
		if !clean {
			r.problem("segment %d: log cut at offset %d of %d", s.id, end, s.size)
			r.cut(s, end, rest[i+1:])
			return kept, nil
		}
		if i < len(rest)-1 {
			if err := r.seal(s); err != nil {
				return nil, err
			}
		}
	}
	return kept, nil
}

// rebuild replays every segment from its start. A bad record cuts its
// segment; the following segments are still replayed.
func (r *recovery) rebuild(segs []*segment) ([]*segment, error) {
	w := r.w
	for i, s := range segs {
		clear(w.heads)
		end, clean := r.replay(s, segHeaderSize)
		if !clean {
			r.problem("segment %d: cut at offset %d of %d", s.id, end, s.size)
			r.cut(s, end, nil)
		}
		if i < len(segs)-1 {
			if err := r.seal(s); err != nil {
				return nil, err
			}
		}
	}
	return segs, nil
}

// seal writes the index of a replayed segment that is not the last one.
func (r *recovery) seal(s *segment) error {
	w := r.w
	s.ranges = s.ranges[:0]
	for _, p := range w.parts {
		if p.segID == s.id {
			s.ranges = append(s.ranges, partRange{p.id, p.segMin, p.segMax})
		}
	}
	s.dirty = true
	return writeIdx(w.dir, s, w.g, w.heads)
}

// replay applies the records of s from offset from. It returns where the
// valid records end and whether they reach the end of the file.
func (r *recovery) replay(s *segment, from int64) (int64, bool) {
	pos := from
	for pos < s.size {
		kind, size, ok := parseRecord(s.data[pos:s.size])
		if !ok || pos+int64(alignUp(size)) > s.size {
			return pos, false
		}
		rec := s.data[pos : pos+int64(size)]
		if kind == kindEntry {
			r.applyEntry(s, uint32(pos), rec)
		} else {
			r.applyMark(decodeMark(rec, size))
		}
		pos += int64(alignUp(size))
	}
	return pos, true
}

func (r *recovery) applyEntry(s *segment, pos uint32, rec []byte) {
	w := r.w
	h := decodeEntryHeader(rec)
	t := w.tickOf(h.due)
	slot := w.slotOf(t)
	if h.prev != w.heads[slot] {
		r.chains++
	}
	w.heads[slot] = pos
	s.noteEntry(h.due)
	if h.part < 0 || h.off < 0 || h.due < 0 {
		return
	}
	p := w.part(h.part)
	if h.epoch < p.epoch {
		return // dropped
	}
	if h.epoch > p.epoch { // its Drop was lost
		w.pending -= p.pending.count
		p.drop(h.epoch)
	}
	if p.pending.add(h.off) {
		w.pending++
	}
	p.high = max(p.high, h.off)
	p.noteSegment(s.id, h.off)
	w.sum[slot].extend(h.due)
	r.minTick = min(r.minTick, t)
}

func (r *recovery) applyMark(m mark) {
	w := r.w
	if m.part < 0 {
		return
	}
	p := w.part(m.part)
	if m.epoch < p.epoch {
		return
	}
	if m.epoch > p.epoch {
		w.pending -= p.pending.count
		p.drop(m.epoch)
	}
	switch m.kind {
	case kindDone:
		m.doneOffsets(func(off int64) {
			if p.pending.remove(off) {
				w.pending--
			}
		})
	case kindTrim:
		w.pending -= p.pending.removeBelow(m.value)
	case kindHandled:
		p.handled, p.durable = m.value, m.value
	}
}

// cut truncates s at end (s may be nil) and removes the segments after it,
// collecting the entries that can still be read there as lost.
func (r *recovery) cut(s *segment, end int64, after []*segment) {
	w := r.w
	w.blocks.forget() // what readActive read may be cut
	if s != nil {
		r.suspect(s, end)
		r.salvage(s, end+recordAlign)
		r.rep.Truncated += s.size - end
		if err := s.f.Truncate(end); err != nil {
			w.problem("segment %d: truncate: %v", s.id, err)
		}
		if s.compacted { // its header holds its size
			if _, err := s.f.WriteAt(encodeSegHeader(s.id, w.g, uint32(end)), 0); err != nil {
				w.problem("segment %d: header: %v", s.id, err)
			}
		}
		s.size = end
		s.dirty = true
	}
	for _, a := range after {
		r.salvage(a, segHeaderSize)
		r.rep.Truncated += a.size
		if err := a.remove(w.dir); err != nil {
			w.problem("segment %d: remove: %v", a.id, err)
		}
		w.dirDirty = true
	}
}

// suspect counts the record where the log was cut as lost when its header
// still names a known partition: the watermark then comes down below it
// too. A wrong guess only makes the relay read more again.
func (r *recovery) suspect(s *segment, at int64) {
	if at+entryHeaderSize > s.size || s.data[at+8] != kindEntry {
		return
	}
	h := decodeEntryHeader(s.data[at:])
	if p := r.w.parts[h.part]; p != nil && h.off >= 0 && h.epoch == p.epoch {
		r.lost = append(r.lost, lostEntry{h.part, h.epoch, h.off})
	}
}

// salvage scans s from offset from for records that still pass their
// checksum, resynchronising on the record alignment.
func (r *recovery) salvage(s *segment, from int64) {
	pos := int64(alignUp(int(from)))
	for pos+markHeaderSize <= s.size {
		kind, size, ok := parseRecord(s.data[pos:s.size])
		if !ok {
			pos += recordAlign
			continue
		}
		if kind == kindEntry {
			h := decodeEntryHeader(s.data[pos:])
			if h.part >= 0 && h.off >= 0 {
				r.lost = append(r.lost, lostEntry{h.part, h.epoch, h.off})
			}
		}
		pos += int64(alignUp(size))
	}
}

// finish makes the last segment the active one, indexes are in place for
// the others.
func (r *recovery) finish(segs []*segment) error {
	w := r.w
	w.segs = segs
	if len(segs) == 0 {
		s, err := createSegment(w.dir, r.maxID+1, w.g, int(w.segBytes))
		if err != nil {
			return err
		}
		w.segs = []*segment{s}
		w.dirDirty = true
		clear(w.heads)
	}
	if last := w.segs[len(w.segs)-1]; last.compacted {
		// Only a rebuild ends on a compacted segment (the ones after it
		// were lost). Its size is final: seal it and start a new one.
		if err := r.seal(last); err != nil {
			return err
		}
		s, err := createSegment(w.dir, max(r.maxID, last.id)+1, w.g, int(w.segBytes))
		if err != nil {
			return err
		}
		w.segs = append(w.segs, s)
		w.dirDirty = true
		clear(w.heads)
	}
	a := w.segs[len(w.segs)-1]
	if a.idx != nil {
		unmapFile(a.idx)
		a.idx = nil
	}
	if a.idxFile != nil {
		a.idxFile.Close()
		a.idxFile = nil
	}
	if err := os.Remove(idxPath(w.dir, a.id)); err == nil {
		w.dirDirty = true
	}
	a.sealed, a.ranges = false, nil
	if err := a.remap(int(max(a.size, w.segBytes)), false); err != nil {
		return err
	}
	w.active = a
	for _, s := range w.segs[:len(w.segs)-1] {
		if !s.compacted && !s.laidOut { // laidOut: grouped when sealed (its index says so)
			w.queueCompaction(s.id)
		}
	}
	if w.ckptSeg == 0 {
		w.ckptSeg = a.id
	}
	return nil
}

// reportLost turns the salvaged entries that are not pending into the
// report and lowers the watermarks below them.
func (r *recovery) reportLost() {
	w := r.w
	var lost []Range
	for _, e := range r.lost {
		p := w.parts[e.part]
		if p != nil && (e.epoch < p.epoch || (e.epoch == p.epoch && p.pending.has(e.off))) {
			continue
		}
		lost = append(lost, Range{e.part, e.off, e.off})
	}
	r.rep.Lost = int64(len(lost))
	if len(lost) == 0 {
		return
	}
	slices.SortFunc(lost, func(a, b Range) int {
		if a.Partition != b.Partition {
			return int(a.Partition) - int(b.Partition)
		}
		return cmpInt64(a.From, b.From)
	})
	merged := lost[:1]
	for _, x := range lost[1:] {
		m := &merged[len(merged)-1]
		if x.Partition == m.Partition && x.From <= m.To+1 {
			m.To = max(m.To, x.To)
			continue
		}
		merged = append(merged, x)
	}
	const maxRanges = 1000
	if len(merged) > maxRanges { // coarsen to one range per partition
		coarse := merged[:1]
		for _, x := range merged[1:] {
			m := &coarse[len(coarse)-1]
			if x.Partition == m.Partition {
				m.To = max(m.To, x.To)
				continue
			}
			coarse = append(coarse, x)
		}
		merged = coarse
	}
	r.rep.LostRanges = slices.Clone(merged)
	for _, x := range merged {
		p := w.part(x.Partition)
		if p.handled >= x.From {
			p.handled, p.durable = x.From-1, x.From-1
		}
	}
	r.problem("%d entries lost in the cut-off tail, in %d range(s); watermarks lowered below them", len(lost), len(merged))
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
