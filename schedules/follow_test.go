package schedules

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
)

// cluster is a kfake cluster with the delay topic of table(t) and its
// cancel topic, and a client producing to it.
func cluster(t *testing.T) (*kgo.Client, *kadm.Client, Options) {
	t.Helper()
	tab := table(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(tab.Partitions(), "delays"), kfake.SeedTopics(1, "delays.cancel"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl), Options{
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Topic: "delays", Group: "kdelay", CancelTopic: "delays.cancel",
		Table: tab, Retain: 24 * time.Hour, CommitEvery: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler),
	}
}

func produce(t *testing.T, cl *kgo.Client, rs ...*kgo.Record) {
	t.Helper()
	for _, r := range rs {
		r.Offset = 0
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// commit commits partition p of the group at off with a done set, as a
// relay writes its metadata.
func commit(t *testing.T, adm *kadm.Client, p int32, off int64, done *offsetmap.Set) {
	t.Helper()
	md := "kdelay/1 levels=1s 10s 1m 1h / 1"
	if done != nil {
		enc, err := offsetmap.Encode(*done, 4000)
		if err != nil {
			t.Fatal(err)
		}
		md += ";done=" + enc
	}
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "delays", Partition: p, At: off, LeaderEpoch: -1, Metadata: md})
	resp, err := adm.CommitOffsets(context.Background(), "kdelay", os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestBuild(t *testing.T) {
	cl, adm, o := cluster(t)
	now := time.Now()
	ts := now.Add(-2 * time.Minute) // level times of levels 1-3 have passed
	due := now.Add(time.Hour + 30*time.Minute)
	// Partition 3 (1h): delivered (below the commit), done above it, pending.
	produce(t, cl,
		rec(3, 0, ts, "delivered", "kdelay-target", "out", "kdelay-level", "4", "kdelay-id", "a"),
		rec(3, 0, ts, "forwarded", "kdelay-target", "out", "kdelay-level", "4", "kdelay-id", "b"),
		rec(3, 0, ts, "held", "kdelay-target", "out", "kdelay-level", "4", "kdelay-id", "c"),
		rec(3, 0, ts, "cancelled", "kdelay-target", "out", "kdelay-level", "4", "kdelay-id", "d"),
	)
	// Partition 2 (1m): a record cascaded to partition 3 (its copy) and
	// its original still above the commit.
	orig := rec(2, 0, ts, "cascaded", "kdelay-target", "out", "kdelay-deliver-at", ms(due), "kdelay-id", "e")
	produce(t, cl, orig)
	produce(t, cl, &kgo.Record{Topic: "delays", Partition: 3, Timestamp: now, Key: orig.Key, Value: orig.Value,
		Headers: levels.CascadeHeadersAt(orig.Headers, due, ts)})
	// Partition 1 (10s): in the wheel.
	produce(t, cl, rec(1, 0, ts, "wheel", "kdelay-target", "out", "kdelay-deliver-at", ms(now.Add(10*time.Minute)), "kdelay-id", "f"))
	commit(t, adm, 3, 1, &offsetmap.Set{Base: 1, End: 3, Open: []int64{2}})
	rd, err := levels.Cancel("delays.cancel", "d", time.Time{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rd.Partition = 0
	produce(t, cl, rd)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := x.Query(Filter{States: AllStates}, time.Now())
	got := states(all)
	want := map[string]string{
		"forwarded": "done/level", "held": "waiting/level", "cancelled": "cancelled/level",
		"cascaded": "waiting/cascaded", "wheel": "wheel/level",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if g := x.Get("e", time.Now()); len(g) != 1 || !g[0].OriginalTimestamp.Equal(ts.Truncate(time.Millisecond)) || g[0].Partition != 3 {
		t.Errorf("cascaded schedule: %+v", g)
	}
	// Only one id: its original and its copy are held, nothing else.
	o.ID = "e"
	x, err = Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if g := x.Get("e", time.Now()); x.Len() != 2 || len(g) != 1 || g[0].Location != LocationCascaded {
		t.Errorf("Build of id e: %d records held, %+v", x.Len(), g)
	}
}

func TestBuildNoTopic(t *testing.T) {
	_, _, o := cluster(t)
	o.Topic = "nope"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := Build(ctx, o); !errors.Is(err, ErrNoTopic) {
		t.Errorf("Build of a missing topic: %v, want ErrNoTopic", err)
	}
}

// TestFollow: the follower's index reflects a commit and a cancel made
// after its start.
func TestFollow(t *testing.T) {
	cl, adm, o := cluster(t)
	ts := time.Now()
	produce(t, cl,
		rec(3, 0, ts, "a", "kdelay-target", "out", "kdelay-level", "4", "kdelay-id", "a"),
		rec(3, 0, ts, "b", "kdelay-target", "out", "kdelay-level", "4", "kdelay-id", "b"),
	)
	f, err := NewFollower(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; f.Close() })
	select {
	case <-f.Ready():
	case err := <-done:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("not ready")
	}
	if err := f.Health(); err != nil {
		t.Fatal(err)
	}
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen within 10s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	produce(t, cl, rec(3, 0, ts, "c", "kdelay-target", "out", "kdelay-level", "4", "kdelay-id", "c"))
	wait("a record produced later", func() bool { return len(f.Index().Get("c", time.Now())) == 1 })
	commit(t, adm, 3, 1, nil)
	wait("a commit", func() bool { return len(f.Index().Get("a", time.Now())) == 0 })
	rd, _ := levels.Cancel("delays.cancel", "b", time.Time{}, time.Now())
	rd.Partition = 0
	produce(t, cl, rd)
	wait("a cancel", func() bool {
		g := f.Index().Get("b", time.Now())
		return len(g) == 1 && g[0].State == StateCancelled
	})
	if ps := f.Partitions(); len(ps) != 4 || ps[3].Committed != 1 || ps[3].End != 3 || ps[3].Lag != 2 {
		t.Errorf("partitions %+v", ps)
	}
}
