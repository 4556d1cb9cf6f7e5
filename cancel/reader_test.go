package cancel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

func newCluster(t testing.TB, partitions int32) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "d.cancel"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("d.cancel"),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return c, prod
}

func newReader(t testing.TB, c *kfake.Cluster, o Options) *Reader {
	t.Helper()
	o.Topic = "d.cancel"
	o.KafkaOpts = []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	if o.Retain == 0 {
		o.Retain = time.Hour
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	r, err := NewReader(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func produce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func TestReader(t *testing.T) {
	c, prod := newCluster(t, 3)
	ts := time.Now().Truncate(time.Millisecond)
	before := func(ms int64) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: levels.HeaderCancelBefore, Value: strconv.AppendInt(nil, ms, 10)}}
	}
	produce(t, prod,
		&kgo.Record{Key: []byte("a"), Value: []byte("x"), Timestamp: ts},
		&kgo.Record{Key: []byte("b"), Value: []byte("x"), Timestamp: ts, Headers: before(ts.UnixMilli() + 5000)},
		&kgo.Record{Key: []byte("gone"), Value: []byte("x"), Timestamp: ts},
		&kgo.Record{Key: []byte("gone"), Value: nil, Timestamp: ts}, // the tombstone withdraws it
		&kgo.Record{Key: []byte("bad"), Value: []byte("x"), Timestamp: ts, Headers: []kgo.RecordHeader{{Key: levels.HeaderCancelBefore, Value: []byte("soon")}}},
		&kgo.Record{Key: make([]byte, MaxIDLen+1), Value: []byte("x"), Timestamp: ts},
		&kgo.Record{Key: []byte("expired"), Value: []byte("x"), Timestamp: ts.Add(-2 * time.Hour)},
	)
	var mu sync.Mutex
	invalid := map[string]int{}
	r := newReader(t, c, Options{Invalid: func(why string) { mu.Lock(); invalid[why]++; mu.Unlock() }})
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	through0, moved := r.Moved()
	if !through0.IsZero() {
		t.Errorf("barrier at %s before the first Sync, want zero", through0)
	}
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if th := r.Through(); th.Before(t0) {
		t.Errorf("Through %s before the Sync started (%s)", th, t0)
	}
	select {
	case <-moved:
	default:
		t.Errorf("the channel of Moved is not closed after the barrier moved")
	}
	if th, again := r.Moved(); again == moved || !th.Equal(r.Through()) {
		t.Errorf("Moved after the barrier moved: the same channel (%v) or barrier %s, want %s", again == moved, th, r.Through())
	}
	for _, tc := range []struct {
		id   string
		ts   time.Time
		want bool
	}{
		{"a", ts.Add(-time.Millisecond), true},
		{"a", ts, false},
		{"b", ts.Add(4 * time.Second), true}, // kdelay-cancel-before wins over the timestamp
		{"b", ts.Add(5 * time.Second), false},
		{"gone", ts.Add(-time.Second), false},
		{"bad", ts.Add(-time.Second), false},
		{"expired", ts.Add(-3 * time.Hour), false},
	} {
		if got := r.Cancelled([]byte(tc.id), tc.ts); got != tc.want {
			t.Errorf("Cancelled(%q, ts%+v) = %v, want %v", tc.id, tc.ts.Sub(ts), got, tc.want)
		}
	}
	if n := r.Set().Len(); n != 2 {
		t.Errorf("set holds %d cancels, want 2 (a, b)", n)
	}
	mu.Lock()
	if invalid[InvalidID] != 1 || invalid[InvalidBefore] != 1 {
		t.Errorf("invalid = %v, want one %s and one %s", invalid, InvalidID, InvalidBefore)
	}
	mu.Unlock()

	// Kept current: a cancel produced after the Sync is in the set after
	// the next round, and Through passes the time of its ack.
	go r.Run(ctx)
	produce(t, prod, &kgo.Record{Key: []byte("late"), Value: []byte("x"), Timestamp: ts.Add(time.Second)})
	acked := time.Now()
	for !r.Through().After(acked) {
		select {
		case <-ctx.Done():
			t.Fatal("barrier did not pass the ack")
		case <-time.After(5 * time.Millisecond): // polling the barrier the reader exposes
		}
	}
	if !r.Cancelled([]byte("late"), ts) {
		t.Errorf("cancel acked before Through is not in the set")
	}
}

// TestReaderWant: Run rounds once per Options.Idle while none is wanted;
// a round wanted runs at the time wanted (its barrier at or past it),
// however long Idle is.
func TestReaderWant(t *testing.T) {
	c, _ := newCluster(t, 1)
	r := newReader(t, c, Options{Idle: time.Hour, Every: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, moved := r.Moved()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	select { // the first round runs at once
	case <-moved:
	case <-ctx.Done():
		t.Fatal("Run ran no first round")
	}
	for _, in := range []time.Duration{0, 200 * time.Millisecond} {
		at := time.Now().Add(in)
		_, moved := r.Moved()
		r.Want(at)
		select {
		case <-moved:
		case <-ctx.Done():
			t.Fatalf("the round wanted at +%s did not run", in)
		}
		if th := r.Through(); th.Before(at) {
			t.Errorf("barrier %s after the round wanted at +%s, before the time wanted", th.Sub(at), in)
		}
	}
}

func TestReaderMissingTopic(t *testing.T) {
	c, _ := newCluster(t, 1)
	r := newReader(t, c, Options{})
	r.topic = "nope"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Sync(ctx); !errors.Is(err, ErrNoTopic) {
		t.Errorf("Sync of a missing topic: %v, want ErrNoTopic", err)
	}
}

// TestReaderTransactionMarker: a partition ending in a transaction marker
// (a cancel written by a transactional producer) counts as read.
func TestReaderTransactionMarker(t *testing.T) {
	c, _ := newCluster(t, 1)
	tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("d.cancel"), kgo.TransactionalID("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(t, tx, &kgo.Record{Key: []byte("t1"), Value: []byte("x")})
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	r := newReader(t, c, Options{})
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !r.Cancelled([]byte("t1"), time.UnixMilli(0)) {
		t.Errorf("transactional cancel not read")
	}
}

// BenchmarkRebuild1M measures the rebuild of a set of 1M cancels from the
// topic (kfake, 3 partitions): the time of one Sync from a fresh reader,
// and the heap the set holds. Run with -benchtime 1x; producing the
// cancels first takes a while.
//
// With KDELAY_BENCH_BROKERS set it runs against that cluster instead: a
// topic named kdelay-bench-cancel-<pid> (3 partitions) is created there.
func BenchmarkRebuild1M(b *testing.B) {
	const n = 1_000_000
	var seeds []string
	var prod *kgo.Client
	topic := "d.cancel"
	if env := os.Getenv("KDELAY_BENCH_BROKERS"); env != "" {
		seeds = strings.Split(env, ",")
		topic = fmt.Sprintf("kdelay-bench-cancel-%d", os.Getpid())
		var err error
		prod, err = kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(1<<20))
		if err != nil {
			b.Fatal(err)
		}
		defer prod.Close()
		adm := kadm.NewClient(prod)
		if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, topic); err != nil {
			b.Fatal(err)
		}
		defer adm.DeleteTopics(context.Background(), topic)
	} else {
		var c *kfake.Cluster
		c, prod = newCluster(b, 3)
		seeds = c.ListenAddrs()
	}
	now := time.Now()
	batch := make([]*kgo.Record, 0, 10_000)
	for i := range n {
		batch = append(batch, &kgo.Record{Key: fmt.Appendf(nil, "order-%010d", i), Value: []byte("c"), Timestamp: now})
		if len(batch) == cap(batch) {
			produce(b, prod, batch...)
			batch = batch[:0]
		}
	}
	b.Logf("produced %d cancels to %s in %s", n, topic, time.Since(now).Round(time.Millisecond))
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r, err := NewReader(Options{Topic: topic, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Retain: time.Hour,
			Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		if err := r.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.ReportMetric(time.Since(start).Seconds(), "s/rebuild")
		if r.Set().Len() != n {
			b.Fatalf("set holds %d, want %d", r.Set().Len(), n)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB-heap")
		r.Close()
	}
}
