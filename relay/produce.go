package relay

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// attempts counts produce attempts whose outcome is not yet in; done is
// closed when the count drops to zero after release (the collector holds
// one count while it starts attempts).
type attempts struct {
	left atomic.Int64
	done chan struct{}
}

func newAttempts() *attempts {
	a := &attempts{done: make(chan struct{})}
	a.left.Store(1)
	return a
}

func (a *attempts) add() { a.left.Add(1) }

// finished reports whether every attempt has its outcome.
func (a *attempts) finished() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func (a *attempts) release() {
	if a.left.Add(-1) == 0 {
		close(a.done)
	}
}

// startProduce hands one attempt of it to the producer and puts it in its
// partition's flight; its outcome lands in the item when it is finished.
// r.mu is held: collect calls it for each item as it decides it, so the
// produce round trip overlaps deciding the rest of the batch, and
// Produce only buffers the record (franz-go's goroutines send it; it
// blocks only while its buffer of unsent records is full).
func (r *Relay) startProduce(ctx context.Context, at *attempts, it *item, now time.Time) {
	r.produce(r.handOut(ctx, at, it, now))
}

// handOff is one attempt ready for the producer (handOut).
type handOff struct {
	ctx context.Context
	rec *kgo.Record
}

// attemptCtx is the Context of an attempt's record: the attempt's own
// context with what its promise needs, so that one promise function
// serves every attempt (Relay.promised) instead of a closure allocated
// per record. Each attempt has its own (newAttemptCtx), written once
// before its record is handed over and never reused: the producer may
// look at a record's Context after its promise.
type attemptCtx struct {
	context.Context
	it   *item
	at   *attempts
	mark *manualMark
	span recordSpan
}

// handOut readies one attempt of it and puts it in its partition's
// flight; r.mu is held. Each attempt is a fresh copy of it.out stamped
// with now, so franz-go's delivery timeout (counted from the record's
// timestamp) is never spent before the attempt is sent, however old the
// source record or however long the retries took.
func (r *Relay) handOut(ctx context.Context, at *attempts, it *item, now time.Time) handOff {
	it.err = nil
	it.sentAt = now
	it.finished.Store(false)
	if ps := r.parts[it.part]; ps != nil {
		ps.flight = append(ps.flight, it)
	}
	// The first attempt sends it.out itself (built for it, owned by
	// franz-go until its promise); a retry sends a copy, fresh for the
	// partitioner and the producer's bookkeeping.
	rec := it.out
	if it.attempted {
		cp := *it.out
		rec = &cp
	}
	it.attempted = true
	rec.Timestamp = now
	var mark *manualMark
	if it.manual {
		mark = new(manualMark)
		ctx = withManual(ctx, mark)
	}
	rec.Context = ctx
	it.group = at
	at.add()
	it.handedNs = r.sendClock(now)
	var span recordSpan
	if r.tracer != nil {
		span = r.tracer.start(it, rec, now)
	}
	a := r.newAttemptCtx()
	*a = attemptCtx{Context: ctx, it: it, at: at, mark: mark, span: span}
	rec.Context = a
	return handOff{ctx: ctx, rec: rec}
}

// produce hands h to the producer; its promise (promised) writes the
// attempt's outcome into the item. r.mu need not be held.
func (r *Relay) produce(h handOff) { r.cl.Produce(h.ctx, h.rec, r.promise) }

// promised is the promise of every attempt (Relay.promise, this method's
// value made once): the attempt is its record's Context (handOut).
func (r *Relay) promised(rec *kgo.Record, err error) {
	a := rec.Context.(*attemptCtx)
	it, at, mark, span := a.it, a.at, a.mark, a.span
	if err != nil && mark != nil && mark.outOfRange.Load() {
		err = &PartitionError{Topic: rec.Topic, Partition: rec.Partition, Partitions: int(mark.partitions.Load()), Err: err}
	}
	it.err = err
	it.ackedAt = r.now()
	if span != nil {
		r.tracer.end(span, err, it.ackedAt)
	}
	it.finished.Store(true)
	at.release()
}

// sendClockEvery is how many produce calls of one iteration share a
// reading of the clock for kdelay_send_lateness_seconds, because 32 calls
// take far less than the histogram's finest bucket (one millisecond).
const sendClockEvery = 32

// sendClock returns the time of a produce call in iteration iter, unix
// ns: the clock read at the iteration's first call and every
// sendClockEvery calls. Loop goroutine only.
func (r *Relay) sendClock(iter time.Time) int64 {
	if !iter.Equal(r.sendIter) || r.sendCalls%sendClockEvery == 0 {
		r.sendIter, r.sendNs, r.sendCalls = iter, r.now().UnixNano(), 0
	}
	r.sendCalls++
	return r.sendNs
}

// flightWait bounds how long an iteration waits for its attempts: a record
// whose produce hangs (a missing target, a broker away) stays in flight,
// holding back its partition's commit only, while the loop goes on.
const flightWait = 250 * time.Millisecond

// deliver waits for the attempts of the previous batch (nil: none), up
// to flightWait, then produces the isolated retries one at a time, each
// waited for. The attempts collect started for this batch go on: at least
// once, a batch's acks overlap with deciding the next, and at most two
// batches are in flight. It returns an error only when ctx ends first
// (shutdown timeout): what is in flight is then handed back uncommitted.
func (r *Relay) deliver(ctx context.Context, solo []*item, prev *attempts) error {
	if prev != nil {
		t := time.NewTimer(flightWait)
		defer t.Stop()
		select {
		case <-prev.done:
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return r.produceSolo(ctx, solo)
}

// produceSolo produces the isolated retries one at a time, each waited
// for; it returns ctx's error if ctx ends first.
func (r *Relay) produceSolo(ctx context.Context, solo []*item) error {
	for _, it := range solo {
		at := newAttempts()
		r.mu.Lock()
		h := r.handOut(ctx, at, it, r.now())
		r.mu.Unlock()
		r.produce(h)
		at.release()
		select {
		case <-at.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// drain waits, on shutdown, for every attempt in flight (bounded by ctx),
// so that what was delivered is committed and a clean restart sends no
// duplicate.
func (r *Relay) drain(ctx context.Context) {
	for {
		r.mu.Lock()
		busy := false
		for _, ps := range r.parts {
			for _, it := range ps.flight {
				busy = busy || !it.finished.Load()
			}
		}
		r.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}
