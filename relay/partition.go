package relay

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partState is one owned partition of the delay topic: what the loop
// holds of it (queue, flight, retries, pause) and its ledger.
type partState struct {
	p       int32
	level   int
	queue   []*kgo.Record // polled, not yet handled, offset order
	bytes   int           // keys, values and headers held in queue
	next    int64         // offset after the last record appended to queue
	paused  bool
	retries []*item   // failed produces set aside, with their next attempt time
	flight  []*item   // produced, outcome not yet settled
	hwm     int64     // high watermark as of the last fetch, -1 if unknown
	waitFor time.Time // when its head may go (zero: it is not waiting)
	holding bool      // its head waits within readAhead: the partition is read on into memory
	led     ledger    // what is done, and what the commit says (ledger.go)
}

// pop removes the queue's head.
func (ps *partState) pop() {
	ps.bytes -= recordBytes(ps.queue[0])
	ps.queue[0] = nil
	ps.queue = ps.queue[1:]
}

func (ps *partState) clearQueue() { ps.queue, ps.bytes = nil, 0 }

// heldBytes estimates the memory of the queue: its keys, values and
// headers, and heldRecordOverhead per record.
func (ps *partState) heldBytes() int { return ps.bytes + len(ps.queue)*heldRecordOverhead }

// heldRecordOverhead is about what a fetched record takes beside its key,
// value and headers: the kgo.Record and its header slice.
const heldRecordOverhead = 320

func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// takeRetries removes and returns the retries due at now.
func (ps *partState) takeRetries(now time.Time) []*item {
	var due []*item
	kept := ps.retries[:0]
	for _, it := range ps.retries {
		if it.nextTry.After(now) {
			kept = append(kept, it)
		} else {
			due = append(due, it)
		}
	}
	clear(ps.retries[len(kept):])
	ps.retries = kept
	return due
}

// takeFinished removes the items of the flight whose attempt has its
// outcome, and returns dst with them appended.
func (ps *partState) takeFinished(dst []*item) []*item {
	kept := ps.flight[:0]
	for _, it := range ps.flight {
		if it.finished.Load() {
			dst = append(dst, it)
		} else {
			kept = append(kept, it)
		}
	}
	clear(ps.flight[len(kept):])
	ps.flight = kept
	return dst
}

// lowestUnsettled returns the lowest offset in flight or being retried,
// math.MaxInt64 if none; with queueOnly, only records taken from the queue
// count (the wheel keeps its own entries pending until done).
func (ps *partState) lowestUnsettled(queueOnly bool) int64 {
	low := int64(1<<63 - 1)
	for _, l := range [][]*item{ps.retries, ps.flight} {
		for _, it := range l {
			if it.fromQueue || !queueOnly {
				low = min(low, it.offset)
			}
		}
	}
	return low
}
