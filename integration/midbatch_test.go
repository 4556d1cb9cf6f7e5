package integration

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/levels"
)

// TestKill9MidBatch (kfake tier): the kill -9 lands in the middle of a
// batch for sure. The broker holds the relay's first produce request to
// the target (kfake SleepControl); the relay is killed while it is held,
// then the request is let through, so its records land but their commit
// never happens. The restarted relay (same data directory, static
// membership) re-reads them: every record of the held request and of those
// behind it comes twice, and nothing that was not in flight at the kill
// does ("duplicates only for the batch in flight"). A smaller request
// acked just before the held one (the relay's produce of one batch can
// go out in several) may come twice too: forwarded, its commit not yet
// made; checkInFlight checks each duplicate against the commit read
// right after the kill.
func TestKill9MidBatch(t *testing.T) {
	t.Parallel()
	if suite.kfake == nil {
		t.Skipf("needs the in-process kfake broker to hold a produce request; tier is %s (the real tier runs TestKill9Restart*)", suite.tier)
	}
	s := newScenario(t, "kill9held", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 3},
		vars: map[string]string{"KDELAY_INSTANCE_ID": "relay-0"}})
	target := s.target("orders")
	td, err := s.adm.ListTopics(testContext(t, 30*time.Second), target)
	if err != nil {
		t.Fatal(err)
	}
	targetID := td[target].ID // Produce v13+ names topics by ID only

	var (
		done, killed atomic.Bool
		inFlight     atomic.Int64 // records in produce requests to the target sent before the kill
		heldOnce     sync.Once
		held         = make(chan struct{})
		release      = make(chan struct{})
		releaseOnce  sync.Once
	)
	let := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(func() { done.Store(true); let() })
	suite.kfake.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if done.Load() {
			suite.kfake.DropControl()
			return nil, nil, false
		}
		suite.kfake.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		n := int64(0)
		for _, tp := range pr.Topics {
			if tp.Topic != target && tp.TopicID != targetID {
				continue
			}
			for _, p := range tp.Partitions {
				n += countRecords(p.Records)
			}
		}
		if n == 0 || killed.Load() {
			return nil, nil, false
		}
		first := false
		select {
		case <-held: // held already: this request is in flight behind it
		default:
			if n < 5 {
				return nil, nil, false // too small a batch to show much: acked as usual
			}
		}
		inFlight.Add(n)
		heldOnce.Do(func() { first = true; close(held) })
		if first {
			suite.kfake.SleepControl(func() { <-release })
		}
		return nil, nil, false // then handled as usual: the records land, the ack goes nowhere
	})

	r1 := s.startRelay("", 90*time.Second)
	var burst []*kgo.Record // due together: one batch of many records
	for i := range 50 {
		burst = append(burst, s.stamped(fmt.Sprintf("h-burst-%02d", i), levels.Delay{Target: target, Level: 1}))
	}
	s.send(burst...)
	s.sendSpread("h", target, spread(300, time.Second, 6*time.Second), 100, 200*time.Millisecond)
	keys := s.sentKeys("h-")
	select {
	case <-held:
	case <-time.After(time.Minute):
		r1.checkAlive()
		t.Fatal("no produce to the target within a minute")
	}
	r1.kill()
	killed.Store(true)
	ft := s.faultNow(t, "kill -9 while a produce is held")
	let()
	t.Logf("killed the relay while its produce of %d records was held; %s", inFlight.Load(), ft)

	r2 := s.startRelay(r1.dataDir, restartReady)
	s.await(keys, s.lastDue(keys).Add(restartReady), r2)
	label := "kill -9 while a produce is held (mid-batch for sure)"
	f := s.check(t, label, keys, -1)
	uncommitted := s.checkInFlight(t, label, keys, f, ft)
	if held := int(inFlight.Load()); f.duplicated < held || f.duplicated > uncommitted {
		t.Errorf("%s: %d duplicates, want the %d records of the held produce and at most the %d forwarded and uncommitted at the kill",
			label, f.duplicated, held, uncommitted)
	}
	r2.stop()
}

// countRecords counts the records of a produce request's record batches.
func countRecords(b []byte) int64 {
	var n int64
	for len(b) >= 12 {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			return n
		}
		n += int64(rb.NumRecords)
		size := 12 + int(rb.Length)
		if size > len(b) {
			return n
		}
		b = b[size:]
	}
	return n
}
