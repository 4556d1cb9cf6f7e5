package integration

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/levels"
)

// TestRevokeMidBatch (kfake tier, at-least-once mode): a graceful
// rebalance while a batch is in flight. The broker holds relay-a's first
// produce to the target (kfake SleepControl; its produce connection waits
// behind it, everything else goes on), relay-b joins, and the cooperative
// rebalance revokes some of relay-a's partitions while their records are
// unacknowledged; then the produce is let through. Nothing is killed, so
// nothing may come twice: the revoked partitions' records in flight must
// land and be committed (or be handed over as done) before the new owner
// reads them. TestRelaysOneKilled shows the same on the real broker when
// acks are slow; this test makes it certain.
func TestRevokeMidBatch(t *testing.T) {
	t.Parallel()
	if suite.kfake == nil {
		t.Skipf("needs the in-process kfake broker to hold a produce request; tier is %s (the real tier runs TestRelaysOneKilled)", suite.tier)
	}
	s := newScenario(t, "revokeheld", scenarioOpts{levels: "1s", perLevel: 2, targets: map[string]int32{"orders": 3}})
	target := s.target("orders")
	td, err := s.adm.ListTopics(testContext(t, 30*time.Second), target)
	if err != nil {
		t.Fatal(err)
	}
	targetID := td[target].ID // Produce v13+ names topics by ID only

	var (
		done        atomic.Bool
		inFlight    atomic.Int64 // records in the held produce request
		heldOnce    sync.Once
		held        = make(chan struct{})
		release     = make(chan struct{})
		releaseOnce sync.Once
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
		if n < 5 {
			return nil, nil, false
		}
		first := false
		heldOnce.Do(func() { first = true; inFlight.Store(n); close(held) })
		if first {
			suite.kfake.SleepControl(func() { <-release })
		}
		return nil, nil, false // then handled as usual: the records land, the ack goes to relay-a
	})

	a := s.startRelay("", 90*time.Second)
	var recs []*kgo.Record // due together: one batch over both partitions of the level
	for i := range 60 {
		recs = append(recs, s.stamped(fmt.Sprintf("v-%02d", i), levels.Delay{Target: target, Level: 1}))
	}
	s.send(recs...)
	keys := s.sentKeys("v-")
	select {
	case <-held:
	case <-time.After(time.Minute):
		a.checkAlive()
		t.Fatal("no produce to the target within a minute")
	}
	heldAt := time.Now()
	// relay-b is started without waiting for it to be ready: a relay that
	// drains what it forwarded before giving partitions up waits in its
	// revoke for the held produce, and relay-b gets no partition until
	// then. The produce is let through once relay-a's client starts the
	// revoke (franz-go logs it right before calling the relay's handler).
	b := launchRelay(t, "relay2", s.vars, filepath.Join(t.TempDir(), "relay2-data"), 1)
	waitFor(t, time.Minute, "relay-a starts revoking partitions", func() bool {
		return len(a.logLines(`revoking assignments from cooperative consuming`)) > 0
	}, a, b)
	revokeAt := time.Now()
	let()
	if err := b.waitReady(90 * time.Second); err != nil {
		b.dumpLog(60)
		t.Fatalf("relay2: %v", err)
	}
	var revoked []int32
	waitFor(t, time.Minute, "relay-a has partitions revoked", func() bool {
		revoked = revokedPartitions(a)
		return len(revoked) > 0
	}, a, b)
	t.Logf("relay-a's produce of %d records held from %s until it began to revoke %v", inFlight.Load(), fmtTime(heldAt), revoked)
	s.await(keys, time.Now().Add(time.Minute), a, b)
	label := "graceful rebalance while a produce is held"
	f := s.check(t, label, keys, -1)
	s.logDuplicates(f)

	// The scenario tests something only if relay-a had forwarded records
	// of a partition it then lost, before it began to revoke it (in the
	// held request or queued behind it on its produce connection).
	ofRevoked := 0
	for _, k := range keys {
		for _, c := range s.obs.arrivals(k) {
			if p, _, ok := s.sourceOf(c); ok && c.ts.Before(revokeAt) && slices.Contains(revoked, p) {
				ofRevoked++
				break
			}
		}
	}
	t.Logf("%s: relay-a had forwarded %d records of the revoked partitions, unacknowledged, when it began to revoke them", label, ofRevoked)
	if ofRevoked == 0 {
		t.Errorf("%s: none of the held records was of a revoked partition: the scenario tests nothing", label)
	}
	if f.duplicated > 0 {
		t.Errorf("%s: %d duplicates, want 0: nothing was killed; relay-a forgot the revoked partitions' records in flight instead of letting them land and committing them (group.go release), so relay-b read them again",
			label, f.duplicated)
	}
	a.stop()
	b.stop()
}

// revokedPartitions returns the delay-topic partitions a relay logged as
// revoked ("partitions revoked", JSON log).
func revokedPartitions(p *relayProc) []int32 {
	var out []int32
	for _, line := range p.logLines(`"msg":"partitions revoked"`) {
		_, rest, ok := strings.Cut(line, `"partitions":[`)
		if !ok {
			continue
		}
		list, _, _ := strings.Cut(rest, "]")
		for _, f := range strings.Split(list, ",") {
			if n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32); err == nil {
				out = append(out, int32(n))
			}
		}
	}
	return out
}
