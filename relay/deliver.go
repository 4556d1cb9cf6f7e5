package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/wheel"
)

// kind is where an item of a batch comes from and goes to.
type kind int

const (
	kForward  kind = iota // queue head, due: produce to the target
	kWheelAdd             // queue head, put into the wheel: nothing to produce
	kCascade              // queue head, beyond the horizon: produce to the delay topic
	kDead                 // produce to the dead-letter topic
	kFire                 // wheel entry, due: produce to the target
)

// item is one record of a batch.
type item struct {
	kind      kind
	part      int32
	offset    int64
	level     int
	fromQueue bool        // a queue head (its offset advances the watermark)
	orig      *kgo.Record // the delay-topic record as produced (key, value, headers)
	out       *kgo.Record // what to produce; nil for kWheelAdd
	due       time.Time
	reason    string // dead-letter reason label
	detail    string // dead-letter reason text

	err       error
	firstMiss time.Time // first "unknown topic" error
	isolate   bool      // retry alone: a batch failed as too large
	ackedAt   time.Time
}

// collect takes what can go at now: the wheel's expired entries first, then
// the ready heads of every partition queue, up to maxBatch items. Each item
// with something to produce is handed to the producer at once, so the
// produce round trip overlaps with deciding the rest; started is done when
// every first attempt has its outcome.
func (r *Relay) collect(ctx context.Context, now time.Time) (b []*item, started *sync.WaitGroup) {
	started = new(sync.WaitGroup)
	if r.firstAsg {
		var bad []*partState
		_, err := r.wheel.Expire(now.UnixMilli(), r.maxBatch, func(e wheel.Entry) {
			it, ok := r.fromWheel(e)
			if it != nil {
				b = append(b, it)
			} else if !ok {
				bad = append(bad, r.parts[e.Partition])
			}
		})
		if err != nil {
			r.log.Error("wheel expire", "err", err)
		}
		for _, ps := range bad { // after Expire: Drop must not run inside it
			r.resyncPartition(ps)
		}
		if len(bad) > 0 {
			b = slices.DeleteFunc(b, func(it *item) bool { return slices.Contains(bad, r.parts[it.part]) })
		}
		for _, it := range b {
			r.startProduce(ctx, started, it)
		}
	}
	for _, ps := range r.parts {
		ps.waitFor = time.Time{}
		for len(ps.queue) > 0 && len(b) < r.maxBatch {
			rec := ps.queue[0]
			d := r.pol.decide(rec, ps.level, now)
			if d.act == actWait {
				ps.waitFor = d.levelTime
				break
			}
			ps.queue[0] = nil
			ps.queue = ps.queue[1:]
			if d.mismatch {
				r.m.mismatched.WithLabelValues(levelLabel(ps.level)).Inc()
			}
			it := &item{part: ps.p, offset: rec.Offset, level: ps.level, fromQueue: true, orig: rec, due: d.sched.Due}
			switch d.act {
			case actForward:
				it.kind, it.out = kForward, r.forwardRecord(rec, d.sched, ps.p, rec.Offset)
			case actWheel:
				err := r.wheel.Add(now.UnixMilli(), wheel.Entry{
					Due: d.sched.Due.UnixMilli(), Partition: ps.p, Offset: rec.Offset, Payload: encodePayload(nil, rec),
				})
				if err == nil {
					it.kind = kWheelAdd
					r.m.wheelAdded.WithLabelValues(levelLabel(ps.level)).Inc()
					break
				}
				r.log.Warn("wheel add failed; cascading instead", "partition", ps.p, "offset", rec.Offset, "err", err)
				it.kind, it.out = kCascade, r.cascadeRecord(rec, d.sched, now)
			case actCascade:
				it.kind, it.out = kCascade, r.cascadeRecord(rec, d.sched, now)
			case actDeadLetter:
				it.kind, it.reason, it.detail = kDead, d.reason, d.detail
				it.out = r.deadLetterRecord(rec, ps.p, rec.Offset, d.detail)
			}
			if it.out != nil {
				r.startProduce(ctx, started, it)
			}
			b = append(b, it)
		}
		if len(ps.queue) == 0 {
			ps.queue = nil // let the backing array go
		}
	}
	return b, started
}

// fromWheel turns a fired wheel entry into a forward. It returns nil, true
// for an entry of a partition no longer owned (its owner re-reads it), and
// nil, false for an entry that does not decode.
func (r *Relay) fromWheel(e wheel.Entry) (*item, bool) {
	ps := r.parts[e.Partition]
	if ps == nil {
		return nil, true
	}
	rec, err := decodePayload(e.Payload)
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
	return &item{
		kind: kFire, part: e.Partition, offset: e.Offset, level: ps.level, orig: rec,
		out: r.forwardRecord(rec, s, e.Partition, e.Offset), due: time.UnixMilli(e.Due),
	}, true
}

// resyncPartition forgets the partition's local state and seeks it back to
// its committed offset.
func (r *Relay) resyncPartition(ps *partState) {
	if err := r.wheel.Drop(ps.p); err != nil {
		r.log.Error("wheel drop", "partition", ps.p, "err", err)
	}
	ps.queue, ps.handled, ps.next = nil, ps.commit-1, ps.commit
	r.resync[ps.p] = max(ps.commit, 0)
}

func (r *Relay) forwardRecord(rec *kgo.Record, s levels.Schedule, p int32, off int64) *kgo.Record {
	out := &kgo.Record{
		Topic:   s.Target,
		Key:     rec.Key,
		Value:   rec.Value,
		Headers: levels.ForwardHeaders(rec.Headers, s.Due, levels.Source(r.cfg.Topic, p, off)),
	}
	if s.TargetPartition >= 0 {
		out.Partition = s.TargetPartition
		out.Context = withManual(context.Background())
	}
	return out
}

func (r *Relay) cascadeRecord(rec *kgo.Record, s levels.Schedule, now time.Time) *kgo.Record {
	tab := r.pol.table
	return &kgo.Record{
		Topic:     r.cfg.Topic,
		Partition: tab.PartitionFor(tab.LevelFor(s.Due.Sub(now)), rec.Key),
		Key:       rec.Key,
		Value:     rec.Value,
		Headers:   levels.CascadeHeaders(rec.Headers, s.Due),
		Timestamp: now,
		Context:   withManual(context.Background()),
	}
}

func (r *Relay) deadLetterRecord(rec *kgo.Record, p int32, off int64, reason string) *kgo.Record {
	return &kgo.Record{
		Topic:     r.cfg.DLQTopic,
		Key:       rec.Key,
		Value:     rec.Value,
		Headers:   levels.DeadLetterHeaders(rec.Headers, reason, levels.Source(r.cfg.Topic, p, off)),
		Timestamp: rec.Timestamp,
	}
}

// deliver waits for the first produce attempt of every item of b, started
// by collect as each item was decided, and produces the failed ones again.
// Retriable errors are retried with backoff for as long as it takes;
// records the target refuses for good (too large, missing beyond the
// timeout, bad partition) are dead-lettered instead. It returns an error
// only when ctx ends first.
func (r *Relay) deliver(ctx context.Context, b []*item, started *sync.WaitGroup) error {
	started.Wait()
	var send []*item
	for _, it := range b {
		if it.out == nil || it.err == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.failed(it) {
			send = append(send, it)
		}
	}
	backoff := 100 * time.Millisecond
	for len(send) > 0 {
		r.stalled.Store(true)
		r.m.ready.Set(0)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
		r.produce(ctx, send)
		var retry []*item
		for _, it := range send {
			if it.err == nil {
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if r.failed(it) {
				retry = append(retry, it)
			}
		}
		send = retry
	}
	r.stalled.Store(false)
	return nil
}

// startProduce hands one item to the producer; its outcome lands in the
// item when wg is done.
func (r *Relay) startProduce(ctx context.Context, wg *sync.WaitGroup, it *item) {
	it.err = nil
	rec := it.out
	if rec.Context == nil {
		rec.Context = ctx
	}
	wg.Add(1)
	r.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		it.err = err
		it.ackedAt = r.now()
		wg.Done()
	})
}

// produce sends items concurrently, except isolated ones, which go one at a
// time, and records each outcome in the item.
func (r *Relay) produce(ctx context.Context, items []*item) {
	var wg sync.WaitGroup
	for _, it := range items {
		if !it.isolate {
			r.startProduce(ctx, &wg, it)
		}
	}
	wg.Wait()
	for _, it := range items {
		if it.isolate {
			r.startProduce(ctx, &wg, it)
			wg.Wait()
		}
	}
}

// failed decides what happens to an item whose produce failed and reports
// whether it must be produced again (as is, or turned into a dead letter).
func (r *Relay) failed(it *item) bool {
	err := it.err
	reason := "retriable"
	tooLarge := errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
	switch {
	case it.kind == kDead && tooLarge && it.out.Value != nil:
		// Too large even for the dead-letter topic: keep the key and
		// headers there, say so, and leave the value to the delay topic.
		r.log.Error("dead letter too large; sending it without its value", "source", levels.Source(r.cfg.Topic, it.part, it.offset), "bytes", len(it.out.Value), "err", err)
		out := *it.out
		out.Value = nil
		out.Headers = levels.DeadLetterHeaders(it.orig.Headers,
			fmt.Sprintf("%s; value of %d bytes dropped: too large for the dead-letter topic (%v)", it.detail, len(it.out.Value), err),
			levels.Source(r.cfg.Topic, it.part, it.offset))
		it.out = &out
		reason = "dead_letter_too_large"
	case it.kind == kDead:
		// The dead-letter topic itself fails: never drop, keep trying.
		r.log.Error("dead-letter produce failed; retrying", "topic", r.cfg.DLQTopic, "source", levels.Source(r.cfg.Topic, it.part, it.offset), "err", err)
		reason = "dead_letter"
	case tooLarge:
		if !it.isolate {
			it.isolate = true // a whole batch may have failed for one record
			reason = "too_large"
			break
		}
		r.toDeadLetter(it, "record_too_large", fmt.Sprintf("record too large for topic %q: %v", it.out.Topic, err))
		return true
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		now := r.now()
		if it.firstMiss.IsZero() {
			it.firstMiss = now
		}
		if now.Sub(it.firstMiss) >= r.cfg.TargetMissingTimeout {
			r.toDeadLetter(it, "target_missing", fmt.Sprintf("target topic %q missing for %s", it.out.Topic, r.cfg.TargetMissingTimeout))
			return true
		}
		reason = "target_missing"
	case strings.Contains(err.Error(), "invalid record partitioning choice"):
		r.toDeadLetter(it, "bad_target_partition", fmt.Sprintf("target partition %d does not exist in %q", it.out.Partition, it.out.Topic))
		return true
	case errors.Is(err, kerr.InvalidTopicException) || errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.PolicyViolation) || errors.Is(err, kerr.InvalidRecord):
		r.toDeadLetter(it, "target_rejected", fmt.Sprintf("topic %q rejected the record: %v", it.out.Topic, err))
		return true
	}
	r.m.retries.WithLabelValues(reason).Inc()
	r.log.Warn("produce failed; retrying", "topic", it.out.Topic, "source", levels.Source(r.cfg.Topic, it.part, it.offset), "err", err)
	return true
}

// toDeadLetter turns a forward or cascade the target refuses into a dead
// letter; the original record goes to the dead-letter topic intact.
func (r *Relay) toDeadLetter(it *item, reason, detail string) {
	r.log.Warn("dead-lettering", "source", levels.Source(r.cfg.Topic, it.part, it.offset), "reason", detail)
	it.kind, it.reason, it.detail, it.isolate, it.err = kDead, reason, detail, false, nil
	it.out = r.deadLetterRecord(it.orig, it.part, it.offset, detail)
}

// finish records the outcome of a delivered batch: wheel entries done, the
// handled watermark advanced, the wheel flushed, then offsets committed at
// the lowest offset not yet done of each touched partition.
func (r *Relay) finish(ctx context.Context, b []*item) {
	touched := make(map[int32]int64) // partition -> highest handled offset of the batch (-1: none)
	for _, it := range b {
		lvl := levelLabel(it.level)
		switch it.kind {
		case kForward, kFire:
			path := "direct"
			if it.kind == kFire {
				path = "wheel"
				if err := r.wheel.Done(it.part, it.offset); err != nil {
					r.log.Error("wheel done", "partition", it.part, "offset", it.offset, "err", err)
				}
			}
			r.m.forwarded.WithLabelValues(lvl, path).Inc()
			r.m.lateness.WithLabelValues(lvl).Observe(it.ackedAt.Sub(it.due).Seconds())
		case kCascade:
			r.m.cascaded.WithLabelValues(lvl).Inc()
		case kDead:
			r.m.deadLettered.WithLabelValues(lvl, it.reason).Inc()
			if !it.fromQueue {
				if err := r.wheel.Done(it.part, it.offset); err != nil {
					r.log.Error("wheel done", "partition", it.part, "offset", it.offset, "err", err)
				}
			}
		}
		h, ok := touched[it.part]
		if !ok {
			h = -1
		}
		if it.fromQueue {
			h = max(h, it.offset)
		}
		touched[it.part] = h
	}
	for p, h := range touched {
		if ps := r.parts[p]; ps != nil && h > ps.handled {
			ps.handled = h
			r.wheel.SetHandled(p, h)
		}
	}
	if err := r.wheel.Flush(); err != nil {
		// Not fatal for correctness: commits never pass what the wheel
		// holds, and a record whose handled mark did not persist is re-read.
		r.log.Error("wheel flush", "err", err)
	}
	r.commit(ctx)
}

// commit commits, for each owned partition whose commit can advance, the
// lowest offset not yet done: the lower of the first wheel entry still
// pending and the first offset not handled. It runs every iteration, so a
// failed commit is retried even when no new record arrives.
func (r *Relay) commit(ctx context.Context) {
	offsets := make(map[int32]kgo.EpochOffset)
	for p, ps := range r.parts {
		if ps.handled < 0 {
			continue
		}
		off := ps.handled + 1
		if low, ok := r.wheel.LowestPending(p); ok && low < off {
			off = low
		}
		if off > ps.commit {
			offsets[p] = kgo.EpochOffset{Epoch: -1, Offset: off}
		}
	}
	if len(offsets) == 0 {
		return
	}
	start := time.Now()
	var cerr error
	r.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{r.cfg.Topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
						cerr = fmt.Errorf("partition %d: %w", p.Partition, e)
						continue
					}
					if ps := r.parts[p.Partition]; ps != nil {
						ps.commit = offsets[p.Partition].Offset
					}
				}
			}
		})
	r.m.commitTime.Observe(time.Since(start).Seconds())
	if cerr != nil {
		// The next batch commits again; meanwhile a crash would re-deliver
		// more, never lose anything.
		r.log.Warn("commit failed", "err", cerr)
	}
}
