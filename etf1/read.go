package etf1

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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

// quiet is how long a partition may return nothing, below the end offset
// listed at the start, before readTopic takes it as read to its end: the
// log cleaner of a compacted topic removes tombstones (after
// delete.retention.ms) and may leave a partition's last offsets empty, and
// a consumer then waits below the end for ever.
const quiet = 5 * time.Second

// Gap is a partition that ended below the end offset listed at the start:
// nothing was readable from Next to End while the broker answered.
type Gap struct {
	Partition int32 `json:"partition"`
	Next      int64 `json:"next"` // the offset after the last record read
	End       int64 `json:"end"`
}

// readTopic calls fn with every record of topic (read_committed, no
// consumer group) from each partition's start to its last stable offset
// as listed when it begins; records written after that are not read. It
// returns the number of records read and the partitions that ended early
// (see quiet).
func readTopic(ctx context.Context, kopts []kgo.Opt, adm *kadm.Client, topic string, fn func(*kgo.Record)) (int, []Gap, error) {
	if _, err := partitions(ctx, adm, topic); err != nil {
		return 0, nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, nil, fmt.Errorf("etf1: start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, nil, fmt.Errorf("etf1: end offsets of %s: %w", topic, err)
	}
	from := make(map[int32]int64)
	end := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		s, ok := starts.Lookup(topic, o.Partition)
		if ok && o.Offset > s.Offset {
			from[o.Partition] = s.Offset
			end[o.Partition] = o.Offset
		}
	})
	return readRange(ctx, kopts, adm, topic, from, end, quiet, fn)
}

// readRange reads topic's partitions from from[p] to end[p] (exclusive);
// a partition that returns nothing for quietFor while the broker answers
// a ListOffsets request is taken as read (a Gap).
func readRange(ctx context.Context, kopts []kgo.Opt, adm *kadm.Client, topic string, from, end map[int32]int64, quietFor time.Duration, fn func(*kgo.Record)) (int, []Gap, error) {
	if len(end) == 0 {
		return 0, nil, nil
	}
	start := make(map[int32]kgo.Offset, len(from))
	next := make(map[int32]int64, len(from))
	seen := make(map[int32]time.Time, len(from))
	now := time.Now()
	for p, o := range from {
		start[p] = kgo.NewOffset().At(o)
		next[p], seen[p] = o, now
	}
	opts := append(append([]kgo.Opt(nil), kopts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers advance the position: a partition that
		// ends in one counts as read to its end.
		kgo.KeepControlRecords(),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, nil, fmt.Errorf("etf1: kafka client: %w", err)
	}
	defer cl.Close()
	n := 0
	var gaps []Gap
	for len(end) > 0 {
		pctx, cancel := context.WithTimeout(ctx, quietFor/5)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return n, gaps, fmt.Errorf("etf1: read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.DeadlineExceeded) {
				ferr = fmt.Errorf("etf1: read %s partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return n, gaps, ferr
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			e, ok := end[r.Partition]
			if !ok || r.Offset >= e {
				return
			}
			if !r.Attrs.IsControl() {
				n++
				fn(r)
			}
			next[r.Partition], seen[r.Partition] = r.Offset+1, now
			if r.Offset+1 >= e {
				delete(end, r.Partition)
			}
		})
		var silent []int32
		for p := range end {
			if now.Sub(seen[p]) >= quietFor {
				silent = append(silent, p)
			}
		}
		if len(silent) == 0 {
			continue
		}
		// Nothing readable, or a broker that does not answer: only an
		// answer tells them apart.
		if _, err := adm.ListCommittedOffsets(ctx, topic); err != nil {
			return n, gaps, fmt.Errorf("etf1: read %s: no record for %s and the broker does not answer: %w", topic, quietFor, err)
		}
		for _, p := range silent {
			gaps = append(gaps, Gap{Partition: p, Next: next[p], End: end[p]})
			delete(end, p)
		}
	}
	slices.SortFunc(gaps, func(a, b Gap) int { return cmp.Compare(a.Partition, b.Partition) })
	return n, gaps, nil
}
