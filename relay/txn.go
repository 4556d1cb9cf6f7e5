package relay

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Exactly-once delivery (KDELAY_DELIVERY=exactly-once): each iteration of
// the loop is one Kafka transaction. The forwards, cascades and dead
// letters of the batch and the offset commit (with its metadata: the level
// table and the done set) commit together or not at all, through franz-go's
// GroupTransactSession: the commit is a TxnOffsetCommit carrying the
// group's generation, so a relay that was frozen past its session timeout
// (a zombie) cannot commit anything once it wakes up (KIP-447).
//
// The loop waits for every produce of the batch (no 250 ms cut-off: a
// transaction cannot commit with a record in flight). If any produce
// failed, the transaction is aborted and every record of it is set aside
// and produced again in the next one, the failed ones classified as in
// at-least-once mode (a refused one becomes a dead letter). If the commit
// itself fails, the partitions of the batch are read again from their
// committed offsets, their wheel entries dropped: the wheel's view is only
// written to disk after a commit, so it never runs ahead of Kafka.

// exactlyOnceMode is the exactly-once delivery: one transaction per
// iteration of the loop.
type exactlyOnceMode struct {
	r    *Relay
	sess *kgo.GroupTransactSession
	id   string // the transactional ID (transactionalID)
	// open: a transaction has begun and not ended (the loop's own). An
	// iteration with nothing to produce or commit leaves it open for the
	// next one (endTxn).
	open   bool
	fences []time.Time // recent fences of the producer (fenced)
}

func (e *exactlyOnceMode) transactional() bool                 { return true }
func (e *exactlyOnceMode) waits() (<-chan struct{}, time.Time) { return nil, time.Time{} }

// handOver has nothing to do: every transaction ended with its iteration,
// so nothing is in flight when a partition is revoked.
func (e *exactlyOnceMode) handOver(context.Context, []int32) {}

// begin begins the iteration's transaction (beginTxn).
func (e *exactlyOnceMode) begin(ctx context.Context) bool { return e.beginTxn(ctx) }

// end waits for the batch's produces and commits the transaction with the
// batch's offsets, or aborts it (endTxn). An iteration whose transaction
// did not begin decided nothing: it only flushes the wheel.
func (e *exactlyOnceMode) end(ctx context.Context, _ time.Time, began bool, b, solo []*item, started *attempts) error {
	r := e.r
	if !began {
		r.mu.Lock()
		r.finish(b, true)
		r.mu.Unlock()
		return nil
	}
	if err := e.endTxn(ctx, b, solo, started); err != nil {
		r.log.Warn("shutdown: transaction aborted, batch handed back", "records", len(b)+len(solo), "err", err)
		return err
	}
	return nil
}

// stop aborts the transaction left open empty; every other one ended with
// its iteration.
func (e *exactlyOnceMode) stop(context.Context) {
	if e.open { // empty: nothing of it reached the broker
		e.abortTxn("shutdown")
	}
}

// errTxnAborted marks the records of an aborted transaction that were
// produced fine: they are produced again in the next one.
var errTxnAborted = errors.New("relay: transaction aborted")

// txnTimeout is the transaction timeout asked of the broker: the group's
// session timeout. A relay that dies or freezes mid-transaction holds back
// read_committed consumers of its targets, and the next owner of its
// partitions (whose committed offsets are pending until then), no longer
// than the group takes to move those partitions. A restart with the same
// transactional ID aborts the open transaction at once.
func txnTimeout(session time.Duration) time.Duration { return session }

// txnWait bounds how long a transaction waits for its produces, and then
// for its commit, before it is aborted and its records set aside: half the
// transaction timeout, at most 8 s, so that both fit in it.
func txnWait(session time.Duration) time.Duration {
	return min(8*time.Second, txnTimeout(session)/2)
}

// transactionalID is the relay's transactional ID, stable across its
// restarts and unique among live relays: KDELAY_TRANSACTIONAL_ID, else
// kdelay-<group>-<KDELAY_INSTANCE_ID> (a pod name: a StatefulSet pod keeps
// it), else the one its data directory keeps (dataDirTxnID). Two live
// relays with one ID fence each other: the older one stops with
// ErrFenced.
func (r *Relay) transactionalID() (string, error) {
	if r.cfg.TransactionalID != "" {
		return r.cfg.TransactionalID, nil
	}
	if r.cfg.InstanceID != "" {
		return "kdelay-" + r.cfg.Group + "-" + r.cfg.InstanceID, nil
	}
	host, _ := os.Hostname()
	return dataDirTxnID(r.cfg.DataDir, r.bind.ClusterID, r.cfg.Group, host)
}

// txnVersions caps TxnOffsetCommit at version 4, which keeps franz-go on
// the explicit AddPartitionsToTxn and AddOffsetsToTxn requests (KIP-890
// part 1) instead of the implicit adds of transaction version 2: there a
// TxnOffsetCommit sent while the previous transaction is still completing
// is refused with CONCURRENT_TRANSACTIONS and franz-go aborts the
// transaction, where AddOffsetsToTxn's refusal is retried in place.
func txnVersions() kgo.Opt {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	return kgo.MaxVersions(v)
}

// ErrFenced is returned by [Relay.Run] in exactly-once mode when another
// live producer uses the relay's transactional ID (fenced fenceLimit times
// within fenceWindow), when the producer cannot recover from a fence, or
// when the principal may not use the ID: the relay stops forwarding at
// once and leaves its group, and the process exits non-zero for its
// supervisor.
var ErrFenced = errors.New("relay: fenced: another producer took over this relay's transactional ID")

// fenceLimit fences within fenceWindow make a relay stop with ErrFenced:
// one fence is what a relay that stood still past its transaction timeout
// meets on waking (the coordinator aborted its transaction and bumped the
// epoch), fences in a row mean another live producer uses the ID. The
// relay goes on after a fence that franz-go recovers its producer ID
// from; after one it cannot (PRODUCER_FENCED), the next Begin fails and
// the relay stops with ErrFenced however few fences it counted.
const (
	fenceLimit  = 3
	fenceWindow = time.Minute
)

// fenced records a fence of the relay's producer; r.mu is held.
func (e *exactlyOnceMode) fenced(err error) {
	r := e.r
	now := r.now()
	e.fences = append(e.fences, now)
	for len(e.fences) > 0 && now.Sub(e.fences[0]) > fenceWindow {
		e.fences = e.fences[1:]
	}
	if len(e.fences) >= fenceLimit {
		r.fatal = fmt.Errorf("%w: transactional ID %s, %d times in %s: %w", ErrFenced, e.id, len(e.fences), fenceWindow, err)
		return
	}
	r.log.Warn("transaction fenced; its partitions are read again (its own transaction timed out while the relay stood still, or another producer uses the transactional ID)",
		"transactional_id", e.id, "err", err)
}

// fencedErr reports whether err means another producer epoch took over.
func fencedErr(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// endTxn waits for every attempt of the batch, then commits the
// transaction with the batch's offsets, or aborts it. It returns an error
// only when ctx ends first.
func (e *exactlyOnceMode) endTxn(ctx context.Context, b, solo []*item, started *attempts) error {
	r := e.r
	e.open = false // every path below ends it, but the empty one
	wait := txnWait(r.cfg.SessionTimeout)
	stuck := time.NewTimer(wait)
	defer stuck.Stop()
	select {
	case <-started.done:
	case <-stuck.C:
		// A produce that does not land (a broker away, a coordinator that
		// moved) would hold the transaction open: abort it, which fails
		// what is still buffered; the records are produced again.
		r.log.Warn("transaction's produces not done; aborting it", "after", wait)
		r.m.txns.WithLabelValues("aborted").Inc()
		e.abortTxn("produces not done")
		select {
		case <-started.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.mu.Lock()
		for _, ps := range r.parts {
			for _, it := range ps.flight {
				if it.err == nil {
					it.err = errTxnAborted
				}
			}
		}
		for _, it := range solo { // not produced yet: set aside again
			if ps := r.parts[it.part]; ps != nil {
				ps.retries = append(ps.retries, it)
			}
		}
		r.finish(b, true)
		r.mu.Unlock()
		return nil
	case <-ctx.Done():
		e.abortTxn("shutdown")
		return ctx.Err()
	}
	if err := r.produceSolo(ctx, solo); err != nil {
		e.abortTxn("shutdown")
		return err
	}
	b = append(b, solo...)
	touched := make(map[int32]bool)
	r.mu.Lock()
	failed := false
	for p, ps := range r.parts {
		for _, it := range ps.flight {
			touched[p] = true
			failed = failed || it.err != nil
		}
	}
	for _, it := range b {
		touched[it.part] = true
	}
	if failed {
		r.mu.Unlock()
		r.m.txns.WithLabelValues("aborted").Inc()
		e.abortTxn("a produce failed")
		r.mu.Lock()
		for _, ps := range r.parts {
			for _, it := range ps.flight {
				if it.err == nil {
					it.err = errTxnAborted
				}
			}
		}
		r.finish(b, true) // every record produced becomes a retry; only wheel adds are flushed
		r.mu.Unlock()
		return nil
	}
	r.finish(b, false) // the wheel's view is flushed after the commit
	reqs := r.commitOffsets()
	if len(touched) == 0 && len(reqs) == 0 {
		// Nothing produced, nothing to commit: nothing of the transaction
		// reached the broker, so it stays open for the next iteration.
		// Ending it would cost franz-go's End of an empty commit, which
		// holds the session for 500 ms (it cannot tell KIP-447 support
		// without a TxnOffsetCommit response).
		e.open = true
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()

	start := time.Now()
	// Bounded: after a broker restart the commit waits for a heartbeat
	// that needs a rejoin, which this loop blocks until it allows a
	// rebalance (BlockRebalanceOnPoll); a timeout aborts the transaction
	// and lets the group recover.
	ectx, cancel := context.WithTimeout(ctx, wait)
	committed, err := e.sess.End(kgo.PreTxnCommitFnContext(ectx, e.txnCommitRequest(reqs)), kgo.TryCommit)
	cancel()
	r.m.txnTime.Observe(time.Since(start).Seconds())
	r.mu.Lock()
	defer r.mu.Unlock()
	ended := false // abortTxn already ran
	if !committed && err != nil && !fencedErr(err) {
		// The end failed without saying whether it committed: end the
		// transaction for sure, then ask the group (txnoutcome.go).
		before := r.commitsBefore(reqs)
		r.mu.Unlock()
		e.abortTxn("commit unconfirmed")
		ended = true
		outcome := e.outcome(ctx, reqs, before)
		r.mu.Lock()
		r.m.txnUnconfirmed.WithLabelValues(outcome.String()).Inc()
		switch outcome {
		case txnCommitted:
			r.log.Warn("transaction's end unconfirmed; the group's offsets are the transaction's, so it committed", "err", err)
			committed, err = true, nil
		case txnUnknown:
			r.log.Warn("transaction's end unconfirmed and the group's offsets do not tell; its records are forwarded again (duplicates possible)", "err", err)
		}
	}
	if committed && err == nil {
		r.m.txns.WithLabelValues("committed").Inc()
		r.committed(reqs, nil)
		if r.wheel != nil {
			// Its fsync (SyncBatch) runs under r.mu: the callbacks that
			// share it wait for AllowRebalance, after this, anyway.
			if err := r.wheel.Flush(); err != nil {
				r.wheelFailed("flush", err)
			}
		}
		return nil
	}
	r.m.txns.WithLabelValues("aborted").Inc()
	r.log.Warn("transaction not committed; its partitions are read again from their committed offsets", "err", err, "partitions", len(touched))
	if !ended {
		r.mu.Unlock()
		e.abortTxn("commit failed") // a no-op unless End left it open
		r.mu.Lock()
	}
	if fencedErr(err) {
		e.fenced(err)
	}
	for p := range touched {
		if ps := r.parts[p]; ps != nil {
			r.resyncPartition(ps)
		}
	}
	if r.wheel != nil {
		if err := r.wheel.Flush(); err != nil {
			r.wheelFailed("flush", err)
		}
	}
	return nil
}

// beginTxn begins the iteration's transaction. If the client is still in
// one (an end that could not reach the coordinator), it aborts that one and
// reports false after a pause: the loop tries again, and meanwhile says it
// is not making progress.
//
// It runs after the poll, with rebalances blocked until the transaction
// ended, so no revoke falls inside a transaction. A revoke or loss since
// the session's last End would still make franz-go abort the next
// transaction (GroupTransactSession marks the session failed until End):
// an End of the empty session clears that first, so a rebalance no
// longer costs the batch that follows it.
func (e *exactlyOnceMode) beginTxn(ctx context.Context) bool {
	r := e.r
	if r.groupMoved.Swap(false) {
		// Also ends an empty transaction left open (endTxn).
		if _, err := e.sess.End(ctx, kgo.TryAbort); err != nil {
			r.log.Warn("clearing the transact session after a rebalance", "err", err)
		}
		e.open = false
	}
	if e.open {
		return true
	}
	err := e.sess.Begin()
	if err == nil {
		e.open = true
		return true
	}
	if fencedErr(err) {
		r.mu.Lock()
		r.fatal = fmt.Errorf("%w: transactional ID %s: %w", ErrFenced, e.id, err)
		r.mu.Unlock()
		return false
	}
	r.log.Warn("begin transaction failed; aborting the open one and trying again", "err", err)
	e.abortTxn("begin failed")
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	return false
}

// abortTxn aborts the open transaction (bounded, whatever ctx the batch
// had).
func (e *exactlyOnceMode) abortTxn(why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.sess.End(ctx, kgo.TryAbort); err != nil {
		e.r.log.Warn("abort transaction", "why", why, "err", err)
	}
}

// txnCommitRequest rewrites the TxnOffsetCommit that franz-go builds from
// the polled offsets into the relay's: for each partition the lowest offset
// not done, with the metadata, and no other partition.
func (e *exactlyOnceMode) txnCommitRequest(reqs map[int32]commitReq) func(*kmsg.TxnOffsetCommitRequest) error {
	r := e.r
	return func(req *kmsg.TxnOffsetCommitRequest) error {
		t := kmsg.NewTxnOffsetCommitRequestTopic()
		t.Topic = r.cfg.Topic
		if id, err := base64.StdEncoding.DecodeString(r.bind.TopicID); err == nil && len(id) == 16 {
			copy(t.TopicID[:], id)
		}
		for _, rt := range req.Topics {
			if rt.Topic == r.cfg.Topic {
				t.TopicID = rt.TopicID
			}
		}
		for _, p := range slices.Sorted(mapsKeys(reqs)) {
			c := reqs[p]
			pt := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			pt.Partition, pt.Offset, pt.LeaderEpoch = p, c.at.Offset, -1
			md := c.meta
			pt.Metadata = &md
			t.Partitions = append(t.Partitions, pt)
		}
		req.Topics = nil
		if len(t.Partitions) > 0 {
			req.Topics = []kmsg.TxnOffsetCommitRequestTopic{t}
		}
		return nil
	}
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
