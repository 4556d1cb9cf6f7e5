package etf1

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoTopic is returned when a topic Migrate reads or writes does not
// exist.
var ErrNoTopic = errors.New("etf1: topic does not exist")

// partitions returns topic's partition count, wrapping ErrNoTopic when
// it does not exist.
func partitions(ctx context.Context, adm *kadm.Client, topic string) (int, error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("etf1: metadata of %s: %w", topic, err)
	}
	d, ok := td[topic]
	switch {
	case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
		return 0, fmt.Errorf("%w: %s", ErrNoTopic, topic)
	case d.Err != nil:
		return 0, fmt.Errorf("etf1: metadata of %s: %w", topic, d.Err)
	}
	return len(d.Partitions), nil
}

// readTopic calls fn with every record of topic (read_committed, no
// consumer group) from each partition's start to its last stable offset
// as listed when it begins; records written after that are not read.
// It returns the number of records read.
func readTopic(ctx context.Context, kopts []kgo.Opt, adm *kadm.Client, topic string, fn func(*kgo.Record)) (int, error) {
	if _, err := partitions(ctx, adm, topic); err != nil {
		return 0, err
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("etf1: start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("etf1: end offsets of %s: %w", topic, err)
	}
	from := make(map[int32]kgo.Offset)
	end := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		s, ok := starts.Lookup(topic, o.Partition)
		if ok && o.Offset > s.Offset {
			from[o.Partition] = kgo.NewOffset().At(s.Offset)
			end[o.Partition] = o.Offset
		}
	})
	if len(end) == 0 {
		return 0, nil
	}
	opts := append(append([]kgo.Opt(nil), kopts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers advance the position: a partition that
		// ends in one counts as read to its end.
		kgo.KeepControlRecords(),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("etf1: kafka client: %w", err)
	}
	defer cl.Close()
	n := 0
	for len(end) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("etf1: read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("etf1: read %s partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return n, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			e, ok := end[r.Partition]
			if !ok || r.Offset >= e {
				return
			}
			if !r.Attrs.IsControl() {
				n++
				fn(r)
			}
			if r.Offset+1 >= e {
				delete(end, r.Partition)
			}
		})
	}
	return n, nil
}
