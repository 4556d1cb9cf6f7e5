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

// Delivery modes.
const (
	AtLeastOnce = "at-least-once"
	ExactlyOnce = "exactly-once"
)

// errTxnAborted marks the records of an aborted transaction that were
// produced fine: they are produced again in the next one.
var errTxnAborted = errors.New("relay: transaction aborted")

// txnTimeout is the transaction timeout asked of the broker: a relay that
// dies mid-transaction holds back read_committed consumers of its targets
// at most this long (a restart with the same transactional ID aborts the
// open transaction at once).
const txnTimeout = 20 * time.Second

// txnWait bounds how long a transaction waits for its produces before it
// is aborted and its records set aside; below txnTimeout.
const txnWait = 8 * time.Second

// transactionalID is the relay's stable transactional ID:
// KDELAY_TRANSACTIONAL_ID, else kdelay-<group>- followed by
// KDELAY_INSTANCE_ID, else the host name (the pod name in a StatefulSet).
// Two live relays with one ID fence each other: the older one stops with a
// ProducerFenced error.
func (r *Relay) transactionalID() string {
	if r.cfg.TransactionalID != "" {
		return r.cfg.TransactionalID
	}
	id := r.cfg.InstanceID
	if id == "" {
		id, _ = os.Hostname()
	}
	if id == "" {
		id = "relay"
	}
	return "kdelay-" + r.cfg.Group + "-" + id
}

// endTxn waits for every attempt of the batch, then commits the
// transaction with the batch's offsets, or aborts it. It returns an error
// only when ctx ends first.
func (r *Relay) endTxn(ctx context.Context, b, solo []*item, started *attempts) error {
	stuck := time.NewTimer(txnWait)
	defer stuck.Stop()
	select {
	case <-started.done:
	case <-stuck.C:
		// A produce that does not land (a broker away, a coordinator that
		// moved) would hold the transaction open: abort it, which fails
		// what is still buffered; the records are produced again.
		r.log.Warn("transaction's produces not done; aborting it", "after", txnWait)
		r.m.txns.WithLabelValues("aborted").Inc()
		r.abortTxn("produces not done")
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
		r.abortTxn("shutdown")
		return ctx.Err()
	}
	if err := r.produceSolo(ctx, solo); err != nil {
		r.abortTxn("shutdown")
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
		r.abortTxn("a produce failed")
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
	r.mu.Unlock()

	start := time.Now()
	// Bounded: after a broker restart the commit waits for a heartbeat
	// that needs a rejoin, which this loop blocks until it allows a
	// rebalance (BlockRebalanceOnPoll); a timeout aborts the transaction
	// and lets the group recover.
	ectx, cancel := context.WithTimeout(ctx, txnWait)
	committed, err := r.txn.End(kgo.PreTxnCommitFnContext(ectx, r.txnCommitRequest(reqs)), kgo.TryCommit)
	cancel()
	r.m.txnTime.Observe(time.Since(start).Seconds())
	r.mu.Lock()
	defer r.mu.Unlock()
	if committed && err == nil {
		r.m.txns.WithLabelValues("committed").Inc()
		r.committed(reqs, nil)
		if r.wheel != nil {
			if err := r.wheel.Flush(); err != nil {
				r.wheelFailed("flush", err)
			}
		}
		return nil
	}
	r.m.txns.WithLabelValues("aborted").Inc()
	r.log.Warn("transaction not committed; its partitions are read again from their committed offsets", "err", err, "partitions", len(touched))
	r.mu.Unlock()
	r.abortTxn("commit failed") // a no-op unless End left it open
	r.mu.Lock()
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		r.fatal = fmt.Errorf("relay: transactional ID %s: %w (another relay uses it, or the principal may not)", r.transactionalID(), err)
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
func (r *Relay) beginTxn(ctx context.Context) bool {
	err := r.txn.Begin()
	if err == nil {
		return true
	}
	r.log.Warn("begin transaction failed; aborting the open one and trying again", "err", err)
	r.abortTxn("begin failed")
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	return false
}

// abortTxn aborts the open transaction (bounded, whatever ctx the batch
// had).
func (r *Relay) abortTxn(why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.txn.End(ctx, kgo.TryAbort); err != nil {
		r.log.Warn("abort transaction", "why", why, "err", err)
	}
}

// txnCommitRequest rewrites the TxnOffsetCommit that franz-go builds from
// the polled offsets into the relay's: for each partition the lowest offset
// not done, with the metadata, and no other partition.
func (r *Relay) txnCommitRequest(reqs map[int32]commitReq) func(*kmsg.TxnOffsetCommitRequest) error {
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
