package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// ceilingWarmup is the most records produced to a scratch topic before a
// ceiling burst: a broker's first produce of a run is far slower than its
// steady state (JIT, page cache), and the ceiling is the steady state.
const ceilingWarmup = 100_000

// ceiling measures what the broker takes: one client with the relay's
// producer settings (producerOpts) produces r.Records pre-built records
// shaped like forwarded ones (key, value of r.Size bytes, the
// kdelay-due-at and kdelay-source headers) to a target topic like the
// bursts' (k partitions, LogAppendTime), after a warm-up to a scratch
// topic. Its drain rate, taken from the target's append times as every
// burst's, is what the bursts of the same size and round are divided by.
func (b *bench) ceiling(ctx context.Context, r *result, nm names, tag string) (*result, error) {
	k := b.o.partitions
	warm := nm.target + "-warmup"
	if err := b.createTopics(ctx, map[string]int{nm.target: k, warm: k}, nm.target, warm); err != nil {
		return r, err
	}
	cl, err := kgo.NewClient(b.producerOpts()...)
	if err != nil {
		return r, err
	}
	defer cl.Close()
	vals := make([]byte, r.Size+4096)
	rand.Read(vals)
	// dueAt is shared by every record of a burst and written just before
	// it is produced: the burst's start, so that lateness reads as the
	// time from the start to the append.
	dueAt := make([]byte, 13)
	build := func(topic string, n int) []*kgo.Record {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			off := i % 4096
			recs[i] = &kgo.Record{
				Topic: topic,
				Key:   []byte("k" + strconv.Itoa(i)),
				Value: vals[off : off+r.Size : off+r.Size],
				Headers: []kgo.RecordHeader{
					{Key: levels.HeaderDueAt, Value: dueAt},
					{Key: levels.HeaderSource, Value: []byte(levels.Source(nm.delay, int32(i%k), int64(i/k)))},
				},
			}
		}
		return recs
	}
	stamp := func(t time.Time) { copy(dueAt, fmt.Sprintf("%013d", t.UnixMilli())) }
	stamp(time.Now())
	if _, err := produceAll(ctx, cl, build(warm, min(r.Records, ceilingWarmup))); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	recs := build(nm.target, r.Records)
	col, err := b.newCollector(ctx, nm.target, r.Records, "deliver "+tag)
	if err != nil {
		return r, err
	}
	samp := b.startDrainSampler(ctx, nil)
	defer samp.stop()
	start := time.Now()
	stamp(start)
	r.DueMs = start.UnixMilli()
	took, perr := produceAll(ctx, cl, recs)
	r.ProduceSeconds = took.Seconds()
	r.ProduceRate = float64(r.Records) / took.Seconds()
	r.Notes = append(r.Notes, fmt.Sprintf("produce only: %d pre-built records (key, value, kdelay-due-at, kdelay-source) with the relay's producer settings (linger 0, acks=all, idempotent), after a warm-up of %d", r.Records, min(r.Records, ceilingWarmup)))
	werr := perr
	if werr == nil {
		werr = col.wait(ctx, time.Now().Add(2*time.Minute), 15*time.Second)
	}
	got, dups, bad := col.finish(200 * time.Millisecond)
	r.fill(got, dups, bad)
	r.setDrainCPU(samp.stop())
	if werr == nil {
		werr = clientCPU(ctx, r, cl, build(warm, r.Records))
	}
	// Its lateness is the time from the burst's start to each append: no
	// record of the ceiling is late, so the late windows say nothing.
	r.LateWindows, r.LateShare = nil, 0
	return r, werr
}

// clientCPU produces the burst once more, to the warm-up topic, with
// nothing else running in this process (the collector is done), and sets
// r.ClientCPUSeconds to this process's CPU time meanwhile: what one
// produce-only client costs per record on this machine, the reference the
// relay's CPU per record is set against in the same round (a figure in
// µs per record follows the machine more than the code).
func clientCPU(ctx context.Context, r *result, cl *kgo.Client, recs []*kgo.Record) error {
	return ownCPU(r, "client", func() error {
		_, err := produceAll(ctx, cl, recs)
		return err
	})
}

// ownCPU runs run, with nothing else running in this process, and sets
// r.ClientCPUSeconds to this process's CPU time (user and system)
// meanwhile; what names the reference in run's error.
func ownCPU(r *result, what string, run func() error) error {
	cpu0, ok := processCPU()
	if err := run(); err != nil {
		return fmt.Errorf("%s CPU reference: %w", what, err)
	}
	if cpu1, ok1 := processCPU(); ok && ok1 {
		r.ClientCPUSeconds = cpu1 - cpu0
	}
	return nil
}

// produceAll produces recs with cl and waits for every ack: how long it
// took and the first error.
func produceAll(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) (time.Duration, error) {
	var (
		wg       sync.WaitGroup
		firstErr atomic.Value
	)
	start := time.Now()
	wg.Add(len(recs))
	for _, rec := range recs {
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return took, fmt.Errorf("produce: %w", err)
	}
	return took, ctx.Err()
}
