package relay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/offsetmap"
)

// The commit of a partition is the lowest offset not yet done
// (docs/architecture.md). Its metadata says two more things, so that any next owner of the
// partition, with or without this relay's data directory, knows them:
//
//	kdelay/1 levels=<table> / <k>[;done=<offsetmap>]
//
// the level table the records were scheduled under (binding.go), and which
// offsets above the committed one are already done (package offsetmap):
// forwarded, cascaded or dead-lettered while a lower record waits in the
// wheel or for a retry. When that set does not fit the broker's metadata
// limit it is left out (kdelay_commit_metadata_overflow_total): the next
// owner then delivers those records again, never loses one.

// commitEvery is the shortest time between two offset commits of the loop,
// at least once. A commit is a round trip the loop waits for, so one per
// iteration would hold every record due meanwhile. A crash re-delivers
// what was forwarded since the last commit: up to commitEvery of it.
// Revokes, membership checks and shutdown commit at once.
const commitEvery = 100 * time.Millisecond

// atLeastOnceMode is the at-least-once delivery: a batch's acks overlap with
// deciding the next one, and what is done is committed by the committer
// at most once per commitEvery (startCommit).
type atLeastOnceMode struct {
	r *Relay
	// prev are the produce attempts of the last batch: the next
	// iteration waits for them (up to flightWait) after deciding its own
	// batch, so deciding overlaps the acks. Loop only.
	prev      *attempts
	commitAt  time.Time // when the loop last sent a commit (loop only)
	commitDue time.Time // when the commit put off by commitEvery is due; zero: none (loop only)
}

func (a *atLeastOnceMode) begin(context.Context) bool { return true }
func (a *atLeastOnceMode) transactional() bool        { return false }

func (a *atLeastOnceMode) waits() (<-chan struct{}, time.Time) {
	if a.prev == nil {
		return nil, a.commitDue
	}
	return a.prev.done, a.commitDue
}

// end waits for the last batch's acks (deliver), lets this batch's
// produces go on while the next is polled and decided (its outcomes settle
// in a later finish), finishes what landed and starts a commit unless one
// went out less than commitEvery ago or is still in flight.
func (a *atLeastOnceMode) end(ctx context.Context, now time.Time, _ bool, b, solo []*item, started *attempts) error {
	r := a.r
	if err := r.deliver(ctx, solo, a.prev); err != nil {
		// Nothing of it is committed; the next owner re-reads it.
		r.log.Warn("shutdown: batch handed back uncommitted", "records", len(b)+len(solo), "err", err)
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a.prev = started
	if started.finished() {
		a.prev = nil
	}
	r.finish(b, true)
	if due := a.commitAt.Add(commitEvery); now.Before(due) || r.committing != nil {
		a.commitDue = due // at most one commit per commitEvery, one in flight
	} else {
		a.commitDue = time.Time{}
		if offsets := r.commitOffsets(); len(offsets) > 0 {
			a.commitAt = now
			r.startCommit(ctx, offsets)
		}
	}
	return nil
}

// stop lets what is in flight land (or the shutdown timeout pass) and
// commits what landed.
func (a *atLeastOnceMode) stop(ctx context.Context) {
	r := a.r
	r.drain(ctx)
	r.awaitCommit(ctx)
	r.commitNow(ctx, nil)
}

func (a *atLeastOnceMode) handOver(ctx context.Context, partitions []int32) {
	a.r.handOver(ctx, partitions)
}

// metaPrefix starts the commit metadata of every offset the relay commits.
const (
	metaPrefix = "kdelay/1 levels="
	metaDone   = ";done="
)

// commitTimeout bounds one synchronous offset commit.
const commitTimeout = 10 * time.Second

// DefaultMetadataLimit is Kafka's default offset.metadata.max.bytes.
const DefaultMetadataLimit = 4096

// maxOpen bounds the offsets not done that a done set lists: beyond it the
// set would not fit the metadata limit anyway, and listing them costs time
// on every commit.
const maxOpen = 2048

// tableOfMetadata returns the level table recorded in commit metadata, ""
// when the committer recorded none (another tool, an older kdelay).
func tableOfMetadata(md string) string {
	t, ok := strings.CutPrefix(md, metaPrefix)
	if !ok {
		return ""
	}
	t, _, _ = strings.Cut(t, metaDone)
	return t
}

// doneOfMetadata returns the done set recorded in commit metadata for a
// partition committed at base; ok is false when there is none.
func doneOfMetadata(md string, base int64) (offsetmap.Set, bool, error) {
	_, enc, found := strings.Cut(md, metaDone)
	if !found || !strings.HasPrefix(md, metaPrefix) {
		return offsetmap.Set{}, false, nil
	}
	s, err := offsetmap.Decode(enc, base)
	if err != nil {
		return offsetmap.Set{}, false, err
	}
	return s, true, nil
}

// doneFromMetadata marks done the wheel entries of partition p that the
// committed done set says were delivered: a relay that crashed after its
// commit and before its wheel write would fire them again. r.mu is held.
func (r *Relay) doneFromMetadata(p int32, done offsetmap.Set) {
	if r.wheel == nil || done.End <= done.Base {
		return
	}
	var fired []int64
	r.wheel.EachPending(p, done.Base, done.End-1, func(o int64) bool {
		if done.Done(o) {
			fired = append(fired, o)
		}
		return true
	})
	for _, o := range fired {
		if err := r.wheel.Done(p, o); err != nil {
			r.wheelFailed("done", err)
			return
		}
	}
}

// commitReq is one partition's commit.
type commitReq struct {
	at      kgo.EpochOffset
	end     int64         // every offset below end is done or listed open in meta
	meta    string        // the commit metadata
	settled uint64        // the partition's settled count when it was computed
	done    offsetmap.Set // the done set in meta (empty when left out)
}

// commitOffsets returns, for each owned partition whose commit or done set
// can advance, the lowest offset not yet done (the lowest of the first wheel
// entry still pending, the first record in flight or being retried and the
// first offset not handled) with its metadata. The caller syncs the wheel
// first (commitNow, or startCommit's Syncer). r.mu is held.
func (r *Relay) commitOffsets() map[int32]commitReq {
	out := make(map[int32]commitReq)
	for p, ps := range r.parts {
		lowWheel := int64(math.MaxInt64)
		if r.wheel != nil {
			if low, ok := r.wheel.LowestPending(p); ok {
				lowWheel = low
			}
		}
		off, end, ok := ps.led.point(ps.lowestUnsettled(false), lowWheel)
		if !ok {
			continue
		}
		md, done := r.metadata(p, ps, off, end)
		out[p] = commitReq{at: kgo.EpochOffset{Epoch: -1, Offset: off}, end: end, meta: md, done: done, settled: ps.led.settled}
	}
	return out
}

// metadata is the commit metadata of partition p committed at off, with
// the done set of [off, end) when it fits.
func (r *Relay) metadata(p int32, ps *partState, off, end int64) (string, offsetmap.Set) {
	md := metaPrefix + r.bind.Levels
	var open []int64
	if end > off+1 && end-off <= offsetmap.MaxSpan {
		if r.wheel != nil {
			r.wheel.EachPending(p, off, end-1, func(o int64) bool {
				open = append(open, o)
				return len(open) <= maxOpen
			})
		}
		for _, l := range [][]*item{ps.retries, ps.flight} {
			for _, it := range l {
				if it.offset >= off && it.offset < end {
					open = append(open, it.offset)
				}
			}
		}
	}
	set, ok, over := ps.led.doneAbove(off, end, open)
	if !ok {
		if over {
			r.m.metaOverflow.Inc()
		}
		return md, offsetmap.Set{}
	}
	enc, err := offsetmap.Encode(set, r.metaLimit-len(md)-len(metaDone))
	if err != nil {
		if !errors.Is(err, offsetmap.ErrTooLarge) {
			r.log.Error("encode the done set; committing without it", "partition", p, "err", err)
		}
		r.m.metaOverflow.Inc()
		return md, offsetmap.Set{}
	}
	return md + metaDone + enc, set
}

// commitNow settles what landed and commits the owned partitions (those
// in partitions; all when nil) synchronously: a revoke's hand-over and the
// shutdown, after the committer's commit in flight (awaitCommit). With
// syncOnCommit the wheel is fsynced before, so that no commit (its done
// set) runs ahead of what the wheel has on disk: its writes go out under
// r.mu, in the critical section that computes the commits, and the fsync
// runs after r.mu is released, as on the committer (startCommit). r.mu is
// not held.
func (r *Relay) commitNow(ctx context.Context, partitions []int32) {
	r.mu.Lock()
	r.finish(nil, true)
	reqs := r.commitOffsets()
	if partitions != nil {
		for p := range reqs {
			if !slices.Contains(partitions, p) {
				delete(reqs, p)
			}
		}
	}
	var syncer Syncer
	if r.syncOnCommit && r.wheel != nil {
		s, err := r.wheel.SyncStart()
		if err != nil {
			r.wheelFailed("sync", err)
		}
		syncer = s
	}
	r.mu.Unlock()
	if syncer != nil {
		if err := syncer.Sync(); err != nil {
			r.mu.Lock()
			r.wheelFailed("sync", err)
			r.mu.Unlock()
		}
	}
	r.commit(ctx, reqs)
}

// startCommit commits the loop's offsets on a goroutine of its own (the
// committer), so that the loop goes on polling and deciding while the
// wheel's fsync and the broker's round trip take their time. At most
// one such commit is in flight (r.committing); the loop's next commit, a
// revoke's and the shutdown's wait for it, so commits stay in order and
// each partition's commit only moves forward. With syncOnCommit the wheel
// is synced first, in two halves: the writes here (SyncStart, r.mu held,
// in the same critical section that computed the offsets, so the done
// sets describe exactly what is written), the fsync on the committer; the
// commit goes out only once that fsync returned. A failed fsync skips the
// commit (a later one covers it) and fails the wheel at its next sync.
// r.mu is held.
func (r *Relay) startCommit(ctx context.Context, reqs map[int32]commitReq) {
	if len(reqs) == 0 {
		return
	}
	var syncer Syncer
	if r.syncOnCommit && r.wheel != nil {
		s, err := r.wheel.SyncStart()
		if err != nil {
			r.wheelFailed("sync", err)
			return // nothing is committed ahead of the wheel's disk
		}
		syncer = s
	}
	done := make(chan struct{})
	r.committing = done
	go func() {
		defer func() {
			r.mu.Lock()
			r.committing = nil
			r.mu.Unlock()
			close(done)
		}()
		if syncer != nil {
			start := time.Now()
			err := syncer.Sync()
			r.m.commitSyncTime.Observe(time.Since(start).Seconds())
			if err != nil {
				r.log.Error("wheel fsync before the commit failed; commit skipped", "err", err)
				return
			}
		}
		r.commit(ctx, reqs)
	}()
}

// awaitCommit waits for the committer's commit in flight, if any (bounded
// by ctx). r.mu is not held.
func (r *Relay) awaitCommit(ctx context.Context) {
	r.mu.Lock()
	c := r.committing
	r.mu.Unlock()
	if c == nil {
		return
	}
	select {
	case <-c:
	case <-ctx.Done():
	}
}

// committed records the commits that went through: all of reqs when only
// is nil, else those in only. r.mu is held.
func (r *Relay) committed(reqs map[int32]commitReq, only map[int32]bool) {
	for p, c := range reqs {
		if only != nil && !only[p] {
			continue
		}
		if ps := r.parts[p]; ps != nil {
			ps.led.committed(c.at.Offset, c.end, c.settled, c.done)
		}
	}
}

// commit commits reqs synchronously, each with its metadata, without
// holding r.mu. The loop's commits (at most one per commitEvery, and again
// after a failed one even when no new record arrives: what did not go
// through stays to commit) call it on the committer (startCommit); a
// revoke and the shutdown call it directly. It returns the commit's error,
// if any (already logged).
func (r *Relay) commit(ctx context.Context, reqs map[int32]commitReq) error {
	if len(reqs) == 0 {
		return nil
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				pt := &req.Topics[i].Partitions[j]
				if c, ok := reqs[pt.Partition]; ok {
					md := c.meta
					pt.Metadata = &md
				}
			}
		}
		return nil
	})
	offsets := make(map[int32]kgo.EpochOffset, len(reqs))
	for p, c := range reqs {
		offsets[p] = c.at
	}
	start := time.Now()
	var cerr error
	committed := make(map[int32]bool)
	// Bounded: a coordinator that does not answer must not hold the loop
	// (and its readiness) for ever; the next iteration commits again.
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	r.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{r.cfg.Topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
						cerr = fmt.Errorf("partition %d: %w", p.Partition, e)
						continue
					}
					committed[p.Partition] = true
				}
			}
		})
	r.m.commitTime.Observe(time.Since(start).Seconds())
	r.mu.Lock()
	r.committed(reqs, committed)
	r.mu.Unlock()
	if cerr != nil {
		// The next iteration commits again; meanwhile a crash would
		// re-deliver more, never lose anything.
		r.log.Warn("commit failed", "err", cerr)
	}
	return cerr
}
