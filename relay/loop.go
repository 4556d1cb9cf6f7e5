package relay

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// loop runs the relay's iterations (poll, decide, produce, settle, commit:
// the package doc) until ctx ends, then lets what is in flight land and
// commits it. work outlives ctx by the shutdown timeout.
func (r *Relay) loop(ctx, work context.Context) error {
	defer func() { // what the last iteration and the shutdown counted
		r.mu.Lock()
		r.m.flushCounts()
		r.mu.Unlock()
	}()
	for ctx.Err() == nil {
		r.mu.Lock()
		if r.fatal != nil {
			r.mu.Unlock()
			return r.fatal
		}
		r.maintainWheel(r.now())
		staging := r.stageWheel(r.now())
		wake := r.nextWake(r.now())
		r.warmUp(ctx, r.now())
		r.wantRound(wake)
		if staging && (wake.IsZero() || wake.After(r.now())) {
			wake = r.now().Add(time.Millisecond) // poll without blocking, then scan on
		}
		if r.suspect {
			wake = r.confirmAt // nothing is decided until the membership is confirmed
		}
		moved := r.barrierMoved
		landed, commitDue := r.mode.waits()
		var committed <-chan struct{}
		if !commitDue.IsZero() {
			committed = r.committing // a commit waits for the one in flight
		}
		r.mu.Unlock()
		// Wake at least once a second so readiness and gauges stay fresh.
		if idle := r.now().Add(r.maxPoll); wake.IsZero() || wake.After(idle) {
			wake = idle
		}
		// A timeout on the relay's own clock (Options.Now), not a
		// deadline on the wall clock.
		pollCtx, cancel := context.WithTimeout(ctx, wake.Sub(r.now()))
		r.mu.Lock()
		r.pollCancel = cancel
		r.mu.Unlock()
		if landed != nil || moved != nil || committed != nil {
			// The last batch's outcomes are still coming: wake when
			// they are in, to settle and commit them. Records held by
			// the cancel barrier: wake when it moves. A commit due
			// behind the one in flight: wake when that is done.
			go func() {
				select {
				case <-landed:
					cancel()
				case <-moved:
					cancel()
				case <-committed:
					cancel()
				case <-pollCtx.Done():
				}
			}()
		}
		fetches := r.cl.PollRecords(pollCtx, r.maxBatch)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				r.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if _, gen := r.cl.GroupMetadata(); gen >= 0 {
			r.joined.Store(true)
		}
		// Exactly once: the transaction begins once the poll is back, so
		// that no rebalance falls inside it (they wait for AllowRebalance).
		// Records polled while it cannot begin stay queued.
		began := r.mode.begin(ctx)

		if r.suspect && !r.now().Before(r.confirmAt) {
			// Asked at most every confirmRetry: a poll that returns
			// records early must not turn the check into a spin.
			if r.confirmMember(work) {
				r.suspect = false
				r.log.Info("group membership confirmed")
			} else {
				r.confirmAt = r.now().Add(confirmRetry)
			}
		}

		// Rebalances are blocked from here to AllowRebalance: the seeks
		// and the batch see one assignment.
		r.mu.Lock()
		seeked := r.applyResync()
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if ps := r.parts[fp.Partition]; ps != nil && fp.Topic == r.cfg.Topic && fp.HighWatermark >= 0 {
				ps.hwm = fp.HighWatermark
			}
		})
		fetches.EachRecord(func(rec *kgo.Record) {
			if !seeked[rec.Partition] { // polled before the seek: read again after it
				r.enqueue(rec)
			}
		})
		now := r.now()
		// A loop that stood still since it last decided a batch (the
		// process frozen or starved, anywhere in the iteration) for long
		// enough to have missed its session may have lost its partitions
		// without knowing yet: at least once, nothing fences its forwards,
		// so it forwards nothing until the group coordinator confirms it
		// is still a member (next iterations, confirmMember).
		if !r.mode.transactional() && !r.suspect && !r.lastIter.IsZero() && now.Sub(r.lastIter) > r.standStill() {
			r.suspect, r.confirmAt = true, now
			r.log.Warn("the loop stood still past the session timeout; confirming group membership before forwarding", "stood_still", now.Sub(r.lastIter).Round(time.Millisecond).String())
		}
		r.lastIter = now
		var b, solo []*item
		started := newAttempts()
		if r.suspect || !began {
			started.release() // records stay queued until membership is confirmed or lost, or a transaction begins
		} else {
			b, solo, started = r.collect(work, now)
		}
		r.mu.Unlock()

		if err := r.mode.end(work, now, began, b, solo, started); err != nil {
			r.cl.AllowRebalance() // the batch is handed back (end logged it)
			return nil
		}
		r.mu.Lock()
		r.updatePauses()
		r.updateGauges(now)
		r.m.flushCounts()
		r.mu.Unlock()
		r.m.ready.Set(boolFloat(r.Ready()))
		r.cl.AllowRebalance()
		r.idle(now, len(b)+len(solo) > 0)
	}
	r.mode.stop(work)
	return nil
}

// idle calls onIdle once the loop has had nothing to handle for idleAfter
// since it last had (busy says whether this iteration had).
func (r *Relay) idle(now time.Time, busy bool) {
	switch {
	case busy:
		r.busyAt = now
	case !r.busyAt.IsZero() && now.Sub(r.busyAt) >= r.idleAfter:
		r.busyAt = time.Time{}
		if r.onIdle != nil {
			r.onIdle()
		}
	}
}

// enqueue appends a polled record to its partition's queue, skipping what
// this relay already handled (restart with an intact wheel) or already
// queued (a seek after assignment).
func (r *Relay) enqueue(rec *kgo.Record) {
	ps := r.parts[rec.Partition]
	if ps == nil || rec.Topic != r.cfg.Topic {
		return // not ours (any more); its owner reads it
	}
	if rec.Offset <= ps.led.handled || rec.Offset < ps.next {
		return
	}
	ps.next = rec.Offset + 1
	ps.queue = append(ps.queue, rec)
	ps.bytes += recordBytes(rec)
	if !rec.Attrs.IsControl() {
		r.m.level(ps.level).nConsumed++
	}
}

// fetchPartitionBytes is the most a fetch asks of one partition (Kafka
// returns at least one whole batch, however large, so a larger record is
// still read). franz-go's default is 1 MiB. A fetched record keeps the
// whole response or decompressed batch it was read from alive until the
// relay lets it go, so a smaller fetch bounds the memory of a relay
// ingesting as fast as it can at no cost in throughput
// (docs/benchmarks.md).
const fetchPartitionBytes = 128 << 10
