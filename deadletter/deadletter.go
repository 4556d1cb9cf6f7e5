// Package deadletter reads kdelay's dead-letter topic and re-drives its
// records to the delay topic, each at most once.
//
// A dead letter is the delay-topic record as it was, plus kdelay-error (the
// reason) and kdelay-source (where it was read). [Read] lists them; a
// [Replayer] writes them back once their cause is fixed: the original
// record (kdelay-error and kdelay-source removed) with its schedule made
// absolute, as a cascade does, at the level of its remaining delay. What
// was replayed is remembered as the committed offsets of a consumer group
// of the dead-letter topic ([ReplayGroup]): a second run goes on from
// where the last one stopped. Each batch is committed once the delay topic
// acknowledged it; a replay stopped between the two can repeat at most
// that batch.
package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// Idle is how long the readers wait for more records before they take a
// partition as read to its end (transaction markers can sit between the
// last record and the high watermark).
const Idle = 2 * time.Second

// adminTimeout bounds one admin request.
const adminTimeout = 30 * time.Second

var (
	// ErrNoTopic is wrapped by the *TopicError returned when the
	// dead-letter (or delay) topic is missing.
	ErrNoTopic = errors.New("deadletter: topic does not exist")
	// ErrPartitions is returned when the delay topic's partition count does
	// not match the level table.
	ErrPartitions = errors.New("deadletter: the delay topic's partitions do not match the levels")
)

// TopicError is a missing topic; it unwraps to ErrNoTopic.
type TopicError struct {
	Kind  string // "dead-letter", "delay"
	Topic string
}

func (e *TopicError) Error() string {
	return fmt.Sprintf("%s topic %s does not exist; create it with `kdelay topic create`", e.Kind, e.Topic)
}

func (e *TopicError) Unwrap() error { return ErrNoTopic }

// Letter is one record of the dead-letter topic.
type Letter struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Timestamp time.Time         `json:"timestamp"`
	Key       string            `json:"key"`
	Target    string            `json:"target"`
	Source    string            `json:"source"`
	Error     string            `json:"error"`
	Headers   map[string]string `json:"headers"`
}

// FromRecord returns the Letter of a dead-letter record.
func FromRecord(r *kgo.Record) Letter {
	d := Letter{
		Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Key: string(r.Key),
		Target: header(r, levels.HeaderTarget), Source: header(r, levels.HeaderSource), Error: header(r, levels.HeaderError),
		Headers: make(map[string]string, len(r.Headers)),
	}
	for _, h := range r.Headers {
		d.Headers[h.Key] = string(h.Value)
	}
	return d
}

// header returns the last value of the header key, "" when absent.
func header(r *kgo.Record, key string) string {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value)
		}
	}
	return ""
}

// ReasonFilter selects dead letters by their kdelay-error: a regular
// expression, case-insensitive. The zero value matches every one.
type ReasonFilter struct {
	re  *regexp.Regexp
	src string
}

// NewReasonFilter compiles s ("" matches everything).
func NewReasonFilter(s string) (ReasonFilter, error) {
	if s == "" {
		return ReasonFilter{}, nil
	}
	re, err := regexp.Compile("(?i)" + s)
	if err != nil {
		return ReasonFilter{}, fmt.Errorf("deadletter: reason %q: %w", s, err)
	}
	return ReasonFilter{re, s}, nil
}

// String returns the expression the filter was made from.
func (f ReasonFilter) String() string { return f.src }

// Match reports whether r's kdelay-error matches.
func (f ReasonFilter) Match(r *kgo.Record) bool {
	return f.re == nil || f.re.MatchString(header(r, levels.HeaderError))
}

// partitionCount returns the number of partitions of topic and whether it
// exists.
func partitionCount(ctx context.Context, adm *kadm.Client, topic string) (int32, bool, error) {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, false, fmt.Errorf("deadletter: list topic %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return 0, false, nil
	}
	if td.Err != nil {
		return 0, false, fmt.Errorf("deadletter: topic %s: %w", topic, td.Err)
	}
	return int32(len(td.Partitions)), true, nil
}

// bounds returns, per partition of the dead-letter topic, the log start and
// the high watermark as of now.
func bounds(ctx context.Context, adm *kadm.Client, topic string) (starts, ends map[int32]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	if _, ok, err := partitionCount(ctx, adm, topic); err != nil {
		return nil, nil, err
	} else if !ok {
		return nil, nil, &TopicError{"dead-letter", topic}
	}
	so, err1 := adm.ListStartOffsets(ctx, topic)
	eo, err2 := adm.ListEndOffsets(ctx, topic)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, fmt.Errorf("deadletter: list offsets of %s: %w", topic, err)
	}
	starts, ends = make(map[int32]int64), make(map[int32]int64)
	eo.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			ends[o.Partition] = o.Offset
		}
	})
	so.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			starts[o.Partition] = o.Offset
		}
	})
	return starts, ends, nil
}

// Read reads the dead-letter topic, from each partition's offset in from
// (its start when absent), up to the high watermark as of the call, and
// calls fn for each record until fn returns false. kopts connect to the
// cluster.
func Read(ctx context.Context, kopts []kgo.Opt, topic string, from map[int32]int64, fn func(*kgo.Record) bool) error {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("deadletter: kafka client: %w", err)
	}
	defer cl.Close()
	starts, ends, err := bounds(ctx, kadm.NewClient(cl), topic)
	if err != nil {
		return err
	}
	offsets := make(map[int32]kgo.Offset)
	left := make(map[int32]int64) // partition -> end still to reach
	for p, end := range ends {
		pos := starts[p]
		if o, ok := from[p]; ok && o > pos {
			pos = o
		}
		if pos < end {
			offsets[p] = kgo.NewOffset().At(pos)
			left[p] = end
		}
	}
	if len(left) == 0 {
		return nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	for len(left) > 0 {
		pctx, cancel := context.WithTimeout(ctx, Idle)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.NumRecords() == 0 && errors.Is(pctx.Err(), context.DeadlineExceeded) {
			return nil // nothing more within Idle: the rest are markers
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = errors.Join(ferr, fmt.Errorf("deadletter: fetch %s/%d: %w", t, p, err))
			}
		})
		if ferr != nil {
			return ferr
		}
		stop := false
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if stop || !ok || r.Offset >= end {
				return
			}
			if !fn(r) {
				stop = true
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
		if stop {
			return nil
		}
	}
	return nil
}

// List returns the dead letters whose reason matches and, when target is
// not empty, whose kdelay-target is target; at most limit (0: all).
func List(ctx context.Context, kopts []kgo.Opt, topic string, reason ReasonFilter, target string, limit int) ([]Letter, error) {
	out := []Letter{}
	err := Read(ctx, kopts, topic, nil, func(r *kgo.Record) bool {
		if reason.Match(r) && (target == "" || header(r, levels.HeaderTarget) == target) {
			out = append(out, FromRecord(r))
		}
		return limit == 0 || len(out) < limit
	})
	return out, err
}

// ReplayGroup is the default group of a replay: one per reason, so that
// replaying one kind of dead letter does not mark the others as done.
func ReplayGroup(group, reason string) string {
	g := group + ".dlq-replay"
	if reason == "" {
		return g
	}
	slug := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, reason)
	return g + "." + slug
}

// ReplayRecord is the delay-topic record that re-drives dead letter d at
// now, or an error (a *levels.ContractError) if its headers break the
// contract.
func ReplayRecord(tab *levels.Table, topic string, d *kgo.Record, now time.Time) (*kgo.Record, error) {
	var hs []kgo.RecordHeader
	for _, h := range d.Headers {
		if h.Key != levels.HeaderError && h.Key != levels.HeaderSource {
			hs = append(hs, h)
		}
	}
	s, err := tab.Parse(hs, d.Timestamp)
	if err != nil {
		return nil, err
	}
	level := tab.LevelFor(max(s.Due.Sub(now), 0))
	return &kgo.Record{
		Topic:     topic,
		Partition: tab.PartitionFor(level, d.Key),
		Key:       d.Key,
		Value:     d.Value,
		Headers:   levels.CascadeHeaders(hs, s.Due),
		Timestamp: now,
	}, nil
}

// Replayer writes dead letters back to the delay topic, each at most once.
type Replayer struct {
	// KafkaOpts connect to the cluster.
	KafkaOpts []kgo.Opt
	// Topic and DLQTopic: the delay topic and the dead-letter topic.
	Topic, DLQTopic string
	// Table is the level table.
	Table *levels.Table
	// Group is the consumer group remembering what was replayed
	// (ReplayGroup).
	Group string
	// Filter selects the dead letters to replay.
	Filter ReasonFilter
	// DryRun counts what would be replayed; nothing is written or
	// committed.
	DryRun bool
	// Log receives the dead letters skipped; default slog.Default().
	Log *slog.Logger
	// Progress, when set, is called after each batch with the records
	// gone through and the total to go through.
	Progress func(done, total int64)
}

// Summary counts what a replay did.
type Summary struct {
	Replayed  int `json:"replayed"`
	Unmatched int `json:"unmatched"` // not matching the filter
	Invalid   int `json:"invalid"`   // still breaking the contract: skipped
}

// Run replays. It returns what was done even with an error; what was
// replayed so far is committed, so a new run goes on from there.
func (r Replayer) Run(ctx context.Context) (Summary, error) {
	var sum Summary
	if r.Log == nil {
		r.Log = slog.Default()
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), r.KafkaOpts...), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return sum, fmt.Errorf("deadletter: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	actx, cancel := context.WithTimeout(ctx, adminTimeout)
	n, ok, err := partitionCount(actx, adm, r.Topic)
	cancel()
	switch {
	case err != nil:
		return sum, err
	case !ok:
		return sum, &TopicError{"delay", r.Topic}
	case n != r.Table.Partitions():
		return sum, fmt.Errorf("%w: %s has %d partitions, %d levels x %d per level need %d", ErrPartitions, r.Topic, n, r.Table.Levels(), r.Table.PerLevel(), r.Table.Partitions())
	}
	from, err := r.committed(ctx, adm)
	if err != nil {
		return sum, err
	}
	starts, ends, err := bounds(ctx, adm, r.DLQTopic)
	if err != nil {
		return sum, err
	}
	var total int64
	for p, end := range ends {
		total += max(end-max(from[p], starts[p]), 0)
	}

	// Batches of up to 1000 records: produce, wait for the acks, commit
	// the dead-letter offsets after them.
	var (
		batch []*kgo.Record
		next  = make(map[int32]int64) // partition -> offset after the last record of the batch
	)
	flush := func() error {
		if len(next) == 0 {
			return nil
		}
		if !r.DryRun && len(batch) > 0 {
			if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				return fmt.Errorf("deadletter: produce to %s: %w (the batch is not marked as replayed; run again once fixed)", r.Topic, err)
			}
		}
		sum.Replayed += len(batch)
		if !r.DryRun {
			if err := r.commit(ctx, adm, next); err != nil {
				return err
			}
		}
		if r.Progress != nil {
			var done int64
			for p, o := range next {
				done += o - max(from[p], starts[p])
			}
			r.Progress(done, total)
		}
		batch = batch[:0]
		return nil
	}
	var ferr error
	err = Read(ctx, r.KafkaOpts, r.DLQTopic, from, func(d *kgo.Record) bool {
		switch {
		case !r.Filter.Match(d):
			sum.Unmatched++
		default:
			rec, err := ReplayRecord(r.Table, r.Topic, d, time.Now())
			if err != nil {
				sum.Invalid++
				r.Log.Warn("dead letter still breaks the contract; skipped", "partition", d.Partition, "offset", d.Offset, "err", err)
				break
			}
			batch = append(batch, rec)
		}
		next[d.Partition] = d.Offset + 1
		if len(batch) >= 1000 {
			if ferr = flush(); ferr != nil {
				return false
			}
		}
		return true
	})
	if ferr != nil {
		return sum, ferr
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return sum, err
	}
	if ferr = flush(); ferr != nil {
		return sum, ferr
	}
	if ctx.Err() != nil {
		return sum, errors.New("deadletter: interrupted; what was replayed so far is committed, a new run goes on from there")
	}
	return sum, nil
}

// committed returns the replay group's committed offsets of the dead-letter
// topic.
func (r Replayer) committed(ctx context.Context, adm *kadm.Client) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	out := make(map[int32]int64)
	os, err := adm.FetchOffsets(ctx, r.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("deadletter: fetch committed offsets of group %s: %w", r.Group, err)
	}
	os.Each(func(o kadm.OffsetResponse) {
		if o.Topic == r.DLQTopic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out, nil
}

// commit commits offsets of the dead-letter topic for the replay group,
// outside any group membership (a simple consumer group).
func (r Replayer) commit(ctx context.Context, adm *kadm.Client, next map[int32]int64) error {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	os := make(kadm.Offsets)
	for p, o := range next {
		os.Add(kadm.Offset{Topic: r.DLQTopic, Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(ctx, r.Group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("deadletter: commit replayed offsets for group %s: %w (the last batch was replayed but not recorded; a new run repeats it)", r.Group, err)
	}
	return nil
}
