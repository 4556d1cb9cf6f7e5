package relay

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/offsetmap"
)

// partState is one owned partition of the delay topic.
type partState struct {
	p       int32
	level   int
	queue   []*kgo.Record // polled, not yet handled, offset order
	bytes   int           // keys, values and headers held in queue
	next    int64         // offset after the last record appended to queue
	paused  bool
	handled int64   // every offset <= handled is done, in the wheel or in retries
	retries []*item // failed produces set aside, with their next attempt time
	flight  []*item // produced, outcome not yet settled
	commit  int64   // last committed offset, -1 if none
	hwm     int64   // high watermark as of the last fetch, -1 if unknown
	waitFor time.Time

	// After an assignment with local state, records up to catchUp (the
	// highest offset the wheel had taken) are read again; those among
	// them that the wheel fires meanwhile are in fired, so that their
	// second reading is skipped. -1 and nil once the queue is past it.
	catchUp int64
	fired   map[int64]struct{}

	commitEnd int64 // end of the done set last committed
	// settled counts the records settled (each may change the done set);
	// committedAt is its value when the last commit that went through
	// was computed. They differ while something settled is uncommitted,
	// also when it settled during that commit's round trip.
	settled, committedAt uint64
	doneSet              offsetmap.Set // the done set of the last commit (what a resync may skip)
	known                offsetmap.Set // done above the commit, from the commit metadata
}

// pop removes the queue's head.
func (ps *partState) pop() {
	ps.bytes -= recordBytes(ps.queue[0])
	ps.queue[0] = nil
	ps.queue = ps.queue[1:]
}

func (ps *partState) clearQueue() { ps.queue, ps.bytes = nil, 0 }

func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// catchingUp reports whether a queue head at off was fired from the wheel
// since the assignment (so it is done or in flight), and ends the catch-up
// once the queue reaches its end.
func (ps *partState) catchingUp(off int64) bool {
	if ps.fired == nil {
		return false
	}
	_, ok := ps.fired[off]
	delete(ps.fired, off)
	if off >= ps.catchUp {
		ps.catchUp, ps.fired = -1, nil
	}
	return ok
}

// knownDone reports whether the commit metadata said off is done (by an
// earlier owner), and forgets that set once the queue is past it.
func (ps *partState) knownDone(off int64) bool {
	if ps.known.End <= ps.known.Base {
		return false
	}
	done := ps.known.Done(off)
	if off >= ps.known.End-1 {
		ps.known = offsetmap.Set{}
	}
	return done
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

// takeFinished removes and returns the items of the flight whose attempt
// has its outcome.
func (ps *partState) takeFinished() []*item {
	var landed []*item
	kept := ps.flight[:0]
	for _, it := range ps.flight {
		if it.finished.Load() {
			landed = append(landed, it)
		} else {
			kept = append(kept, it)
		}
	}
	clear(ps.flight[len(kept):])
	ps.flight = kept
	return landed
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
