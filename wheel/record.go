package wheel

import (
	"encoding/binary"
	"hash/crc32"
)

// Record layout in a segment (little endian, every record starts 8-byte
// aligned, padding is zero and not covered by the checksum):
//
//	common   0 crc32c u32 over [4, size)
//	         4 size   u32 unpadded record length, header included
//	         8 kind   u8, then 3 zero bytes
//	        12 part   i32 source partition
//	        16 epoch  u32 partition epoch (bumped by Drop)
//	entry   20 prev   u32 offset of the previous entry of the same slot in
//	                      this segment, 0 = end of chain
//	        24 offset i64 source offset
//	        32 due    i64 unix ms
//	        40 payload
//	mark    20 count  u32 (done: number of offsets; else 0)
//	        24 value  i64 (done: first offset; trim: below; handled: offset)
//	        32 done only: count-1 zigzag varint deltas between offsets
const (
	recordAlign     = 8
	entryHeaderSize = 40
	markHeaderSize  = 32

	kindEntry   byte = 1
	kindDone    byte = 2
	kindTrim    byte = 3
	kindHandled byte = 4
	kindDrop    byte = 5

	// MaxPayload is the largest payload Add accepts.
	MaxPayload = 64 << 20
)

var le = binary.LittleEndian

// castagnoli is read-only after package initialisation.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func alignUp(n int) int { return (n + recordAlign - 1) &^ (recordAlign - 1) }

// entryHeader is the fixed part of an entry record.
type entryHeader struct {
	part  int32
	epoch uint32
	prev  uint32
	off   int64
	due   int64
}

// grow extends b by n zero bytes, reusing capacity.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	b = b[:len(b)+n]
	clear(b[len(b)-n:])
	return b
}

// appendEntry appends one padded entry record to b.
func appendEntry(b []byte, h entryHeader, payload []byte) []byte {
	size := entryHeaderSize + len(payload)
	start := len(b)
	b = grow(b, alignUp(size))
	r := b[start : start+size]
	le.PutUint32(r[4:], uint32(size))
	r[8] = kindEntry
	le.PutUint32(r[12:], uint32(h.part))
	le.PutUint32(r[16:], h.epoch)
	le.PutUint32(r[20:], h.prev)
	le.PutUint64(r[24:], uint64(h.off))
	le.PutUint64(r[32:], uint64(h.due))
	copy(r[40:], payload)
	le.PutUint32(r[0:], checksum(r[4:]))
	return b
}

// appendMark appends a mark record. For kindDone, offs holds the offsets in
// any order; for the other kinds it is nil and value is used.
func appendMark(b []byte, kind byte, part int32, epoch uint32, value int64, offs []int64) []byte {
	size := markHeaderSize
	if kind == kindDone {
		value = offs[0]
		for i := 1; i < len(offs); i++ {
			size += varintLen(offs[i] - offs[i-1])
		}
	}
	start := len(b)
	b = grow(b, alignUp(size))
	r := b[start : start+size]
	le.PutUint32(r[4:], uint32(size))
	r[8] = kind
	le.PutUint32(r[12:], uint32(part))
	le.PutUint32(r[16:], epoch)
	le.PutUint32(r[20:], uint32(len(offs)))
	le.PutUint64(r[24:], uint64(value))
	p := r[markHeaderSize:]
	for i := 1; i < len(offs); i++ {
		n := binary.PutVarint(p, offs[i]-offs[i-1])
		p = p[n:]
	}
	le.PutUint32(r[0:], checksum(r[4:]))
	return b
}

func varintLen(d int64) int {
	v := uint64(d) << 1 // zigzag, as binary.PutVarint
	if d < 0 {
		v = ^v
	}
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// parseRecord checks the record at the start of b: its size fits in b, its
// kind is known and its checksum matches. It returns the kind and the
// unpadded size.
func parseRecord(b []byte) (kind byte, size int, ok bool) {
	if len(b) < markHeaderSize {
		return 0, 0, false
	}
	size = int(le.Uint32(b[4:]))
	kind = b[8]
	switch kind {
	case kindEntry:
		if size < entryHeaderSize {
			return 0, 0, false
		}
	case kindDone, kindTrim, kindHandled, kindDrop:
		if size < markHeaderSize {
			return 0, 0, false
		}
	default:
		return 0, 0, false
	}
	if size > len(b) || size > entryHeaderSize+MaxPayload {
		return 0, 0, false
	}
	if le.Uint32(b) != checksum(b[4:size]) {
		return 0, 0, false
	}
	return kind, size, true
}

func decodeEntryHeader(r []byte) entryHeader {
	return entryHeader{
		part:  int32(le.Uint32(r[12:])),
		epoch: le.Uint32(r[16:]),
		prev:  le.Uint32(r[20:]),
		off:   int64(le.Uint64(r[24:])),
		due:   int64(le.Uint64(r[32:])),
	}
}

// mark is a decoded mark record.
type mark struct {
	kind  byte
	part  int32
	epoch uint32
	value int64
	count int
	rest  []byte // varint deltas of a done mark
}

func decodeMark(r []byte, size int) mark {
	return mark{
		kind:  r[8],
		part:  int32(le.Uint32(r[12:])),
		epoch: le.Uint32(r[16:]),
		count: int(le.Uint32(r[20:])),
		value: int64(le.Uint64(r[24:])),
		rest:  r[markHeaderSize:size],
	}
}

// doneOffsets calls fn for each offset of a done mark; it stops at the first
// malformed delta.
func (m mark) doneOffsets(fn func(int64)) {
	if m.count == 0 {
		return
	}
	off := m.value
	fn(off)
	p := m.rest
	for i := 1; i < m.count; i++ {
		d, n := binary.Varint(p)
		if n <= 0 {
			return
		}
		p = p[n:]
		off += d
		fn(off)
	}
}
