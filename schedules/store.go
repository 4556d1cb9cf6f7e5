package schedules

import (
	"encoding/binary"
	"math"

	"github.com/kdelay/kdelay/offsetmap"
)

// ref names a record held by an Index: its partition and its sequence
// number in that partition (the count of records the partition took
// before it, never reused, not even after a Reset). It stays valid while
// the record is held and never names another record afterwards.
type ref uint64

const (
	seqBits = 44 // 17.6e12 records per partition over an index's life
	seqMask = 1<<seqBits - 1
	// maxPart bounds the partition numbers an Index takes (the level
	// table allows fewer).
	maxPart = 1<<(64-seqBits) - 1
)

func mkref(p int32, seq uint64) ref { return ref(uint64(p)<<seqBits | seq&seqMask) }
func (r ref) part() int32           { return int32(r >> seqBits) }
func (r ref) seq() uint64           { return uint64(r) & seqMask }

// entry is one delay-topic record in the index: its schedule, never its
// value; 48 bytes, no pointers. Its id, key and the rarer strings (target
// when not interned, series, contract error) are in its chunk's arena
// from pos on.
type entry struct {
	offset int64
	due    int64 // epoch ms; 0 for an invalid record
	ts     int64 // epoch ms: the record's timestamp
	orig   int64 // epoch ms: its original timestamp
	fp     uint64
	pos    uint32 // of its strings in the arena
	target uint16 // in Index.targets; targetInArena: in the arena
	flags  uint8
}

const (
	flagCascaded uint8 = 1 << iota // a copy the relay cascaded
	flagInvalid                    // breaks the contract: its error is in the arena
	flagSeries                     // recurring: its series is in the arena
	flagID                         // has a kdelay-id

	// targetInArena: the target name follows the key in the arena (the
	// interned names are full).
	targetInArena = math.MaxUint16
)

// strs are the strings of an entry; read from an arena, they alias it.
type strs struct {
	id, key, target, series, err []byte
}

// chunkLen is the number of entries of a chunk (48 KiB of them). Fixed-size
// chunks make a partition grow and shrink without copying its records or
// leaving holes of odd sizes in the heap.
const chunkLen = 1024

// chunk holds chunkLen consecutive records of a partition (its last chunk
// fewer) and their strings.
type chunk struct {
	entries []entry
	arena   []byte
}

// part is one partition of the delay topic: its commit, its done set and
// its records from the committed offset on, in offset order, in chunks.
type part struct {
	committed int64 // -1: no commit
	done      offsetmap.Set
	level     int
	chunks    []*chunk
	n         int    // entries in chunks
	head      int    // the held records are entries head..n-1
	seq0      uint64 // the sequence number of the first entry of chunks[0]
}

// held returns the number of records held.
func (pt *part) held() int { return pt.n - pt.head }

// entry returns the i-th entry of the chunks and its chunk.
func (pt *part) entry(i int) (*chunk, *entry) {
	c := pt.chunks[i/chunkLen]
	return c, &c.entries[i%chunkLen]
}

// at returns the entry with sequence number seq while it is held.
func (pt *part) at(seq uint64) (*chunk, *entry, bool) {
	if seq < pt.seq0 {
		return nil, nil, false
	}
	i := seq - pt.seq0
	if i < uint64(pt.head) || i >= uint64(pt.n) {
		return nil, nil, false
	}
	c, e := pt.entry(int(i))
	return c, e, true
}

// seqOf returns the sequence number of the i-th entry.
func (pt *part) seqOf(i int) uint64 { return pt.seq0 + uint64(i) }

// last returns the last entry held; false when none is.
func (pt *part) last() (*entry, bool) {
	if pt.held() == 0 {
		return nil, false
	}
	_, e := pt.entry(pt.n - 1)
	return e, true
}

// add appends e with its strings and returns its sequence number; false
// when its chunk's arena would outgrow its 4 GiB offsets.
func (pt *part) add(e entry, s strs) (uint64, bool) {
	if pt.n == len(pt.chunks)*chunkLen {
		pt.chunks = append(pt.chunks, &chunk{entries: make([]entry, 0, chunkLen)})
	}
	c := pt.chunks[len(pt.chunks)-1]
	need := 5*binary.MaxVarintLen32 + len(s.id) + len(s.key) + len(s.target) + len(s.series) + len(s.err)
	if len(c.arena)+need > math.MaxUint32 {
		return 0, false
	}
	if c.arena == nil {
		// Records alike fill it once.
		c.arena = make([]byte, 0, min(chunkLen*(need-5*binary.MaxVarintLen32+4), 256<<10))
	}
	e.pos = uint32(len(c.arena))
	put := func(b []byte) {
		c.arena = binary.AppendUvarint(c.arena, uint64(len(b)))
		c.arena = append(c.arena, b...)
	}
	put(s.id)
	put(s.key)
	if e.target == targetInArena {
		put(s.target)
	}
	if e.flags&flagSeries != 0 {
		put(s.series)
	}
	if e.flags&flagInvalid != 0 {
		put(s.err)
	}
	c.entries = append(c.entries, e)
	if len(c.entries) == chunkLen && cap(c.arena)-len(c.arena) > len(c.arena)/8 {
		c.arena = append([]byte(nil), c.arena...) // full: give back the slack
	}
	pt.n++
	return pt.seqOf(pt.n - 1), true
}

// strs reads e's strings from its chunk; the target only when it is in
// the arena.
func (c *chunk) strs(e *entry) strs {
	b := c.arena[e.pos:]
	next := func() []byte {
		n, w := binary.Uvarint(b)
		s := b[w : w+int(n) : w+int(n)]
		b = b[w+int(n):]
		return s
	}
	var s strs
	s.id = next()
	s.key = next()
	if e.target == targetInArena {
		s.target = next()
	}
	if e.flags&flagSeries != 0 {
		s.series = next()
	}
	if e.flags&flagInvalid != 0 {
		s.err = next()
	}
	return s
}

// id reads e's id from its chunk.
func (c *chunk) id(e *entry) []byte {
	n, w := binary.Uvarint(c.arena[e.pos:])
	start := int(e.pos) + w
	return c.arena[start : start+int(n) : start+int(n)]
}

// dropHead lets go of the held records before the i-th entry; chunks
// with none held left go.
func (pt *part) dropHead(i int) {
	pt.head = i
	for pt.head >= chunkLen {
		pt.chunks[0] = nil
		pt.chunks = pt.chunks[1:]
		pt.head -= chunkLen
		pt.n -= chunkLen
		pt.seq0 += chunkLen
	}
}

// reset lets go of every held record: their sequence numbers are never
// used again.
func (pt *part) reset() {
	pt.seq0 += uint64(pt.n)
	pt.chunks, pt.n, pt.head = nil, 0, 0
}
