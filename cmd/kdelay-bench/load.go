package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// createTopics creates topics with the given partition counts; targets get
// LogAppendTime so their timestamps are the broker's append times.
func (b *bench) createTopics(ctx context.Context, parts map[string]int, logAppend ...string) error {
	for name, n := range parts {
		var cfg map[string]*string
		for _, t := range logAppend {
			if t == name {
				cfg = map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")}
			}
		}
		resp, err := b.adm.CreateTopic(ctx, int32(n), -1, cfg, name)
		if err != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		if resp.Err != nil {
			return fmt.Errorf("create topic %s: %w", name, resp.Err)
		}
	}
	// Wait until every partition has a leader in the metadata.
	deadline := time.Now().Add(30 * time.Second)
	for {
		names := make([]string, 0, len(parts))
		for n := range parts {
			names = append(names, n)
		}
		md, err := b.adm.Metadata(ctx, names...)
		ok := err == nil
		if ok {
			for name, n := range parts {
				td, found := md.Topics[name]
				if !found || td.Err != nil || len(td.Partitions) != n {
					ok = false
					break
				}
				for _, p := range td.Partitions {
					if p.Leader < 0 || p.Err != nil {
						ok = false
					}
				}
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topics %v not ready after 30s (%v)", names, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// recSpec describes one record of a load.
type recSpec struct {
	ts    time.Time // record timestamp; zero: now
	delay levels.Delay
	// plain: no kdelay stamping; partition is given (baseline source).
	plain     bool
	partition int32
	topic     string
	// sendAt: produce the record no earlier than this (a paced load);
	// zero: at once.
	sendAt time.Time
}

// produceStats is what producing a load took.
type produceStats struct {
	took time.Duration
	// ackedAfterDue counts the records with a kdelay-deliver-at whose
	// produce was acked after it: they were not in Kafka ahead of their due
	// time. minAhead is the least time from an ack to the record's due time
	// (negative: after it).
	ackedAfterDue int
	minAhead      time.Duration
}

// produceLoad produces n records built by gen to the broker and returns
// when all are acked. Values are random bytes of size, keys "k<i>".
func (b *bench) produceLoad(ctx context.Context, what string, n, size int, tab *levels.Table, delayTopic string, gen func(i int, now time.Time) recSpec) (produceStats, error) {
	start := time.Now()
	vals := make([]byte, size+4096)
	rand.Read(vals)
	bar := b.bar(n, "produce "+what)
	var (
		firstErr atomic.Value
		wg       sync.WaitGroup
		late     atomic.Int64
		mu       sync.Mutex
		minAhead = time.Duration(math.MaxInt64)
	)
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			break
		}
		now := time.Now()
		s := gen(i, now)
		if d := s.sendAt.Sub(now); d > time.Millisecond {
			time.Sleep(d) // pacing: a schedule, not a condition
			now = time.Now()
		}
		off := i % 4096
		r := &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: vals[off : off+size : off+size], Timestamp: s.ts}
		if s.plain {
			r.Topic, r.Partition = s.topic, s.partition
			r.Headers = []kgo.RecordHeader{{Key: levels.HeaderTarget, Value: []byte("x")}, {Key: levels.HeaderLevel, Value: []byte("1")}}
		} else if err := tab.Stamp(r, delayTopic, s.delay, now); err != nil {
			return produceStats{}, err
		}
		due := s.delay.At
		wg.Add(1)
		b.prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
			if !due.IsZero() {
				ahead := time.Until(due)
				if ahead < 0 {
					late.Add(1)
				}
				mu.Lock()
				minAhead = min(minAhead, ahead)
				mu.Unlock()
			}
			bar.Add(1)
			wg.Done()
		})
	}
	wg.Wait()
	bar.Finish()
	st := produceStats{took: time.Since(start), ackedAfterDue: int(late.Load())}
	if minAhead != time.Duration(math.MaxInt64) {
		st.minAhead = minAhead
	}
	if err, _ := firstErr.Load().(error); err != nil {
		return st, fmt.Errorf("produce %s: %w", what, err)
	}
	return st, ctx.Err()
}

// delivery is one record seen on a target topic.
type delivery struct {
	idx   int32
	tsMs  int64 // target record timestamp (LogAppendTime)
	dueMs int64 // kdelay-due-at; -1 if absent
	arrUs int64 // when the collector polled it, unix µs
}

// collector reads a target topic from its start and keeps every record.
type collector struct {
	cl   *kgo.Client
	n    int // expected distinct records
	bar  *progressbar.ProgressBar
	mu   sync.Mutex
	recs []delivery
	seen []bool
	got  int
	dups int
	bad  int
	done chan struct{}
	// primed is closed when the primer (primerKey) arrives.
	primed     chan struct{}
	primerSeen bool
	last       atomic.Int64 // unix ns of the last new record
	stop       context.CancelFunc
	wg         sync.WaitGroup
}

func (b *bench) newCollector(ctx context.Context, topic string, n int, what string) (*collector, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.seeds...),
		kgo.ConsumeTopics(topic),
		// What a consumer of an exactly-once relay reads; the same for
		// at-least-once (no transactions).
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond),
		kgo.MetadataMinAge(500*time.Millisecond),
	)
	if err != nil {
		return nil, err
	}
	c := &collector{cl: cl, n: n, seen: make([]bool, n), done: make(chan struct{}), primed: make(chan struct{}), recs: make([]delivery, 0, n)}
	c.bar = b.bar(n, what)
	cctx, cancel := context.WithCancel(ctx)
	c.stop = cancel
	c.wg.Add(1)
	go c.loop(cctx)
	return c, nil
}

func (c *collector) loop(ctx context.Context) {
	defer c.wg.Done()
	closed := false
	for ctx.Err() == nil {
		fs := c.cl.PollFetches(ctx)
		if fs.IsClientClosed() {
			return
		}
		arr := time.Now().UnixMicro()
		c.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == primerKey {
				if !c.primerSeen {
					c.primerSeen = true
					close(c.primed)
				}
				return
			}
			idx, err := strconv.Atoi(string(r.Key[min(1, len(r.Key)):]))
			if err != nil || idx < 0 || idx >= c.n {
				c.bad++
				return
			}
			if c.seen[idx] {
				c.dups++
				return
			}
			c.seen[idx] = true
			c.got++
			d := delivery{idx: int32(idx), tsMs: r.Timestamp.UnixMilli(), dueMs: -1, arrUs: arr}
			for _, h := range r.Headers {
				if h.Key == levels.HeaderDueAt {
					if v, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
						d.dueMs = v
					}
				}
			}
			c.recs = append(c.recs, d)
			c.bar.Add(1)
			c.last.Store(time.Now().UnixNano())
		})
		if c.got >= c.n && !closed {
			closed = true
			close(c.done)
		}
		c.mu.Unlock()
	}
}

// wait blocks until all n records arrived, ctx ends, or nothing new came
// for idle after the deadline passed.
func (c *collector) wait(ctx context.Context, deadline time.Time, idle time.Duration) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if time.Now().After(deadline) && time.Since(time.Unix(0, c.last.Load())) > idle {
				c.mu.Lock()
				got := c.got
				c.mu.Unlock()
				return fmt.Errorf("only %d of %d records delivered (nothing new for %s)", got, c.n, idle)
			}
		}
	}
}

// finish stops the collector and returns what it saw; lingering lets
// late duplicates show up.
func (c *collector) finish(linger time.Duration) (recs []delivery, dups, bad int) {
	time.Sleep(linger)
	c.stop()
	c.cl.Close()
	c.wg.Wait()
	c.bar.Finish()
	return c.recs, c.dups, c.bad
}

func (b *bench) bar(n int, what string) *progressbar.ProgressBar {
	var w io.Writer = io.Discard
	if b.o.progress {
		w = b.o.stderr
	}
	return progressbar.NewOptions(n,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(fmt.Sprintf("%-34s", what)),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rec"),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetWidth(24),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
}

var errNoRecords = errors.New("no records delivered")
