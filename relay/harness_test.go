package relay

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// harness is an in-process Kafka (kfake) with a delay topic, a dead-letter
// topic and target topics, plus clients to produce and observe.
type harness struct {
	t    *testing.T
	c    *kfake.Cluster
	cfg  config.Config
	prod *kgo.Client
	adm  *kadm.Client

	mu   sync.Mutex
	sent map[string]sent // by key

	readCommitted bool // collect reads with isolation.level=read_committed
	// kafkaOpts are added to every relay's client (Options.KafkaOpts).
	kafkaOpts []kgo.Opt
}

type sent struct {
	key       string
	due       time.Time
	delay     time.Duration // due minus the record timestamp
	partition int32         // delay-topic partition written to
}

// received is a record seen on a target or the dead-letter topic.
type received struct {
	key       string
	topic     string
	partition int32 // of the target (or dead-letter) topic
	offset    int64
	at        time.Time // when the observer polled it
	ts        time.Time // record timestamp: set when the relay produced it
	due       time.Time // kdelay-due-at
	source    string
	headers   map[string]string
	value     string
}

func newHarness(t *testing.T, env map[string]string, targets ...string) *harness {
	t.Helper()
	base := map[string]string{
		"KDELAY_LEVELS":         "1s 2s 4s 8s",
		"KDELAY_TOPIC":          "delays",
		"KDELAY_HTTP_ADDR":      "off",
		"KDELAY_FETCH_MAX_WAIT": "50ms",
		"KDELAY_LOG_LEVEL":      "info",
	}
	maps.Copy(base, env)
	probe, err := config.Load(base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(probe.Table().Partitions(), probe.Topic),
		kfake.SeedTopics(1, append([]string{probe.DLQTopic, probe.CancelTopic}, targets...)...),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	base["KDELAY_BROKERS"] = strings.Join(c.ListenAddrs(), ",")
	base["KDELAY_DATA_DIR"] = t.TempDir()
	cfg, err := config.Load(base)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &harness{t: t, c: c, cfg: cfg, prod: prod, adm: kadm.NewClient(prod), sent: make(map[string]sent)}
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// relayRun is a running relay.
type relayRun struct {
	r      *Relay
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// start runs a relay with the harness config, changed by mod, and options
// changed by opts.
func (h *harness) start(mod func(*config.Config), opts ...func(*Options)) *relayRun {
	h.t.Helper()
	cfg := h.cfg
	if mod != nil {
		mod(&cfg)
	}
	tw := &testWriter{t: h.t}
	h.t.Cleanup(func() { tw.mu.Lock(); tw.done = true; tw.mu.Unlock() })
	reg := prometheus.NewRegistry()
	o := Options{
		Config:    cfg,
		Log:       slog.New(slog.NewTextHandler(tw, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Registry:  reg,
		MaxBatch:  512,
		KafkaOpts: h.kafkaOpts,
	}
	for _, f := range opts {
		f(&o)
	}
	r, err := New(o)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &relayRun{r: r, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	h.t.Cleanup(func() { rr.stop(h.t) })
	return rr
}

// waitReady waits until the relay has joined its group, so that lateness
// figures measure the relay, not the group join.
func (rr *relayRun) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !rr.r.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("relay not ready within 30s")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition the relay exposes
	}
}

func (rr *relayRun) stop(t *testing.T) {
	rr.cancel()
	select {
	case err, ok := <-rr.done:
		if ok && err != nil {
			t.Errorf("relay Run: %v", err)
		}
		if ok {
			close(rr.done)
		}
	case <-time.After(60 * time.Second):
		t.Error("relay did not stop within 60s")
	}
}

// send stamps a record with the Go helper and produces it.
func (h *harness) send(key string, d levels.Delay) sent {
	h.t.Helper()
	r := &kgo.Record{Key: []byte(key), Value: []byte("v-" + key), Headers: []kgo.RecordHeader{{Key: "own", Value: []byte(key)}}}
	if err := h.cfg.Table().Stamp(r, h.cfg.Topic, d, time.Now()); err != nil {
		h.t.Fatal(err)
	}
	return h.produce(r)
}

// sendRaw produces a record with the given headers to an explicit partition,
// as a producer that is not the Go helper would.
func (h *harness) sendRaw(key string, partition int32, kv ...string) sent {
	h.t.Helper()
	r := &kgo.Record{Topic: h.cfg.Topic, Partition: partition, Key: []byte(key), Value: []byte("v-" + key), Timestamp: time.Now()}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return h.produce(r)
}

func (h *harness) produce(r *kgo.Record) sent {
	h.t.Helper()
	if err := h.prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
	s := sent{key: string(r.Key), partition: r.Partition}
	if sch, err := h.cfg.Table().Parse(r.Headers, r.Timestamp); err == nil {
		s.due, s.delay = sch.Due, sch.Delay
	}
	h.mu.Lock()
	h.sent[s.key] = s
	h.mu.Unlock()
	return s
}

// collect consumes topics from the start until stop says enough or the
// timeout passes.
func (h *harness) collect(timeout time.Duration, stop func(map[string][]received) bool, topics ...string) map[string][]received {
	h.t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(h.c.ListenAddrs()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(20 * time.Millisecond)}
	if h.readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	got := make(map[string][]received)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for !stop(got) {
		// Bounded polls, so that a stop condition on time is seen
		// without a record arriving.
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fs := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			break
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			rc := received{key: string(r.Key), topic: r.Topic, partition: r.Partition, offset: r.Offset,
				at: now, ts: r.Timestamp, value: string(r.Value), headers: map[string]string{}}
			for _, hd := range r.Headers {
				rc.headers[hd.Key] = string(hd.Value)
			}
			if ms, err := strconv.ParseInt(rc.headers[levels.HeaderDueAt], 10, 64); err == nil {
				rc.due = time.UnixMilli(ms)
			}
			rc.source = rc.headers[levels.HeaderSource]
			got[rc.key] = append(got[rc.key], rc)
		})
	}
	return got
}

// allKeys stops a collect once every key has arrived.
func allKeys(keys ...string) func(map[string][]received) bool {
	return func(got map[string][]received) bool {
		for _, k := range keys {
			if len(got[k]) == 0 {
				return false
			}
		}
		return true
	}
}

// report checks the delivery guarantees for the records sent under keys and
// logs the figures: every record once or more (duplicates counted, allowed
// up to maxDup), none early, lateness percentiles.
func (h *harness) report(got map[string][]received, keys []string, maxDup int) {
	h.t.Helper()
	var lost, dup, early int
	var late []time.Duration
	for _, k := range keys {
		h.mu.Lock()
		s := h.sent[k]
		h.mu.Unlock()
		rs := got[k]
		if len(rs) == 0 {
			lost++
			h.t.Errorf("record %s (due %s) lost", k, s.due.Format(time.TimeOnly+".000"))
			continue
		}
		dup += len(rs) - 1
		for _, rc := range rs {
			if rc.ts.Before(s.due) || rc.at.Before(s.due) {
				early++
				h.t.Errorf("record %s forwarded early: produced %s, due %s", k, rc.ts.Format(time.TimeOnly+".000"), s.due.Format(time.TimeOnly+".000"))
			}
			if !rc.due.Equal(s.due) {
				h.t.Errorf("record %s: kdelay-due-at %s, want %s", k, rc.due, s.due)
			}
		}
		// Lateness = the forwarded record's timestamp (set by the relay's
		// producer just before the ack) minus the due time.
		late = append(late, rs[0].ts.Sub(s.due))
		if l := rs[0].ts.Sub(s.due); l > 250*time.Millisecond {
			h.t.Logf("record %s forwarded %s after its due time", k, l)
		}
	}
	if dup > maxDup {
		h.t.Errorf("%d duplicates, at most %d allowed", dup, maxDup)
	}
	slices.Sort(late)
	pct := func(q float64) time.Duration {
		if len(late) == 0 {
			return 0
		}
		return late[min(len(late)-1, int(q*float64(len(late))))]
	}
	h.t.Logf("sent=%d delivered=%d duplicated=%d early=%d lost=%d lateness p50=%s p99=%s max=%s",
		len(keys), len(keys)-lost, dup, early, lost, pct(0.50), pct(0.99), pct(1))
}

func keysOf(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return ks
}
