package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
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

// readAhead is how long before their level time records are read into the
// wheel (policy.decide), because a burst read only at its level time goes
// out late by the time it takes to read it (docs/benchmarks.md). The cost:
// records of the level path take the wheel path (a write to the data
// directory; it holds the commit back until it fires) for up to readAhead.
const readAhead = 5 * time.Second

// Backoff bounds of a failing record's retries.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

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
		r.collectWheel(ctx, started, now, &b)
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
		ps.waitFor = time.Time{}
		// A partition whose retries fill its queue's room takes no new
		// heads: the failing records hold back their own partition only.
		for len(ps.queue) > 0 && len(b) < room && !r.crowded(ps) {
			rec := ps.queue[0]
			if ps.catchingUp(rec.Offset) || ps.knownDone(rec.Offset) || rec.Attrs.IsControl() || (r.wheel != nil && r.wheel.Holds(ps.p, rec.Offset)) {
				// Read again after a restart or a seek, but its outcome is
				// already the wheel's; or a transaction marker.
				ps.pop()
				b = append(b, &item{kind: kSkip, part: ps.p, offset: rec.Offset, level: ps.level, fromQueue: true})
				continue
			}
			d := r.pol.decide(rec, ps.level, now, ahead)
			if d.act == actWait {
				ps.waitFor = d.wakeAt
				break
			}
			if wait, ok := r.held(d.sched.Due, now); ok && d.act == actForward {
				ps.waitFor = wait // the cancel barrier (cancel.go)
				break
			}
			ps.pop()
			if d.mismatch {
				r.m.mismatched.WithLabelValues(levelLabel(ps.level)).Inc()
			}
			it := &item{part: ps.p, offset: rec.Offset, level: ps.level, fromQueue: true, orig: rec, due: d.sched.Due}
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
				it.out, it.manual = r.forwardRecord(rec, d.sched.Target, d.sched.TargetPartition, d.sched.Due, ps.p, rec.Offset)
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

// collectWheel appends the wheel's expired entries to b as forwards.
func (r *Relay) collectWheel(ctx context.Context, started *attempts, now time.Time, b *[]*item) {
	var fired []*item
	bad := make(map[int32]bool)
	_, err := r.wheel.Expire(r.fireLimit(now).UnixMilli(), r.maxBatch, func(e wheel.Entry) {
		it, ok := r.fromWheel(e)
		switch {
		case it != nil:
			fired = append(fired, it)
		case !ok:
			bad[e.Partition] = true
		}
	})
	if err != nil {
		r.wheelFailed("expire", err)
		return // the reset re-reads every partition; nothing fired is lost
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
		if ps := r.parts[it.part]; ps.fired != nil && it.offset <= ps.catchUp && it.offset >= ps.next {
			ps.fired[it.offset] = struct{}{} // to be read again: skip it then
		}
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
}

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
		r.m.wheelAdded.WithLabelValues(levelLabel(ps.level)).Inc()
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
	rec := &f.orig
	err := decodePayloadInto(rec, f.hs[:0], e.Payload)
	var s levels.Schedule
	if err == nil {
		rec.Topic, rec.Partition, rec.Offset = r.cfg.Topic, e.Partition, e.Offset
		s, err = r.pol.table.Parse(rec.Headers, rec.Timestamp)
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
	it.out, it.manual = &f.out, r.forwardInto(&f.out, f.fwd[:0], f.buf[:0], rec, s.Target, s.TargetPartition, due, e.Partition, e.Offset)
	return it, true
}

// wheelFire is what firing a wheel entry builds, in one allocation: the
// item, the decoded record and its forward, with room for their headers
// and the forward's two new header values (more grow on their own). They
// live as long as the item does.
type wheelFire struct {
	it   item
	orig kgo.Record
	out  kgo.Record
	hs   [3]kgo.RecordHeader // the producer's: a target and a schedule, often an ID
	fwd  [4]kgo.RecordHeader // the producer's own plus due-at, source and the ID
	buf  [64]byte            // due-at and source values: 13 digits, topic/partition@offset
}

// fireChunk is how many wheelFires one allocation holds (64 of 928 bytes:
// 58 KiB), because one allocation per wheelFire (a 1 KiB object with
// pointers: zeroed, typed and swept each) costs the loop's CPU per fired
// record; a chunk is zeroed in one go. A
// chunk stays in memory while one of its items does: an item lives until
// its partition's commit passes it, usually a few iterations, so mostly
// the chunks of the records in flight are held; a record set aside for
// retries holds its chunk for as long as it waits.
const fireChunk = 64

// newFire returns a zeroed wheelFire cut from the current chunk. r.mu is
// held.
func (r *Relay) newFire() *wheelFire {
	if len(r.fires) == 0 {
		r.fires = make([]wheelFire, fireChunk)
	}
	f := &r.fires[0]
	r.fires = r.fires[1:]
	return f
}

// resyncPartition forgets the partition's local state and seeks it back to
// its committed offset.
func (r *Relay) resyncPartition(ps *partState) {
	if r.wheel != nil {
		if err := r.wheel.Drop(ps.p); err != nil {
			r.wheelFailed("drop", err)
		}
	}
	ps.clearQueue()
	ps.retries, ps.flight = nil, nil // what lands late is read again
	ps.catchUp, ps.fired = -1, nil
	ps.handled, ps.next = ps.commit-1, max(ps.commit, 0)
	r.resync[ps.p] = max(ps.commit, 0)
	// What the last commit said is done above it stays done: read again,
	// it is skipped (a duplicate otherwise; in exactly-once mode a
	// duplicate that consumers would see).
	if ps.doneSet.Base == ps.commit {
		ps.known = ps.doneSet
	}
}

func (r *Relay) forwardRecord(rec *kgo.Record, target string, partition int32, due time.Time, p int32, off int64) (*kgo.Record, bool) {
	out := &kgo.Record{
		Topic:   target,
		Key:     rec.Key,
		Value:   rec.Value,
		Headers: levels.ForwardHeadersFrom(rec.Headers, due, r.cfg.Topic, p, off),
	}
	if partition >= 0 {
		out.Partition = partition
		return out, true
	}
	return out, false
}

// forwardInto is forwardRecord building *out (overwritten) with its
// headers in hs's and buf's storage (levels.AppendForwardHeaders); it
// reports whether the partition is chosen.
func (r *Relay) forwardInto(out *kgo.Record, hs []kgo.RecordHeader, buf []byte, rec *kgo.Record, target string, partition int32, due time.Time, p int32, off int64) bool {
	*out = kgo.Record{
		Topic:   target,
		Key:     rec.Key,
		Value:   rec.Value,
		Headers: levels.AppendForwardHeaders(hs, buf, rec.Headers, due, r.cfg.Topic, p, off),
	}
	if partition >= 0 {
		out.Partition = partition
		return true
	}
	return false
}

func (r *Relay) cascadeRecord(rec *kgo.Record, due, now time.Time) *kgo.Record {
	tab := r.pol.table
	return &kgo.Record{
		Topic:     r.cfg.Topic,
		Partition: tab.PartitionFor(tab.LevelFor(due.Sub(now)), rec.Key),
		Key:       rec.Key,
		Value:     rec.Value,
		Headers:   levels.CascadeHeadersAt(rec.Headers, due, rec.Timestamp),
	}
}

// deadLetterRecord is rec for the dead-letter topic: everything kept, plus
// the reason, the source and the original timestamp (the dead letter's own
// timestamp is the time it is sent).
func (r *Relay) deadLetterRecord(rec *kgo.Record, p int32, off int64, reason string) *kgo.Record {
	hs := levels.DeadLetterHeaders(rec.Headers, reason, levels.Source(r.cfg.Topic, p, off))
	if levels.OriginalTimestamp(rec.Headers, time.Time{}).IsZero() { // a cascaded copy has it already
		hs = append(hs, kgo.RecordHeader{Key: levels.HeaderOriginalTimestamp, Value: fmt.Appendf(nil, "%d", rec.Timestamp.UnixMilli())})
	}
	return &kgo.Record{Topic: r.cfg.DLQTopic, Key: rec.Key, Value: rec.Value, Headers: hs}
}

// deadItem is the dead letter that replaces it, a record its target
// refuses; the original record goes to the dead-letter topic intact.
func (r *Relay) deadItem(it *item, reason, detail string) *item {
	r.log.Warn("dead-lettering", "source", levels.Source(r.cfg.Topic, it.part, it.offset), "reason", detail)
	return &item{
		kind: kDead, part: it.part, offset: it.offset, level: it.level, fromQueue: it.fromQueue,
		orig: it.orig, due: it.due, reason: reason, detail: detail, pair: it.pair,
		out: r.deadLetterRecord(it.orig, it.part, it.offset, detail),
	}
}

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
// Each attempt is a fresh copy of it.out stamped with now, so franz-go's
// delivery timeout (counted from the record's timestamp) is never spent
// before the attempt is sent, however old the source record or however
// long the retries took.
func (r *Relay) startProduce(ctx context.Context, at *attempts, it *item, now time.Time) {
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
	r.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
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
	})
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
		r.startProduce(ctx, at, it, r.now())
		r.mu.Unlock()
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

// errClass is what a failed produce means for its record.
type errClass int

const (
	errUnknown      errClass = iota // not classified: retried up to KDELAY_RETRY_TIMEOUT, then dead-lettered
	errRetriable                    // the cluster will get better: retried without bound
	errTooLarge                     // the record (or its batch) exceeds a size limit
	errMissing                      // the target topic does not exist (yet)
	errBadPartition                 // kdelay-target-partition does not exist in the target
	errRejected                     // the target refuses the record for good
)

// classify sorts a produce error by its type, never by its text.
func classify(err error) errClass {
	var pe *PartitionError
	switch {
	case errors.As(err, &pe):
		return errBadPartition
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return errTooLarge
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return errMissing
	case errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.PolicyViolation), errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.CorruptMessage), errors.Is(err, kerr.InvalidTimestamp):
		return errRejected
	case errors.Is(err, errTxnAborted), kerr.IsRetriable(err), errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, context.DeadlineExceeded), isNetErr(err):
		return errRetriable
	}
	return errUnknown
}

// onFailure decides what happens to an item whose produce failed: the item
// itself (or the dead letter that replaces it) is returned, to be produced
// again at its nextTry. Nothing is ever dropped.
func (r *Relay) onFailure(it *item, now time.Time) *item {
	err := it.err
	if it.firstFail.IsZero() {
		it.firstFail = now
	}
	failing := now.Sub(it.firstFail)
	src := levels.Source(r.cfg.Topic, it.part, it.offset)
	var next *item
	reason := "retriable"
	switch c := classify(err); {
	case it.kind == kDead && c == errTooLarge && it.out.Value != nil:
		// Too large even for the dead-letter topic: keep the key and
		// headers there, say so, and leave the value to the delay topic.
		r.log.Error("dead letter too large; sending it without its value", "source", src, "bytes", len(it.out.Value), "err", err)
		next = r.deadItem(it, it.reason, fmt.Sprintf("%s; value of %d bytes dropped: too large for the dead-letter topic (%v)", it.detail, len(it.out.Value), err))
		next.out.Value = nil
		reason = "dead_letter_too_large"
	case it.kind == kDead:
		// The dead-letter topic itself fails: the one case that waits,
		// loudly. Nothing may be dropped.
		r.log.Error("dead-letter produce failed; retrying (its partition's commit waits)", "topic", r.cfg.DLQTopic, "source", src, "failing_for", failing.Round(time.Millisecond), "err", err)
		reason = "dead_letter"
	case c == errTooLarge && !it.isolate:
		it.isolate = true // a whole batch may have failed for one record
		it.nextTry = now
		reason = "too_large"
	case c == errTooLarge:
		next = r.deadItem(it, "record_too_large", fmt.Sprintf("record too large for topic %q: %v", it.out.Topic, err))
	case c == errMissing && failing >= r.cfg.TargetMissingTimeout:
		next = r.deadItem(it, "target_missing", fmt.Sprintf("target topic %q missing for %s", it.out.Topic, r.cfg.TargetMissingTimeout))
	case c == errMissing:
		reason = "target_missing"
	case c == errBadPartition:
		next = r.deadItem(it, "bad_target_partition", err.Error())
	case c == errRejected:
		next = r.deadItem(it, "target_rejected", fmt.Sprintf("topic %q rejected the record: %v", it.out.Topic, err))
	case c == errUnknown && failing >= r.cfg.RetryTimeout:
		next = r.deadItem(it, "produce_failed", fmt.Sprintf("produce to %q failed for %s: %v", it.out.Topic, failing.Round(time.Millisecond), err))
	case c == errUnknown:
		reason = "unclassified"
	}
	if next != nil {
		next.nextTry = now
		return next
	}
	r.m.retries.WithLabelValues(reason).Inc()
	if it.kind != kDead {
		r.log.Warn("produce failed; retrying", "topic", it.out.Topic, "source", src, "reason", reason, "err", err)
	}
	if !it.nextTry.After(now) {
		it.backoff = min(max(2*it.backoff, minBackoff), maxBackoff)
		it.nextTry = now.Add(it.backoff)
	}
	return it
}

// settle sorts the outcomes that are in: failed items are set aside as
// retries of their partition, the others are done. It returns the items
// that are done.
func (r *Relay) settle(b []*item, now time.Time) []*item {
	done := b[:0:0]
	for _, it := range b {
		if it.out != nil && it.err != nil {
			next := r.onFailure(it, now)
			if ps := r.parts[it.part]; ps != nil {
				ps.retries = append(ps.retries, next)
			} // else revoked meanwhile: its new owner re-reads it
			continue
		}
		done = append(done, it)
	}
	return done
}

// finish records what is done: the handled watermark advanced by this
// iteration's queue heads (b), the outcomes that are in (of this iteration
// or an earlier one) settled, wheel entries done, the wheel flushed.
// Records in flight or set aside for a retry hold back their partition's
// commit and its persisted watermark.
//
// flush says whether to flush the wheel; exactly-once mode flushes only
// after its transaction committed.
func (r *Relay) finish(b []*item, flush bool) {
	touched := make(map[int32]int64) // partition -> highest handled offset of the batch (-1: none)
	var in []*item
	for _, it := range b {
		h, ok := touched[it.part]
		if !ok {
			h = -1
		}
		if it.fromQueue {
			h = max(h, it.offset)
		}
		touched[it.part] = h
		if it.out == nil {
			in = append(in, it) // into the wheel: nothing to produce
		}
	}
	for p, ps := range r.parts {
		if landed := ps.takeFinished(); len(landed) > 0 {
			in = append(in, landed...)
			if _, ok := touched[p]; !ok {
				touched[p] = -1
			}
		}
	}
	settled := r.settle(in, r.now())
	if len(settled) > 0 {
		r.progress()
	}
	for _, it := range settled {
		if ps := r.parts[it.part]; ps != nil {
			ps.settled++
		}
		switch it.kind {
		case kForward, kFire:
			ls := r.m.level(it.level)
			if it.kind == kFire {
				r.wheelDone(it)
				ls.forwardedWheel.Inc()
			} else {
				ls.forwardedDirect.Inc()
			}
			ls.lateness.Observe(it.ackedAt.Sub(it.due).Seconds())
			ls.sendLateness.Observe(float64(it.handedNs-it.due.UnixNano()) / 1e9)
		case kCascade:
			r.m.cascaded.WithLabelValues(levelLabel(it.level)).Inc()
			if it.pair != nil {
				r.nextSettled(it) // a series' next occurrence (recur.go)
			}
		case kSkip:
			if !it.fromQueue {
				r.wheelDone(it) // a duplicate series firing from the wheel (recur.go)
			}
		case kDead:
			r.m.deadLettered.WithLabelValues(levelLabel(it.level), it.reason).Inc()
			if !it.fromQueue {
				r.wheelDone(it)
			}
		case kCancelled:
			r.cancelDone(it)
		}
	}
	for p, h := range touched {
		ps := r.parts[p]
		if ps == nil {
			continue
		}
		ps.handled = max(ps.handled, h)
		if r.wheel != nil && ps.handled >= 0 {
			// The persisted watermark stays below a record in flight or
			// being retried: a restart must read it again.
			r.wheel.SetHandled(p, min(ps.handled, ps.lowestUnsettled(true)-1))
		}
	}
	if flush && r.wheel != nil {
		if err := r.wheel.Flush(); err != nil {
			r.wheelFailed("flush", err)
		}
	}
}

// crowded reports whether the partition's records in flight and set aside
// fill its room: it then takes no new heads, so failing records hold back
// their own partition only.
func (r *Relay) crowded(ps *partState) bool {
	return len(ps.retries)+len(ps.flight) >= r.queueCap()
}

func (r *Relay) wheelDone(it *item) {
	if !it.pairDone() || r.wheel == nil {
		return // reset: the partition is re-read from its commit
	}
	if err := r.wheel.Done(it.part, it.offset); err != nil {
		r.wheelFailed("done", err)
	}
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
