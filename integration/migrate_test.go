package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMigrateETF1: an etf1/kafka-message-scheduler schedules topic
// (compacted, two partitions) with live, updated, deleted and overdue
// schedules is migrated by `kdelay migrate etf1` while a relay runs, then
// migrated again. Every live schedule arrives once at its scheduler-epoch
// (never early; the updated ones with their newest value and time), the
// overdue ones at once, the deleted ones never, and the second run writes
// nothing.
func TestMigrateETF1(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "etf1", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 3}})
	source := s.prefix + "-etf1"
	ctx := testContext(t, 2*time.Minute)
	if _, err := s.adm.CreateTopic(ctx, 2, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, source); err != nil {
		t.Fatalf("create %s: %v", source, err)
	}
	t.Cleanup(func() { _, _ = s.adm.DeleteTopics(testContext(t, 15*time.Second), source) })
	waitTopic(ctx, t, s.adm, source, 2)
	relay := s.startRelay("", time.Minute)

	target := s.target("orders")
	// etf1 records: key = schedule id, partition by hand (both partitions
	// used), headers as etf1's producers write them.
	var recs []*kgo.Record
	put := func(id string, p int32, value []byte, epoch int64, key string) {
		r := &kgo.Record{Topic: source, Partition: p, Key: []byte(id), Value: value}
		if value != nil {
			r.Headers = []kgo.RecordHeader{
				{Key: "scheduler-epoch", Value: []byte(strconv.FormatInt(epoch, 10))},
				{Key: "scheduler-target-topic", Value: []byte(target)},
				{Key: "scheduler-target-key", Value: []byte(key)},
				{Key: "trace-id", Value: []byte("t-" + id)},
			}
		}
		recs = append(recs, r)
	}
	base := time.Now().Add(6 * time.Second).Truncate(time.Second).Unix()
	want := make(map[string]int64) // target key -> due, epoch seconds
	for i := range 20 {
		id, key := fmt.Sprintf("live-%02d", i), fmt.Sprintf("k-live-%02d", i)
		put(id, int32(i%2), []byte("v-"+id), base+int64(i%5), key)
		want[key] = base + int64(i%5)
	}
	for i := range 5 {
		id, key := fmt.Sprintf("upd-%02d", i), fmt.Sprintf("k-upd-%02d", i)
		put(id, int32(i%2), []byte("old"), base, key)
		put(id, int32(i%2), []byte("v-"+id), base+3, key) // the newer record replaces it
		want[key] = base + 3
	}
	var deleted []string
	for i := range 5 {
		id, key := fmt.Sprintf("del-%02d", i), fmt.Sprintf("k-del-%02d", i)
		put(id, int32(i%2), []byte("v-"+id), base+1, key)
		put(id, int32(i%2), nil, 0, "") // tombstone
		deleted = append(deleted, key)
	}
	overdueAt := time.Now().Add(-time.Minute).Unix()
	for i := range 5 {
		id, key := fmt.Sprintf("late-%02d", i), fmt.Sprintf("k-late-%02d", i)
		put(id, int32(i%2), []byte("v-"+id), overdueAt, key)
		want[key] = overdueAt
	}
	if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce the etf1 schedules: %v", err)
	}

	dry := kdelayCLI(t, s.vars, nil, "migrate", "etf1", "--from", source, "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "copied       30") {
		t.Fatalf("dry run: exit %d\n%s\n%s", dry.code, dry.stdout, dry.stderr)
	}
	start := time.Now()
	res := kdelayCLI(t, s.vars, nil, "migrate", "etf1", "--from", source)
	t.Logf("migrate etf1 (%s):\n%s", time.Since(start).Round(time.Millisecond), res.stdout)
	for _, w := range []string{"45 records read, 35 schedule ids", "live         30 (5 overdue", "deleted      5", "copied       30", "skipped      0"} {
		if res.code != 0 || !strings.Contains(res.stdout, w) {
			t.Fatalf("migrate: exit %d, want %q in\n%s\n%s", res.code, w, res.stdout, res.stderr)
		}
	}
	again := kdelayCLI(t, s.vars, nil, "migrate", "etf1", "--from", source)
	if again.code != 0 || !strings.Contains(again.stdout, "copied       0") || !strings.Contains(again.stdout, "already      30") {
		t.Fatalf("second run: exit %d\n%s\n%s", again.code, again.stdout, again.stderr)
	}

	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	s.learn(keys)
	for _, k := range keys {
		sr := s.sent[k]
		if sr.due.UnixMilli() != want[k]*1000 {
			t.Errorf("%s: copy due %s, want scheduler-epoch %d", k, fmtTime(sr.due), want[k])
		}
		if want := "v-" + strings.TrimPrefix(k, "k-"); string(sr.value) != want {
			t.Errorf("%s: copy value %q, want %q (the latest record)", k, sr.value, want)
		}
	}
	s.await(keys, s.lastDue(keys).Add(30*time.Second), relay)
	var onTime, overdue []string
	for _, k := range keys {
		if strings.HasPrefix(k, "k-late-") {
			overdue = append(overdue, k)
		} else {
			onTime = append(onTime, k)
		}
	}
	checkP99(t, "etf1 migration: live and updated", s.check(t, "etf1 migration: live and updated", onTime, 0), noFaultP99)
	s.check(t, "etf1 migration: overdue", overdue, 0)
	for _, k := range overdue {
		// At once: forwarded within seconds of the migration, not at
		// some level time or wheel slot later.
		if a := s.obs.arrivals(k); len(a) > 0 && a[0].ts.Sub(start) > 5*time.Second {
			t.Errorf("overdue %s forwarded %s after the migration started, want at once", k, a[0].ts.Sub(start).Round(time.Millisecond))
		}
	}
	// A third run after the deliveries delivers nothing again.
	third := kdelayCLI(t, s.vars, nil, "migrate", "etf1", "--from", source)
	if third.code != 0 || !strings.Contains(third.stdout, "copied       0") {
		t.Fatalf("third run: exit %d\n%s\n%s", third.code, third.stdout, third.stderr)
	}
	s.waitSettled(30*time.Second, relay)
	for _, k := range keys {
		if n := len(s.obs.arrivals(k)); n != 1 {
			t.Errorf("%s arrived %d times, want once", k, n)
		}
	}
	s.neverArrived(deleted)
	relay.stop()
}
