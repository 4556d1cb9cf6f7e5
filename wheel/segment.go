package wheel

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// A segment is one append-only file of records, NNNNNNNN.seg (hex id), with
// a 32-byte header:
//
//	0 magic "KDWHLSEG"  8 version u32  12 id u32  16 tick ms u32
//	20 slots u32  24 compacted size u32  28 crc32c of [0, 28)
//
// The compacted size is 0 in a segment written by Add (the log). A sealed
// segment rewritten by compaction (compact.go) holds its entries grouped by
// slot and no marks, and its header holds its exact file size, so that a
// cut or extended compacted file is recognised without a checkpoint. The
// field was reserved (always 0) before compaction existed: directories
// written by earlier versions read as they did, and earlier versions read
// a compacted segment as a plain sealed one.
//
// Entries are chained per slot inside their segment only, so a segment can
// be deleted on its own. When a segment is sealed its slot heads are written
// to NNNNNNNN.idx, the segment's fixed slot array:
//
//	0 magic "KDWHLIDX"  8 version u32  12 id u32  16 tick ms u32  20 slots u32
//	24 segment size i64  32 min due i64  40 max due i64  48 entries i64
//	56 ranges u32  60 compacted size u32  64 heads: slots x u32
//	then ranges x {partition i32, min offset i64, max offset i64}, crc32c u32
//
// The top bit of the ranges field (idxGrouped) says that the segment was
// grouped when sealed and is not to be compacted, after a restart too.
// Indexes written before it have the bit clear and read as before; an
// earlier version reads an index with the bit set as damaged and rebuilds
// it from the segment, losing nothing.
const (
	formatVersion  = 1
	segHeaderSize  = 32
	idxHeaderSize  = 64
	rangeSize      = 20
	segMagic       = "KDWHLSEG"
	idxMagic       = "KDWHLIDX"
	maxSegmentSize = 1 << 30
	idxGrouped     = 1 << 31 // flag in the ranges field of an index
)

// geometry is fixed when a wheel directory is created.
type geometry struct {
	tick   int64 // ms
	nslots int
}

// partRange is the offset range one partition added to one segment.
type partRange struct {
	part     int32
	min, max int64
}

type segment struct {
	id     uint32
	path   string
	f      *os.File
	data   []byte // read-only mapping (see mapFile), len(data) >= size
	size   int64  // bytes in the file
	sealed bool
	dirty  bool // written since the last fsync

	compacted bool // rewritten grouped by slot (compact.go); size is final
	// laidOut: grouped when it was sealed (compact.go, grouped), so never
	// compacted; kept in its index (idxGrouped).
	laidOut bool

	readLo, readHi int64 // range of data read since the last releaseMapped

	idx     []byte // sealed: the .idx file (mapped)
	idxFile *os.File

	minDue, maxDue int64 // of the entries in the segment
	entries        int64
	// added counts the entries Add appended to this segment since it was
	// created in this process (a recovered segment's earlier entries are
	// not counted), chains the slot chains they started, runs the runs
	// among them appended one after the other to the same chain, and
	// descents those due at an earlier tick than the entry added before
	// them; lastEntry is the position of the last one, lastTick its tick.
	added, chains, runs, descents int64
	lastEntry                     uint32
	lastTick                      int64
	ranges                        []partRange // sealed only; the active one's are in partState
}

func segPath(dir string, id uint32) string { return filepath.Join(dir, fmt.Sprintf("%08x.seg", id)) }
func idxPath(dir string, id uint32) string { return filepath.Join(dir, fmt.Sprintf("%08x.idx", id)) }

func newSegmentState(id uint32, path string) *segment {
	return &segment{id: id, path: path, minDue: math.MaxInt64, maxDue: math.MinInt64, readLo: math.MaxInt64}
}

// encodeSegHeader returns the header of segment id; compacted is the file
// size of a compacted segment, 0 for a log segment.
func encodeSegHeader(id uint32, g geometry, compacted uint32) []byte {
	b := make([]byte, segHeaderSize)
	copy(b, segMagic)
	le.PutUint32(b[8:], formatVersion)
	le.PutUint32(b[12:], id)
	le.PutUint32(b[16:], uint32(g.tick))
	le.PutUint32(b[20:], uint32(g.nslots))
	le.PutUint32(b[24:], compacted)
	le.PutUint32(b[28:], checksum(b[:28]))
	return b
}

var errBadHeader = errors.New("wheel: bad header")

// decodeSegHeader checks a segment header and returns its geometry and its
// compacted size (0: a log segment).
func decodeSegHeader(b []byte, id uint32) (geometry, uint32, error) {
	if len(b) < segHeaderSize {
		return geometry{}, 0, fmt.Errorf("%w: short segment header", errBadHeader)
	}
	if string(b[:8]) != segMagic {
		return geometry{}, 0, fmt.Errorf("%w: not a wheel segment", errBadHeader)
	}
	if le.Uint32(b[28:]) != checksum(b[:28]) {
		return geometry{}, 0, fmt.Errorf("%w: segment header checksum", errBadHeader)
	}
	if v := le.Uint32(b[8:]); v != formatVersion {
		return geometry{}, 0, fmt.Errorf("%w: segment format version %d, want %d", errBadHeader, v, formatVersion)
	}
	if got := le.Uint32(b[12:]); got != id {
		return geometry{}, 0, fmt.Errorf("%w: segment id %d in file named %d", errBadHeader, got, id)
	}
	g := geometry{tick: int64(le.Uint32(b[16:])), nslots: int(le.Uint32(b[20:]))}
	if g.tick <= 0 || g.nslots < 2 || g.nslots > maxSlots {
		return geometry{}, 0, fmt.Errorf("%w: segment geometry tick %dms slots %d", errBadHeader, g.tick, g.nslots)
	}
	return g, le.Uint32(b[24:]), nil
}

// createSegment creates segment id with room for mapLen bytes.
func createSegment(dir string, id uint32, g geometry, mapLen int) (*segment, error) {
	s := newSegmentState(id, segPath(dir, id))
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wheel: create segment: %w", err)
	}
	if _, err := f.WriteAt(encodeSegHeader(id, g, 0), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("wheel: write segment header %s: %w", s.path, err)
	}
	s.f, s.size, s.dirty = f, segHeaderSize, true
	if s.data, err = mapFile(f, mapLen, false); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// remap maps the segment again with room for mapLen bytes.
func (s *segment) remap(mapLen int, populate bool) error {
	if err := unmapFile(s.data); err != nil {
		return fmt.Errorf("wheel: unmap %s: %w", s.path, err)
	}
	s.data = nil
	var err error
	s.data, err = mapFile(s.f, mapLen, populate)
	return err
}

// write appends b at the end of the file.
func (s *segment) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if _, err := s.f.WriteAt(b, s.size); err != nil {
		return fmt.Errorf("wheel: write %s: %w", s.path, err)
	}
	if !mappedWrites {
		copy(s.data[s.size:], b)
	}
	s.size += int64(len(b))
	s.dirty = true
	return nil
}

func (s *segment) sync() error {
	if s.dirty {
		if err := fsync(s.f); err != nil {
			return fmt.Errorf("wheel: sync %s: %w", s.path, err)
		}
		s.dirty = false
	}
	if s.idxFile != nil {
		if err := fsync(s.idxFile); err != nil {
			return fmt.Errorf("wheel: sync %s: %w", s.idxFile.Name(), err)
		}
		s.idxFile.Close()
		s.idxFile = nil
	}
	return nil
}

// head returns the chain head of slot i in a sealed segment.
func (s *segment) head(i int) uint32 {
	return le.Uint32(s.idx[idxHeaderSize+4*i:])
}

// compactedSize is what the headers of a compacted segment and of its
// index hold: its size, 0 for a log segment.
func (s *segment) compactedSize() uint32 {
	if s.compacted {
		return uint32(s.size)
	}
	return 0
}

// read notes that the record at pos is being read, and returns by how many
// bytes that grew the range read since the last releaseMapped.
func (s *segment) read(pos uint32) int64 { return s.readRange(int64(pos), int64(pos)+1) }

// readRange notes that bytes lo to hi are being read, and returns by how
// many bytes that grew the range read since the last releaseMapped.
func (s *segment) readRange(lo, hi int64) int64 {
	oldLo, oldHi := s.readLo, s.readHi
	s.readLo, s.readHi = min(s.readLo, lo), max(s.readHi, hi)
	if oldHi <= oldLo {
		return s.readHi - s.readLo
	}
	return oldLo - s.readLo + s.readHi - oldHi
}

func (s *segment) noteEntry(due int64) {
	s.minDue = min(s.minDue, due)
	s.maxDue = max(s.maxDue, due)
	s.entries++
}

func (s *segment) close() error {
	var errs []error
	errs = append(errs, unmapFile(s.data), unmapFile(s.idx))
	s.data, s.idx = nil, nil
	if s.idxFile != nil {
		errs = append(errs, s.idxFile.Close())
		s.idxFile = nil
	}
	if s.f != nil {
		errs = append(errs, s.f.Close())
		s.f = nil
	}
	return errors.Join(errs...)
}

// remove closes the segment and deletes its files.
func (s *segment) remove(dir string) error {
	err := s.close()
	if e := os.Remove(s.path); e != nil && !errors.Is(e, os.ErrNotExist) {
		err = errors.Join(err, e)
	}
	if e := os.Remove(idxPath(dir, s.id)); e != nil && !errors.Is(e, os.ErrNotExist) {
		err = errors.Join(err, e)
	}
	return err
}

// encodeIdx builds the .idx file of a sealed segment.
func encodeIdx(s *segment, g geometry, heads []uint32) []byte {
	n := idxHeaderSize + 4*len(heads) + rangeSize*len(s.ranges) + 4
	b := make([]byte, n)
	copy(b, idxMagic)
	le.PutUint32(b[8:], formatVersion)
	le.PutUint32(b[12:], s.id)
	le.PutUint32(b[16:], uint32(g.tick))
	le.PutUint32(b[20:], uint32(g.nslots))
	le.PutUint64(b[24:], uint64(s.size))
	le.PutUint64(b[32:], uint64(s.minDue))
	le.PutUint64(b[40:], uint64(s.maxDue))
	le.PutUint64(b[48:], uint64(s.entries))
	nr := uint32(len(s.ranges))
	if s.laidOut {
		nr |= idxGrouped
	}
	le.PutUint32(b[56:], nr)
	le.PutUint32(b[60:], s.compactedSize())
	p := b[idxHeaderSize:]
	for _, h := range heads {
		le.PutUint32(p, h)
		p = p[4:]
	}
	for _, r := range s.ranges {
		le.PutUint32(p, uint32(r.part))
		le.PutUint64(p[4:], uint64(r.min))
		le.PutUint64(p[12:], uint64(r.max))
		p = p[rangeSize:]
	}
	le.PutUint32(p, checksum(b[:n-4]))
	return b
}

// decodeIdx checks an .idx file against its segment and loads its summary.
func decodeIdx(b []byte, s *segment, g geometry) error {
	if len(b) < idxHeaderSize+4 || string(b[:8]) != idxMagic {
		return fmt.Errorf("%w: not a wheel index", errBadHeader)
	}
	n := len(b)
	if le.Uint32(b[n-4:]) != checksum(b[:n-4]) {
		return fmt.Errorf("%w: index checksum", errBadHeader)
	}
	if le.Uint32(b[8:]) != formatVersion || le.Uint32(b[12:]) != s.id ||
		int64(le.Uint32(b[16:])) != g.tick || int(le.Uint32(b[20:])) != g.nslots {
		return fmt.Errorf("%w: index version, id or geometry", errBadHeader)
	}
	if int64(le.Uint64(b[24:])) != s.size {
		return fmt.Errorf("%w: index covers %d bytes, segment has %d", errBadHeader, int64(le.Uint64(b[24:])), s.size)
	}
	// An index of the segment before its compaction can have the same size
	// (no marks were dropped) but other heads.
	if le.Uint32(b[60:]) != s.compactedSize() {
		return fmt.Errorf("%w: index of the segment before or after its compaction", errBadHeader)
	}
	nr := int(le.Uint32(b[56:]) &^ idxGrouped)
	if n != idxHeaderSize+4*g.nslots+rangeSize*nr+4 {
		return fmt.Errorf("%w: index size", errBadHeader)
	}
	for i := range g.nslots {
		h := le.Uint32(b[idxHeaderSize+4*i:])
		if h != 0 && (h < segHeaderSize || int64(h) >= s.size) {
			return fmt.Errorf("%w: index head out of range", errBadHeader)
		}
	}
	s.minDue = int64(le.Uint64(b[32:]))
	s.maxDue = int64(le.Uint64(b[40:]))
	s.entries = int64(le.Uint64(b[48:]))
	s.laidOut = le.Uint32(b[56:])&idxGrouped != 0
	s.ranges = make([]partRange, nr)
	p := b[idxHeaderSize+4*g.nslots:]
	for i := range s.ranges {
		s.ranges[i] = partRange{
			part: int32(le.Uint32(p)),
			min:  int64(le.Uint64(p[4:])),
			max:  int64(le.Uint64(p[12:])),
		}
		p = p[rangeSize:]
	}
	return nil
}

// writeIdx writes and maps the .idx file of s; it is synced with s.
func writeIdx(dir string, s *segment, g geometry, heads []uint32) error {
	b := encodeIdx(s, g, heads)
	path := idxPath(dir, s.id)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("wheel: create index: %w", err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		f.Close()
		return fmt.Errorf("wheel: write %s: %w", path, err)
	}
	m, err := mapFile(f, len(b), true)
	if err != nil {
		f.Close()
		return err
	}
	if s.idx != nil {
		unmapFile(s.idx)
	}
	if s.idxFile != nil {
		s.idxFile.Close()
	}
	s.idx, s.idxFile, s.sealed = m, f, true
	return nil
}

// loadIdx maps an existing .idx file of s; an error means it must be rebuilt.
func loadIdx(dir string, s *segment, g geometry) error {
	path := idxPath(dir, s.id)
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() < idxHeaderSize+4 || st.Size() > int64(idxHeaderSize+4*g.nslots+4+rangeSize*(1<<20)) {
		return fmt.Errorf("%w: index size %d", errBadHeader, st.Size())
	}
	m, err := mapFile(f, int(st.Size()), false)
	if err != nil {
		return err
	}
	if err := decodeIdx(m, s, g); err != nil {
		unmapFile(m)
		return err
	}
	s.idx, s.sealed = m, true
	return nil
}
