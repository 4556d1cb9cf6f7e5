package relay

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/levels"
)

// Checks of the guarantees (docs/guarantees.md) shared by the relay tests. Each fails
// on its breakage (see mutants/ and .ci/mutants.sh).

// noFaultP99 bounds the p99 lateness (forwarded timestamp - due time) of a
// run without faults. Measured p99s on kfake are a few ms (TestExactness);
// the bound is generous for a loaded CI machine with -race and still far
// below a wheel or a level that fires seconds late.
const noFaultP99 = 500 * time.Millisecond

// collectAll collects until every key arrived, then until the relay has
// nothing left to send (its committed offsets reach the end of every
// delay-topic partition), then reads the topics to their end: unlike
// collect(allKeys), it sees every duplicate the relay sent.
func (h *harness) collectAll(timeout time.Duration, keys []string, topics ...string) map[string][]received {
	h.t.Helper()
	h.collect(timeout, allKeys(keys...), topics...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h.awaitIdle(ctx)
	ends, err := h.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		h.t.Fatal(err)
	}
	want := map[string]map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		if e.Offset > 0 {
			if want[e.Topic] == nil {
				want[e.Topic] = map[int32]int64{}
			}
			want[e.Topic][e.Partition] = e.Offset - 1
		}
	})
	return h.collect(timeout, func(got map[string][]received) bool {
		seen := map[string]map[int32]int64{}
		for _, rs := range got {
			for _, rc := range rs {
				if seen[rc.topic] == nil {
					seen[rc.topic] = map[int32]int64{}
				}
				seen[rc.topic][rc.partition] = max(seen[rc.topic][rc.partition], rc.offset)
			}
		}
		for t, ps := range want {
			for p, last := range ps {
				if o, ok := seen[t][p]; !ok || o < last {
					return false
				}
			}
		}
		return true
	}, topics...)
}

// awaitIdle waits until the relay has nothing left to send: its
// committed offsets reach the end of every delay-topic partition.
func (h *harness) awaitIdle(ctx context.Context) {
	h.t.Helper()
	var lag string
	waitFor(h.t, func() bool {
		ends, err := h.adm.ListEndOffsets(ctx, h.cfg.Topic)
		if err != nil {
			return false
		}
		committed, err := h.adm.FetchOffsets(ctx, h.cfg.Group)
		if err != nil {
			return false
		}
		lag = ""
		ends.Each(func(e kadm.ListedOffset) {
			if e.Offset == 0 {
				return
			}
			if c, ok := committed.Lookup(e.Topic, e.Partition); !ok || c.At < e.Offset {
				lag += " " + strconv.Itoa(int(e.Partition))
			}
		})
		return lag == ""
	})
}

// checkLateness fails when the p99 lateness of the first copies of keys is
// above bound.
func (h *harness) checkLateness(got map[string][]received, keys []string, bound time.Duration) {
	h.t.Helper()
	var late []time.Duration
	for _, k := range keys {
		h.mu.Lock()
		s := h.sent[k]
		h.mu.Unlock()
		if rs := got[k]; len(rs) > 0 {
			late = append(late, rs[0].ts.Sub(s.due))
		}
	}
	if len(late) == 0 {
		h.t.Fatal("lateness: no record arrived")
	}
	slices.Sort(late)
	p99 := late[min(len(late)-1, int(0.99*float64(len(late))))]
	if p99 > bound {
		h.t.Errorf("p99 lateness %s over %d records, above the %s a run without faults allows", p99, len(late), bound)
	}
}

// checkFIFO checks FIFO per level: in each target partition, the records
// of one delay-topic partition that are due at their level's own precision
// (delay = the level's duration) arrive in their delay-topic offset order.
// It returns the number of ordered pairs checked.
func (h *harness) checkFIFO(got map[string][]received) int {
	h.t.Helper()
	tab := h.cfg.Table()
	type tp struct {
		topic string
		part  int32
	}
	byTarget := map[tp][]received{}
	for k, rs := range got {
		h.mu.Lock()
		s, ok := h.sent[k]
		h.mu.Unlock()
		if !ok || s.delay != tab.Duration(tab.LevelOf(s.partition)) {
			continue
		}
		for _, rc := range rs {
			if rc.topic != h.cfg.DLQTopic {
				byTarget[tp{rc.topic, rc.partition}] = append(byTarget[tp{rc.topic, rc.partition}], rc)
			}
		}
	}
	pairs := 0
	for t, rs := range byTarget {
		slices.SortFunc(rs, func(a, b received) int { return int(a.offset - b.offset) })
		last := map[int32]received{} // delay-topic partition -> last record seen
		for _, rc := range rs {
			p, off := parseSource(h.t, rc.source)
			if prev, ok := last[p]; ok {
				_, poff := parseSource(h.t, prev.source)
				pairs++
				if poff >= off {
					h.t.Errorf("FIFO per level broken in %s/%d: %s (source offset %d) at offset %d after %s (source offset %d) at offset %d",
						t.topic, t.part, rc.key, off, rc.offset, prev.key, poff, prev.offset)
				}
			}
			last[p] = rc
		}
	}
	return pairs
}

func parseSource(t *testing.T, src string) (int32, int64) {
	t.Helper()
	f := strings.Split(src, "/")
	if len(f) != 3 {
		t.Fatalf("kdelay-source %q", src)
	}
	p, err1 := strconv.ParseInt(f[1], 10, 32)
	o, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("kdelay-source %q", src)
	}
	return int32(p), o
}

// committedNow reads the group's committed offsets of the delay topic.
func (h *harness) committedNow() map[int32]int64 {
	h.t.Helper()
	resp, err := h.adm.FetchOffsets(context.Background(), h.cfg.Group)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == h.cfg.Topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// checkDupsAbove checks the duplicate bound after a fault: a record may be
// sent twice only if it was at or above its partition's committed offset
// read right after the fault (what the next owner re-reads); everything
// below was done and must not come again. It returns the duplicates.
func (h *harness) checkDupsAbove(got map[string][]received, keys []string, committed map[int32]int64) int {
	h.t.Helper()
	dups := 0
	for _, k := range keys {
		rs := got[k]
		if len(rs) < 2 {
			continue
		}
		dups += len(rs) - 1
		p, off := parseSource(h.t, rs[0].source)
		if c, ok := committed[p]; ok && off < c {
			h.t.Errorf("record %s (%s) sent %d times, but offset %d was below the commit %d of partition %d at the fault",
				k, rs[0].source, len(rs), off, c, p)
		}
	}
	return dups
}

// commitWatch records, through a kgo hook on the relay's client, when each
// forwarded record's produce was acknowledged, and through a kfake control,
// when the broker received each offset commit. check then proves the
// commit invariant against the acks: every offset below a commit was
// acknowledged before the broker saw the commit.
type commitWatch struct {
	mu      sync.Mutex
	topic   string
	hold    time.Duration        // produce responses held back this long (OnBrokerRead)
	acked   map[string]time.Time // kdelay-source -> ack time
	commits []commitSeen
}

type commitSeen struct {
	at  time.Time
	off map[int32]int64
}

// OnProduceRecordUnbuffered implements kgo.HookProduceRecordUnbuffered: it
// runs just before the record's promise, once the broker acknowledged it.
func (cw *commitWatch) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil {
		return
	}
	for _, hd := range r.Headers {
		if hd.Key == levels.HeaderSource {
			cw.mu.Lock()
			if _, ok := cw.acked[string(hd.Value)]; !ok {
				cw.acked[string(hd.Value)] = time.Now()
			}
			cw.mu.Unlock()
		}
	}
}

// watchCommits installs the hooks on the harness's relays and the control
// on its cluster; call it before starting a relay. Produce responses to
// the relay are held back by hold (0: none) so that an ack lags its
// request, which makes a commit sent before the ack visible.
func watchCommits(h *harness, hold time.Duration) *commitWatch {
	cw := &commitWatch{topic: h.cfg.Topic, acked: map[string]time.Time{}, hold: hold}
	h.kafkaOpts = append(h.kafkaOpts, kgo.WithHooks(cw))
	h.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		cr := req.(*kmsg.OffsetCommitRequest)
		s := commitSeen{at: time.Now(), off: map[int32]int64{}}
		for _, t := range cr.Topics {
			if t.Topic != cw.topic && t.Topic != "" { // "": by topic ID (v10+); the relay commits only the delay topic
				continue
			}
			for _, p := range t.Partitions {
				s.off[p.Partition] = p.Offset
			}
		}
		cw.mu.Lock()
		cw.commits = append(cw.commits, s)
		cw.mu.Unlock()
		return nil, nil, false
	})
	return cw
}

// OnBrokerRead implements kgo.HookBrokerRead: with hold set, the relay's
// client takes each produce response that long after reading it, as from
// a slow broker, so that its acks lag their requests. It runs in the
// client, not as a kfake sleeping control, because those race inside
// kfake when many requests sleep on one connection.
func (cw *commitWatch) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if cw.hold > 0 && key == int16(kmsg.Produce) && err == nil {
		time.Sleep(cw.hold) // the slow broker itself: a duration, not a condition
	}
}

// check verifies every commit seen against the acks and returns the number
// of offsets checked. Only forwards carry kdelay-source: use it where every
// record is forwarded (no cascade, no dead letter).
func (cw *commitWatch) check(t *testing.T) int {
	t.Helper()
	// Every record has arrived, but records read ahead or in the wheel
	// hold the commit until they are forwarded: the commit past them comes
	// up to commitEvery later (more after injected commit failures).
	waitFor(t, func() bool {
		cw.mu.Lock()
		defer cw.mu.Unlock()
		for _, c := range cw.commits {
			for _, off := range c.off {
				if off > 0 {
					return true
				}
			}
		}
		return false
	})
	cw.mu.Lock()
	defer cw.mu.Unlock()
	checked := 0
	for _, c := range cw.commits {
		for p, off := range c.off {
			for o := int64(0); o < off; o++ {
				src := levels.Source(cw.topic, p, o)
				at, ok := cw.acked[src]
				if !ok || at.After(c.at) {
					t.Fatalf("commit %d of partition %d received at %s passes offset %d, acknowledged at %s (acked %v)",
						off, p, c.at.Format(time.TimeOnly+".000000"), o, at.Format(time.TimeOnly+".000000"), ok)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatalf("%d commits seen, no offset checked", len(cw.commits))
	}
	t.Logf("%d commits, %d committed offsets checked against produce acks", len(cw.commits), checked)
	return checked
}

// TestFIFOPerLevel: bursts of records at each level's own delay, written
// together (one timestamp per burst, so each burst falls due at once and
// travels in one batch), arrive in offset order per level partition. The
// first burst is written with a timestamp one level in the past, so it is
// read after its level time and forwarded directly; the others are read
// ahead into the wheel and fire from it.
func TestFIFOPerLevel(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	var keys []string
	tab := h.cfg.Table()
	for burst := range 3 {
		ts := time.Now()
		var recs []*kgo.Record
		for level := 1; level <= 2; level++ {
			if burst == 0 {
				ts = time.Now().Add(-tab.Duration(level)) // due when read: the direct path
			}
			for i := range 40 {
				k := "f-" + strconv.Itoa(burst) + "-" + strconv.Itoa(level) + "-" + strconv.Itoa(i)
				r := &kgo.Record{Key: []byte(k), Value: []byte("v-" + k), Timestamp: ts}
				if err := tab.Stamp(r, h.cfg.Topic, levels.Delay{Target: "orders", Level: level}, ts); err != nil {
					t.Fatal(err)
				}
				recs = append(recs, r)
				keys = append(keys, k)
			}
		}
		if err := h.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			h.mu.Lock()
			s := sent{key: string(r.Key), partition: r.Partition}
			if sch, err := tab.Parse(r.Headers, r.Timestamp); err == nil {
				s.due, s.delay = sch.Due, sch.Delay
			}
			h.sent[s.key] = s
			h.mu.Unlock()
		}
	}
	got := h.collectAll(40*time.Second, keys, "orders")
	h.report(got, keys, 0)
	h.checkLateness(got, keys, noFaultP99)
	if pairs := h.checkFIFO(got); pairs < len(keys)/2 {
		t.Fatalf("FIFO: only %d ordered pairs checked for %d records", pairs, len(keys))
	} else {
		t.Logf("FIFO: %d ordered pairs checked", pairs)
	}
}
