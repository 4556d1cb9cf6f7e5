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
	// ID, if set, is the schedule's id (kdelay-id, 1 to MaxIDLen bytes): a
	// cancel keyed by it on the cancel topic cancels the record.
	ID string

	// Every, if set, makes the record a series on a fixed grid
	// (kdelay-every, at least MinEvery); needs ID. Without Delay, At or
	// Level its first occurrence is one Every after the timestamp.
	Every time.Duration
	// Cron, if set, makes the record a series on a cron expression
	// (kdelay-cron, five fields or six with seconds first); needs ID.
	// Without Delay, At or Level its first occurrence is the expression's
	// first time after the timestamp.
	Cron string
	// Timezone is the IANA zone Cron is read in (kdelay-timezone); ""
	// is UTC.
	Timezone string
	// Until, if set, ends a series: no occurrence after it (kdelay-until).
	Until time.Time
	// Count, if set, ends a series after that many firings (kdelay-count).
	Count int
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
	series := d.Every != 0 || d.Cron != ""
	var delay time.Duration
	switch {
	case series && set == 0:
		// The first occurrence follows from the series (below).
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
	if d.ID != "" {
		if len(d.ID) > MaxIDLen {
			return fmt.Errorf("levels: stamp: id of %d bytes, at most %d", len(d.ID), MaxIDLen)
		}
		hs = append(hs, kgo.RecordHeader{Key: HeaderID, Value: []byte(d.ID)})
	}
	if series {
		var err error
		if hs, delay, err = t.stampSeries(hs, d, r.Timestamp, set == 0, delay); err != nil {
			return err
		}
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

// Cancel returns the record that cancels, on the cancel topic named
// cancelTopic (KDELAY_CANCEL_TOPIC, default <delay topic>.cancel), every
// delayed record with kdelay-id id whose original timestamp lies before
// before; a zero before means the cancel record's timestamp, which is now.
// Produce it with Kafka's default partitioner (the key decides), and wait
// for its ack: a cancel acknowledged at least KDELAY_CANCEL_MARGIN before a
// record's due time is always honoured.
func Cancel(cancelTopic, id string, before, now time.Time) (*kgo.Record, error) {
	if err := ValidTopicName(cancelTopic); err != nil {
		return nil, fmt.Errorf("levels: cancel: topic: %w", err)
	}
	if id == "" || len(id) > MaxIDLen {
		return nil, fmt.Errorf("levels: cancel: id of %d bytes, want 1 to %d", len(id), MaxIDLen)
	}
	r := &kgo.Record{Topic: cancelTopic, Key: []byte(id), Value: []byte("cancel"), Timestamp: now}
	if !before.IsZero() {
		r.Headers = []kgo.RecordHeader{{Key: HeaderCancelBefore, Value: strconv.AppendInt(nil, ceilMilli(before).UnixMilli(), 10)}}
	}
	return r, nil
}

// Replace reschedules id: it returns the cancel of every earlier record
// with the id, and stamps r (as [Table.Stamp] does, with d.ID set to id)
// as the new one. Both get the timestamp now rounded up to the next
// millisecond, which is the cancel's cut-off: earlier records are before
// it, the new one is not, so the new record is never caught by its own
// cancel. Produce the cancel first, wait for its ack, then produce r.
func (t *Table) Replace(r *kgo.Record, topic, cancelTopic, id string, d Delay, now time.Time) (*kgo.Record, error) {
	cutoff := now.Truncate(time.Millisecond).Add(time.Millisecond)
	c, err := Cancel(cancelTopic, id, cutoff, cutoff)
	if err != nil {
		return nil, err
	}
	d.ID = id
	r.Timestamp = cutoff
	if err := t.Stamp(r, topic, d, cutoff); err != nil {
		return nil, err
	}
	return c, nil
}

// stampSeries appends the series headers of d to hs and checks them as
// the relay will; with first, the delay is the first occurrence's.
func (t *Table) stampSeries(hs []kgo.RecordHeader, d Delay, ts time.Time, first bool, delay time.Duration) ([]kgo.RecordHeader, time.Duration, error) {
	if d.Every != 0 {
		hs = append(hs, kgo.RecordHeader{Key: HeaderEvery, Value: everyValue(d.Every)})
	}
	if d.Cron != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderCron, Value: []byte(d.Cron)})
	}
	if d.Timezone != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderTimezone, Value: []byte(d.Timezone)})
	}
	if !d.Until.IsZero() {
		hs = append(hs, kgo.RecordHeader{Key: HeaderUntil, Value: strconv.AppendInt(nil, d.Until.UnixMilli(), 10)})
	}
	if d.Count != 0 {
		hs = append(hs, kgo.RecordHeader{Key: HeaderCount, Value: strconv.AppendInt(nil, int64(d.Count), 10)})
	}
	rec, err := t.parseRecurrence(hs, d.ID)
	if err != nil {
		return nil, 0, err // a *ContractError, "levels: ..."
	}
	if first {
		at := rec.First(ts)
		if at.IsZero() {
			return nil, 0, fmt.Errorf("levels: stamp: cron %q has no time in the next five years", d.Cron)
		}
		delay = at.Sub(ts)
	}
	if !d.Until.IsZero() && ts.Add(delay).After(d.Until) {
		return nil, 0, fmt.Errorf("levels: stamp: until %s lies before the first occurrence", d.Until.UTC().Format(time.RFC3339))
	}
	return hs, delay, nil
}

// everyValue writes an interval as whole seconds ("90s") when it is one,
// else as milliseconds or nanoseconds: a Go duration any helper can
// write the same way.
func everyValue(d time.Duration) []byte {
	switch {
	case d%time.Second == 0:
		return append(strconv.AppendInt(nil, int64(d/time.Second), 10), 's')
	case d%time.Millisecond == 0:
		return append(strconv.AppendInt(nil, int64(d/time.Millisecond), 10), "ms"...)
	default:
		return append(strconv.AppendInt(nil, int64(d), 10), "ns"...)
	}
}
