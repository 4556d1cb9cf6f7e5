package relay

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
)

// TestTxnCommitUnconfirmed: in exactly-once mode, a transaction's commit
// reaches the transaction coordinator and commits, but its answer never
// reaches the relay, as when the coordinator's broker is killed right
// after writing the commit. franz-go reports the end as failed; the relay
// must learn from the group's committed offsets that the transaction
// committed. Read again from its older commit, it would forward that
// transaction's records a second time, and a read_committed consumer
// would see them twice.
func TestTxnCommitUnconfirmed(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests

	h := newHarness(t, map[string]string{"KDELAY_SESSION_TIMEOUT": "6s"}, "orders") // kfake's least; txnWait 3s
	h.readCommitted = true
	// The test's own client ends the relay's transaction in its place,
	// with EndTxn v3 (the relay's franz-go sends v4 or v5): the control
	// below lets v3 through and answers the relay's own attempts at that
	// end with a closed connection.
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.EndTxn), 3)
	stand, err := kgo.NewClient(kgo.SeedBrokers(h.c.ListenAddrs()...), kgo.MaxVersions(v))
	if err != nil {
		t.Fatal(err)
	}
	defer stand.Close()

	var (
		forwards  atomic.Bool  // the open transaction has records for the target
		dropped   atomic.Bool  // a commit's answer was lost
		epoch     atomic.Int64 // that transaction's producer ID << 16 | epoch
		standDone = make(chan error, 1)
	)
	h.c.ControlKey(int16(kmsg.AddPartitionsToTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		for _, tp := range req.(*kmsg.AddPartitionsToTxnRequest).Topics {
			if tp.Topic == "orders" {
				forwards.Store(true)
			}
		}
		return nil, nil, false
	})
	h.c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if r.Version == 3 {
			return nil, nil, false // the stand-in's commit
		}
		id := r.ProducerID<<16 | int64(r.ProducerEpoch)
		if dropped.Load() {
			if id == epoch.Load() { // a retry of the same end: no answer either
				return nil, errors.New("the coordinator went away"), true
			}
			return nil, nil, false
		}
		if !r.Commit || !forwards.Swap(false) {
			return nil, nil, false
		}
		dropped.Store(true)
		epoch.Store(id)
		c := *r
		go func() { // the commit that happens while its answer is lost
			resp, err := c.RequestWith(context.Background(), stand)
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			standDone <- err
		}()
		return nil, errors.New("the coordinator went away"), true
	})

	rr := h.start(exactlyOnce)
	rr.waitReady(t)
	keys := keysOf("uc", 200)
	for i, k := range keys {
		// 0.1 s .. 3.4 s: through the wheel and fired in many
		// transactions, one of which loses its answer
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(100+i*17) * time.Millisecond})
	}
	got := h.collectToEnd(60*time.Second, keys, "orders") // a late duplicate included
	if !dropped.Load() {
		t.Fatal("no transaction commit lost its answer: the test checked nothing")
	}
	if err := <-standDone; err != nil {
		t.Fatalf("the stand-in commit of the relay's transaction failed: %v", err)
	}
	h.report(got, keys, 0)
	if n := testutil.ToFloat64(rr.r.m.txnUnconfirmed.WithLabelValues("committed")); n < 1 {
		t.Errorf("%v transactions found committed by the group's offsets after an unanswered end, want at least 1", n)
	}
}

// TestJudgeTxn: only the partitions a transaction moved tell its outcome,
// and they must agree; anything else is unknown, never committed (which
// would count an aborted transaction's records as delivered).
func TestJudgeTxn(t *testing.T) {
	req := func(at int64, done ...int64) commitReq {
		c := commitReq{at: kgo.EpochOffset{Epoch: -1, Offset: at}}
		if len(done) > 0 {
			c.done = offsetmap.Set{Base: at, End: done[0], Open: done[1:]}
		}
		return c
	}
	info := func(at int64, done ...int64) commitInfo {
		c := commitInfo{at: at}
		if len(done) > 0 {
			c.done = offsetmap.Set{Base: at, End: done[0], Open: done[1:]}
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		reqs   map[int32]commitReq
		before map[int32]commitInfo
		group  map[int32]commitInfo
		want   txnOutcome
	}{
		{"moved and there", map[int32]commitReq{0: req(10), 1: req(5)}, map[int32]commitInfo{0: info(7), 1: info(5)}, map[int32]commitInfo{0: info(10), 1: info(5)}, txnCommitted},
		{"moved and not there", map[int32]commitReq{0: req(10)}, map[int32]commitInfo{0: info(7)}, map[int32]commitInfo{0: info(7)}, txnAborted},
		{"done set moved and there", map[int32]commitReq{0: req(7, 12, 8)}, map[int32]commitInfo{0: info(7, 12, 8, 9)}, map[int32]commitInfo{0: info(7, 12, 8)}, txnCommitted},
		{"done set moved and not there", map[int32]commitReq{0: req(7, 12, 8)}, map[int32]commitInfo{0: info(7, 12, 8, 9)}, map[int32]commitInfo{0: info(7, 12, 8, 9)}, txnAborted},
		{"first commit, none now", map[int32]commitReq{0: req(3)}, map[int32]commitInfo{0: {at: -1}}, map[int32]commitInfo{0: {at: -1}}, txnAborted},
		{"nothing moved", map[int32]commitReq{0: req(7)}, map[int32]commitInfo{0: info(7)}, map[int32]commitInfo{0: info(7)}, txnUnknown},
		{"partitions disagree", map[int32]commitReq{0: req(10), 1: req(6)}, map[int32]commitInfo{0: info(7), 1: info(5)}, map[int32]commitInfo{0: info(10), 1: info(5)}, txnUnknown},
		{"another committer", map[int32]commitReq{0: req(10)}, map[int32]commitInfo{0: info(7)}, map[int32]commitInfo{0: info(12)}, txnUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeTxn(tc.reqs, tc.before, tc.group); got != tc.want {
				t.Errorf("judgeTxn = %s, want %s", got, tc.want)
			}
		})
	}
}
