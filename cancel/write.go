package cancel

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// Ack is a cancel (or a withdrawal) the broker acknowledged.
type Ack struct {
	ID        string
	Topic     string
	Partition int32
	Offset    int64
	// Cutoff is the cancel's cut-off: records with the id whose original
	// timestamp lies before it are cancelled (zero for a withdrawal).
	Cutoff time.Time
	// AckedAt is when the acknowledgement arrived.
	AckedAt time.Time
}

// Write produces the cancel of id to the cancel topic with the cut-off
// before (zero: now, the cancel's own timestamp) and returns once the
// broker acknowledged it; an error means it may not have been written.
// cl must partition by key (Kafka's default partitioner, kgo's default),
// so that compaction keeps the last cancel of each id.
func Write(ctx context.Context, cl *kgo.Client, topic, id string, before, now time.Time) (Ack, error) {
	rec, err := levels.Cancel(topic, id, before, now)
	if err != nil {
		return Ack{}, err
	}
	cut := now.Truncate(time.Millisecond)
	if !before.IsZero() {
		if cut = before.Truncate(time.Millisecond); !cut.Equal(before) {
			cut = cut.Add(time.Millisecond) // as levels.Cancel rounds it
		}
	}
	return write(ctx, cl, rec, id, cut)
}

// Withdraw produces a tombstone for id: its cancel is withdrawn, records
// with the id not yet due are delivered again.
func Withdraw(ctx context.Context, cl *kgo.Client, topic, id string, now time.Time) (Ack, error) {
	rec, err := levels.Cancel(topic, id, time.Time{}, now)
	if err != nil {
		return Ack{}, err
	}
	rec.Value, rec.Headers = nil, nil
	return write(ctx, cl, rec, id, time.Time{})
}

func write(ctx context.Context, cl *kgo.Client, rec *kgo.Record, id string, cut time.Time) (Ack, error) {
	res := cl.ProduceSync(ctx, rec)
	if err := res.FirstErr(); err != nil {
		return Ack{}, fmt.Errorf("cancel: write the cancel of %s to %s: %w", id, rec.Topic, err)
	}
	r := res[0].Record
	return Ack{ID: id, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Cutoff: cut, AckedAt: time.Now()}, nil
}
