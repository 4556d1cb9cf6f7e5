// Package etf1 moves schedules from etf1/kafka-message-scheduler to kdelay.
//
// etf1 keeps its schedules in a compacted topic keyed by schedule id. A
// record's headers say when and where it goes: scheduler-epoch (the due
// time in Unix seconds), scheduler-target-topic and scheduler-target-key;
// its value is the payload. A newer record with the same key replaces the
// schedule, a tombstone (a null value) deletes it.
//
// [Reducer] turns the records of such a topic into its schedules: the
// latest record of each key wins (the higher offset within a partition,
// the later timestamp across partitions), tombstones delete, and a schedule
// kdelay cannot carry is set aside with a reason. [Migrate] reads the
// topic to the end offsets it finds at its start and writes each live
// schedule to kdelay's delay topic.
package etf1

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// Headers of an etf1 schedule record.
const (
	HeaderEpoch       = "scheduler-epoch"
	HeaderTargetTopic = "scheduler-target-topic"
	HeaderTargetKey   = "scheduler-target-key"
)

// Reasons a schedule is not migrated ([Schedule.Skip]).
const (
	SkipNoKey       = "no_key"               // a record without a key: no schedule id
	SkipLongKey     = "long_key"             // the key is longer than levels.MaxIDLen, kdelay-id's limit
	SkipBadEpoch    = "bad_epoch"            // scheduler-epoch missing, not an integer, or 0 or less
	SkipNoTarget    = "no_target"            // scheduler-target-topic missing or empty
	SkipBadTarget   = "bad_target"           // scheduler-target-topic is not a valid topic name
	SkipKdelayHdr   = "kdelay_header"        // a kdelay-* header, which kdelay would read as a control header
	SkipMaxDelay    = "max_delay"            // due beyond KDELAY_MAX_DELAY: a relay would dead-letter it
	SkipRefused     = "refused"              // KDELAY_TARGET_ALLOW/DENY refuse the target
	SkipNoTargetTop = "missing_target_topic" // the target topic does not exist
)

// Schedule is the latest record of one key of an etf1 schedules topic.
type Schedule struct {
	// ID is the record key: etf1's schedule id, kdelay's kdelay-id.
	ID string
	// Deleted is true when the latest record is a tombstone.
	Deleted bool
	// Due is scheduler-epoch, in seconds.
	Due time.Time
	// Target is scheduler-target-topic.
	Target string
	// Key is scheduler-target-key (nil without one): the delivered key.
	Key []byte
	// Value is the payload.
	Value []byte
	// Headers are the record's other headers, in order.
	Headers []kgo.RecordHeader
	// Source is where the record lies: topic/partition/offset.
	Source string
	// Skip, when not empty, is why the schedule cannot be migrated (one
	// of the Skip* reasons); Why says more.
	Skip, Why string

	partition int32
	offset    int64
	ts        time.Time
}

// first returns the first header named key, as etf1 reads them.
func first(hs []kgo.RecordHeader, key string) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

// parse reads one record of the schedules topic.
func parse(r *kgo.Record) *Schedule {
	s := &Schedule{
		ID: string(r.Key), Deleted: r.Value == nil, Value: r.Value,
		Source:    levels.Source(r.Topic, r.Partition, r.Offset),
		partition: r.Partition, offset: r.Offset, ts: r.Timestamp,
	}
	if s.Deleted {
		return s
	}
	skip := func(reason, format string, args ...any) *Schedule {
		s.Skip, s.Why = reason, fmt.Sprintf(format, args...)
		return s
	}
	if len(r.Key) > levels.MaxIDLen {
		return skip(SkipLongKey, "key of %d bytes; kdelay-id allows %d", len(r.Key), levels.MaxIDLen)
	}
	v, ok := first(r.Headers, HeaderEpoch)
	if !ok {
		return skip(SkipBadEpoch, "no %s header", HeaderEpoch)
	}
	epoch, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || epoch <= 0 || epoch > maxEpoch {
		return skip(SkipBadEpoch, "%s=%q is not Unix seconds", HeaderEpoch, v)
	}
	s.Due = time.Unix(epoch, 0)
	t, _ := first(r.Headers, HeaderTargetTopic)
	if len(t) == 0 {
		return skip(SkipNoTarget, "no %s header", HeaderTargetTopic)
	}
	if err := levels.ValidTopicName(string(t)); err != nil {
		return skip(SkipBadTarget, "%s=%q: %v", HeaderTargetTopic, t, err)
	}
	s.Target = string(t)
	s.Key, _ = first(r.Headers, HeaderTargetKey)
	for _, h := range r.Headers {
		switch {
		case h.Key == HeaderEpoch || h.Key == HeaderTargetTopic || h.Key == HeaderTargetKey:
		case levels.IsControl(h.Key):
			return skip(SkipKdelayHdr, "header %s", h.Key)
		default:
			s.Headers = append(s.Headers, h)
		}
	}
	return s
}

// maxEpoch is 9999-12-31, the latest due time kdelay accepts.
var maxEpoch = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).Unix()

// newer reports whether a replaces b as the latest record of their key.
func (a *Schedule) newer(b *Schedule) bool {
	if a.partition == b.partition {
		return a.offset > b.offset
	}
	if !a.ts.Equal(b.ts) {
		return a.ts.After(b.ts)
	}
	return a.partition > b.partition
}

// Reducer keeps the latest record of each key. The zero value is ready to
// use; it is not safe for concurrent use.
type Reducer struct {
	latest map[string]*Schedule
	read   int
	noKey  []*Schedule
}

// Add reads one record of the schedules topic.
func (rd *Reducer) Add(r *kgo.Record) {
	rd.read++
	s := parse(r)
	if len(r.Key) == 0 {
		s.Skip, s.Why = SkipNoKey, "no key"
		rd.noKey = append(rd.noKey, s)
		return
	}
	if rd.latest == nil {
		rd.latest = make(map[string]*Schedule)
	}
	if old, ok := rd.latest[s.ID]; !ok || s.newer(old) {
		rd.latest[s.ID] = s
	}
}

// Read returns the number of records added.
func (rd *Reducer) Read() int { return rd.read }

// Schedules returns the latest record of every key, tombstones included
// (Deleted), and the records without a key (skipped, SkipNoKey), sorted
// by source partition and offset.
func (rd *Reducer) Schedules() []*Schedule {
	out := make([]*Schedule, 0, len(rd.latest)+len(rd.noKey))
	for _, s := range rd.latest {
		out = append(out, s)
	}
	out = append(out, rd.noKey...)
	sortSchedules(out)
	return out
}

func sortSchedules(ss []*Schedule) {
	slices.SortFunc(ss, func(a, b *Schedule) int {
		return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
	})
}
