package relay

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/offsetmap"
)

// onAssigned takes up newly assigned partitions: the committed offset from
// the group, wheel entries below it trimmed (another owner did them), and
// the handled watermark from the wheel so a restart with an intact data
// directory skips what it already did. A partition without a committed
// offset never trusts a local watermark.
func (r *Relay) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	partitions := assigned[r.cfg.Topic]
	committed, known := r.fetchCommitted(ctx, cl)
	r.mu.Lock()
	defer r.mu.Unlock()
	// Every session calls onAssigned, whatever it adds, after the revoke
	// of what it lost: what r.parts holds from here is this generation's.
	_, gen := cl.GroupMetadata()
	r.asgGen.Store(gen)
	if !r.firstAsg {
		// Entries of partitions not given back to us belong to their new
		// owner, who re-reads them from Kafka.
		for p := int32(0); p < r.pol.table.Partitions(); p++ {
			if !slices.Contains(partitions, p) {
				r.wheelDrop(p)
			}
		}
		r.firstAsg = true
		r.joined.Store(true)
	}
	// The poll this runs in was given its deadline before the assignment
	// (up to maxPoll away when nothing waited, and the wheel's expiries
	// are not looked at before the first assignment): end it, so that the
	// loop looks again now: after a restart the wheel's due entries would
	// otherwise go out up to a second late.
	if r.pollCancel != nil {
		r.pollCancel()
	}
	for _, p := range partitions {
		ps := &partState{p: p, level: r.pol.table.LevelOf(p), hwm: -1, led: newLedger()}
		if ps.level == 0 {
			r.log.Error("delay topic has more partitions than levels x partitions-per-level; extra partition is not read", "partition", p)
			continue
		}
		c, ok := committed[p]
		if ok && c.table != "" && c.table != r.bind.Levels && !r.cfg.AllowLevelChange {
			r.fatal = &LevelChangeError{Partition: p, Committed: c.table, Current: r.bind.Levels}
			r.log.Error("refusing the assignment", "err", r.fatal)
		}
		switch {
		case ok:
			ps.led.takeUp(c.at, c.done)
			if r.wheel != nil {
				if err := r.wheel.Trim(p, c.at); err != nil {
					r.wheelFailed("trim", err)
				}
				r.doneFromMetadata(p, c.done)
				hi, ok := r.wheel.Highest(p)
				ps.led.restore(r.wheel.Handled(p), hi, ok)
			}
		default:
			// No commit (a new or recreated topic, or the fetch failed):
			// nothing local is trusted, the partition is read from where
			// the group starts.
			r.wheelDrop(p)
		}
		from, seek := ps.led.start()
		if seek {
			r.resync[p] = from
		}
		ps.next = from
		r.parts[p] = ps
		r.log.Info("partition assigned", "partition", p, "level", ps.level, "committed", ps.led.commit, "handled", ps.led.handled, "commit_known", known)
	}
	if r.wheel != nil {
		// Under r.mu, with its fsync if the policy asks: the wheel is
		// r.mu's, and a rebalance is rare.
		if err := r.wheel.Flush(); err != nil {
			r.wheelFailed("flush", err)
		}
	}
}

func (r *Relay) wheelDrop(p int32) {
	if r.wheel == nil {
		return
	}
	if err := r.wheel.Drop(p); err != nil {
		r.wheelFailed("drop", err)
	}
}

// commitInfo is a partition's committed offset and the level table its
// committer recorded in the commit metadata ("" when none).
type commitInfo struct {
	at    int64
	table string
	done  offsetmap.Set // done above at, per the metadata (empty if none)
}

// fetchCommitted returns the group's committed offsets of the delay topic.
// A failed fetch is retried a few times; if it keeps failing, known is
// false and the result is empty, which onAssigned treats as "no commit":
// nothing local is trusted, so a failure costs duplicates, never records.
func (r *Relay) fetchCommitted(ctx context.Context, cl *kgo.Client) (map[int32]commitInfo, bool) {
	out := make(map[int32]commitInfo)
	var err error
	// Retriable errors (an offset commit pending in another relay's open
	// transaction: UNSTABLE_OFFSET_COMMIT; a coordinator moving) are
	// retried until the transaction timeout has surely passed (another
	// relay's may be longer than this one's: at least 40 s); others a few
	// times.
	deadline := r.now().Add(max(2*txnTimeout(r.cfg.SessionTimeout), 40*time.Second))
	for attempt, wait := 0, 200*time.Millisecond; attempt < 4 || (kerr.IsRetriable(err) && r.now().Before(deadline)); attempt, wait = attempt+1, min(2*wait, 2*time.Second) {
		var resp kadm.OffsetResponses
		// RequireStable: a commit pending in an open transaction (exactly-
		// once mode, the previous owner's last batch) is waited for, not
		// read as the older one.
		resp, err = kadm.NewClient(cl).FetchOffsets(kadm.RequireStable(ctx), r.cfg.Group)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			resp.Each(func(o kadm.OffsetResponse) {
				if o.Topic == r.cfg.Topic && o.Err == nil && o.At >= 0 {
					ci := commitInfo{at: o.At, table: tableOfMetadata(o.Metadata)}
					done, ok, derr := doneOfMetadata(o.Metadata, o.At)
					switch {
					case derr != nil:
						r.log.Warn("ignoring the done set of a commit's metadata (its records are read again)", "partition", o.Partition, "err", derr)
					case ok:
						ci.done = done
					}
					out[o.Partition] = ci
				}
			})
			return out, true
		}
		select {
		case <-ctx.Done():
			return out, false
		case <-time.After(wait):
		}
	}
	r.log.Warn("fetch committed offsets failed; reading the assigned partitions without trusting local state (duplicates possible)", "err", err)
	return out, false
}

// applyResync seeks partitions whose position must change: past what the
// wheel already holds after an assignment, or back to the committed offset
// after a reset. It runs with rebalances blocked and r.mu held, and
// returns the partitions it moved.
func (r *Relay) applyResync() map[int32]bool {
	if len(r.resync) == 0 {
		return nil
	}
	moved := make(map[int32]bool, len(r.resync))
	set := make(map[int32]kgo.EpochOffset, len(r.resync))
	for p, off := range r.resync {
		if _, ok := r.parts[p]; ok {
			set[p] = kgo.EpochOffset{Epoch: -1, Offset: off}
			moved[p] = true
		}
	}
	clear(r.resync)
	if len(set) > 0 {
		r.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{r.cfg.Topic: set})
	}
	return moved
}

// adjustStart starts each newly assigned partition where onAssigned found
// that the local state reaches (r.resync: handled+1, past the committed
// offset when the wheel holds or did everything between), so that the
// first fetch does not read records only to seek past them (docs/architecture.md).
// franz-go calls it after OnPartitionsAssigned, before fetching
// (kgo.AdjustFetchOffsetsFn); entries it does not consume stay in r.resync
// for applyResync.
func (r *Relay) adjustStart(_ context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range offsets[r.cfg.Topic] {
		if off, ok := r.resync[p]; ok && r.parts[p] != nil {
			offsets[r.cfg.Topic][p] = kgo.NewOffset().At(off).WithEpoch(-1)
			delete(r.resync, p)
		}
	}
	return offsets, nil
}

// onRevoked hands the revoked partitions over and forgets them. The group
// callbacks use the client they are given: they may run before New has
// stored r.cl.
func (r *Relay) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	r.groupMoved.Store(true)
	r.mode.handOver(ctx, revoked[r.cfg.Topic])
	r.release(cl, revoked[r.cfg.Topic], "revoked")
}

// handOver, at least once, lets the produces in flight to the revoked
// partitions land (up to handOverWait) and commits what is done, so that
// the next owner does not deliver them again.
func (r *Relay) handOver(ctx context.Context, partitions []int32) {
	if len(partitions) == 0 || r.stopping.Load() {
		return
	}
	r.mu.Lock()
	var groups []*attempts
	for _, p := range partitions {
		if ps := r.parts[p]; ps != nil {
			for _, it := range ps.flight {
				if !it.finished.Load() && it.group != nil && !slices.Contains(groups, it.group) {
					groups = append(groups, it.group)
				}
			}
		}
	}
	r.mu.Unlock()
	t := time.NewTimer(handOverWait)
	defer t.Stop()
wait:
	for i, g := range groups {
		select {
		case <-g.done:
		case <-t.C:
			r.log.Warn("revoke: produces still in flight after the hand-over wait; the next owner may deliver their records again",
				"partitions", partitions, "batches_in_flight", len(groups)-i, "waited", handOverWait.String())
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	r.awaitCommit(ctx)
	r.commitNow(ctx, partitions)
}

func (r *Relay) onLost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	r.groupMoved.Store(true)
	r.release(cl, lost[r.cfg.Topic], "lost")
}

// release forgets partitions that are no longer ours. What was done is
// committed (each iteration commits what landed; a revoke hands over its
// produces in flight first, handOver); wheel entries, retries and what is
// still in flight are dropped because the new owner re-reads them from the
// committed offset. On
// shutdown the wheel is kept, so a restart that gets the partitions back
// sends no duplicate.
func (r *Relay) release(cl *kgo.Client, partitions []int32, why string) {
	if len(partitions) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range partitions {
		delete(r.parts, p)
		delete(r.resync, p)
		if !r.stopping.Load() {
			r.wheelDrop(p)
		}
	}
	if r.wheel != nil {
		// Under r.mu, with its fsync if the policy asks: the wheel is
		// r.mu's, and a rebalance is rare.
		if err := r.wheel.Flush(); err != nil {
			r.wheelFailed("flush", err)
		}
	}
	cl.ResumeFetchPartitions(map[string][]int32{r.cfg.Topic: partitions}) // pauses survive rebalances
	r.log.Info("partitions "+why, "partitions", partitions)
}

// confirmMember asks the group coordinator whether this relay is still the
// member it was: a Heartbeat with its member ID and generation. A member
// that lost its partitions while it stood still (expelled at its session
// timeout, fenced by a restart with the same instance ID) is refused, and
// its client is told to rejoin, which reports the partitions lost. It
// reports whether the coordinator confirmed the membership.
//
// It asks even when the relay has nothing to commit: a relay that stood
// still before it handled a single record has nothing to lose, but what
// it would forward the new owner forwards too (a woken zombie going on
// unasked would duplicate every record of its old partitions).
// A rebalance in progress confirms the membership: the member keeps its
// partitions until it revokes them, after this iteration.
func (r *Relay) confirmMember(ctx context.Context) bool {
	member, gen := r.cl.GroupMetadata()
	if member == "" || gen < 0 {
		return false // not in a group session: partitions come back through onAssigned
	}
	if held := r.asgGen.Load(); gen != held {
		// A rejoin is under way (the client learns the new generation
		// from JoinGroup, before its assignment): the partitions held
		// are generation held's, and the new one may have given them
		// to another relay. Its Heartbeat would be answered "no
		// error" while the group completes the rebalance, so asking
		// proves nothing; onAssigned (after the revoke of what was
		// lost) brings the generation to confirm.
		return false
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = r.cfg.Group, member, gen
	if r.cfg.InstanceID != "" {
		req.InstanceID = kmsg.StringPtr(r.cfg.InstanceID)
	}
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	resp, err := req.RequestWith(ctx, r.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	switch {
	case err == nil, errors.Is(err, kerr.RebalanceInProgress):
		return true
	case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.FencedInstanceID):
		r.log.Warn("group membership lost while the loop stood still; rejoining", "member", member, "generation", gen, "err", err)
		r.cl.ForceRebalance()
	default:
		r.log.Warn("group membership not confirmed; asking again", "err", err)
	}
	return false
}

// heartbeatInterval is the group heartbeat interval (franz-go's default,
// set here because standStill depends on it).
const heartbeatInterval = 3 * time.Second

// standStill is how long the loop may stand still before it asks whether
// it is still a member. The coordinator expels a member a session timeout
// after its last heartbeat, which can be up to a heartbeat interval before
// the loop stopped: a freeze of the session timeout minus that interval
// can already cost the partitions (TestZombie). Asking costs one Heartbeat
// round trip, so the bound errs low: minus another second, at least 1s.
func (r *Relay) standStill() time.Duration {
	return max(r.cfg.SessionTimeout-heartbeatInterval-time.Second, time.Second)
}

// confirmRetry is how long a loop whose membership is unconfirmed waits
// before it asks the coordinator again (it forwards nothing meanwhile).
const confirmRetry = 100 * time.Millisecond

// handOverWait bounds how long a revoke waits for the revoked partitions'
// produces in flight (the group's rebalance waits for it).
const handOverWait = 5 * time.Second
