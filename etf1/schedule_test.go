package etf1

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// rec is an etf1 schedule record: key, value (nil: tombstone) and headers
// as key=value pairs.
func rec(p int32, off int64, key string, value []byte, hs ...string) *kgo.Record {
	r := &kgo.Record{Topic: "schedules", Partition: p, Offset: off, Value: value, Timestamp: time.UnixMilli(1_000 + off)}
	if key != "" {
		r.Key = []byte(key)
	}
	for _, h := range hs {
		k, v, _ := strings.Cut(h, "=")
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

func sched(p int32, off int64, key, value string, epoch string, extra ...string) *kgo.Record {
	hs := append([]string{"scheduler-epoch=" + epoch, "scheduler-target-topic=orders", "scheduler-target-key=tk-" + key}, extra...)
	return rec(p, off, key, []byte(value), hs...)
}

func TestReduce(t *testing.T) {
	var rd Reducer
	for _, r := range []*kgo.Record{
		sched(0, 0, "a", "a1", "2000000000"),
		sched(0, 1, "b", "b1", "2000000000"),
		sched(0, 2, "a", "a2", "2000000100", "trace=t1"), // replaces a1
		rec(0, 3, "b", nil),                              // deletes b
		sched(0, 4, "c", "c1", "2000000000"),
		rec(0, 5, "c", nil),
		sched(0, 6, "c", "c2", "1000000000"), // c comes back after its tombstone
		sched(1, 0, "d", "d1", "2000000000"),
		rec(1, 1, "e", nil), // a tombstone alone
		rec(1, 2, "", []byte("x"), "scheduler-epoch=1"),
	} {
		rd.Add(r)
	}
	got := make(map[string]*Schedule)
	var nokey int
	for _, s := range rd.Schedules() {
		if s.ID == "" {
			nokey++
			if s.Skip != SkipNoKey {
				t.Errorf("record without a key: skip %q, want %q", s.Skip, SkipNoKey)
			}
			continue
		}
		got[s.ID] = s
	}
	if rd.Read() != 10 || nokey != 1 || len(got) != 5 {
		t.Fatalf("read %d, no key %d, ids %d; want 10, 1, 5", rd.Read(), nokey, len(got))
	}
	a := got["a"]
	if a.Deleted || string(a.Value) != "a2" || a.Due.Unix() != 2000000100 || a.Target != "orders" || string(a.Key) != "tk-a" ||
		a.Source != "schedules/0/2" || len(a.Headers) != 1 || a.Headers[0].Key != "trace" {
		t.Errorf("a = %+v, want the second record (value a2, due 2000000100, header trace only)", a)
	}
	for _, id := range []string{"b", "e"} {
		if !got[id].Deleted {
			t.Errorf("%s not deleted: %+v", id, got[id])
		}
	}
	if c := got["c"]; c.Deleted || string(c.Value) != "c2" || c.Due.Unix() != 1000000000 {
		t.Errorf("c = %+v, want c2 (a record after the tombstone lives)", c)
	}
	if d := got["d"]; d.Deleted || d.Skip != "" || d.Source != "schedules/1/0" {
		t.Errorf("d = %+v", d)
	}
}

// The same key in two partitions: the later timestamp wins.
func TestReduceAcrossPartitions(t *testing.T) {
	var rd Reducer
	late := sched(0, 0, "k", "late", "2000000000")
	late.Timestamp = time.UnixMilli(9_000)
	early := sched(1, 5, "k", "early", "2000000000")
	early.Timestamp = time.UnixMilli(8_000)
	rd.Add(late)
	rd.Add(early)
	ss := rd.Schedules()
	if len(ss) != 1 || string(ss[0].Value) != "late" {
		t.Fatalf("got %d schedules, first %+v; want the later one", len(ss), ss[0])
	}
}

func TestParseSkips(t *testing.T) {
	long := strings.Repeat("x", 256)
	for _, tc := range []struct {
		name string
		r    *kgo.Record
		want string
	}{
		{"valid", sched(0, 0, "k", "v", "2000000000"), ""},
		{"no epoch", rec(0, 0, "k", []byte("v"), "scheduler-target-topic=orders"), SkipBadEpoch},
		{"epoch not a number", sched(0, 0, "k", "v", "soon"), SkipBadEpoch},
		{"epoch in milliseconds past 9999", sched(0, 0, "k", "v", "2000000000000000"), SkipBadEpoch},
		{"epoch zero", sched(0, 0, "k", "v", "0"), SkipBadEpoch},
		{"no target", rec(0, 0, "k", []byte("v"), "scheduler-epoch=2000000000"), SkipNoTarget},
		{"bad target", rec(0, 0, "k", []byte("v"), "scheduler-epoch=2000000000", "scheduler-target-topic=a b"), SkipBadTarget},
		{"kdelay header", sched(0, 0, "k", "v", "2000000000", "kdelay-every=1s"), SkipKdelayHdr},
		{"key too long", sched(0, 0, long, "v", "2000000000"), SkipLongKey},
		{"first epoch header counts", sched(0, 0, "k", "v", "2000000000", "scheduler-epoch=bad"), ""},
		{"empty value is a schedule", sched(0, 0, "k", "", "2000000000"), ""},
	} {
		s := parse(tc.r)
		if s.Skip != tc.want {
			t.Errorf("%s: skip %q (%s), want %q", tc.name, s.Skip, s.Why, tc.want)
		}
	}
	if s := parse(sched(0, 0, "k", "v", "2000000000")); s.Deleted {
		t.Error("a record with a value is deleted")
	}
	if s := parse(rec(0, 0, "k", nil)); !s.Deleted || s.Skip != "" {
		t.Errorf("tombstone: %+v", s)
	}
	// Without scheduler-target-key the delivered record has no key.
	if s := parse(rec(0, 0, "k", []byte("v"), "scheduler-epoch=2000000000", "scheduler-target-topic=orders")); s.Key != nil {
		t.Errorf("key %q, want none", s.Key)
	}
}
