package relay

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// TestExactness: with levels 1s 2s 4s 8s, records at each level's delay and
// at arbitrary delays are each forwarded once, never before their due time.
func TestExactness(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	// Shorter delays first: a level partition is FIFO, so a 300ms record
	// written behind a 1s record of the same level waits for it (as in
	// RocketMQ); that head-of-line wait is not what this test measures.
	delays := []time.Duration{
		0, 300 * time.Millisecond, // level 1, below its duration
		time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, // level path
		1500 * time.Millisecond, 3 * time.Second, 7 * time.Second, 12 * time.Second, // wheel path
	}
	var keys []string
	for _, d := range delays {
		for round := range 3 {
			k := "k-" + strconv.Itoa(round) + "-" + d.String()
			keys = append(keys, k)
			if d == 0 {
				h.send(k, levels.Delay{Target: "orders", At: time.Now()})
				continue
			}
			h.send(k, levels.Delay{Target: "orders", Delay: d})
		}
	}
	got := h.collectAll(40*time.Second, keys, "orders")
	h.report(got, keys, 0)
	h.checkLateness(got, keys, noFaultP99)
	t.Logf("FIFO: %d ordered pairs checked", h.checkFIFO(got))

	// The metrics account for every record by level and path. Records due
	// at their level time go direct; those due after it wait in the wheel
	// from their level time on, unless a loaded machine decides them after
	// their due time: the totals per level are exact, the split is
	// logged.
	waitFor(t, func() bool {
		return sumCounter(rr.r.m.forwarded) == 30 && testutil.ToFloat64(rr.r.m.wheelPending) == 0
	})
	for level, want := range map[string]float64{"1": 12, "2": 6, "3": 6, "4": 6} {
		direct := testutil.ToFloat64(rr.r.m.forwarded.WithLabelValues(level, "direct"))
		wheel := testutil.ToFloat64(rr.r.m.forwarded.WithLabelValues(level, "wheel"))
		if direct+wheel != want {
			t.Errorf("level %s: %v direct + %v via the wheel, want %v forwarded", level, direct, wheel, want)
		}
		t.Logf("level %s: %v direct, %v via the wheel", level, direct, wheel)
	}
	// One sample per forwarded record in both lateness histograms; the
	// relay's part (its produce call) lies after the due time and before
	// the ack.
	sendN, sendSum := histTotals(rr.r.m.sendLateness)
	ackN, ackSum := histTotals(rr.r.m.lateness)
	if sendN != 30 || ackN != 30 {
		t.Errorf("lateness samples: %d at the produce call, %d at the ack, want 30 each", sendN, ackN)
	}
	if sendSum < 0 || sendSum > ackSum {
		t.Errorf("lateness sums: %.4fs at the produce call, %.4fs at the ack: want 0 <= send <= ack", sendSum, ackSum)
	}
	for _, k := range keys {
		for _, rc := range got[k] {
			if rc.value != "v-"+k || rc.headers["own"] != k {
				t.Errorf("%s: value/header not preserved: %+v", k, rc)
			}
			for hk := range rc.headers {
				if levels.IsControl(hk) && hk != levels.HeaderDueAt && hk != levels.HeaderSource {
					t.Errorf("%s: control header %s left on the forwarded record", k, hk)
				}
			}
		}
	}
}

// waitFor polls a condition the relay exposes until it holds (30s at most).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sumCounter(c *prometheus.CounterVec) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err == nil {
			sum += pb.GetCounter().GetValue()
		}
	}
	return sum
}

// histTotals sums the sample counts and sums of every series of h.
func histTotals(h prometheus.Collector) (n uint64, sum float64) {
	ch := make(chan prometheus.Metric, 64)
	go func() { h.Collect(ch); close(ch) }()
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err == nil {
			n += pb.GetHistogram().GetSampleCount()
			sum += pb.GetHistogram().GetSampleSum()
		}
	}
	return n, sum
}

// TestCascade: with levels 1s 2s 4s (wheel horizon 2s), a 20s delay cascades
// through the delay topic and arrives at 20s, not earlier.
func TestCascade(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	if testing.Short() {
		t.Skip("20s scenario")
	}
	h := newHarness(t, map[string]string{"KDELAY_LEVELS": "1s 2s 4s"}, "orders")
	rr := h.start(nil)
	keys := []string{"c-20s", "c-9s"}
	h.send("c-20s", levels.Delay{Target: "orders", Delay: 20 * time.Second})
	h.send("c-9s", levels.Delay{Target: "orders", Delay: 9 * time.Second})
	got := h.collect(40*time.Second, allKeys(keys...), "orders")
	h.report(got, keys, 0)
	if n := testutil.ToFloat64(rr.r.m.cascaded.WithLabelValues("3")); n < 1 {
		t.Errorf("cascaded from level 3 = %v, want >= 1", n)
	}
}

// TestHeaderIsTruth: a 9s record written to the shortest level's partition
// arrives at 9s; a 1s record written to the longest level's partition
// arrives at that level's time (late, counted), never early.
func TestHeaderIsTruth(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	short := h.sendRaw("nine", 0, levels.HeaderTarget, "orders", levels.HeaderDelay, "9s")
	long := h.sendRaw("one", 3, levels.HeaderTarget, "orders", levels.HeaderDelay, "1s")
	got := h.collect(30*time.Second, allKeys("nine", "one"), "orders")
	h.report(got, []string{"nine", "one"}, 0)
	if rc := got["one"]; len(rc) > 0 && rc[0].ts.Before(long.due.Add(7*time.Second)) {
		t.Errorf("1s record in the 8s partition forwarded at +%s, before the level time", rc[0].ts.Sub(long.due.Add(-time.Second)))
	}
	_ = short
	if n := testutil.ToFloat64(rr.r.m.mismatched.WithLabelValues("4")) + testutil.ToFloat64(rr.r.m.mismatched.WithLabelValues("1")); n != 2 {
		t.Errorf("level mismatches counted = %v, want 2", n)
	}
}

// TestCommitInvariant samples the committed offsets during a run: a
// committed offset never passes a record that had not been forwarded at
// the time of the sample.
//
// It also checks every commit the broker received against the produce
// acks the relay's client saw (a kgo hook), with produce responses held
// back 20ms so that a commit sent before its acks cannot pass unseen.
func TestCommitInvariant(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	cw := watchCommits(h, 20*time.Millisecond)
	h.start(nil)
	keys := keysOf("ci", 120)
	for i, k := range keys {
		// Arbitrary delays within and across levels, so wheel entries hold
		// commits back while later offsets are forwarded directly.
		d := time.Duration(200+(i*997)%9000) * time.Millisecond
		h.send(k, levels.Delay{Target: "orders", Delay: d})
	}
	type sample struct {
		at  time.Time
		off map[int32]int64
	}
	var (
		samples []sample
		mu      sync.Mutex
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			resp, err := h.adm.FetchOffsets(ctx, h.cfg.Group)
			at := time.Now()
			if err == nil {
				s := sample{at: at, off: map[int32]int64{}}
				resp.Each(func(o kadm.OffsetResponse) {
					if o.Topic == h.cfg.Topic && o.Err == nil {
						s.off[o.Partition] = o.At
					}
				})
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond) // sampling period, not a synchronisation
		}
	})
	got := h.collect(40*time.Second, allKeys(keys...), "orders")
	cancel()
	wg.Wait()
	h.report(got, keys, 0)

	forwardedAt := map[string]time.Time{} // source "topic/p/o" -> produce time
	for _, rs := range got {
		for _, rc := range rs {
			forwardedAt[rc.source] = rc.ts
		}
	}
	checked := 0
	for _, s := range samples {
		for p, c := range s.off {
			for o := int64(0); o < c; o++ {
				src := levels.Source(h.cfg.Topic, p, o)
				at, ok := forwardedAt[src]
				if !ok || at.After(s.at) {
					t.Fatalf("commit %d of partition %d sampled at %s passes offset %d, forwarded at %s (found %v)", c, p, s.at.Format(time.TimeOnly+".000"), o, at.Format(time.TimeOnly+".000"), ok)
				}
				checked++
			}
		}
	}
	if len(samples) < 10 || checked == 0 {
		t.Fatalf("only %d samples, %d offsets checked", len(samples), checked)
	}
	t.Logf("%d commit samples, %d committed offsets checked against forward times", len(samples), checked)
	cw.check(t)
}

// TestBadInput: every kind of bad record ends in the dead-letter topic with
// a readable reason while good records behind it keep flowing.
func TestBadInput(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, map[string]string{
		"KDELAY_TARGET_DENY":            "secret*",
		"KDELAY_MAX_DELAY":              "1h",
		"KDELAY_TARGET_MISSING_TIMEOUT": "1s",
	}, "orders", "secret-stuff", "small")
	h.start(nil)
	bad := map[string][]string{
		"no-target":     {levels.HeaderDelay, "1s"},
		"bad-delay":     {levels.HeaderTarget, "orders", levels.HeaderDelay, "soon"},
		"neg-delay":     {levels.HeaderTarget, "orders", levels.HeaderDelay, "-3s"},
		"bad-level":     {levels.HeaderTarget, "orders", levels.HeaderLevel, "99"},
		"bad-at":        {levels.HeaderTarget, "orders", levels.HeaderDeliverAt, "tomorrow"},
		"no-schedule":   {levels.HeaderTarget, "orders"},
		"internal":      {levels.HeaderTarget, "__consumer_offsets", levels.HeaderDelay, "0"},
		"self":          {levels.HeaderTarget, "delays", levels.HeaderDelay, "0"},
		"denied":        {levels.HeaderTarget, "secret-stuff", levels.HeaderDelay, "0"},
		"too-long":      {levels.HeaderTarget, "orders", levels.HeaderDelay, "2h"},
		"missing-topic": {levels.HeaderTarget, "nowhere", levels.HeaderDelay, "0"},
		"bad-partition": {levels.HeaderTarget, "orders", levels.HeaderDelay, "0", levels.HeaderTargetPartition, "7"},
	}
	var good []string
	for k, hs := range bad {
		h.sendRaw(k, 0, hs...)
		g := "good-after-" + k
		good = append(good, g)
		h.send(g, levels.Delay{Target: "orders", Delay: 100 * time.Millisecond})
	}
	// Larger than the relay's producer takes (franz-go's default batch
	// limit, 1 MB, Kafka's default max.message.bytes), for the target and
	// the dead-letter topic alike: it is dead-lettered without its value.
	big := &kgo.Record{Key: []byte("too-big"), Value: []byte(strings.Repeat("x", 1_200_000))}
	if err := h.cfg.Table().Stamp(big, h.cfg.Topic, levels.Delay{Target: "small", Delay: 10 * time.Millisecond}, time.Now()); err != nil {
		t.Fatal(err)
	}
	h.produce(big)
	h.send("small-ok", levels.Delay{Target: "small", Delay: 10 * time.Millisecond})

	want := append(append([]string{"too-big", "small-ok"}, good...), keysOfMap(bad)...)
	got := h.collect(40*time.Second, allKeys(want...), "orders", "small", h.cfg.DLQTopic)
	for k := range bad {
		rs := got[k]
		if len(rs) != 1 || rs[0].topic != h.cfg.DLQTopic {
			t.Errorf("%s: got %+v, want one dead letter", k, rs)
			continue
		}
		if rs[0].headers[levels.HeaderError] == "" || !strings.HasPrefix(rs[0].source, "delays/0/") || rs[0].value != "v-"+k {
			t.Errorf("%s: dead letter lacks reason, source or value: %+v", k, rs[0])
		}
		t.Logf("%-14s -> %s", k, rs[0].headers[levels.HeaderError])
	}
	if rs := got["too-big"]; len(rs) != 1 || rs[0].topic != h.cfg.DLQTopic || rs[0].value != "" || !strings.Contains(rs[0].headers[levels.HeaderError], "too large") {
		t.Errorf("too-big: got %d records, want one dead letter without its value", len(rs))
	} else {
		t.Logf("%-14s -> %s", "too-big", rs[0].headers[levels.HeaderError])
	}
	for _, g := range append(good, "small-ok") {
		if rs := got[g]; len(rs) != 1 || rs[0].topic == h.cfg.DLQTopic {
			t.Errorf("%s: got %+v, want one delivery", g, rs)
		}
	}
}

func keysOfMap[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestRestart: a relay stopped mid-run (SIGTERM path) and restarted with
// its data directory delivers everything, none early, and no duplicate
// (collectAll reads the target to its end once the relay is idle).
func TestRestart(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	keys := keysOf("rs", 200)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(i%40) * 100 * time.Millisecond})
	}
	// Stop once some, not all, have been delivered.
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 60 }, "orders")
	rr.stop(t)
	h.start(nil)
	got := h.collectAll(40*time.Second, keys, "orders")
	h.report(got, keys, 0)
}

// TestDataDirLost: a relay whose data directory is wiped before the restart
// still loses nothing (the commit never passed what the wheel held).
func TestDataDirLost(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	keys := keysOf("dl", 100)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(1500+i*50) * time.Millisecond})
	}
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 10 }, "orders")
	rr.stop(t)
	committed := h.committedNow()
	if err := os.RemoveAll(h.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	h.start(nil)
	got := h.collectAll(40*time.Second, keys, "orders")
	h.report(got, keys, len(keys)) // duplicates allowed: the local state is gone...
	// ...but only of what the restart re-reads: records at or above the
	// committed offsets (the wheel's), never below.
	t.Logf("%d duplicates, all at or above the commits %v", h.checkDupsAbove(got, keys, committed), committed)
}

// TestRebalance: two relays share the delay topic; one stops mid-run; every
// record arrives, none early.
func TestRebalance(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	a := h.start(nil)
	h.start(func(c *config.Config) { c.DataDir = t.TempDir() })
	keys := keysOf("rb", 200)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(i%50) * 100 * time.Millisecond})
	}
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 50 }, "orders")
	a.stop(t)
	got := h.collect(40*time.Second, allKeys(keys...), "orders")
	h.report(got, keys, len(keys))
}

// TestProduceFaults: the broker fails produce requests to the target for a
// while and commits now and then; nothing is lost, nothing early, and no
// commit (refused or not) passes a record whose produce was not acked.
func TestProduceFaults(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	cw := watchCommits(h, 0)
	h.start(nil).waitReady(t)
	keys := keysOf("pf", 100)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(500+i*20) * time.Millisecond})
	}
	// From here on the broker fails the next produce requests (all from
	// the relay, which forwards from 500ms on) and offset commits. Each
	// NOT_LEADER costs franz-go a metadata refresh (at most one per 5s), so
	// a few failures are enough.
	var mu sync.Mutex
	failProduce, failCommit := 0, 0
	h.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		mu.Lock()
		defer mu.Unlock()
		if failProduce == 0 {
			return nil, nil, false
		}
		failProduce--
		return produceError(pr, notLeader), nil, true
	})
	mu.Lock()
	failProduce, failCommit = 3, 3
	mu.Unlock()
	h.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		if failCommit == 0 {
			return nil, nil, false
		}
		failCommit--
		cr := req.(*kmsg.OffsetCommitRequest)
		resp := cr.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, tp := range cr.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = tp.Topic
			for _, p := range tp.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	got := h.collect(60*time.Second, allKeys(keys...), "orders")
	h.report(got, keys, len(keys))
	mu.Lock()
	defer mu.Unlock()
	if failProduce != 0 {
		t.Errorf("%d injected produce failures left unused", failProduce)
	}
	cw.check(t)
}

// TestStaticMembership: with KDELAY_INSTANCE_ID a stopped relay does not
// leave the group, and its successor with the same ID takes the partitions
// over without waiting for a session timeout. Everything arrives once.
func TestStaticMembership(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, map[string]string{"KDELAY_INSTANCE_ID": "relay-0", "KDELAY_SESSION_TIMEOUT": "30s"}, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	keys := keysOf("sm", 100)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(i%20) * 100 * time.Millisecond})
	}
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 30 }, "orders")
	rr.stop(t)
	restarted := time.Now()
	next := h.start(nil)
	next.waitReady(t)
	t.Logf("successor ready %s after the restart (session timeout 30s)", time.Since(restarted).Round(time.Millisecond))
	got := h.collectAll(40*time.Second, keys, "orders")
	h.report(got, keys, 0)
}

// startOffsets records, per delay-topic partition, the lowest offset the
// client fetched (kgo.HookFetchRecordUnbuffered sees every buffered record).
type startOffsets struct {
	topic string
	mu    sync.Mutex
	low   map[int32]int64
}

func (s *startOffsets) OnFetchRecordUnbuffered(r *kgo.Record, _ bool) {
	if r.Topic != s.topic {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if lo, ok := s.low[r.Partition]; !ok || r.Offset < lo {
		s.low[r.Partition] = r.Offset
	}
}

// TestRestartStartsPastWheel: after a restart, a partition whose records
// all rest in the wheel (the commit still at the lowest of them) starts
// fetching after them (adjustStart), not at the committed offset: none of
// them is fetched again, and all are delivered once.
func TestRestartStartsPastWheel(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, map[string]string{"KDELAY_LEVELS": "1s 20s"}, "orders")
	rr := h.start(nil)
	keys := keysOf("sw", 100)
	perPart := map[int32]int64{}
	for _, k := range keys {
		s := h.send(k, levels.Delay{Target: "orders", Delay: 8 * time.Second})
		perPart[s.partition]++
	}
	pending := func(rr *relayRun) int64 {
		rr.r.mu.Lock()
		defer rr.r.mu.Unlock()
		if rr.r.wheel == nil {
			return 0
		}
		return rr.r.wheel.Pending()
	}
	waitFor(t, func() bool { return pending(rr) >= int64(len(keys)) })
	rr.stop(t)
	so := &startOffsets{topic: h.cfg.Topic, low: map[int32]int64{}}
	h.kafkaOpts = append(h.kafkaOpts, kgo.WithHooks(so))
	rr = h.start(nil)
	rr.waitReady(t)
	if n := pending(rr); n == 0 {
		t.Fatal("the records fired before the restart: nothing tested")
	}
	got := h.collectAll(40*time.Second, keys, "orders")
	h.report(got, keys, 0)
	so.mu.Lock()
	defer so.mu.Unlock()
	for p, n := range perPart {
		if lo, ok := so.low[p]; ok && lo < n {
			t.Errorf("partition %d: fetched again from offset %d, below the %d records the wheel held", p, lo, n)
		}
	}
}

// TestFetchAsksLittlePerPartition: the relay's fetches of the delay topic
// ask for at most fetchPartitionBytes per partition (franz-go's default, 1
// MiB, keeps far more fetched batches alive while the relay reads a
// pre-load at full speed: docs/architecture.md).
func TestFetchAsksLittlePerPartition(t *testing.T) {
	h := newHarness(t, nil, "orders")
	isDelay := h.isTopic(h.cfg.Topic)
	var (
		mu          sync.Mutex
		asked, most int // fetches of the delay topic's partitions; the largest ask of one
	)
	h.c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			if !isDelay(rt.Topic, rt.TopicID) {
				continue
			}
			for _, rp := range rt.Partitions {
				asked++
				most = max(most, int(rp.PartitionMaxBytes))
			}
		}
		return nil, nil, false
	})
	rr := h.start(nil)
	rr.waitReady(t)
	keys := keysOf("fa", 4)
	for _, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Second})
	}
	h.report(h.collectAll(20*time.Second, keys, "orders"), keys, 0)
	mu.Lock()
	defer mu.Unlock()
	if asked == 0 {
		t.Fatal("no fetch of the delay topic seen: nothing tested")
	}
	if most > fetchPartitionBytes {
		t.Errorf("a fetch asked for %d bytes of one partition, want at most %d", most, fetchPartitionBytes)
	}
}

// TestRestartFiresAtOnce: entries already due in the wheel when a relay
// restarts go out once it has its partitions, not when its first poll
// (begun before the assignment, so without the wheel's expiries) runs
// out. Its polls are made to last 20 s: a relay that waited for one
// delivers them about 18 s late, far past the lateness bound of a run
// without faults. The restarted relay's SyncGroup is held until its loop
// polls, so that the assignment always lands in a poll begun before it
// (an assignment taken up before the first poll would let mutant 23
// survive).
func TestRestartFiresAtOnce(t *testing.T) {
	h := newHarness(t, map[string]string{"KDELAY_LEVELS": "1s 20s"}, "orders")
	rr := h.start(nil)
	keys := keysOf("fo", 20)
	for _, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: 2 * time.Second})
	}
	waitFor(t, func() bool {
		rr.r.mu.Lock()
		defer rr.r.mu.Unlock()
		return rr.r.wheel != nil && rr.r.wheel.Pending() >= int64(len(keys))
	})
	rr.stop(t)
	var next sync.Map // "rr": the restarted relay, once started
	polling := func() bool {
		v, ok := next.Load("rr")
		if !ok {
			return false
		}
		r := v.(*relayRun).r
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.pollCancel != nil
	}
	h.c.ControlKey(int16(kmsg.SyncGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.c.SleepControl(func() {
			for deadline := time.Now().Add(30 * time.Second); !polling() && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond) // polling a condition the relay exposes
			}
		})
		h.c.DropControl()
		return nil, nil, false
	})
	rr = h.start(nil, func(o *Options) { o.maxPoll = 20 * time.Second })
	next.Store("rr", rr)
	got := h.collectAll(40*time.Second, keys, "orders")
	h.report(got, keys, 0)
	h.checkLateness(got, keys, noFaultP99)
}
