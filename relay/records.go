package relay

import (
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// forwardBuf is an item's own storage for its forward (forward): the
// record, with room for its headers and the two new header values (more
// grow on their own), so that building a forward allocates nothing.
type forwardBuf struct {
	rec kgo.Record
	hs  [4]kgo.RecordHeader // the producer's own plus due-at, source and the ID
	buf [64]byte            // due-at and source values: 13 digits, topic/partition@offset
}

// forward sets it.out to rec for its target (partition: the chosen one,
// or -1 for the key's), due at due, read from partition p at offset off of
// the delay topic, built in it.fwd (levels.AppendForwardHeaders), which it
// takes from the pool when it has none; it.out lives as long as it does.
// it.manual says whether the partition is chosen. r.mu is held.
func (r *Relay) forward(it *item, rec *kgo.Record, target string, partition int32, due time.Time, p int32, off int64) {
	f := it.fwd
	if f == nil {
		f = r.newForwardBuf()
		it.fwd = f
	}
	f.rec = kgo.Record{
		Topic:   target,
		Key:     rec.Key,
		Value:   rec.Value,
		Headers: levels.AppendForwardHeaders(f.hs[:0], f.buf[:0], rec.Headers, due, r.cfg.Topic, p, off),
	}
	it.out, it.manual = &f.rec, partition >= 0
	if it.manual {
		f.rec.Partition = partition
	}
}

// cascadeRecord is rec back on the delay topic, in the level of what is
// left of its wait at now, due at due (absolute) with its original
// timestamp.
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

// cancelledRecord is rec for KDELAY_CANCELLED_TOPIC (topic), cancelled at
// now: everything kept, plus the source and the time of the cancel.
func (r *Relay) cancelledRecord(rec *kgo.Record, topic string, p int32, off int64, now time.Time) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(rec.Headers)+2)
	for _, h := range rec.Headers {
		if h.Key != levels.HeaderSource && h.Key != levels.HeaderCancelledAt {
			hs = append(hs, h)
		}
	}
	hs = append(hs,
		kgo.RecordHeader{Key: levels.HeaderSource, Value: []byte(levels.Source(r.cfg.Topic, p, off))},
		kgo.RecordHeader{Key: levels.HeaderCancelledAt, Value: strconv.AppendInt(nil, now.UnixMilli(), 10)},
	)
	return &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Headers: hs}
}
