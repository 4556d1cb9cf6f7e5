package relay

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// manualKey marks, in a record's Context, a record whose Partition field is
// already chosen: cascades to the delay topic and forwards with a
// kdelay-target-partition header. Its value is a *manualMark.
type manualKey struct{}

// manualMark is where the partitioner reports a chosen partition that the
// topic does not have, so that the failure is classified by type.
type manualMark struct {
	outOfRange atomic.Bool
	partitions atomic.Int32
}

func withManual(ctx context.Context, m *manualMark) context.Context {
	return context.WithValue(ctx, manualKey{}, m)
}

func manualOf(r *kgo.Record) *manualMark {
	switch c := r.Context.(type) {
	case nil:
		return nil
	case *attemptCtx:
		return c.mark // the attempt's own: no walk up its context chain, twice per record
	default:
		m, _ := c.Value(manualKey{}).(*manualMark)
		return m
	}
}

// PartitionError is the produce error of a record whose chosen partition
// (kdelay-target-partition) does not exist in its topic.
type PartitionError struct {
	Topic      string
	Partition  int32
	Partitions int   // the topic's partition count
	Err        error // franz-go's error
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("target partition %d does not exist in %q (%d partitions)", e.Partition, e.Topic, e.Partitions)
}

func (e *PartitionError) Unwrap() error { return e.Err }

// partitioner honours a manual partition on marked records and otherwise
// partitions as Kafka's Java client does for keyed records (murmur2), with
// sticky batches for records without a key.
type partitioner struct{ keyed kgo.Partitioner }

func newPartitioner() kgo.Partitioner {
	return partitioner{keyed: kgo.StickyKeyPartitioner(nil)}
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return topicPartitioner{keyed: p.keyed.ForTopic(topic)}
}

type topicPartitioner struct{ keyed kgo.TopicPartitioner }

func (tp topicPartitioner) OnNewBatch() {
	if nb, ok := tp.keyed.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}

func (tp topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return manualOf(r) != nil || tp.keyed.RequiresConsistency(r)
}

func (tp topicPartitioner) Partition(r *kgo.Record, n int) int {
	if m := manualOf(r); m != nil {
		if r.Partition < 0 || int(r.Partition) >= n {
			m.partitions.Store(int32(n))
			m.outOfRange.Store(true)
		}
		return int(r.Partition) // out of range fails the record in kgo
	}
	return tp.keyed.Partition(r, n)
}
