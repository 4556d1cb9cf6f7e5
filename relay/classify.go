package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// Backoff bounds of a failing record's retries.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

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

// failClass is what a failed produce means for its record.
type failClass int

const (
	failUnknown      failClass = iota // not classified: retried up to KDELAY_RETRY_TIMEOUT, then dead-lettered
	failRetriable                     // the cluster will get better: retried without bound
	failTooLarge                      // the record (or its batch) exceeds a size limit
	failMissing                       // the target topic does not exist (yet)
	failBadPartition                  // kdelay-target-partition does not exist in the target
	failRejected                      // the target refuses the record for good
)

// classify sorts a produce error by its type, never by its text.
func classify(err error) failClass {
	var pe *PartitionError
	switch {
	case errors.As(err, &pe):
		return failBadPartition
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return failTooLarge
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return failMissing
	case errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.PolicyViolation), errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.CorruptMessage), errors.Is(err, kerr.InvalidTimestamp):
		return failRejected
	case errors.Is(err, errTxnAborted), kerr.IsRetriable(err), errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, context.DeadlineExceeded), isNetErr(err):
		return failRetriable
	}
	return failUnknown
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
	case it.kind == kDead && c == failTooLarge && it.out.Value != nil:
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
	case c == failTooLarge && !it.isolate:
		it.isolate = true // a whole batch may have failed for one record
		it.nextTry = now
		reason = "too_large"
	case c == failTooLarge:
		next = r.deadItem(it, "record_too_large", fmt.Sprintf("record too large for topic %q: %v", it.out.Topic, err))
	case c == failMissing && failing >= r.cfg.TargetMissingTimeout:
		next = r.deadItem(it, "target_missing", fmt.Sprintf("target topic %q missing for %s", it.out.Topic, r.cfg.TargetMissingTimeout))
	case c == failMissing:
		reason = "target_missing"
	case c == failBadPartition:
		next = r.deadItem(it, "bad_target_partition", err.Error())
	case c == failRejected:
		next = r.deadItem(it, "target_rejected", fmt.Sprintf("topic %q rejected the record: %v", it.out.Topic, err))
	case c == failUnknown && failing >= r.cfg.RetryTimeout:
		next = r.deadItem(it, "produce_failed", fmt.Sprintf("produce to %q failed for %s: %v", it.out.Topic, failing.Round(time.Millisecond), err))
	case c == failUnknown:
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
// that are done, in b's storage (b is overwritten).
func (r *Relay) settle(b []*item, now time.Time) []*item {
	done := b[:0]
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
