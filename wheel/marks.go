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

// A chunk's key (its index and bit count) is kept apart from its bits: the
// keys of a partition are a few kilobytes that stay in the cache, so that a
// look-up misses the cache once, on the word holding the bit, not also on
// the chunk's header.
type chunkKey struct {
	idx int64 // offset >> chunkShift
	n   int32 // bits set
}

type bitChunk [chunkWords]uint64

type offsetSet struct {
	keys  []chunkKey // sorted by idx, none empty
	words []bitChunk // words[i] holds the bits of keys[i]
	count int64
}

// find returns the position of chunk ci, or where it would be inserted.
func (s *offsetSet) find(ci int64) (int, bool) {
	keys := s.keys
	n := len(keys)
	if n == 0 {
		return 0, false
	}
	first := keys[0].idx
	// chunks are mostly contiguous: try the position they would have
	if k := uint64(ci - first); k < uint64(n) && keys[k].idx == ci {
		return int(k), true
	}
	if last := keys[n-1].idx; ci >= last {
		if ci == last {
			return n - 1, true
		}
		return n, false
	}
	if ci <= first {
		return 0, ci == first
	}
	lo, hi := 1, n-1 // keys[lo-1].idx < ci < keys[hi].idx
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if keys[m].idx < ci {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, keys[lo].idx == ci
}

func (s *offsetSet) has(off int64) bool {
	i, ok := s.find(off >> chunkShift)
	if !ok {
		return false
	}
	b := off & (chunkBits - 1)
	return s.words[i][b>>6]&(1<<(b&63)) != 0
}

// word returns the word holding the bit of off (bit off&63), nil if its
// chunk does not exist. It is valid until the set changes.
func (s *offsetSet) word(off int64) *uint64 {
	i, ok := s.find(off >> chunkShift)
	if !ok {
		return nil
	}
	return &s.words[i][(off&(chunkBits-1))>>6]
}

// add sets off; it reports whether it was not set before.
func (s *offsetSet) add(off int64) bool {
	ci := off >> chunkShift
	i, ok := s.find(ci)
	if !ok {
		s.keys = slices.Insert(s.keys, i, chunkKey{idx: ci})
		s.words = slices.Insert(s.words, i, bitChunk{})
	}
	b := off & (chunkBits - 1)
	m := uint64(1) << (b & 63)
	w := &s.words[i][b>>6]
	if *w&m != 0 {
		return false
	}
	*w |= m
	s.keys[i].n++
	s.count++
	return true
}

// remove clears off; it reports whether it was set.
func (s *offsetSet) remove(off int64) bool {
	i, ok := s.find(off >> chunkShift)
	if !ok {
		return false
	}
	b := off & (chunkBits - 1)
	m := uint64(1) << (b & 63)
	w := &s.words[i][b>>6]
	if *w&m == 0 {
		return false
	}
	*w &^= m
	s.keys[i].n--
	s.count--
	if s.keys[i].n == 0 {
		s.dropChunk(i)
	}
	return true
}

func (s *offsetSet) dropChunk(i int) {
	if i == 0 {
		s.keys = s.keys[1:]
		s.words = s.words[1:]
		return
	}
	s.keys = slices.Delete(s.keys, i, i+1)
	s.words = slices.Delete(s.words, i, i+1)
}

// appendChunk appends chunk idx with bits w, which must be non-empty and
// after every chunk held (checkpoint loading).
func (s *offsetSet) appendChunk(idx int64, w *bitChunk) {
	var n int32
	for _, x := range w {
		n += int32(bits.OnesCount64(x))
	}
	s.keys = append(s.keys, chunkKey{idx, n})
	s.words = append(s.words, *w)
	s.count += int64(n)
}

// min returns the lowest offset set.
func (s *offsetSet) min() (int64, bool) {
	if len(s.keys) == 0 {
		return 0, false
	}
	for wi, w := range s.words[0] {
		if w != 0 {
			return s.keys[0].idx<<chunkShift + int64(wi*64+bits.TrailingZeros64(w)), true
		}
	}
	return 0, false // unreachable: chunks are never empty
}

// removeBelow clears every offset < below and returns how many were set.
func (s *offsetSet) removeBelow(below int64) int64 {
	var n int64
	for len(s.keys) > 0 {
		k := &s.keys[0]
		lo := k.idx << chunkShift
		if lo >= below {
			break
		}
		if lo+chunkBits <= below {
			n += int64(k.n)
			s.count -= int64(k.n)
			s.dropChunk(0)
			continue
		}
		c := &s.words[0]
		for off := lo; off < below; off++ {
			b := off - lo
			m := uint64(1) << (b & 63)
			if c[b>>6]&m != 0 {
				c[b>>6] &^= m
				k.n--
				n++
				s.count--
			}
		}
		if k.n == 0 {
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
	for ; i < len(s.keys); i++ {
		base := s.keys[i].idx << chunkShift
		if base > hi {
			return
		}
		for wi, w := range s.words[i] {
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
	if hi < lo || len(s.keys) == 0 {
		return false
	}
	i, _ := s.find(lo >> chunkShift)
	for ; i < len(s.keys); i++ {
		base := s.keys[i].idx << chunkShift
		if base > hi {
			return false
		}
		for wi, w := range s.words[i] {
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
	s.keys, s.words = nil, nil
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
