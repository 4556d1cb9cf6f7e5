package relay

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// Tests of guarantees as docs/guarantees.md states them, each with a
// mutant in mutants/ that it kills.

// TestHandOverToAnotherRelay: a relay stopped cleanly (SIGTERM) while it
// forwards hands its partitions to another relay with a data directory of
// its own: no local mark can hide what the first relay did not commit, so
// the shutdown commit (offsets and the done set above them) is all the
// successor has. Nothing is lost and nothing comes twice (collectAll reads
// the target to its end).
func TestHandOverToAnotherRelay(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	a := h.start(nil)
	a.waitReady(t)
	keys := keysOf("ho", 300)
	for i, k := range keys {
		// due over 3 s, 5 records every 50 ms: forwards go on when a stops
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(i%60) * 50 * time.Millisecond})
	}
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 100 }, "orders")
	a.stop(t)
	h.start(func(c *config.Config) { c.DataDir = t.TempDir() })
	got := h.collectAll(40*time.Second, keys, "orders")
	h.report(got, keys, 0)
}

// TestCommitCadence: while records are forwarded without a pause, the
// loop commits at most once per commitEvery (100 ms) and at least once per
// commitEvery plus a scheduling slack, which bounds what a crash can
// send again to what was forwarded since the last commit. Commits are
// timed as the broker receives them, during a window of continuous
// forwards (one record due every 10 ms for 4 s).
func TestCommitCadence(t *testing.T) {
	const commitEvery = 100 * time.Millisecond // as documented, not the relay's constant
	h := newHarness(t, nil, "orders")
	var mu sync.Mutex
	var commits []time.Time
	h.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		if req.(*kmsg.OffsetCommitRequest).Group == h.cfg.Group {
			mu.Lock()
			commits = append(commits, time.Now())
			mu.Unlock()
		}
		return nil, nil, false
	})
	rr := h.start(nil)
	rr.waitReady(t)
	keys := keysOf("cc", 400)
	first := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", At: first.Add(time.Duration(i) * 10 * time.Millisecond)})
	}
	last := first.Add(time.Duration(len(keys)-1) * 10 * time.Millisecond)
	got := h.collect(30*time.Second, allKeys(keys...), "orders")
	h.report(got, keys, 0)
	rr.stop(t)

	// The window: from 300 ms after the first due time to 300 ms before
	// the last, every 10 ms a record is forwarded.
	from, to := first.Add(300*time.Millisecond), last.Add(-300*time.Millisecond)
	mu.Lock()
	var in []time.Time
	for _, c := range commits {
		if !c.Before(from) && !c.After(to) {
			in = append(in, c)
		}
	}
	mu.Unlock()
	if len(in) < 2 {
		t.Fatalf("%d commits in the %s window of continuous forwards, want one every %s", len(in), to.Sub(from), commitEvery)
	}
	// At most one per commitEvery: n commits span at least (n-1) x 100 ms
	// (10 ms of arrival jitter allowed).
	span := in[len(in)-1].Sub(in[0])
	if min := time.Duration(len(in)-1)*commitEvery - 10*time.Millisecond; span < min {
		t.Errorf("commit cadence: %d commits within %s, more than one per %s", len(in), span.Round(time.Millisecond), commitEvery)
	}
	// At least one per commitEvery plus slack (a commit waits for the
	// wheel's fsync and for the one in flight): the gap from the window's
	// start to the first commit, between commits, and from the last to
	// the window's end.
	const slack = 400 * time.Millisecond
	prev := from
	for _, c := range append(in, to) {
		if gap := c.Sub(prev); gap > commitEvery+slack {
			t.Errorf("commit cadence: no commit for %s while records were forwarded, want one every %s (+%s slack)", gap.Round(time.Millisecond), commitEvery, slack)
		}
		prev = c
	}
	t.Logf("%d commits in %s of continuous forwards", len(in), to.Sub(from))
}

// murmurVectors reads the shared murmur2 vectors (Kafka's Utils.murmur2
// of each key, and its toPositive).
func murmurVectors(t *testing.T) (keys [][]byte, positive []int32) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "contract", "murmur2.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []struct {
			Key      *string `json:"key"`
			KeyHex   *string `json:"key_hex"`
			Positive int32   `json:"positive"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, v := range f.Vectors {
		var k []byte
		switch {
		case v.Key != nil:
			k = []byte(*v.Key)
		case v.KeyHex != nil:
			if k, err = hex.DecodeString(*v.KeyHex); err != nil {
				t.Fatal(err)
			}
		}
		if len(k) == 0 {
			continue // no key: sticky, not hashed
		}
		keys, positive = append(keys, k), append(positive, v.Positive)
	}
	return keys, positive
}

// TestKeyDecidesTargetPartition: a forwarded record without
// kdelay-target-partition goes to the partition Kafka's default
// partitioner picks for its key: toPositive(murmur2(key)) mod the
// target's partition count, checked against the shared vectors (pinned
// to Kafka's Java client) on a target with 7 partitions.
func TestKeyDecidesTargetPartition(t *testing.T) {
	h := newHarness(t, nil, "orders")
	const n = 7
	if _, err := h.adm.CreateTopic(context.Background(), n, 1, nil, "keyed"); err != nil {
		t.Fatal(err)
	}
	rr := h.start(nil)
	rr.waitReady(t)
	keys, positive := murmurVectors(t)
	want := map[string]int32{}
	var names []string
	for i, k := range keys {
		r := &kgo.Record{Key: k, Value: []byte(strconv.Itoa(i))}
		if err := h.cfg.Table().Stamp(r, h.cfg.Topic, levels.Delay{Target: "keyed", Delay: 100 * time.Millisecond}, time.Now()); err != nil {
			t.Fatal(err)
		}
		h.produce(r)
		want[string(k)] = positive[i] % n
		names = append(names, string(k))
	}
	got := h.collect(30*time.Second, allKeys(names...), "keyed")
	parts := map[int32]bool{}
	for _, k := range names {
		for _, rc := range got[k] {
			parts[rc.partition] = true
			if rc.partition != want[k] {
				t.Errorf("key %q forwarded to partition %d, Kafka's default partitioner picks %d", k, rc.partition, want[k])
			}
		}
	}
	if len(parts) < 3 {
		t.Errorf("%d keys landed in %d partitions: the vectors should spread over more", len(names), len(parts))
	}
}

// TestCancelRetention: a cancel is kept until its cut-off plus
// KDELAY_MAX_DELAY (no record older than that is delivered), also when
// the relay reads it long after its cut-off. Here a relay starts 55 min
// (by its clock) after a cancel with KDELAY_MAX_DELAY=1h: the cancelled
// record, due long ago, is not delivered; another one is.
func TestCancelRetention(t *testing.T) {
	h := newHarness(t, map[string]string{"KDELAY_MAX_DELAY": "1h"}, "orders")
	h.sendRaw("cut", 0, levels.HeaderTarget, "orders", levels.HeaderDelay, "100ms", levels.HeaderID, "ret-1")
	h.sendRaw("keep", 0, levels.HeaderTarget, "orders", levels.HeaderDelay, "100ms", levels.HeaderID, "ret-2")
	h.cancel("ret-1", time.Time{}) // cut-off: the cancel's timestamp, after the records'
	clock := &skewClock{}
	clock.add(55 * time.Minute)
	rr := h.start(nil, clock.opt())
	got := h.collect(30*time.Second, allKeys("keep"), "orders")
	if n := len(got["cut"]); n != 0 {
		t.Errorf("record cancelled 55 min before (KDELAY_MAX_DELAY 1h) delivered %d times: the cancel was forgotten", n)
	}
	if n := rr.cancelled(); n != 1 {
		t.Errorf("kdelay_records_cancelled_total = %v, want 1", n)
	}
}

// TestCancelInAbortedTransaction: the cancel reader reads the cancel
// topic read_committed: a cancel written in a transaction that aborted
// cancels nothing, one in a committed transaction cancels its record.
func TestCancelInAbortedTransaction(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	due := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	h.sendID("aborted", "tx-a", levels.Delay{Target: "orders", At: due})
	h.sendID("committed", "tx-c", levels.Delay{Target: "orders", At: due})
	ctx := context.Background()
	// One transactional producer per cancel, the committed one first.
	for _, c := range []struct {
		id  string
		end kgo.TransactionEndTry
	}{{"tx-c", kgo.TryCommit}, {"tx-a", kgo.TryAbort}} {
		tx, err := kgo.NewClient(kgo.SeedBrokers(h.c.ListenAddrs()...), kgo.TransactionalID("cancel-writer-"+c.id))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		// The cut-off a millisecond ahead: the record may have been
		// stamped in the same millisecond, and a cut-off cancels only
		// what is strictly before it.
		rec, err := levels.Cancel(h.cfg.CancelTopic, c.id, time.Now().Add(time.Millisecond), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, c.end); err != nil {
			t.Fatal(err)
		}
	}
	if time.Now().After(due.Add(-h.cfg.CancelMargin)) {
		t.Fatalf("the cancels were written after the margin before the due time: the test checked nothing")
	}
	got := h.collect(30*time.Second, func(got map[string][]received) bool {
		return len(got["aborted"]) > 0 && time.Now().After(due.Add(time.Second))
	}, "orders")
	if n := len(got["aborted"]); n != 1 {
		t.Errorf("record whose cancel was in an aborted transaction delivered %d times, want 1", n)
	}
	if n := len(got["committed"]); n != 0 {
		t.Errorf("record cancelled in a committed transaction delivered %d times", n)
	}
}

// TestRetryAtStopArrives: records whose produce keeps failing (retried)
// when the relay stops cleanly are neither committed nor marked done: a
// relay restarted on the same data directory delivers them once the
// target takes records again.
func TestRetryAtStopArrives(t *testing.T) {
	h := newHarness(t, nil, "orders")
	var fail atomic.Bool
	fail.Store(true)
	// An error franz-go does not retry and the relay cannot classify:
	// retried by the relay until KDELAY_RETRY_TIMEOUT.
	h.failProduces("orders", kerr.InvalidRequiredAcks.Code, &fail)
	rr := h.start(nil)
	rr.waitReady(t)
	keys := keysOf("rs", 20)
	for _, k := range keys {
		h.sendRaw(k, 0, levels.HeaderTarget, "orders", levels.HeaderDelay, "0")
	}
	waitFor(t, func() bool { return sumCounter(rr.r.m.retries) >= float64(2*len(keys)) })
	rr.stop(t)
	fail.Store(false)
	h.start(nil)
	got := h.collectAll(40*time.Second, keys, "orders")
	h.report(got, keys, 0)
}

// collectToEnd is collectAll for any isolation level: once every key
// arrived and the relay has nothing left to send (its committed offsets
// reach the end of every delay-topic partition), a marker record goes to
// every partition of topics, and the topics are read until every marker
// came back. What the relay wrote before the markers, a late duplicate
// included, is then in the result (transaction markers at a partition's
// end cannot hide it). The markers are not in the result.
func (h *harness) collectToEnd(timeout time.Duration, keys []string, topics ...string) map[string][]received {
	h.t.Helper()
	h.collect(timeout, allKeys(keys...), topics...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h.awaitIdle(ctx)
	ends, err := h.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		h.t.Fatal(err)
	}
	var marks []string
	ends.Each(func(e kadm.ListedOffset) {
		k := "end-marker/" + e.Topic + "/" + strconv.Itoa(int(e.Partition))
		r := &kgo.Record{Topic: e.Topic, Partition: e.Partition, Key: []byte(k)}
		if err := h.prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			h.t.Fatal(err)
		}
		marks = append(marks, k)
	})
	got := h.collect(timeout, allKeys(marks...), topics...)
	for _, k := range marks {
		delete(got, k)
	}
	return got
}

// TestCancelMarginDirect: the cancel margin on the direct path, records
// forwarded from their partition's queue without the wheel (read when
// already due), with a cancel reader that lags. A cancel acknowledged
// exactly KDELAY_CANCEL_MARGIN before a record's due time stops it,
// however far behind the reader is: the record waits for the reader to
// read past its due time minus the margin (the fire barrier), then is
// cancelled. Its twin without a cancel goes once the reader caught up.
func TestCancelMarginDirect(t *testing.T) {
	h := newHarness(t, map[string]string{"KDELAY_CANCEL_MARGIN": "300ms"}, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	blind, unblind := h.cancelReaderBlinds()
	blind()
	// Cut-off a minute ahead: the records, produced after the cancel,
	// are before it.
	acked := h.cancel("d-1", time.Now().Add(time.Minute))
	due := acked.Add(h.cfg.CancelMargin).Truncate(time.Millisecond).Add(time.Millisecond)
	time.Sleep(time.Until(due)) // produced once due: read, they are forwarded from the queue
	h.sendID("cut", "d-1", levels.Delay{Target: "orders", At: due})
	h.sendID("keep", "d-2", levels.Delay{Target: "orders", At: due})
	time.AfterFunc(3*time.Second, unblind)
	got := h.collect(30*time.Second, func(got map[string][]received) bool {
		return len(got["keep"]) > 0
	}, "orders")
	if n := len(got["cut"]); n != 0 {
		t.Errorf("record cancelled exactly the margin before its due time delivered %d times on the direct path while the cancel reader lagged", n)
	}
	if len(got["keep"]) != 1 {
		t.Fatalf("uncancelled record delivered %d times, want 1", len(got["keep"]))
	}
	ls := rr.r.m.level(1)
	// The relay counts a forward once it has settled it, in the loop
	// iteration after its ack: maybe after the record was seen here.
	waitFor(t, func() bool { return testutil.ToFloat64(ls.forwardedDirect) >= 1 && rr.cancelled() >= 1 })
	if direct, wheeled := testutil.ToFloat64(ls.forwardedDirect), testutil.ToFloat64(rr.r.m.wheelAdded.WithLabelValues("1")); direct != 1 || wheeled != 0 {
		t.Errorf("level 1: %v forwarded direct, %v put into the wheel; want 1 and 0 (the direct path)", direct, wheeled)
	}
	if n := rr.cancelled(); n != 1 {
		t.Errorf("kdelay_records_cancelled_total = %v, want 1", n)
	}
	t.Logf("uncancelled record forwarded %s after its due time (the cancel reader blind for 3s)", got["keep"][0].ts.Sub(due).Round(time.Millisecond))
}
