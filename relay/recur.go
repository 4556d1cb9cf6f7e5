package relay

import (
	"maps"
	"strconv"
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

// seriesPair links the two items of a series firing: the forward and
// the next occurrence. For a wheel entry, left counts the halves still to
// settle: the entry is done when both are.
type seriesPair struct {
	left atomic.Int32
	key  string // the series: its id and original timestamp
	at   int64  // the occurrence fired, epoch ms
}

// seriesMarks drops duplicate copies of a series occurrence (at least
// once). A crash after the next occurrence was produced and before the
// firing was committed fires the occurrence again and writes its next
// occurrence twice; when one relay fires both copies, the second is
// dropped: it is settled undelivered, and the series goes on as one.
// done holds, per series, the latest occurrence whose next occurrence is
// acknowledged (a later copy of it can go: its series is safe in Kafka);
// batch the occurrences fired in the current batch (two copies due
// together). Exactly-once mode needs neither: its transactions never
// write a next occurrence without committing the firing.
type seriesMarks struct {
	done    map[string]int64
	batch   map[string]int64
	batchAt time.Time // the batch's time: batch is of the collect at batchAt
	purgeAt int       // purge done when it grows beyond
}

// seriesKeep is how long an occurrence stays in seriesMarks.done: the
// copies of one occurrence are due together, so a duplicate comes within
// the relay's lateness.
const seriesKeep = 10 * time.Minute

// duplicate reports whether the occurrence at of series key was fired
// already, and otherwise marks it fired in the batch of now.
func (m *seriesMarks) duplicate(key string, at int64, now time.Time) bool {
	if !now.Equal(m.batchAt) {
		clear(m.batch)
		m.batchAt = now
	}
	if d, ok := m.done[key]; ok && d >= at {
		return true
	}
	if b, ok := m.batch[key]; ok && b >= at {
		return true
	}
	if m.batch == nil {
		m.batch = make(map[string]int64)
	}
	m.batch[key] = at
	return false
}

// settled records that the next occurrence of a firing is acknowledged.
func (m *seriesMarks) settled(key string, at int64, now time.Time) {
	if m.done == nil {
		m.done = make(map[string]int64)
	}
	m.done[key] = max(m.done[key], at)
	if len(m.done) > m.purgeAt {
		old := now.Add(-seriesKeep).UnixMilli()
		maps.DeleteFunc(m.done, func(_ string, at int64) bool { return at < old })
		m.purgeAt = 2*len(m.done) + 1024
	}
}

// nextSettled is a series' next occurrence settled (r.mu held): a wheel
// entry is done once its forward is too, and the occurrence is marked.
func (r *Relay) nextSettled(it *item) {
	if !it.fromQueue {
		r.wheelDone(it)
	}
	r.series.settled(it.pair.key, it.pair.at, r.now())
}

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
	// The latest occurrence the cancel barrier lets go (now, unless the
	// cancel reader lags): a catch-up never fires past it.
	f := s.Recur.Fire(it.due, r.fireLimit(now))
	key := s.ID + "\x00" + strconv.FormatInt(levels.OriginalTimestamp(rec.Headers, rec.Timestamp).UnixMilli(), 10)
	if !r.mode.transactional() && r.series.duplicate(key, f.At.UnixMilli(), now) {
		r.log.Warn("series occurrence fired already; dropping this copy of it", "id", s.ID,
			"due", f.At.UTC().Format(time.RFC3339Nano), "source", levels.Source(r.cfg.Topic, it.part, it.offset))
		it.kind, it.out = kSkip, nil
		return nil
	}
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
	p := &seriesPair{key: key, at: f.At.UnixMilli()}
	next.pair = p
	if !it.fromQueue {
		// A wheel entry: done once the forward and the next occurrence
		// are both settled, so that a restart fires it again otherwise.
		p.left.Store(2)
		it.pair = p
	}
	return next
}

// pairDone reports whether the other half of it's series firing from
// the wheel (if any) has settled too; called once per settled half.
func (it *item) pairDone() bool {
	return it.pair == nil || it.fromQueue || it.pair.left.Add(-1) <= 0
}
