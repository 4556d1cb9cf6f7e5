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
const txnTimeout = 30 * time.Second

// transactionalID is the relay's stable transactional ID: kdelay-<group>-
// followed by KDELAY_INSTANCE_ID, else the host name (the pod name in a
// StatefulSet). Two live relays with one ID fence each other: the older one
// stops with a ProducerFenced error.
func transactionalID(group, instanceID string) string {
	id := instanceID
	if id == "" {
		id, _ = os.Hostname()
	}
	if id == "" {
		id = "relay"
	}
	return "kdelay-" + group + "-" + id
}

// endTxn waits for every attempt of the batch, then commits the
// transaction with the batch's offsets, or aborts it. It returns an error
// only when ctx ends first.
func (r *Relay) endTxn(ctx context.Context, b, solo []*item, started *attempts) error {
	select {
	case <-started.done:
	case <-ctx.Done():
		r.abortTxn("shutdown")
		return ctx.Err()
	}
	for _, it := range solo {
		at := newAttempts()
		r.mu.Lock()
		r.startProduce(ctx, at, it, r.now())
		r.mu.Unlock()
		at.release()
		select {
		case <-at.done:
		case <-ctx.Done():
			r.abortTxn("shutdown")
			return ctx.Err()
		}
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
	committed, err := r.txn.End(kgo.PreTxnCommitFnContext(ctx, r.txnCommitRequest(reqs)), kgo.TryCommit)
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
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		r.fatal = fmt.Errorf("relay: transactional ID %s: %w (another relay uses it, or the principal may not)", transactionalID(r.cfg.Group, r.cfg.InstanceID), err)
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

// abortTxn aborts the open transaction (bounded, whatever ctx the batch
// had).
func (r *Relay) abortTxn(why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.txn.End(ctx, kgo.TryAbort); err != nil {
		r.log.Warn("abort transaction", "why", why, "err", err)
	}
	r.m.txns.WithLabelValues("aborted").Inc()
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
