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
// when not interned, series, contract error) are in its partition's
// arena from pos on.
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

// strs are the strings of an entry, read from its arena; they alias the
// arena and are valid until the index changes.
type strs struct {
	id, key, target, series, err []byte
}

// part is one partition of the delay topic: its commit, its done set and
// its records from the committed offset on, in offset order.
type part struct {
	committed int64 // -1: no commit
	done      offsetmap.Set
	level     int
	entries   []entry // entries[head:] are held
	head      int
	seq0      uint64 // the sequence number of entries[0]
	arena     []byte // the strings of entries[head:], from entries[head].pos on
}

// held returns the number of records held.
func (pt *part) held() int { return len(pt.entries) - pt.head }

// at returns the entry with sequence number seq while it is held.
func (pt *part) at(seq uint64) (*entry, bool) {
	if seq < pt.seq0 {
		return nil, false
	}
	i := seq - pt.seq0
	if i < uint64(pt.head) || i >= uint64(len(pt.entries)) {
		return nil, false
	}
	return &pt.entries[i], true
}

// seqOf returns the sequence number of entries[i].
func (pt *part) seqOf(i int) uint64 { return pt.seq0 + uint64(i) }

// appendStrs writes the strings of an entry to the arena and returns
// where they start; false when the arena would outgrow its 4 GiB offsets.
func (pt *part) appendStrs(s strs, flags uint8, targetToo bool) (uint32, bool) {
	need := 5*binary.MaxVarintLen32 + len(s.id) + len(s.key) + len(s.target) + len(s.series) + len(s.err)
	if len(pt.arena)+need > math.MaxUint32 {
		pt.compact()
		if len(pt.arena)+need > math.MaxUint32 {
			return 0, false
		}
	}
	pos := uint32(len(pt.arena))
	put := func(b []byte) {
		pt.arena = binary.AppendUvarint(pt.arena, uint64(len(b)))
		pt.arena = append(pt.arena, b...)
	}
	put(s.id)
	put(s.key)
	if targetToo {
		put(s.target)
	}
	if flags&flagSeries != 0 {
		put(s.series)
	}
	if flags&flagInvalid != 0 {
		put(s.err)
	}
	return pos, true
}

// strs reads e's strings; the target only when it is in the arena.
func (pt *part) strs(e *entry) strs {
	b := pt.arena[e.pos:]
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

// id reads e's id.
func (pt *part) id(e *entry) []byte {
	n, w := binary.Uvarint(pt.arena[e.pos:])
	start := int(e.pos) + w
	return pt.arena[start : start+int(n) : start+int(n)]
}

// dropHead lets go of the held records before entries[i] and compacts
// once they are half of the slice.
func (pt *part) dropHead(i int) {
	pt.head = i
	if pt.head > 0 && pt.head*2 >= len(pt.entries) {
		pt.compact()
	}
}

// compact moves the held entries and their strings to the front, and
// gives back memory when the slices are mostly empty.
func (pt *part) compact() {
	if pt.head == 0 {
		return
	}
	held := pt.entries[pt.head:]
	var shift uint32
	if len(held) > 0 {
		shift = held[0].pos
	} else {
		shift = uint32(len(pt.arena))
	}
	n := copy(pt.arena, pt.arena[shift:])
	pt.arena = pt.arena[:n]
	for i := range held {
		held[i].pos -= shift
	}
	pt.seq0 += uint64(pt.head)
	pt.entries = pt.entries[:copy(pt.entries, held)]
	pt.head = 0
	if c := cap(pt.entries); c > 1024 && c > 4*len(pt.entries) {
		pt.entries = append(make([]entry, 0, 2*len(pt.entries)), pt.entries...)
	}
	if c := cap(pt.arena); c > 64<<10 && c > 4*len(pt.arena) {
		pt.arena = append(make([]byte, 0, 2*len(pt.arena)), pt.arena...)
	}
}

// reset lets go of every held record: their sequence numbers are never
// used again.
func (pt *part) reset() {
	pt.head = len(pt.entries)
	pt.compact()
}
