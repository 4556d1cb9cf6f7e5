package levels

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Delay says when and where a record stamped by [Table.Stamp] is delivered.
// At most one of Delay, At and Level is set; none means a zero delay.
type Delay struct {
	// Target is the topic to deliver to (required).
	Target string
	// Delay after the record timestamp.
	Delay time.Duration
	// At is an absolute due time; sent as epoch milliseconds.
	At time.Time
	// Level is a level number, 1..levels.
	Level int
	// Partition, if set, is the partition of the target topic.
	Partition *int32
}

// Stamp prepares r for the delay topic named topic: it sets r.Topic, the
// kdelay headers (appended to r's own) and r.Partition, the partition of the
// record's level chosen by key. Use it with a client built with
// kgo.RecordPartitioner(kgo.ManualPartitioner()). If r.Timestamp is zero it
// is set to now, so the delay counts from the moment of stamping.
func (t *Table) Stamp(r *kgo.Record, topic string, d Delay, now time.Time) error {
	if err := ValidTopicName(d.Target); err != nil {
		return fmt.Errorf("levels: stamp: target: %w", err)
	}
	set := 0
	if d.Delay != 0 {
		set++
	}
	if !d.At.IsZero() {
		set++
	}
	if d.Level != 0 {
		set++
	}
	if set > 1 {
		return errors.New("levels: stamp: set at most one of Delay, At and Level")
	}
	if r.Timestamp.IsZero() {
		r.Timestamp = now
	}
	hs := []kgo.RecordHeader{{Key: HeaderTarget, Value: []byte(d.Target)}}
	var delay time.Duration
	switch {
	case d.At.IsZero() && d.Level == 0:
		if d.Delay < 0 {
			return fmt.Errorf("levels: stamp: negative delay %s", d.Delay)
		}
		delay = d.Delay
		hs = append(hs, kgo.RecordHeader{Key: HeaderDelay, Value: strconv.AppendInt(nil, d.Delay.Milliseconds(), 10)})
		if d.Delay%time.Millisecond != 0 {
			hs[len(hs)-1].Value = []byte(d.Delay.String())
		}
	case !d.At.IsZero():
		delay = d.At.Sub(r.Timestamp)
		hs = append(hs, kgo.RecordHeader{Key: HeaderDeliverAt, Value: strconv.AppendInt(nil, ceilMilli(d.At).UnixMilli(), 10)})
	default:
		if d.Level < 1 || d.Level > t.Levels() {
			return fmt.Errorf("levels: stamp: level %d out of range 1..%d", d.Level, t.Levels())
		}
		delay = t.Duration(d.Level)
		hs = append(hs, kgo.RecordHeader{Key: HeaderLevel, Value: strconv.AppendInt(nil, int64(d.Level), 10)})
	}
	if d.Partition != nil {
		if *d.Partition < 0 {
			return fmt.Errorf("levels: stamp: negative target partition %d", *d.Partition)
		}
		hs = append(hs, kgo.RecordHeader{Key: HeaderTargetPartition, Value: strconv.AppendInt(nil, int64(*d.Partition), 10)})
	}
	level := d.Level
	if level == 0 {
		level = t.LevelFor(delay)
	}
	r.Topic = topic
	r.Headers = append(r.Headers, hs...)
	r.Partition = t.PartitionFor(level, r.Key)
	return nil
}
