package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The tests of this file check the relay's membership, as the group
// coordinator sees it, after its loop stood still.

// TestConfirmMemberAsksTheCoordinator: a loop that stood still past the
// session timeout forwards nothing until confirmMember says it is still a
// member, and confirmMember must ask the group coordinator even when the
// relay has nothing to commit (here: no record read yet). Answering yes
// unasked lets a zombie woken before its first commit forward again every
// record the new owner forwarded (TestZombie, real broker).
func TestConfirmMemberAsksTheCoordinator(t *testing.T) {
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	ctx := context.Background()
	if !rr.r.confirmMember(ctx) {
		t.Fatal("a member of the current generation was not confirmed")
	}
	var asked atomic.Int32
	h.c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		hb := req.(*kmsg.HeartbeatRequest)
		resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.Version = hb.Version
		resp.ErrorCode = kerr.UnknownMemberID.Code // expelled while it stood still
		asked.Add(1)
		return resp, nil, true
	})
	before := asked.Load()
	if rr.r.confirmMember(ctx) {
		t.Fatal("confirmed a member the coordinator does not know")
	}
	if asked.Load() == before {
		t.Fatal("confirmMember did not ask the coordinator")
	}
}

// TestConfirmMemberWaitsForTheNewAssignment: a woken zombie that the
// coordinator expelled rejoins (confirmMember forces it); from the
// JoinGroup response on, its client reports the new generation, and a
// Heartbeat of that generation is answered "no error" (Kafka, while the
// group completes the rebalance), but the partitions the relay still holds
// are the old generation's: the new one may have given them to another
// relay. confirmMember must not confirm before the new generation's
// assignment has been taken up (onAssigned); otherwise the zombie forwards
// its wheel's due entries of partitions the other relay has taken over
// (TestZombie at-least-once on kfake under CI load).
func TestConfirmMemberWaitsForTheNewAssignment(t *testing.T) {
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	_, gen0 := rr.r.cl.GroupMetadata()
	// Hold the relay's SyncGroup, so that it stays between its join and
	// its new assignment, and answer its Heartbeats as Kafka does then.
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	h.c.ControlKey(int16(kmsg.SyncGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.c.SleepControl(func() { <-release })
		h.c.DropControl()
		return nil, nil, false
	})
	h.c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-release:
			h.c.DropControl()
			return nil, nil, false
		default:
		}
		h.c.KeepControl()
		hb := req.(*kmsg.HeartbeatRequest)
		resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.Version = hb.Version
		return resp, nil, true
	})
	rr.r.cl.ForceRebalance()
	waitFor(t, func() bool { _, gen := rr.r.cl.GroupMetadata(); return gen > gen0 })
	if rr.r.confirmMember(context.Background()) {
		t.Fatal("confirmed the membership of a generation whose assignment has not been taken up: the partitions held are the old generation's")
	}
	releaseOnce.Do(func() { close(release) })
	waitFor(t, func() bool { return rr.r.confirmMember(context.Background()) })
}
