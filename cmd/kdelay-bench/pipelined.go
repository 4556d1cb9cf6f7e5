package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// pipelineCommitEvery is how often the pipelined pipe commits what is
// acked.
const pipelineCommitEvery = 100 * time.Millisecond

// pipelined is the relay's design without the scheduling: each polled
// batch is produced without waiting for its acks, so produces overlap the
// next poll, and every pipelineCommitEvery the offsets of the batches
// acked in full (in poll order) are committed. The client's buffer
// (MaxBufferedRecords) bounds what is in flight.
func (b *bench) pipelined(ctx context.Context, src, dst, group string, n int) error {
	cl, err := kgo.NewClient(append(b.producerOpts(),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(src),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(100*time.Millisecond),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	type batch struct {
		offsets map[int32]kgo.EpochOffset
		left    atomic.Int64
	}
	var (
		mu       sync.Mutex
		queue    []*batch
		firstErr atomic.Value
	)
	commit := func() error {
		merged := map[int32]kgo.EpochOffset{}
		mu.Lock()
		for len(queue) > 0 && queue[0].left.Load() == 0 {
			for p, o := range queue[0].offsets {
				merged[p] = o
			}
			queue = queue[1:]
		}
		mu.Unlock()
		if len(merged) == 0 {
			return nil
		}
		var cerr error
		cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{src: merged}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) { cerr = err })
		return cerr
	}
	commitErr := make(chan error, 1)
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(pipelineCommitEvery)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				if err := commit(); err != nil && ctx.Err() == nil {
					commitErr <- err
					return
				}
			}
		}
	}()
	defer func() { stop(); wg.Wait() }()
	done := 0
	for done < n && ctx.Err() == nil {
		select {
		case err := <-commitErr:
			return err
		default:
		}
		if err, _ := firstErr.Load().(error); err != nil {
			return err
		}
		recs := cl.PollRecords(ctx, b.o.maxBatch).Records()
		if len(recs) == 0 {
			continue
		}
		bt := &batch{offsets: make(map[int32]kgo.EpochOffset)}
		bt.left.Store(int64(len(recs)))
		for _, rec := range recs {
			bt.offsets[rec.Partition] = kgo.EpochOffset{Epoch: -1, Offset: rec.Offset + 1}
		}
		mu.Lock()
		queue = append(queue, bt)
		mu.Unlock()
		for _, rec := range recs {
			cl.Produce(ctx, &kgo.Record{Topic: dst, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}, func(_ *kgo.Record, err error) {
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
				bt.left.Add(-1)
			})
		}
		done += len(recs)
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return commit()
}
