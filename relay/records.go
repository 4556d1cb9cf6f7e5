package relay

import (
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// forwardRecord is rec for its target (partition: the chosen one, or -1
// for the key's), due at due, read from partition p at offset off of the
// delay topic; it reports whether the partition is chosen.
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
