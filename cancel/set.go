// Package cancel is kdelay's cancel set: the cancels of the compacted
// cancel topic (KDELAY_CANCEL_TOPIC), read by every relay in full (all
// partitions, no consumer group) into a compact in-memory map from a
// schedule's id (the kdelay-id header of delayed records) to its cut-off.
//
// A cancel record's key is the id; its cut-off is the epoch-millisecond
// value of its kdelay-cancel-before header, else its record timestamp. It
// cancels every delayed record with that id whose original timestamp lies
// before the cut-off. A null value (a tombstone) withdraws the cancel; the
// last record read for an id wins, as compaction keeps it.
//
// A cancel is forgotten once no record it could cancel can still be
// pending: cut-off + the retention given to [NewSet] (KDELAY_MAX_DELAY).
//
// [Reader] keeps a [Set] current and offers the fire barrier: [Reader.Through]
// is a time t such that every cancel acknowledged by the broker before t
// has been read. Time is passed in or comes from the reader's clock, never
// from the wall clock directly.
//
// Concurrency: a Set is safe for concurrent use; a Reader's methods too.
package cancel

import (
	"hash/maphash"
	"sync"
	"time"
)

// MaxIDLen bounds a schedule id, in bytes (the kdelay-id contract).
const MaxIDLen = 255

// key identifies an id in the map: two independent 64-bit hashes of it,
// so an entry costs 24 bytes whatever the id's length, and two ids share a
// key with a probability of about n²/2¹²⁹ (never, in practice). Hashes are
// seeded per process: the set is never persisted, only rebuilt from the
// topic.
type key [2]uint64

// Set maps ids to their cut-off, epoch milliseconds.
type Set struct {
	seed1, seed2 maphash.Seed
	retain       int64 // ms a cancel is kept after its cut-off

	mu sync.RWMutex
	m  map[key]int64
}

// NewSet returns an empty set whose cancels are kept for retain after
// their cut-off (KDELAY_MAX_DELAY: no record older than that can still be
// pending).
func NewSet(retain time.Duration) *Set {
	return &Set{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), retain: retain.Milliseconds(), m: make(map[key]int64)}
}

func (s *Set) key(id []byte) key {
	return key{maphash.Bytes(s.seed1, id), maphash.Bytes(s.seed2, id)}
}

// Put records a cancel of id with the given cut-off (epoch ms), replacing
// an earlier one. A cancel already past its retention at now is not kept;
// Put reports whether it was.
func (s *Set) Put(id []byte, cutoff int64, now time.Time) bool {
	k := s.key(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cutoff+s.retain < now.UnixMilli() {
		delete(s.m, k) // an earlier, live one is replaced by an expired one
		return false
	}
	s.m[k] = cutoff
	return true
}

// Delete withdraws the cancel of id (a tombstone).
func (s *Set) Delete(id []byte) {
	k := s.key(id)
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

// Cancelled reports whether a delayed record with id and original
// timestamp ts (epoch ms) is cancelled, and by which cut-off.
func (s *Set) Cancelled(id []byte, ts int64) (cutoff int64, ok bool) {
	if len(id) == 0 {
		return 0, false
	}
	k := s.key(id)
	s.mu.RLock()
	c, found := s.m[k]
	s.mu.RUnlock()
	return c, found && ts < c
}

// Expire forgets the cancels whose cut-off plus retention lies before now
// and returns how many it forgot. It walks the whole map: call it every
// minute or so, not per record.
func (s *Set) Expire(now time.Time) int {
	limit := now.UnixMilli() - s.retain
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, c := range s.m {
		if c < limit {
			delete(s.m, k)
			n++
		}
	}
	return n
}

// Len returns the number of live cancels.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m)
}
