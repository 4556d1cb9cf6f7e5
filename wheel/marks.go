package wheel

import (
	"math/bits"
	"slices"
)

// Pending offsets of one source partition are kept as a chunked bitset: one
// bit per offset, in chunks of 4096 offsets that exist only while one of
// their bits is set. Offsets handed to the wheel grow with time, so chunks are
// appended at the end and freed from the front: memory is about one bit per
// offset between the lowest pending offset and the highest one.
const (
	chunkShift = 12
	chunkBits  = 1 << chunkShift
	chunkWords = chunkBits / 64
)

type chunk struct {
	idx int64 // offset >> chunkShift
	n   int32 // bits set
	w   [chunkWords]uint64
}

type offsetSet struct {
	chunks []chunk // sorted by idx, none empty
	count  int64
}

// find returns the position of chunk ci, or where it would be inserted.
func (s *offsetSet) find(ci int64) (int, bool) {
	n := len(s.chunks)
	if n == 0 {
		return 0, false
	}
	if last := s.chunks[n-1].idx; ci >= last {
		if ci == last {
			return n - 1, true
		}
		return n, false
	}
	first := s.chunks[0].idx
	if ci <= first {
		return 0, ci == first
	}
	// chunks are mostly contiguous: try the position they would have
	if k := ci - first; k < int64(n) && s.chunks[k].idx == ci {
		return int(k), true
	}
	lo, hi := 1, n-1 // chunks[lo-1].idx < ci < chunks[hi].idx
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.chunks[m].idx < ci {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, s.chunks[lo].idx == ci
}

func (s *offsetSet) has(off int64) bool {
	i, ok := s.find(off >> chunkShift)
	if !ok {
		return false
	}
	b := off & (chunkBits - 1)
	return s.chunks[i].w[b>>6]&(1<<(b&63)) != 0
}

// peek loads the memory has(off) will read, for a prefetching loop; the
// value means nothing.
func (s *offsetSet) peek(off int64) uint64 {
	n := len(s.chunks)
	if n == 0 {
		return 0
	}
	k := off>>chunkShift - s.chunks[0].idx
	if uint64(k) >= uint64(n) {
		return 0
	}
	c := &s.chunks[k]
	b := off & (chunkBits - 1)
	return uint64(c.idx) + c.w[b>>6]
}

// add sets off; it reports whether it was not set before.
func (s *offsetSet) add(off int64) bool {
	ci := off >> chunkShift
	i, ok := s.find(ci)
	if !ok {
		s.chunks = slices.Insert(s.chunks, i, chunk{idx: ci})
	}
	c := &s.chunks[i]
	b := off & (chunkBits - 1)
	m := uint64(1) << (b & 63)
	if c.w[b>>6]&m != 0 {
		return false
	}
	c.w[b>>6] |= m
	c.n++
	s.count++
	return true
}

// remove clears off; it reports whether it was set.
func (s *offsetSet) remove(off int64) bool {
	i, ok := s.find(off >> chunkShift)
	if !ok {
		return false
	}
	c := &s.chunks[i]
	b := off & (chunkBits - 1)
	m := uint64(1) << (b & 63)
	if c.w[b>>6]&m == 0 {
		return false
	}
	c.w[b>>6] &^= m
	c.n--
	s.count--
	if c.n == 0 {
		s.dropChunk(i)
	}
	return true
}

func (s *offsetSet) dropChunk(i int) {
	if i == 0 {
		s.chunks[0] = chunk{}
		s.chunks = s.chunks[1:]
		return
	}
	s.chunks = slices.Delete(s.chunks, i, i+1)
}

// min returns the lowest offset set.
func (s *offsetSet) min() (int64, bool) {
	if len(s.chunks) == 0 {
		return 0, false
	}
	c := &s.chunks[0]
	for wi, w := range c.w {
		if w != 0 {
			return c.idx<<chunkShift + int64(wi*64+bits.TrailingZeros64(w)), true
		}
	}
	return 0, false // unreachable: chunks are never empty
}

// removeBelow clears every offset < below and returns how many were set.
func (s *offsetSet) removeBelow(below int64) int64 {
	var n int64
	for len(s.chunks) > 0 {
		c := &s.chunks[0]
		lo := c.idx << chunkShift
		if lo >= below {
			break
		}
		if lo+chunkBits <= below {
			n += int64(c.n)
			s.count -= int64(c.n)
			s.dropChunk(0)
			continue
		}
		for off := lo; off < below; off++ {
			b := off - lo
			m := uint64(1) << (b & 63)
			if c.w[b>>6]&m != 0 {
				c.w[b>>6] &^= m
				c.n--
				n++
				s.count--
			}
		}
		if c.n == 0 {
			s.dropChunk(0)
		}
		break
	}
	return n
}

// each calls fn for every offset set in [lo, hi], in order, until fn
// returns false.
func (s *offsetSet) each(lo, hi int64, fn func(int64) bool) {
	if hi < lo {
		return
	}
	i, _ := s.find(lo >> chunkShift)
	for ; i < len(s.chunks); i++ {
		c := &s.chunks[i]
		base := c.idx << chunkShift
		if base > hi {
			return
		}
		for wi, w := range c.w {
			for w != 0 {
				off := base + int64(wi*64+bits.TrailingZeros64(w))
				w &= w - 1
				if off > hi {
					return
				}
				if off >= lo && !fn(off) {
					return
				}
			}
		}
	}
}

// anyIn reports whether an offset in [lo, hi] is set.
func (s *offsetSet) anyIn(lo, hi int64) bool {
	if hi < lo || len(s.chunks) == 0 {
		return false
	}
	i, _ := s.find(lo >> chunkShift)
	for ; i < len(s.chunks); i++ {
		c := &s.chunks[i]
		base := c.idx << chunkShift
		if base > hi {
			return false
		}
		for wi, w := range c.w {
			if w == 0 {
				continue
			}
			wlo := base + int64(wi*64)
			if wlo > hi {
				break
			}
			if wlo+63 < lo {
				continue
			}
			// mask bits outside [lo, hi]
			if lo > wlo {
				w &^= (1 << uint(lo-wlo)) - 1
			}
			if hi < wlo+63 {
				w &= (1 << uint(hi-wlo+1)) - 1
			}
			if w != 0 {
				return true
			}
		}
	}
	return false
}

func (s *offsetSet) reset() {
	s.chunks = nil
	s.count = 0
}

// partState is everything the wheel knows about one source partition.
type partState struct {
	id      int32
	epoch   uint32 // bumped by Drop; entries of an older epoch are dead
	handled int64  // latest SetHandled, -1 unknown
	durable int64  // handled as of the last Flush
	high    int64  // highest offset added, -1 none
	pending offsetSet

	// offsets this partition added to segment segID, for reclamation
	segID          uint32
	segMin, segMax int64

	// buffered until the next Flush (or the next record of this partition)
	dones        []int64
	handledDirty bool
	dirty        bool // listed in Wheel.dirty
}

func newPartState(id int32) *partState {
	return &partState{id: id, handled: -1, durable: -1, high: -1}
}

// noteSegment records that offset off of this partition went to segment id.
func (p *partState) noteSegment(id uint32, off int64) {
	if p.segID != id {
		p.segID, p.segMin, p.segMax = id, off, off
		return
	}
	p.segMin = min(p.segMin, off)
	p.segMax = max(p.segMax, off)
}

// drop forgets the partition's entries and watermark and starts epoch.
func (p *partState) drop(epoch uint32) {
	p.epoch = epoch
	p.pending.reset()
	p.handled, p.durable, p.high = -1, -1, -1
	p.dones = p.dones[:0]
	p.handledDirty = false
}
