package relay

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/wheel"
)

// kind is where an item of a batch comes from and goes to. An item's kind
// never changes: a record the target refuses becomes a new dead-letter item.
type kind int

const (
	kForward  kind = iota // queue head, due: produce to the target
	kWheelAdd             // queue head, put into the wheel: nothing to produce
	kCascade              // queue head, beyond the horizon: produce to the delay topic
	kDead                 // produce to the dead-letter topic
	kFire                 // wheel entry, due: produce to the target
	kSkip                 // queue head with nothing to do: a transaction marker, or a record the wheel already holds
)

// item is one record of a batch, or one set aside for a retry.
type item struct {
	kind      kind
	part      int32
	offset    int64
	level     int
	fromQueue bool        // a queue head (its offset advances the watermark)
	orig      *kgo.Record // the delay-topic record as produced (key, value, headers)
	out       *kgo.Record // what to produce (each attempt sends a copy); nil for kWheelAdd
	manual    bool        // out.Partition is chosen (cascade, kdelay-target-partition)
	due       time.Time
	reason    string      // dead-letter reason label
	detail    string      // dead-letter reason text
	pair      *seriesPair // a series firing from the wheel and its next occurrence (recur.go)
	fire      *wheelFire  // the wheelFire this item is part of (newFire), nil for any other
	pooled    bool        // cut by newItem: giveBack takes it back
	fwd       *forwardBuf // out's storage when built by forward: its wheelFire's, or the pool's (newForwardBuf)

	// The outcome of the current attempt, written by its promise before
	// it sets finished.
	err       error
	ackedAt   time.Time
	sentAt    time.Time // when the current attempt was handed over (its iteration's time)
	handedNs  int64     // unix ns of the current attempt's produce call (kdelay_send_lateness_seconds)
	finished  atomic.Bool
	attempted bool      // it.out was handed to the producer once (a later attempt sends a copy)
	group     *attempts // the attempts the current attempt belongs to (done when they all are)

	// Retry state of an item whose produce failed.
	isolate   bool          // produce alone: a whole batch failed as too large
	firstFail time.Time     // first failed attempt
	nextTry   time.Time     // earliest next attempt
	backoff   time.Duration // wait before the attempt after next
}

// While wheel entries come due within fireSoon, an iteration takes at most
// headsWhileFiring queue heads, because deciding a full batch of heads at
// once would hold every entry due meanwhile.
const (
	fireSoon         = 10 * time.Millisecond
	headsWhileFiring = 512
)

// readAhead is how long before their level time records are read
// (policy.decide), because a burst read only at its level time goes out
// late by the time it takes to read it (docs/benchmarks.md). A record that
// goes at its level time waits in its partition's queue, in memory, up to
// Options.ReadAheadBytes for the relay (updatePauses); one due later goes
// into the wheel, where it would wait from its level time anyway.
const readAhead = 5 * time.Second

// collect takes what can go at now: retries whose time has come, the
// wheel's expired entries, then the ready heads of every partition queue,
// up to maxBatch items. Each item with something to produce is handed to
// the producer at once, so the produce round trip overlaps with deciding
// the rest; started is done when every first attempt has its outcome.
// Isolated retries are returned in solo, to be produced one at a time.
// Every item produced joins its partition's flight until settled.
func (r *Relay) collect(ctx context.Context, now time.Time) (b, solo []*item, started *attempts) {
	started = newAttempts()
	defer started.release()
	r.barrierMoved = nil // held sets it again
	for _, ps := range r.parts {
		for _, it := range ps.takeRetries(now) {
			if c := r.cancelledItem(it, now); c != nil {
				it = c
				if it.out == nil {
					b = append(b, it)
					continue
				}
			}
			if it.isolate {
				solo = append(solo, it)
				continue
			}
			r.startProduce(ctx, started, it, now)
			b = append(b, it)
		}
	}
	room := r.maxBatch
	if r.firstAsg && r.wheel != nil {
		if n := r.collectWheel(ctx, started, now, &b, min(firstFires, r.maxBatch)); n == firstFires && n < r.maxBatch {
			r.collectWheel(ctx, started, now, &b, r.maxBatch-n)
		}
		if ms, ok := r.wheel.NextExpiry(); ok && ms <= now.Add(fireSoon).UnixMilli() {
			// Entries come due meanwhile: a short batch of heads, so that
			// they are not held behind thousands of records read at once.
			room = min(room, len(b)+headsWhileFiring)
		}
	}
	var ahead time.Duration
	if r.wheel != nil {
		ahead = readAhead // no wheel: nothing may be read before its level time
	}
	for _, ps := range r.parts {
		ps.waitFor, ps.holding = time.Time{}, false
		// A partition whose retries fill its queue's room takes no new
		// heads: the failing records hold back their own partition only.
		for len(ps.queue) > 0 && len(b) < room && !r.crowded(ps) {
			rec := ps.queue[0]
			if ps.led.catchingUp(rec.Offset) || ps.led.knownDone(rec.Offset) || rec.Attrs.IsControl() || (r.wheel != nil && r.wheel.Holds(ps.p, rec.Offset)) {
				// Read again after a restart or a seek, but its outcome is
				// already the wheel's; or a transaction marker.
				ps.pop()
				b = append(b, &item{kind: kSkip, part: ps.p, offset: rec.Offset, level: ps.level, fromQueue: true})
				continue
			}
			d := r.pol.decide(rec, ps.level, now, ahead)
			if d.act == actWait {
				ps.waitFor, ps.holding = d.wakeAt, d.hold
				break
			}
			if wait, ok := r.held(d.sched.Due, now); ok && d.act == actForward {
				ps.waitFor = wait // the cancel barrier (cancel.go)
				break
			}
			ps.pop()
			if d.mismatch {
				r.m.mismatchedAt(ps.level).Inc()
			}
			it := r.newItem()
			*it = item{pooled: true, part: ps.p, offset: rec.Offset, level: ps.level, fromQueue: true, orig: rec, due: d.sched.Due}
			if d.act != actDeadLetter {
				if c := r.cancelledItem(it, now); c != nil {
					if c.out != nil {
						r.startProduce(ctx, started, c, now)
					}
					b = append(b, c)
					continue
				}
			}
			switch d.act {
			case actForward:
				it.kind = kForward
				r.forward(it, rec, d.sched.Target, d.sched.TargetPartition, d.sched.Due, ps.p, rec.Offset)
				if nx := r.fireSeries(it, now); nx != nil {
					r.startProduce(ctx, started, nx, now)
					b = append(b, nx)
				}
			case actWheel:
				if r.addToWheel(now, ps, rec, d.sched.Due) {
					it.kind = kWheelAdd
					break
				}
				it.kind, it.out, it.manual = kCascade, r.cascadeRecord(rec, d.sched.Due, now), true
			case actCascade:
				it.kind, it.out, it.manual = kCascade, r.cascadeRecord(rec, d.sched.Due, now), true
			case actDeadLetter:
				it.kind, it.reason, it.detail = kDead, d.reason, d.detail
				it.out = r.deadLetterRecord(rec, ps.p, rec.Offset, d.detail)
			}
			if it.out != nil {
				r.startProduce(ctx, started, it, now)
			}
			b = append(b, it)
		}
		if len(ps.queue) == 0 {
			ps.queue = nil // let the backing array go
		}
	}
	return b, solo, started
}

// collectWheel appends up to max of the wheel's expired entries to b as
// forwards, and returns how many the wheel handed out.
func (r *Relay) collectWheel(ctx context.Context, started *attempts, now time.Time, b *[]*item, max int) int {
	fired := r.pool.fired[:0]
	defer func() { clear(fired); r.pool.fired = fired[:0] }()
	var bad map[int32]bool // partitions with an entry that does not decode (none: nil)
	n, err := r.wheel.ExpireView(r.fireLimit(now).UnixMilli(), max, func(e wheel.Entry) {
		it, ok := r.fromWheel(e)
		switch {
		case it != nil:
			fired = append(fired, it)
		case !ok:
			if bad == nil {
				bad = make(map[int32]bool)
			}
			bad[e.Partition] = true
		}
	})
	if err != nil {
		r.wheelFailed("expire", err)
		return 0 // the reset re-reads every partition; nothing fired is lost
	}
	for p := range bad { // after Expire: Drop must not run inside it
		if ps := r.parts[p]; ps != nil {
			r.resyncPartition(ps)
		}
	}
	for _, it := range fired {
		if bad[it.part] {
			continue
		}
		ps := r.parts[it.part]
		ps.led.firedAhead(it.offset, ps.next) // to be read again: skip it then
		if c := r.cancelledItem(it, now); c != nil {
			it = c
		} else if nx := r.fireSeries(it, now); nx != nil {
			r.startProduce(ctx, started, nx, now)
			*b = append(*b, nx)
		}
		if it.out != nil {
			r.startProduce(ctx, started, it, now)
		}
		*b = append(*b, it)
	}
	return n
}

// firstFires is the first batch collect takes from the wheel: handed to
// the producer before the rest of the batch is taken and built (4096
// fires of 1 KiB take the loop 5 to 10 ms), so that a burst's first
// records are sent meanwhile.
const firstFires = 64

// addToWheel puts rec into the wheel, due at due, and reports whether it is
// there; when not, the caller cascades the record through Kafka instead.
func (r *Relay) addToWheel(now time.Time, ps *partState, rec *kgo.Record, due time.Time) bool {
	if r.wheel == nil {
		return false
	}
	r.payload = encodePayload(r.payload[:0], rec) // Add copies it: one buffer serves every record
	err := r.wheel.Add(now.UnixMilli(), wheel.Entry{
		Due: due.UnixMilli(), Partition: ps.p, Offset: rec.Offset, Payload: r.payload,
	})
	switch {
	case err == nil:
		r.m.level(ps.level).nWheeled++
		return true
	case errors.Is(err, wheel.ErrInvalid):
		r.log.Warn("wheel refused the record; cascading it instead", "source", levels.Source(r.cfg.Topic, ps.p, rec.Offset), "err", err)
	default:
		r.wheelFailed("add", err)
	}
	return false
}

// fromWheel turns a fired wheel entry into a forward, due at the time
// computed when it was added (never re-derived from a level table that may
// have changed since). It returns nil, true for an entry of a partition no
// longer owned (its owner re-reads it), and nil, false for an entry that
// does not decode.
func (r *Relay) fromWheel(e wheel.Entry) (*item, bool) {
	ps := r.parts[e.Partition]
	if ps == nil {
		return nil, true
	}
	f := r.newFire()
	f.payload = append(f.payload[:0], e.Payload...) // e.Payload is the wheel's until this returns
	rec := &f.orig
	err := decodePayloadInto(rec, f.hs[:0], f.payload)
	var target string
	var partition int32
	if err == nil {
		rec.Topic, rec.Partition, rec.Offset = r.cfg.Topic, e.Partition, e.Offset
		// Its schedule was read when it was added: only where it goes
		// is read again.
		target, partition, err = r.pol.table.Target(rec.Headers)
	}
	if err != nil {
		// Cannot happen for entries this relay wrote; re-read the
		// partition from Kafka rather than lose or guess.
		r.log.Error("undecodable wheel entry; re-reading the partition from its committed offset",
			"partition", e.Partition, "offset", e.Offset, "err", err)
		return nil, false
	}
	due := time.UnixMilli(e.Due)
	it := &f.it
	it.kind, it.part, it.offset, it.level, it.orig, it.due = kFire, e.Partition, e.Offset, ps.level, rec, due
	r.forward(it, rec, target, partition, due, e.Partition, e.Offset)
	return it, true
}

// wheelFire is what firing a wheel entry builds, in one allocation: the
// item, the decoded record, with room for its headers (more grow on their
// own), and the storage of its forward. They live as long as the item
// does. The payload the record is decoded from is a buffer of its own,
// which a reused wheelFire keeps (giveBack), so that a burst's payloads
// are copied into storage already allocated instead of new storage each.
type wheelFire struct {
	it      item
	orig    kgo.Record
	hs      [3]kgo.RecordHeader // the producer's: a target and a schedule, often an ID
	fwd     forwardBuf
	payload []byte // the wheel entry's payload; orig's slices alias it
}

// keptPayload bounds the payload buffer a wheelFire keeps for reuse: a
// burst of large records must not leave the pool holding a large buffer
// per wheelFire.
const keptPayload = 8 << 10

// fireChunk is how many wheelFires one allocation holds (64 of 992
// bytes: 62 KiB), because one allocation per wheelFire (a 1 KiB object
// with pointers: zeroed, typed and swept each) costs the loop's CPU per
// fired record; a chunk is zeroed in one go. A chunk stays in memory while
// one of its wheelFires is in use or free for reuse (itemPool).
const fireChunk = 64

// itemChunk is how many queue heads' items one allocation holds (64 of
// 304 bytes: 19 KiB), for the reason of fireChunk and with its cost; so
// is fwdChunk for their forwards' storage (64 of 384 bytes: 24 KiB), which
// only the heads forwarded at once take.
const (
	itemChunk = 64
	fwdChunk  = 64
)

// itemPool hands out the items of queue heads (newItem) and the
// wheelFires of fired entries (newFire): taken back once settled
// (giveBack), else cut from the current chunk. What is taken back is
// handed out again, so that a burst reuses the storage of the records
// it settled instead of allocating (and collecting) a new item per
// record. r.mu is held for all of it.
type itemPool struct {
	items     []item        // what is left of the current item chunk
	fires     []wheelFire   // what is left of the current fire chunk
	freeItems []*item       // settled, zeroed
	freeFires []*wheelFire  // settled, zeroed
	fwds      []forwardBuf  // what is left of the current chunk of forward storage
	freeFwds  []*forwardBuf // taken back with their items, zeroed
	actxs     []attemptCtx  // what is left of the current chunk of attempt contexts (newAttemptCtx)
	fired     []*item       // collectWheel's storage for what it fires
}

// newItem returns a zeroed item for a queue head; the caller sets its
// pooled, for giveBack to take it back once settled. r.mu is held.
func (r *Relay) newItem() *item {
	return take(&r.pool.freeItems, &r.pool.items, itemChunk)
}

// take returns the last of *free, else the first of *chunk, cut from a
// fresh chunk of n when it is used up.
func take[T any](free *[]*T, chunk *[]T, n int) *T {
	if k := len(*free); k > 0 {
		v := (*free)[k-1]
		*free = (*free)[:k-1]
		return v
	}
	if len(*chunk) == 0 {
		*chunk = make([]T, n)
	}
	v := &(*chunk)[0]
	*chunk = (*chunk)[1:]
	return v
}

// newFire returns a zeroed wheelFire, its item pointing back at it
// (item.fire). r.mu is held.
func (r *Relay) newFire() *wheelFire {
	f := take(&r.pool.freeFires, &r.pool.fires, fireChunk)
	f.it.fire, f.it.fwd = f, &f.fwd
	return f
}

// newForwardBuf returns zeroed storage for a queue head's forward
// (forward), taken back with its item (giveBack). r.mu is held.
func (r *Relay) newForwardBuf() *forwardBuf {
	return take(&r.pool.freeFwds, &r.pool.fwds, fwdChunk)
}

// giveBack takes back a settled item for reuse (r.mu held). The caller
// holds the last reference to it: it is settled as done, so it is in no
// flight and no retries, its producer's promise (the producer's last use
// of its record) has run, and the batch that listed it is finished. An
// item that another may still refer to stays the collector's: a series
// firing from the wheel, whose next occurrence's item shares its decoded
// record (fireSeries). Items not cut by newItem or newFire (dead letters,
// cancels, cascades of a series, skips) are left alone. A dead letter or
// cancel made from a pooled item (deadItem, cancelledItem) shares its
// record, so the item it replaced, which never settles, is never taken
// back either.
func (r *Relay) giveBack(it *item) {
	p := &r.pool
	switch {
	case it.attempted && !it.finished.Load():
		// Its attempt is still out: settled as done too early (a bug,
		// which must not turn into the producer sending a zeroed record).
	case it.pair != nil:
	case it.fire != nil:
		f := it.fire
		buf := f.payload[:0]
		*f = wheelFire{}
		if cap(buf) <= keptPayload {
			f.payload = buf
		}
		p.freeFires = append(p.freeFires, f)
	case it.pooled:
		if f := it.fwd; f != nil {
			*f = forwardBuf{}
			p.freeFwds = append(p.freeFwds, f)
		}
		*it = item{}
		p.freeItems = append(p.freeItems, it)
	}
}

// attemptChunk is how many attempt contexts one allocation holds (64 of
// 56 bytes).
const attemptChunk = 64

// newAttemptCtx returns a new attemptCtx, cut from the current chunk.
// Attempt contexts are never reused: the producer may keep a record's
// Context after its promise (franz-go checks a buffered record's context
// from goroutines of its own). r.mu is held.
func (r *Relay) newAttemptCtx() *attemptCtx {
	p := &r.pool
	if len(p.actxs) == 0 {
		p.actxs = make([]attemptCtx, attemptChunk)
	}
	a := &p.actxs[0]
	p.actxs = p.actxs[1:]
	return a
}

// trim lets go of what the pool keeps for reuse, once the relay has a
// quiet iteration: the storage a burst needed is not held through the
// quiet time after it.
func (p *itemPool) trim() {
	p.freeItems, p.freeFires, p.freeFwds = nil, nil, nil
}
