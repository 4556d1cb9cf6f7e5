package relay

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

func exactlyOnce(c *config.Config) { c.Delivery = ExactlyOnce }

// TestExactlyOnce: in exactly-once mode, a read_committed consumer sees
// every record once, none early, across a clean restart, a lost data
// directory and a spell of failing produces (aborted transactions); the
// target is read to its end, so a late duplicate is seen.
func TestExactlyOnce(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	h.readCommitted = true
	rr := h.start(exactlyOnce)
	rr.waitReady(t)
	keys := keysOf("eo", 300)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(i%60) * 100 * time.Millisecond})
	}
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 80 }, "orders")
	rr.stop(t) // clean restart
	rr = h.start(exactlyOnce)
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 160 }, "orders")

	// Produces to the target fail for a while: every transaction of that
	// spell aborts, its records are produced again in the next one.
	var fail atomic.Bool
	fail.Store(true)
	h.failProduces("orders", kerr.NotEnoughReplicas.Code, &fail)
	time.Sleep(time.Second) // the spell of failures: a duration, not a condition
	fail.Store(false)
	h.collect(20*time.Second, func(got map[string][]received) bool { return len(got) >= 220 }, "orders")
	aborted := testutil.ToFloat64(rr.r.m.txns.WithLabelValues("aborted"))
	rr.stop(t)
	if err := os.RemoveAll(h.cfg.DataDir); err != nil { // lost data directory
		t.Fatal(err)
	}
	h.start(exactlyOnce)
	got := h.collectToEnd(40*time.Second, keys, "orders") // a late duplicate included
	h.report(got, keys, 0)
	t.Logf("aborted transactions during the failing spell: %v", aborted)
}

// TestTxnCommitRefused: in exactly-once mode, the broker refuses some
// transactions' offset commits with CONCURRENT_TRANSACTIONS (Kafka 4.4
// does, now and then, for a TxnOffsetCommit sent right after the previous
// transaction ended), while records wait in the wheel and others fire from
// it. Each such transaction aborts and its partitions are read again from
// their commits (resyncPartition); a read_committed consumer sees every
// record once, none early.
func TestTxnCommitRefused(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	h.readCommitted = true
	var commits, refused atomic.Int64
	h.c.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		r := req.(*kmsg.TxnOffsetCommitRequest)
		// Refuse every third commit, eight in all, once records flow.
		if r.Group != h.cfg.Group || len(r.Topics) == 0 || commits.Add(1)%3 != 0 || refused.Load() >= 8 {
			return nil, nil, false
		}
		refused.Add(1)
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewTxnOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.ConcurrentTransactions.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	rr := h.start(exactlyOnce)
	rr.waitReady(t)
	keys := keysOf("tr", 200)
	for i, k := range keys {
		// 0.1 s .. 3.4 s: most through the wheel (horizon 4s), fired
		// while later ones are read into it
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(100+i*17) * time.Millisecond})
	}
	got := h.collectToEnd(60*time.Second, keys, "orders") // a late duplicate included
	h.report(got, keys, 0)
	if refused.Load() == 0 {
		t.Fatal("no transaction commit was refused: the test checked nothing")
	}
	if aborted := testutil.ToFloat64(rr.r.m.txns.WithLabelValues("aborted")); aborted < float64(refused.Load()) {
		t.Errorf("%v transactions aborted, want at least the %d refused", aborted, refused.Load())
	}
	t.Logf("%d of %d transaction commits refused", refused.Load(), commits.Load())
}
