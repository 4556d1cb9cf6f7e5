package relay

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
)

// doneSetRun: one record waiting 3 s in the wheel (4 s delay, level 1) holds partition 0's
// commit at offset 0 while 60 records behind it are delivered; the relay
// stops cleanly and its data directory is lost. The next relay (or the
// next owner after a rebalance) knows from the commit metadata what is
// done above the commit. It returns the duplicates seen.
func doneSetRun(t *testing.T, limit int) (dups int, overflow float64) {
	h := newHarness(t, nil, "orders")
	rr := h.start(nil, func(o *Options) { o.MetadataLimit = limit })
	rr.waitReady(t)
	h.sendRaw("long", 0, levels.HeaderTarget, "orders", levels.HeaderDelay, "4s")
	keys := keysOf("short", 60)
	for _, k := range keys {
		h.sendRaw(k, 0, levels.HeaderTarget, "orders", levels.HeaderDelay, "100ms")
	}
	h.collect(20*time.Second, allKeys(keys...), "orders")
	// The commit with the done set of the 60 (or, with a tiny limit, the
	// one that left it out) comes at most commitEvery after the last of
	// them landed: wait until the group has it (at most 30s).
	var md string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		offs, err := h.adm.FetchOffsets(context.Background(), h.cfg.Group)
		if err != nil {
			continue
		}
		if o, ok := offs.Lookup(h.cfg.Topic, 0); ok && o.At == 0 {
			md = o.Metadata
			if (limit < 100 && testutil.ToFloat64(rr.r.m.metaOverflow) > 0) || strings.Contains(md, metaDone) {
				break
			}
		}
	}
	if !strings.HasPrefix(md, metaPrefix) || (limit >= 100 && !strings.Contains(md, metaDone)) {
		t.Fatalf("partition 0's commit metadata never carried the done set: %q", md)
	}
	overflow = testutil.ToFloat64(rr.r.m.metaOverflow)
	rr.stop(t)
	if err := os.RemoveAll(h.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	h.start(nil)
	all := append(keys, "long")
	got := h.collect(30*time.Second, allKeys(all...), "orders")
	h.report(got, all, len(all))
	for _, k := range all {
		dups += max(0, len(got[k])-1)
	}
	return dups, overflow
}

// TestDoneSetTravels: what was done above the committed
// offset travels in the commit metadata, so a relay without the data
// directory delivers none of it again.
func TestDoneSetTravels(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	dups, overflow := doneSetRun(t, DefaultMetadataLimit)
	if dups != 0 || overflow != 0 {
		t.Errorf("with the done set: %d duplicates, %v overflows; want 0 and 0", dups, overflow)
	}
}

// TestDoneSetOverflow: when the done set does not fit the metadata limit
// it is left out and counted; the records are delivered again, none lost.
func TestDoneSetOverflow(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	dups, overflow := doneSetRun(t, len(metaPrefix)+len("1s 2s 4s 8s / 1")+len(metaDone)+2)
	if overflow == 0 || dups == 0 {
		t.Errorf("with a tiny metadata limit: %d duplicates, %v overflows; want both > 0", dups, overflow)
	}
	t.Logf("tiny limit: %d duplicates, %v overflows", dups, overflow)
}

// TestCommitKeepsTheKnownDoneSet: a partition read again from its commit
// (a resync after an aborted transaction, a new owner) skips what the
// commit's done set says is done. A commit made while that re-read is only
// part way must still carry the rest of the set; a set cut at the re-read
// records makes the next resync forward the rest again (exactly-once: a
// duplicate consumers see; TestRelaysOneKilled on kfake).
func TestCommitKeepsTheKnownDoneSet(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{parts: map[int32]*partState{}, metaLimit: DefaultMetadataLimit, m: m}
	// Committed at 1; done above it: [1,19) except 3 and 12 (in a wheel).
	known := offsetmap.Set{Base: 1, End: 19, Open: []int64{3, 12}}
	ps := &partState{p: 1, level: 2, led: newLedger()}
	ps.led.takeUp(1, known)
	// Read again up to 8: 3 went back into the retries (still open), the
	// others were skipped as done.
	ps.led.handled = 8
	ps.retries = []*item{{part: 1, offset: 3}}
	ps.led.settled = 1
	r.parts[1] = ps
	reqs := r.commitOffsets()
	c, ok := reqs[1]
	if !ok {
		t.Fatal("no commit for the partition")
	}
	if c.at.Offset != 3 {
		t.Fatalf("committed at %d, want 3 (the lowest offset not done)", c.at.Offset)
	}
	got, ok, err := doneOfMetadata(c.meta, c.at.Offset)
	if err != nil || !ok {
		t.Fatalf("no done set in the metadata %q: %v", c.meta, err)
	}
	for o := int64(3); o < 19; o++ {
		if want := o != 3 && o != 12; got.Done(o) != want {
			t.Errorf("offset %d: done=%v in the committed set %+v, want %v", o, got.Done(o), got, want)
		}
	}
}

// TestSettleDuringCommitIsCommitted: a record that lands while the
// committer's commit is in flight (its offsets and done set computed
// before, the record still open in them) is committed done by the next
// commit, whoever makes it (the loop's next, a revoke's, the shutdown's).
// The commit's return once marked the partition clean whatever had
// settled meanwhile: a revoke then committed nothing new and the next
// owner forwarded the record again (TestRelaysOneKilled/at-least-once on
// the real broker: relay-c forwarded 3/27 again 0.8 s after relay-a).
func TestSettleDuringCommitIsCommitted(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	r := &Relay{parts: map[int32]*partState{}, metaLimit: DefaultMetadataLimit, m: m, now: func() time.Time { return now }}
	// Read up to 8: 3 is being retried (it holds the commit at 3), 5 is
	// in flight, the others are done.
	ps := &partState{p: 1, level: 2, led: newLedger()}
	ps.led.handled, ps.led.commitEnd, ps.led.settled = 8, -1, 1
	ps.retries = []*item{{part: 1, offset: 3, kind: kForward, level: 2, nextTry: now.Add(time.Hour)}}
	five := &item{part: 1, offset: 5, kind: kForward, level: 2}
	ps.flight = []*item{five}
	r.parts[1] = ps
	inFlight := r.commitOffsets() // the committer's commit, 5 open in it
	if c, ok := inFlight[1]; !ok || c.done.Done(5) {
		t.Fatalf("the first commit %+v: want one for partition 1 with 5 open", inFlight)
	}
	five.finished.Store(true) // 5 lands while that commit is in flight
	r.finish(nil, false)
	r.committed(inFlight, nil) // the commit returns
	next, ok := r.commitOffsets()[1]
	if !ok {
		t.Fatal("no commit after record 5 landed: the group never learns that it is done, and its next owner forwards it again")
	}
	got, ok, err := doneOfMetadata(next.meta, next.at.Offset)
	if err != nil || !ok {
		t.Fatalf("no done set in the metadata %q: %v", next.meta, err)
	}
	if next.at.Offset != 3 || !got.Done(5) || got.Done(3) {
		t.Errorf("next commit at %d with done set %+v: want at 3, 5 done, 3 open", next.at.Offset, got)
	}
}

// syncOrder wraps the wheel and counts the Syncers its SyncStart handed
// out and those whose Sync returned nil.
type syncOrder struct {
	Store
	started, synced atomic.Int64
}

func (s *syncOrder) SyncStart() (Syncer, error) {
	sy, err := s.Store.SyncStart()
	if err != nil {
		return nil, err
	}
	s.started.Add(1)
	return &countedSyncer{Syncer: sy, s: s}, nil
}

type countedSyncer struct {
	Syncer
	s    *syncOrder
	once sync.Once
}

func (c *countedSyncer) Sync() error {
	err := c.Syncer.Sync()
	if err == nil {
		c.once.Do(func() { c.s.synced.Add(1) })
	}
	return err
}

// TestCommitAfterWheelSync (docs/architecture.md, at least once with
// KDELAY_WHEEL_SYNC=batch): an offset commit of the delay topic reaches the
// broker only once the fsync of every wheel write before it has returned,
// so no commit runs ahead of the wheel's disk (a power loss would lose the
// records it passes). The broker checks, on each OffsetCommit of the
// relay's group, that no Syncer the relay was handed is still unsynced.
func TestCommitAfterWheelSync(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	st := &syncOrder{}
	var commits, early atomic.Int64
	var first atomic.Value // string: the first early commit
	h.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		if req := req.(*kmsg.OffsetCommitRequest); req.Group == h.cfg.Group {
			commits.Add(1)
			if started, synced := st.started.Load(), st.synced.Load(); started > synced {
				early.Add(1)
				first.CompareAndSwap(nil, fmt.Sprintf("commit #%d with %d of %d wheel syncs returned", commits.Load(), synced, started))
			}
		}
		return nil, nil, false
	})
	h.start(nil, wrappedWheel(func(w Store) Store { st.Store = w; return st }))
	keys := keysOf("cs", 120)
	for i, k := range keys {
		// 1.1 s .. 3.5 s: level 1 or 2, the rest in the wheel (horizon 4s)
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(1100+i*20) * time.Millisecond})
	}
	got := h.collectAll(60*time.Second, keys, "orders")
	h.report(got, keys, 0)
	if st.started.Load() == 0 || commits.Load() == 0 {
		t.Fatalf("%d wheel syncs started, %d commits: the test saw nothing to check", st.started.Load(), commits.Load())
	}
	if n := early.Load(); n > 0 {
		t.Errorf("%d of %d offset commits reached the broker before the wheel's fsync returned (first: %v)", n, commits.Load(), first.Load())
	}
	t.Logf("%d commits, %d wheel syncs started, %d returned", commits.Load(), st.started.Load(), st.synced.Load())
}
