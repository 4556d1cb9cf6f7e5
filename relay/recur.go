package relay

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// Recurring series (levels.Recurrence). A series record that comes due is
// forwarded like any other, as the occurrence its grid says (the latest
// one not after now: after downtime it fires once), and a second item of
// the batch, a cascade of the same source record, writes the next
// occurrence back to the delay topic with an absolute kdelay-deliver-at.
// Both hold their partition's commit until they settle, so the firing is
// committed only once the next occurrence is in Kafka; in exactly-once
// mode both are in the batch's transaction. A cancel matches the series'
// original timestamp, carried by every occurrence as by a cascade.

// seriesPair counts the halves of a wheel entry's firing still to settle:
// the entry is done when both are.
type seriesPair struct{ left atomic.Int32 }

// fireSeries turns it, a forward of a due record (kForward or kFire), into
// the firing of its series when the record is one, and returns the item
// that schedules the next occurrence (nil when the series ends, or the
// record is not a series). r.mu is held.
func (r *Relay) fireSeries(it *item, now time.Time) *item {
	if it.orig == nil || it.out == nil || !levels.IsSeries(it.orig.Headers) {
		return nil
	}
	rec := it.orig
	s, err := r.pol.table.Parse(rec.Headers, rec.Timestamp)
	if err != nil || s.Recur == nil {
		return nil // decided before: a series that parses
	}
	f := s.Recur.Fire(it.due, now)
	it.due = f.At
	it.out.Headers = levels.AppendOccurrence(levels.ForwardHeadersFrom(rec.Headers, f.At, r.cfg.Topic, it.part, it.offset), f.Occurrence)
	if f.Next.IsZero() {
		return nil // until or count ends the series
	}
	tab := r.pol.table
	next := &item{
		kind: kCascade, part: it.part, offset: it.offset, level: it.level, fromQueue: it.fromQueue,
		orig: rec, due: f.Next, manual: true,
		out: &kgo.Record{
			Topic:     r.cfg.Topic,
			Partition: tab.PartitionFor(tab.LevelFor(f.Next.Sub(now)), rec.Key),
			Key:       rec.Key,
			Value:     rec.Value,
			Headers:   levels.NextHeaders(rec.Headers, f.Next, rec.Timestamp, f.Occurrence+1),
		},
	}
	if !it.fromQueue {
		// A wheel entry: done once the forward and the next occurrence
		// are both settled, so that a restart fires it again otherwise.
		p := new(seriesPair)
		p.left.Store(2)
		it.pair, next.pair = p, p
	}
	return next
}

// pairDone reports whether the other half of it's series firing (if any)
// has settled too; called once per settled half.
func (it *item) pairDone() bool {
	return it.pair == nil || it.pair.left.Add(-1) <= 0
}
