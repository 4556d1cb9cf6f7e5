package etf1

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

type fixture struct {
	t    *testing.T
	opts Options
	cl   *kgo.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	kopts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(kopts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	tab, err := levels.Parse("1s 5s 10s 30s", 2)
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	for topic, n := range map[string]int32{"schedules": 2, "delay-topic": tab.Partitions(), "delay-topic.cancel": 1, "orders": 3} {
		if _, err := adm.CreateTopic(t.Context(), n, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{t: t, cl: cl, opts: Options{
		Source: "schedules", Topic: "delay-topic", CancelTopic: "delay-topic.cancel", Table: tab, KafkaOpts: kopts,
	}}
}

// put writes etf1 records to the schedules topic (partition as given).
func (f *fixture) put(rs ...*kgo.Record) {
	f.t.Helper()
	for _, r := range rs {
		r.Topic, r.Offset, r.Timestamp = "schedules", 0, time.Time{}
		if err := f.cl.ProduceSync(f.t.Context(), r).FirstErr(); err != nil {
			f.t.Fatal(err)
		}
	}
}

// all reads every record of topic.
func (f *fixture) all(topic string) []*kgo.Record {
	f.t.Helper()
	var out []*kgo.Record
	if _, _, err := readTopic(f.t.Context(), f.opts.KafkaOpts, kadm.NewClient(f.cl), topic, func(r *kgo.Record) { out = append(out, r) }); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) migrate(mod func(*Options)) Report {
	f.t.Helper()
	o := f.opts
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(f.t.Context(), 30*time.Second)
	defer cancel()
	rep, err := Migrate(ctx, o)
	if err != nil {
		f.t.Fatalf("migrate: %v (report %+v)", err, rep)
	}
	return rep
}

func header(r *kgo.Record, key string) string {
	v, _ := lastHeader(r.Headers, key)
	return v
}

func TestMigrate(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	future := now.Add(time.Hour).Unix()
	past := now.Add(-time.Hour).Unix()
	f.put(
		sched(0, 0, "live", "v1", itoa(future), "trace=abc"),
		sched(0, 0, "updated", "old", itoa(future)),
		sched(0, 0, "updated", "new", itoa(future+60)),
		sched(1, 0, "deleted", "x", itoa(future)),
		rec(1, 0, "deleted", nil),
		sched(1, 0, "overdue", "late", itoa(past)),
		sched(1, 0, "bad", "x", "soon"),
		rec(0, 0, "nowhere", []byte("x"), "scheduler-epoch="+itoa(future), "scheduler-target-topic=missing"),
	)

	// A dry run decides and writes nothing.
	var plan []Action
	rep := f.migrate(func(o *Options) { o.DryRun = true; o.Plan = func(a Action) { plan = append(plan, a) } })
	if rep.Live != 3 || rep.Deleted != 1 || rep.Overdue != 1 || rep.Copied != 3 || rep.Skipped[SkipBadEpoch] != 1 || rep.Skipped[SkipNoTargetTop] != 1 || rep.Read != 8 {
		t.Errorf("dry run report %+v", rep)
	}
	if len(plan) != 6 {
		t.Errorf("dry run planned %d schedules, want 6", len(plan))
	}
	if n := len(f.all("delay-topic")); n != 0 {
		t.Fatalf("dry run wrote %d records", n)
	}

	rep = f.migrate(nil)
	if rep.Copied != 3 || rep.Failed != 0 {
		t.Fatalf("report %+v", rep)
	}
	got := make(map[string]*kgo.Record)
	for _, r := range f.all("delay-topic") {
		got[header(r, levels.HeaderID)] = r
	}
	if len(got) != 3 {
		t.Fatalf("delay topic holds %d ids, want 3: %v", len(got), got)
	}
	for id, want := range map[string]struct {
		value string
		due   int64
	}{"live": {"v1", future}, "updated": {"new", future + 60}, "overdue": {"late", past}} {
		r := got[id]
		if r == nil {
			t.Errorf("%s not copied", id)
			continue
		}
		s, err := f.opts.Table.Parse(r.Headers, r.Timestamp)
		if err != nil || s.Target != "orders" || s.ID != id || s.Due.Unix() != want.due || string(r.Value) != want.value || string(r.Key) != "tk-"+id {
			t.Errorf("%s: record key %s value %s schedule %+v %v", id, r.Key, r.Value, s, err)
		}
		if header(r, levels.HeaderDeliverAt) != itoa(want.due*1000) {
			t.Errorf("%s: kdelay-deliver-at %s, want %d", id, header(r, levels.HeaderDeliverAt), want.due*1000)
		}
		if w := f.opts.Table.PartitionFor(f.opts.Table.LevelFor(s.Due.Sub(r.Timestamp)), r.Key); r.Partition != w {
			t.Errorf("%s in partition %d, want %d (as kdelay send)", id, r.Partition, w)
		}
		if header(r, HeaderSource) == "" {
			t.Errorf("%s: no %s", id, HeaderSource)
		}
		if _, ok := lastHeader(r.Headers, HeaderEpoch); ok {
			t.Errorf("%s keeps the etf1 headers: %v", id, r.Headers)
		}
	}
	if header(got["live"], "trace") != "abc" {
		t.Errorf("live lost its own header: %v", got["live"].Headers)
	}

	// A second run writes nothing.
	rep = f.migrate(nil)
	if rep.Already != 3 || rep.Copied != 0 || rep.Rescheduled != 0 || rep.Cancelled != 0 {
		t.Errorf("second run %+v", rep)
	}
	if n := len(f.all("delay-topic")); n != 3 {
		t.Errorf("second run: delay topic holds %d records, want 3", n)
	}

	// Changed in etf1 since: live rescheduled (cancel, then a new copy),
	// overdue deleted (cancel).
	f.put(sched(0, 0, "live", "v2", itoa(future+120)), rec(1, 0, "overdue", nil))
	rep = f.migrate(nil)
	if rep.Rescheduled != 1 || rep.Cancelled != 1 || rep.Already != 1 || rep.Copied != 0 {
		t.Errorf("third run %+v", rep)
	}
	cancels := make(map[string]*kgo.Record)
	for _, r := range f.all("delay-topic.cancel") {
		cancels[string(r.Key)] = r
	}
	if len(cancels) != 2 || cancels["live"] == nil || cancels["overdue"] == nil {
		t.Fatalf("cancels %v, want live and overdue", cancels)
	}
	recs := f.all("delay-topic")
	if len(recs) != 4 {
		t.Fatalf("delay topic holds %d records, want 4", len(recs))
	}
	newLive := recs[0]
	for _, r := range recs {
		if header(r, levels.HeaderID) == "live" && string(r.Value) == "v2" {
			newLive = r
		}
	}
	cut, _ := lastHeader(cancels["live"].Headers, levels.HeaderCancelBefore)
	if string(newLive.Value) != "v2" || newLive.Timestamp.UnixMilli() < atoi(t, cut) {
		t.Errorf("the new copy (value %s, ts %d) is caught by its cancel (cut-off %s)", newLive.Value, newLive.Timestamp.UnixMilli(), cut)
	}
	if old := got["live"]; old.Timestamp.UnixMilli() >= atoi(t, cut) {
		t.Errorf("the old copy (ts %d) escapes the cancel (cut-off %s)", old.Timestamp.UnixMilli(), cut)
	}
}

func TestMigrateErrors(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	o := f.opts
	o.Source = "nope"
	if _, err := Migrate(ctx, o); !errors.Is(err, ErrNoTopic) {
		t.Errorf("missing source: %v, want ErrNoTopic", err)
	}
	o = f.opts
	o.Table, _ = levels.Parse("1s 5s", 1)
	if _, err := Migrate(ctx, o); err == nil {
		t.Error("a level table that does not match the delay topic: no error")
	}
	o = f.opts
	o.Source = o.Topic
	if _, err := Migrate(ctx, o); err == nil {
		t.Error("the delay topic as the source: no error")
	}
	// Refused targets and delays beyond the maximum are set aside.
	f.put(sched(0, 0, "far", "v", itoa(time.Now().Add(48*time.Hour).Unix())))
	f.put(sched(0, 0, "near", "v", itoa(time.Now().Add(time.Hour).Unix())))
	rep := f.migrate(func(o *Options) { o.MaxDelay = 24 * time.Hour; o.DryRun = true })
	if rep.Skipped[SkipMaxDelay] != 1 || rep.Live != 1 {
		t.Errorf("max delay: %+v", rep)
	}
	rep = f.migrate(func(o *Options) {
		o.DryRun = true
		o.Allowed = func(string) (bool, string) { return false, "denied" }
	})
	if rep.Skipped[SkipRefused] != 2 || rep.Live != 0 {
		t.Errorf("refused: %+v", rep)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// A partition whose last offsets hold nothing readable (the log cleaner
// removed them) ends after the quiet time as a Gap instead of waiting for
// ever; the other partition is read to its end.
func TestReadRangeGap(t *testing.T) {
	f := newFixture(t)
	f.put(sched(0, 0, "a", "v", "2000000000"), sched(1, 0, "b", "v", "2000000000"), sched(1, 0, "c", "v", "2000000000"))
	var got []string
	start := time.Now()
	n, gaps, err := readRange(t.Context(), f.opts.KafkaOpts, kadm.NewClient(f.cl), "schedules",
		map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 3, 1: 2}, 500*time.Millisecond,
		func(r *kgo.Record) { got = append(got, string(r.Key)) })
	if err != nil || n != 3 || len(got) != 3 {
		t.Fatalf("read %d records %v, %v; want a, b, c", n, got, err)
	}
	if len(gaps) != 1 || gaps[0] != (Gap{Partition: 0, Next: 1, End: 3}) {
		t.Errorf("gaps %+v, want partition 0 from 1 to 3", gaps)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("took %s: ended before the quiet time", d)
	}
}
