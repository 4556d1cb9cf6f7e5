package relay

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// manualKey marks, in a record's Context, a record whose Partition field is
// already chosen: cascades to the delay topic and forwards with a
// kdelay-target-partition header.
type manualKey struct{}

func withManual(ctx context.Context) context.Context {
	return context.WithValue(ctx, manualKey{}, true)
}

func isManual(r *kgo.Record) bool {
	if r.Context == nil {
		return false
	}
	v, _ := r.Context.Value(manualKey{}).(bool)
	return v
}

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
	return isManual(r) || tp.keyed.RequiresConsistency(r)
}

func (tp topicPartitioner) Partition(r *kgo.Record, n int) int {
	if isManual(r) {
		return int(r.Partition) // out of range fails the record in kgo
	}
	return tp.keyed.Partition(r, n)
}
