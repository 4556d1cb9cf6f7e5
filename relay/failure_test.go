package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/wheel"
)

// The tests of this file break something under a running relay (the
// failure table of docs/operations.md) and check, as a user would: bad records end in the
// dead-letter topic with their reason, every other record arrives, none
// early, none lost, and the relay keeps running or says why it stopped.

// produceOld produces a record whose timestamp is hours old, as records
// read after an outage or a long delay are.
func (h *harness) produceOld(key string, partition int32, age time.Duration, kv ...string) sent {
	h.t.Helper()
	r := &kgo.Record{Topic: h.cfg.Topic, Partition: partition, Key: []byte(key), Value: []byte("v-" + key), Timestamp: time.Now().Add(-age)}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return h.produce(r)
}

// TestOldUndeliverable: records hours old that cannot be
// delivered (missing target, refused target, missing target partition) are
// dead-lettered with their reason and their original timestamp, and do not
// stop anything: the records written after them arrive.
func TestOldUndeliverable(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, map[string]string{
		"KDELAY_TARGET_DENY":            "secret*",
		"KDELAY_TARGET_MISSING_TIMEOUT": "1s",
	}, "orders", "secret-stuff")
	rr := h.start(nil)
	old := 3 * time.Hour
	bad := map[string]string{
		"old-missing":       "target_missing",
		"old-denied":        "target_refused",
		"old-bad-partition": "bad_target_partition",
	}
	h.produceOld("old-missing", 0, old, levels.HeaderTarget, "nowhere", levels.HeaderDelay, "0")
	h.produceOld("old-denied", 0, old, levels.HeaderTarget, "secret-stuff", levels.HeaderDelay, "0")
	h.produceOld("old-bad-partition", 0, old, levels.HeaderTarget, "orders", levels.HeaderDelay, "0", levels.HeaderTargetPartition, "7")
	// An old record that is not yet due (absolute due time) waits for it.
	soon := time.Now().Add(1500 * time.Millisecond)
	h.produceOld("old-but-later", 0, old, levels.HeaderTarget, "orders", levels.HeaderDeliverAt, fmt.Sprint(soon.UnixMilli()))
	good := keysOf("after", 30)
	for i, k := range good {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(i%4) * time.Second})
	}
	want := append(slices.Clone(good), "old-but-later")
	got := h.collect(40*time.Second, allKeys(append(slices.Clone(want), keysOfMap(bad)...)...), "orders", h.cfg.DLQTopic)
	for k, reason := range bad {
		rs := got[k]
		if len(rs) != 1 || rs[0].topic != h.cfg.DLQTopic {
			t.Errorf("%s: got %+v, want one dead letter", k, rs)
			continue
		}
		if rs[0].headers[levels.HeaderError] == "" || rs[0].headers[levels.HeaderOriginalTimestamp] == "" {
			t.Errorf("%s: dead letter without reason or original timestamp: %v", k, rs[0].headers)
		}
		if age := time.Since(rs[0].ts); age > time.Minute {
			t.Errorf("%s: dead letter timestamped %s ago; want the time it was sent", k, age.Round(time.Second))
		}
		t.Logf("%-18s -> %s (%s)", k, rs[0].headers[levels.HeaderError], reason)
	}
	if n := testutil.ToFloat64(rr.r.m.deadLettered.WithLabelValues("1", "target_missing")); n != 1 {
		t.Errorf("target_missing dead letters = %v, want 1", n)
	}
	h.report(got, want, 0)
}

// TestIsolation: while records for a missing target are
// retried, every other record, on its level and on the others, keeps
// flowing on time; the missing-target records end as dead letters.
func TestIsolation(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, map[string]string{"KDELAY_TARGET_MISSING_TIMEOUT": "3s"}, "orders")
	h.start(nil).waitReady(t)
	var good, bad []string
	for i := range 12 {
		k := fmt.Sprintf("bad-%02d", i)
		bad = append(bad, k)
		h.sendRaw(k, 0, levels.HeaderTarget, "nowhere", levels.HeaderDelay, "0")
		for j := range 5 {
			g := fmt.Sprintf("good-%02d-%d", i, j)
			good = append(good, g)
			h.send(g, levels.Delay{Target: "orders", Delay: time.Duration(j) * 700 * time.Millisecond})
		}
		time.Sleep(300 * time.Millisecond) // the load's pace: a bad record every 300 ms
	}
	got := h.collect(60*time.Second, allKeys(append(slices.Clone(good), bad...)...), "orders", h.cfg.DLQTopic)
	for _, k := range bad {
		if rs := got[k]; len(rs) != 1 || rs[0].topic != h.cfg.DLQTopic {
			t.Errorf("%s: got %d records, want one dead letter", k, len(rs))
		}
	}
	h.report(got, good, 0)
	// Isolated, a good record is at most flightWait (250ms) late here.
	// Without it (mutant 14) a missing target held the batches behind its
	// attempts: up to 3s late before read-ahead, 1.3-2.5s since (records
	// fire from the wheel, one batch behind the slow one). 1.5s leaves
	// room for a loaded machine and still sees that.
	for _, k := range good {
		if rs := got[k]; len(rs) > 0 {
			if late := rs[0].ts.Sub(h.sent[k].due); late > 1500*time.Millisecond {
				t.Errorf("%s forwarded %s late while another record was retried", k, late.Round(time.Millisecond))
			}
		}
	}
}

// TestUnclassifiedError: an error kdelay does not know is retried for
// KDELAY_RETRY_TIMEOUT, then the record is dead-lettered with the error as
// its reason; records to other targets flow meanwhile.
func TestUnclassifiedError(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, map[string]string{"KDELAY_RETRY_TIMEOUT": "1s"}, "orders", "odd")
	h.start(nil).waitReady(t)
	isOdd := h.isTopic("odd")
	h.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if !slices.ContainsFunc(pr.Topics, func(tp kmsg.ProduceRequestTopic) bool { return isOdd(tp.Topic, tp.TopicID) }) {
			return nil, nil, false
		}
		// A request with odd in it fails whole: odd's batches with an
		// error neither retriable nor classified, the others' (a retry
		// of odd can share a request with them) with a retriable one,
		// as nothing of the request was written.
		return produceError(pr, func(tp kmsg.ProduceRequestTopic) int16 {
			if isOdd(tp.Topic, tp.TopicID) {
				return kerr.InvalidRequiredAcks.Code // not retriable, not classified
			}
			return kerr.NotLeaderForPartition.Code
		}), nil, true
	})
	h.send("odd-one", levels.Delay{Target: "odd", Delay: 0})
	good := keysOf("ok", 20)
	for _, k := range good {
		h.send(k, levels.Delay{Target: "orders", Delay: 200 * time.Millisecond})
	}
	got := h.collect(40*time.Second, allKeys(append(slices.Clone(good), "odd-one")...), "orders", "odd", h.cfg.DLQTopic)
	if rs := got["odd-one"]; len(rs) != 1 || rs[0].topic != h.cfg.DLQTopic || !strings.Contains(rs[0].headers[levels.HeaderError], kerr.InvalidRequiredAcks.Message) {
		t.Errorf("odd-one: got %+v, want one dead letter naming the error", rs)
	} else {
		t.Logf("odd-one -> %s", rs[0].headers[levels.HeaderError])
	}
	h.report(got, good, 0)
}

// isTopic returns a matcher of produce requests' topics, which name a
// topic or, from Produce v13 on, give its ID.
func (h *harness) isTopic(name string) func(string, [16]byte) bool {
	h.t.Helper()
	md, err := h.adm.Metadata(context.Background(), name)
	if err != nil {
		h.t.Fatal(err)
	}
	id := md.Topics[name].ID
	return func(topic string, topicID [16]byte) bool { return topic == name || (topic == "" && topicID == id) }
}

// faultyStore wraps the wheel and fails it on demand.
type faultyStore struct {
	Store
	addsLeft atomic.Int64 // Add fails with ENOSPC once this reaches 0 (if armed)
	armed    atomic.Bool
	hide     atomic.Int64 // entries Expire swallows, each counted as damaged
	corrupt  atomic.Int64
	opened   *atomic.Int64
}

var errNoSpace = &os.PathError{Op: "write", Path: "00000001.seg", Err: syscall.ENOSPC}

func (s *faultyStore) Add(now int64, e wheel.Entry) error {
	if s.armed.Load() && s.addsLeft.Add(-1) < 0 {
		return errNoSpace
	}
	return s.Store.Add(now, e)
}

func (s *faultyStore) ExpireView(now int64, max int, fn func(wheel.Entry)) (int, error) {
	return s.Store.ExpireView(now, max, func(e wheel.Entry) {
		if s.hide.Load() > 0 {
			s.hide.Add(-1)
			s.corrupt.Add(1)
			return // as behind a bad checksum: never handed out
		}
		fn(e)
	})
}

func (s *faultyStore) Corrupt() int64 { return s.Store.Corrupt() + s.corrupt.Load() }

// wrappedWheel opens real wheels, each handed to wrap, which returns the
// Store the relay uses (a test's wrapper around it).
func wrappedWheel(wrap func(Store) Store) func(*Options) {
	return func(o *Options) {
		o.OpenWheel = func(dir string, opt wheel.Options, now int64) (Store, wheel.Report, error) {
			w, rep, err := wheel.Open(dir, opt, now)
			if err != nil {
				return nil, rep, err
			}
			return wrap(WheelStore(w)), rep, nil
		}
	}
}

// faultyWheels opens real wheels wrapped in faultyStore; first is the
// first one opened, later ones are healthy.
func faultyWheels(first func(*faultyStore)) (func(*Options), *atomic.Int64) {
	var opened atomic.Int64
	return wrappedWheel(func(w Store) Store {
		s := &faultyStore{Store: w, opened: &opened}
		if opened.Add(1) == 1 {
			first(s)
		}
		return s
	}), &opened
}

// TestWheelFull (injected): the wheel's disk fills up while
// records wait in it; the relay discards the wheel, re-reads its partitions
// from their commits, cascades waits through Kafka until a new wheel opens,
// and delivers everything, none early.
func TestWheelFull(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	opt, opened := faultyWheels(func(s *faultyStore) { s.addsLeft.Store(40); s.armed.Store(true) })
	rr := h.start(nil, opt)
	keys := keysOf("wf", 150)
	for i, k := range keys {
		// 1.3 s .. 3.8 s: level 1 or 2, then the wheel (horizon 4s).
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(1300+i*17) * time.Millisecond})
	}
	got := h.collect(60*time.Second, allKeys(keys...), "orders")
	h.report(got, keys, len(keys)) // a reset re-reads from the commit: duplicates allowed
	if n := testutil.ToFloat64(rr.r.m.wheelResets); n < 1 {
		t.Errorf("wheel resets = %v, want >= 1", n)
	}
	t.Logf("wheels opened: %d, resets: %v", opened.Load(), testutil.ToFloat64(rr.r.m.wheelResets))
}

// TestWheelDamaged: an entry behind a damaged record is never
// handed out; the relay sees the wheel's damage count grow, discards the
// wheel and re-reads the partition, so the record still arrives.
func TestWheelDamaged(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	opt, _ := faultyWheels(func(s *faultyStore) { s.hide.Store(3) })
	rr := h.start(nil, opt)
	keys := keysOf("wd", 40)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(1200+i*20) * time.Millisecond})
	}
	got := h.collect(60*time.Second, allKeys(keys...), "orders")
	h.report(got, keys, len(keys))
	if n := testutil.ToFloat64(rr.r.m.wheelResets); n < 1 {
		t.Errorf("wheel resets = %v, want >= 1", n)
	}
}

// TestDiskFull (real disk): the data directory is a 4 MiB
// tmpfs and 8 MB of records wait in the wheel. Nothing lost, nothing
// early, delivery goes on. Needs root (mount).
func TestDiskFull(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	dir := mountTmpfs(t, "4m")
	h := newHarness(t, nil, "orders")
	h.cfg.DataDir = dir
	var full atomic.Bool // a wheel write failed with ENOSPC
	rr := h.start(nil, wrappedWheel(func(w Store) Store { return &noSpaceWatch{Store: w, seen: &full} }))
	keys := keysOf("df", 128)
	value := strings.Repeat("x", 64<<10)
	for i, k := range keys {
		r := &kgo.Record{Key: []byte(k), Value: []byte(value)}
		if err := h.cfg.Table().Stamp(r, h.cfg.Topic, levels.Delay{Target: "orders", Delay: time.Duration(1200+i*20) * time.Millisecond}, time.Now()); err != nil {
			t.Fatal(err)
		}
		h.produce(r)
	}
	got := h.collect(90*time.Second, allKeys(keys...), "orders")
	h.report(got, keys, len(keys))
	resets := testutil.ToFloat64(rr.r.m.wheelResets)
	if !full.Load() || resets < 1 {
		t.Errorf("the disk never filled (a wheel write failed with ENOSPC: %v, wheel resets: %v): the test checked nothing", full.Load(), resets)
	}
	t.Logf("wheel resets: %v", resets)
}

// noSpaceWatch is a wheel Store that notes when a write fails with ENOSPC.
type noSpaceWatch struct {
	Store
	seen *atomic.Bool
}

func (s *noSpaceWatch) note(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		s.seen.Store(true)
	}
	return err
}

func (s *noSpaceWatch) Add(now int64, e wheel.Entry) error { return s.note(s.Store.Add(now, e)) }
func (s *noSpaceWatch) Done(p int32, off int64) error      { return s.note(s.Store.Done(p, off)) }
func (s *noSpaceWatch) Flush() error                       { return s.note(s.Store.Flush()) }
func (s *noSpaceWatch) Sync() error                        { return s.note(s.Store.Sync()) }

// mountTmpfs mounts a tmpfs of size under a temporary directory, unmounted
// at cleanup. It skips where the test cannot mount (not root, no tmpfs);
// under CI=true (where CI runs as root) that is a failure.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("cannot mount a %s tmpfs (needs root): %v: %s", size, err, strings.TrimSpace(string(out)))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	return filepath.Join(dir, "data")
}

// TestTopicRecreated: the delay topic is deleted and created
// again under a running relay. The relay stops with ErrTopicRecreated; the
// next one, on the same data directory, discards the old wheel and its
// watermarks and delivers every record of the new topic.
func TestTopicRecreated(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	first := keysOf("before", 120)
	for _, k := range first {
		h.send(k, levels.Delay{Target: "orders", Delay: 100 * time.Millisecond})
	}
	h.collect(30*time.Second, allKeys(first...), "orders")

	ctx := context.Background()
	if _, err := h.adm.DeleteTopics(ctx, h.cfg.Topic); err != nil {
		t.Fatal(err)
	}
	// Kafka removes a deleted topic's committed offsets; kfake keeps them.
	if _, err := h.adm.DeleteOffsets(ctx, h.cfg.Group, kadm.TopicsSet{h.cfg.Topic: partitionSet(h.cfg.Table().Partitions())}); err != nil {
		t.Logf("delete offsets: %v", err)
	}
	if _, err := h.adm.CreateTopic(ctx, h.cfg.Table().Partitions(), 1, nil, h.cfg.Topic); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-rr.done:
		close(rr.done)
		if !errors.Is(err, ErrTopicRecreated) {
			t.Fatalf("Run = %v, want ErrTopicRecreated", err)
		}
	case <-time.After(3 * topicCheckEvery):
		t.Fatal("relay did not notice the recreated topic")
	}
	// A new producer: the harness's one knows the old topic's ID.
	prod, err := kgo.NewClient(kgo.SeedBrokers(h.c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	h.prod = prod
	second := keysOf("after", 200)
	for _, k := range second {
		h.send(k, levels.Delay{Target: "orders", Delay: 100 * time.Millisecond})
	}
	h.start(nil)
	got := h.collect(40*time.Second, allKeys(second...), "orders")
	h.report(got, second, 0)
}

func partitionSet(n int32) map[int32]struct{} {
	ps := make(map[int32]struct{}, n)
	for i := range n {
		ps[i] = struct{}{}
	}
	return ps
}

// TestLevelTableChanged: records written under one level
// table are pending; a relay with another table refuses to start (found in
// the data directory, and after the data directory is lost, in the
// group's commit metadata), unless KDELAY_ALLOW_LEVEL_CHANGE. Back on the
// old table, every record arrives at its time, none early.
func TestLevelTableChanged(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	var keys []string
	for i := range 20 {
		k := fmt.Sprintf("l4-%02d", i)
		keys = append(keys, k)
		h.sendRaw(k, 3, levels.HeaderTarget, "orders", levels.HeaderLevel, "4") // 8 s
	}
	// Level 2 records, some delivered (committed, with the table in the
	// commit metadata), one held in the wheel so the partition is pending.
	for i := range 5 {
		k := fmt.Sprintf("l2-%02d", i)
		keys = append(keys, k)
		h.sendRaw(k, 1, levels.HeaderTarget, "orders", levels.HeaderDelay, "2s")
	}
	keys = append(keys, "l2-late")
	h.sendRaw("l2-late", 1, levels.HeaderTarget, "orders", levels.HeaderDelay, "5s")
	h.collect(20*time.Second, allKeys("l2-00", "l2-01", "l2-02", "l2-03", "l2-04"), "orders")
	rr.stop(t)

	changed := func(c *config.Config) {
		cfg, err := config.Load(map[string]string{
			"KDELAY_BROKERS": strings.Join(h.c.ListenAddrs(), ","), "KDELAY_TOPIC": c.Topic,
			"KDELAY_LEVELS": "1s 2s 2500ms 3s", "KDELAY_DATA_DIR": c.DataDir, "KDELAY_HTTP_ADDR": "off",
		})
		if err != nil {
			t.Fatal(err)
		}
		*c = cfg
	}
	newWith := func(mod func(*config.Config)) error {
		cfg := h.cfg
		mod(&cfg)
		r, err := New(Options{Config: cfg})
		if err == nil {
			r.Close()
		}
		return err
	}
	var lce *LevelChangeError
	if err := newWith(changed); !errors.As(err, &lce) || lce.Partition != -1 {
		t.Fatalf("New with another table and the same data directory = %v, want a LevelChangeError from the data directory", err)
	} else {
		t.Logf("refused: %v", err)
	}
	if err := newWith(func(c *config.Config) { changed(c); c.DataDir = t.TempDir() }); !errors.As(err, &lce) || lce.Partition != 1 {
		t.Fatalf("New with another table and a lost data directory = %v, want a LevelChangeError from partition 1's commit", err)
	} else {
		t.Logf("refused: %v", err)
	}
	// The override accepts the new table (and records it: on a copy here).
	if err := newWith(func(c *config.Config) { changed(c); c.AllowLevelChange = true; c.DataDir = t.TempDir() }); err != nil {
		t.Fatalf("New with KDELAY_ALLOW_LEVEL_CHANGE: %v", err)
	}
	h.start(nil)
	got := h.collect(40*time.Second, allKeys(keys...), "orders")
	h.report(got, keys, 0)
}

// TestAbortedTransaction: a record written in an aborted
// transaction is never delivered; committed ones are.
func TestAbortedTransaction(t *testing.T) {
	h := newHarness(t, nil, "orders")
	h.start(nil)
	tx, err := kgo.NewClient(kgo.SeedBrokers(h.c.ListenAddrs()...), kgo.TransactionalID("tx-producer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	ctx := context.Background()
	inTxn := func(key string, commit bool) {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: h.cfg.Topic, Partition: 0, Key: []byte(key), Value: []byte("v-" + key),
			Headers: []kgo.RecordHeader{{Key: levels.HeaderTarget, Value: []byte("orders")}, {Key: levels.HeaderDelay, Value: []byte("0")}}}
		if err := tx.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
		if commit {
			h.mu.Lock()
			h.sent[key] = sent{key: key, due: r.Timestamp}
			h.mu.Unlock()
		}
	}
	inTxn("aborted", false)
	inTxn("committed", true)
	// FIFO on one partition: had the aborted record been read, it would
	// arrive before the committed one, which is collected last.
	got := h.collect(30*time.Second, allKeys("committed"), "orders")
	if rs := got["aborted"]; len(rs) != 0 {
		t.Errorf("a record of an aborted transaction was delivered %d time(s)", len(rs))
	}
	h.report(got, []string{"committed"}, 0)
}

// TestShutdownWithHeldCascade: a cascade (a record with a
// chosen partition) whose produce hangs does not stretch the shutdown past
// KDELAY_SHUTDOWN_TIMEOUT, and the wheel is closed.
func TestShutdownWithHeldCascade(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, map[string]string{"KDELAY_SHUTDOWN_TIMEOUT": "1s"}, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	// Due in 60 s, beyond the 4 s horizon: cascades at its 1 s level time.
	at := time.Now().Add(time.Minute)
	h.sendRaw("far", 0, levels.HeaderTarget, "orders", levels.HeaderDeliverAt, fmt.Sprint(at.UnixMilli()))
	// From here on only the relay produces to the delay topic: hold it.
	isDelay := h.isTopic(h.cfg.Topic)
	var once sync.Once
	held, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	h.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) == 1 && isDelay(pr.Topics[0].Topic, pr.Topics[0].TopicID) {
			once.Do(func() { close(held) })
			h.c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no cascade produced")
	}
	begin := time.Now()
	rr.cancel()
	select {
	case err := <-rr.done:
		close(rr.done)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("shutdown did not keep KDELAY_SHUTDOWN_TIMEOUT (1s) with a cascade held")
	}
	t.Logf("stopped %s after the signal", time.Since(begin).Round(time.Millisecond))
	if err := rr.r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// failProduces makes the cluster answer produce requests to topic with
// code while fail is set. A request that also carries other topics gets
// NOT_LEADER for those (franz-go sends them again), so that records of
// topic never slip through in a shared request.
func (h *harness) failProduces(topic string, code int16, fail *atomic.Bool) {
	is := h.isTopic(topic)
	h.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if !fail.Load() || !slices.ContainsFunc(pr.Topics, func(tp kmsg.ProduceRequestTopic) bool { return is(tp.Topic, tp.TopicID) }) {
			return nil, nil, false
		}
		return produceError(pr, func(tp kmsg.ProduceRequestTopic) int16 {
			if is(tp.Topic, tp.TopicID) {
				return code
			}
			return kerr.NotLeaderForPartition.Code
		}), nil, true
	})
}

// produceError answers a whole produce request with an error for every
// partition: codeOf's for each topic's. A broker that fails a request
// writes none of it, so the other topics of a request that fails one
// get a retriable code (NOT_LEADER_FOR_PARTITION).
func produceError(pr *kmsg.ProduceRequest, codeOf func(kmsg.ProduceRequestTopic) int16) *kmsg.ProduceResponse {
	resp := pr.ResponseKind().(*kmsg.ProduceResponse)
	for _, tp := range pr.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
		code := codeOf(tp)
		for _, p := range tp.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// notLeader is produceError's code for a request failed whole with a
// retriable error.
func notLeader(kmsg.ProduceRequestTopic) int16 { return kerr.NotLeaderForPartition.Code }

// TestStalledLiveness: a relay with due work that delivers nothing for
// KDELAY_STALL_TIMEOUT fails its liveness check (so Kubernetes restarts
// it) and says why; once the cluster recovers it delivers and is live.
func TestStalledLiveness(t *testing.T) {
	h := newHarness(t, nil, "orders")
	rr := h.start(func(c *config.Config) { c.StallTimeout = time.Second })
	rr.waitReady(t)
	var fail atomic.Bool
	fail.Store(true)
	h.failProduces("orders", kerr.NotEnoughReplicas.Code, &fail) // retriable: retried without bound
	h.send("stuck", levels.Delay{Target: "orders", Delay: 0})
	waitFor(t, func() bool { return errors.Is(rr.r.Live(), ErrStalled) })
	if rr.r.Ready() || rr.r.Why() != stallNoProgress {
		t.Errorf("stalled relay: Ready %v, Why %q; want false, %q", rr.r.Ready(), rr.r.Why(), stallNoProgress)
	}
	if v := testutil.ToFloat64(rr.r.m.stalled.WithLabelValues(stallNoProgress)); v != 1 {
		t.Errorf("kdelay_stalled{reason=no_progress} = %v, want 1", v)
	}
	t.Logf("live: %v", rr.r.Live())
	fail.Store(false)
	got := h.collect(40*time.Second, allKeys("stuck"), "orders")
	h.report(got, []string{"stuck"}, 0)
	waitFor(t, func() bool { return rr.r.Live() == nil })
}

// TestDeadLetterTopicFailing: the dead-letter topic refuses records. The
// dead letter waits (nothing is dropped) and says so, its partition's
// commit waits, every other partition flows; once the topic takes records
// again the dead letter arrives.
func TestDeadLetterTopicFailing(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	var fail atomic.Bool
	fail.Store(true)
	h.failProduces(h.cfg.DLQTopic, kerr.InvalidRequiredAcks.Code, &fail)
	h.sendRaw("bad", 0, levels.HeaderDelay, "0") // no target: a dead letter
	waitFor(t, func() bool { return rr.r.Why() == stallDeadLetter })
	good := keysOf("flows", 20)
	for _, k := range good {
		h.send(k, levels.Delay{Target: "orders", Delay: 1500 * time.Millisecond}) // level 2: another partition
	}
	got := h.collect(30*time.Second, allKeys(good...), "orders")
	h.report(got, good, 0)
	if v := testutil.ToFloat64(rr.r.m.stalled.WithLabelValues(stallDeadLetter)); v != 1 {
		t.Errorf("kdelay_stalled{reason=dead_letter_failing} = %v, want 1", v)
	}
	// The dead letter is partition 0's first record: its commit waits.
	offs, err := h.adm.FetchOffsets(context.Background(), h.cfg.Group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(h.cfg.Topic, 0); ok && o.At > 0 {
		t.Errorf("partition 0 committed at %d past its undelivered dead letter (offset 0)", o.At)
	}
	fail.Store(false)
	got = h.collect(30*time.Second, allKeys("bad"), h.cfg.DLQTopic)
	if len(got["bad"]) != 1 {
		t.Errorf("dead letter arrived %d times, want 1", len(got["bad"]))
	}
	waitFor(t, func() bool { return rr.r.Ready() })
}
