package integration

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/levels"
)

// TestCommitRefusedThenIdle (kfake only: fault injection): the broker
// refuses the relay's offset commits (a non-retriable error) while a
// partition receives its last records, then accepts them again. The records
// are delivered, and the relay must then commit them although no new record
// comes to that partition: the lag drains (waitSettled, stuckCommit).
func TestCommitRefusedThenIdle(t *testing.T) {
	t.Parallel()
	if suite.kfake == nil {
		t.Skipf("needs the in-process kfake broker to refuse commits; tier is %s", suite.tier)
	}
	s := newScenario(t, "commitrefused", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 1}})
	var refusing, done atomic.Bool
	var refused atomic.Int32
	var refusedUpTo atomic.Int64 // highest offset a refused commit asked for
	refusing.Store(true)
	t.Cleanup(func() { done.Store(true) })
	suite.kfake.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if done.Load() {
			suite.kfake.DropControl()
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		if r.Group != s.group || !refusing.Load() {
			return nil, nil, false
		}
		suite.kfake.KeepControl()
		refused.Add(1)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				if rp.Offset > refusedUpTo.Load() {
					refusedUpTo.Store(rp.Offset)
				}
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code // not retried by the client
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	relay := s.startRelay("", 90*time.Second)
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, s.stamped(fmt.Sprintf("c-%03d", i), levels.Delay{Target: s.target("orders"), Delay: time.Second}))
	}
	s.send(recs...)
	keys := s.sentKeys("c-")
	s.waitArrived(keys, 1, time.Minute, relay)
	// Refuse until the commit of the last record has been refused.
	waitFor(t, time.Minute, "a refused commit of offset 20", func() bool { return refusedUpTo.Load() >= int64(len(keys)) }, relay)
	refusing.Store(false)
	t.Logf("%d commits refused while the %d records were forwarded; commits accepted again", refused.Load(), len(keys))
	s.await(keys, time.Now().Add(time.Minute), relay)
	s.check(t, "commit refused, then no more traffic", keys, 0)
	relay.stop()
}
