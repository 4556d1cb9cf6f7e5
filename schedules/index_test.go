package schedules

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/cancel"
	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
)

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// table: levels 1s 10s 1m 1h, one partition each (wheel horizon 59m).
func table(t *testing.T) *levels.Table {
	t.Helper()
	tab, err := levels.Parse("1s 10s 1m 1h", 1)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// rec is a delay-topic record at partition p, offset off, timestamp ts,
// with headers given as key, value pairs.
func rec(p int32, off int64, ts time.Time, key string, hs ...string) *kgo.Record {
	r := &kgo.Record{Topic: "delays", Partition: p, Offset: off, Timestamp: ts, Key: []byte(key), Value: []byte("v-" + key)}
	for i := 0; i+1 < len(hs); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: hs[i], Value: []byte(hs[i+1])})
	}
	return r
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func states(ss []Schedule) map[string]string {
	m := make(map[string]string)
	for _, s := range ss {
		m[s.Key] = s.State + "/" + s.Location
	}
	return m
}

func TestStates(t *testing.T) {
	tab := table(t)
	cs := cancel.NewSet(24 * time.Hour)
	x := NewIndex(tab, 0, cs)
	now := t0.Add(30 * time.Second)
	// Partition 3 (level 4, 1h): written at t0.
	x.Add(rec(3, 10, t0, "waiting", "kdelay-target", "out", "kdelay-level", "4"))                                     // level time t0+1h not passed
	x.Add(rec(3, 11, t0, "done", "kdelay-target", "out", "kdelay-level", "4"))                                        // in the done set
	x.Add(rec(3, 12, t0, "invalid", "kdelay-target", "out"))                                                          // no schedule
	x.Add(rec(3, 13, t0, "cancelled", "kdelay-target", "out", "kdelay-level", "4", "kdelay-id", "c1"))                // cancelled
	x.Add(rec(3, 14, t0.Add(time.Minute), "late-id", "kdelay-target", "out", "kdelay-level", "4", "kdelay-id", "c1")) // same id, after the cut-off
	x.Add(rec(3, 5, t0, "below", "kdelay-target", "out", "kdelay-level", "4"))                                        // re-read: ignored
	// Partition 1 (level 2, 10s): level time passed, due within the horizon: wheel.
	x.Add(rec(1, 0, t0, "wheel", "kdelay-target", "out", "kdelay-deliver-at", ms(t0.Add(20*time.Minute))))
	x.Add(rec(1, 1, t0, "overdue", "kdelay-target", "out", "kdelay-delay", "10s"))
	x.Add(rec(1, 2, t0, "far", "kdelay-target", "out", "kdelay-deliver-at", ms(t0.Add(3*time.Hour)))) // beyond the horizon: cascades next
	cs.Put([]byte("c1"), t0.Add(time.Second).UnixMilli(), now)
	if back := x.Commit(3, 10, offsetmap.Set{Base: 10, End: 12, Open: []int64{10}}); back {
		t.Fatal("first commit reported as going back")
	}
	all, _ := x.Query(Filter{States: AllStates}, now)
	got := states(all)
	want := map[string]string{
		"waiting": "waiting/level", "done": "done/level", "invalid": "invalid/level", "cancelled": "cancelled/level",
		"late-id": "waiting/level", "wheel": "wheel/level", "overdue": "due/level", "far": "waiting/level",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: state %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	pending, next := x.Query(Filter{}, now)
	var keys []string
	for _, s := range pending {
		keys = append(keys, s.Key)
	}
	if want := []string{"overdue", "wheel", "waiting", "late-id", "far"}; !slices.Equal(keys, want) || next != "" {
		t.Errorf("pending by due time: %v (next %q), want %v", keys, next, want)
	}
	g := x.Get("c1", now)
	if len(g) != 2 || g[0].State != StateCancelled || g[0].CancelCutoff == nil || !g[0].CancelCutoff.Equal(t0.Add(time.Second)) || g[1].State != StateWaiting {
		t.Errorf("Get(c1) = %+v", g)
	}
	// The commit moves past 11 and 12: they leave the index.
	x.Commit(3, 13, offsetmap.Set{})
	if n := x.Len(); n != 5 {
		t.Errorf("after the commit: %d records held, want 5", n)
	}
	x.Commit(3, 14, offsetmap.Set{})
	if g := x.Get("c1", now); len(g) != 1 || g[0].Key != "late-id" {
		t.Errorf("after the first record of id c1 left: %+v", g)
	}
	if !x.Commit(3, 12, offsetmap.Set{}) {
		t.Error("a commit going back is not reported")
	}
}

func TestCascadedCopyIsOneSchedule(t *testing.T) {
	tab := table(t)
	x := NewIndex(tab, 0, cancel.NewSet(time.Hour))
	due := t0.Add(3 * time.Hour)
	orig := rec(3, 0, t0, "k", "kdelay-target", "out", "kdelay-delay", "3h", "kdelay-id", "s1")
	x.Add(orig)
	now := t0.Add(time.Hour + time.Second)
	if g := x.Get("s1", now); len(g) != 1 || g[0].Location != LocationLevel || g[0].State != StateWaiting {
		t.Fatalf("before the cascade: %+v", g)
	}
	// The relay cascades it (the copy is written before its commit).
	cp := &kgo.Record{Topic: "delays", Partition: 3, Offset: 1, Timestamp: now, Key: orig.Key, Value: orig.Value,
		Headers: levels.CascadeHeadersAt(orig.Headers, due, orig.Timestamp)}
	x.Add(cp)
	g := x.Get("s1", now)
	if len(g) != 1 || g[0].Location != LocationCascaded || g[0].Offset != 1 || !g[0].OriginalTimestamp.Equal(t0) || !g[0].DueAt.Equal(due) {
		t.Fatalf("after the cascade: %+v, want one cascaded schedule with the original timestamp", g)
	}
	if p, _ := x.Query(Filter{}, now); len(p) != 1 {
		t.Errorf("pending: %d schedules, want 1", len(p))
	}
	// A second cascade of the copy: still one.
	cp2 := &kgo.Record{Topic: "delays", Partition: 2, Offset: 0, Timestamp: now.Add(time.Hour), Key: cp.Key, Value: cp.Value,
		Headers: levels.CascadeHeadersAt(cp.Headers, due, cp.Timestamp)}
	x.Add(cp2)
	if g := x.Get("s1", now.Add(time.Hour)); len(g) != 1 || g[0].Partition != 2 || !g[0].OriginalTimestamp.Equal(t0) {
		t.Fatalf("after the second cascade: %+v", g)
	}
	// The copy is cancelled by a cut-off after the original timestamp, even
	// though the copy's own timestamp is later.
	cs := cancel.NewSet(time.Hour)
	x2 := NewIndex(tab, 0, cs)
	x2.Add(cp)
	cs.Put([]byte("s1"), t0.Add(time.Minute).UnixMilli(), now)
	if g := x2.Get("s1", now); len(g) != 1 || g[0].State != StateCancelled {
		t.Errorf("cancelled copy: %+v", g)
	}
	// Two producer records alike are two schedules.
	x3 := NewIndex(tab, 0, nil)
	x3.Add(rec(3, 0, t0, "k", "kdelay-target", "out", "kdelay-delay", "3h"))
	x3.Add(rec(3, 1, t0, "k", "kdelay-target", "out", "kdelay-delay", "3h"))
	if p, _ := x3.Query(Filter{}, t0); len(p) != 2 {
		t.Errorf("two identical originals: %d schedules, want 2", len(p))
	}
}

func TestQueryFiltersAndPages(t *testing.T) {
	tab := table(t)
	x := NewIndex(tab, 0, nil)
	for i := range 25 {
		p := int32(i % 4)
		x.Add(rec(p, int64(i), t0, "k"+strconv.Itoa(i), "kdelay-target", "t"+strconv.Itoa(i%2), "kdelay-deliver-at", ms(t0.Add(time.Duration(i)*time.Minute)), "kdelay-id", "id"+strconv.Itoa(i)))
	}
	now := t0.Add(-time.Minute)
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		ss, next := x.Query(Filter{Limit: 10, After: cursor}, now)
		for _, s := range ss {
			got = append(got, s.ID)
		}
		if next == "" {
			if pages != 2 {
				t.Errorf("%d pages, want 3", pages+1)
			}
			break
		}
		cursor = next
	}
	if len(got) != 25 || got[0] != "id0" || got[24] != "id24" {
		t.Errorf("pages: %v", got)
	}
	for _, tc := range []struct {
		name string
		f    Filter
		want int
	}{
		{"target", Filter{Target: "t1"}, 12},
		{"key", Filter{Key: "k7"}, 1},
		{"id", Filter{ID: "id7"}, 1},
		{"id and target mismatch", Filter{ID: "id7", Target: "t0"}, 0},
		{"level 2", Filter{Level: 2}, 6},
		{"due range", Filter{DueFrom: t0.Add(5 * time.Minute), DueTo: t0.Add(10 * time.Minute)}, 5},
		{"limit", Filter{Limit: 3}, 3},
		{"done only", Filter{States: []string{StateDone}}, 0},
	} {
		if ss, _ := x.Query(tc.f, now); len(ss) != tc.want {
			t.Errorf("%s: %d results, want %d", tc.name, len(ss), tc.want)
		}
	}
}

func TestParseFilter(t *testing.T) {
	for _, tc := range []struct {
		params map[string]string
		bad    string // the parameter named by the error, "" for none
	}{
		{map[string]string{"id": "x", "target": "t", "key": "k", "level": "2", "due_from": "2030-01-01T00:00:00Z", "due_to": "1893456000001", "state": "due,cancelled", "limit": "5"}, ""},
		{map[string]string{"state": "all"}, ""},
		{map[string]string{"level": "0"}, "level"},
		{map[string]string{"level": "5"}, "level"},
		{map[string]string{"due_from": "tomorrow"}, "due_from"},
		{map[string]string{"due_from": "2030-01-02T00:00:00Z", "due_to": "2030-01-01T00:00:00Z"}, "due_to"},
		{map[string]string{"state": "gone"}, "state"},
		{map[string]string{"limit": "-1"}, "limit"},
		{map[string]string{"limit": "5000"}, "limit"},
		{map[string]string{"cursor": "!!"}, "cursor"},
	} {
		_, err := ParseFilter(func(n string) string { return tc.params[n] }, 4, 1000)
		var pe *ParamError
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%v: %v", tc.params, err)
		case tc.bad != "" && (!errors.As(err, &pe) || pe.Param != tc.bad || !errors.Is(err, ErrBadParam)):
			t.Errorf("%v: error %v, want one naming %s", tc.params, err, tc.bad)
		}
	}
}

func TestDue(t *testing.T) {
	tab := table(t)
	x := NewIndex(tab, 0, nil)
	now := t0.Add(30 * time.Second)
	for i, d := range []time.Duration{10 * time.Second, 90 * time.Second, 95 * time.Second, 150 * time.Second, 3 * time.Hour} {
		x.Add(rec(int32(i%4), int64(i), t0, "k"+strconv.Itoa(i), "kdelay-target", "out", "kdelay-deliver-at", ms(t0.Add(d))))
	}
	h := x.Due(now, time.Minute, 3*time.Minute)
	if h.Overdue != 1 || h.Later != 1 || len(h.Buckets) != 3 {
		t.Fatalf("histogram %+v", h)
	}
	if !h.Buckets[0].Start.Equal(t0) || h.Buckets[1].Count != 2 || h.Buckets[2].Count != 1 || h.Buckets[1].ByLevel["2"] != 1 || h.Buckets[1].ByLevel["3"] != 1 {
		t.Errorf("buckets %+v", h.Buckets)
	}
	w := x.Windows(now, []time.Duration{time.Minute, time.Hour})
	for level, want := range map[int][]int{1: {1, 0, 0, 1}, 2: {0, 1, 0, 0}, 3: {0, 0, 1, 0}, 4: {0, 0, 1, 0}} {
		if !slices.Equal(w[level], want) {
			t.Errorf("windows of level %d (due, 1m, 1h, later): %v, want %v", level, w[level], want)
		}
	}
	ls := x.Levels(now)
	if len(ls) != 4 || ls[0].Pending != 2 || ls[0].NextDue == nil || !ls[0].NextDue.Equal(t0.Add(10*time.Second)) {
		t.Errorf("levels %+v", ls)
	}
}

// TestSeriesShowsItsNextOccurrence: a series record and the next
// occurrence the relay wrote back show what series they are and when the
// next firing is due.
func TestSeriesShowsItsNextOccurrence(t *testing.T) {
	x := NewIndex(table(t), 0, nil)
	first := rec(2, 0, t0, "k", "kdelay-target", "out", "kdelay-id", "s", "kdelay-every", "1m", "kdelay-count", "5",
		"kdelay-deliver-at", ms(t0.Add(time.Minute)))
	x.Add(first)
	g := x.Get("s", t0)
	if len(g) != 1 || g[0].Recurring != "every 1m0s, occurrence 1 of 5" || !g[0].DueAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("series record: %+v", g)
	}
	fired := t0.Add(time.Minute)
	x.Add(&kgo.Record{Topic: "delays", Partition: 2, Offset: 1, Timestamp: fired, Key: first.Key, Value: first.Value,
		Headers: levels.NextHeaders(first.Headers, t0.Add(2*time.Minute), first.Timestamp, 2)})
	g = x.Get("s", fired)
	i := slices.IndexFunc(g, func(s Schedule) bool { return s.Offset == 1 })
	if i < 0 || g[i].Recurring != "every 1m0s, occurrence 2 of 5" || !g[i].DueAt.Equal(t0.Add(2*time.Minute)) || !g[i].OriginalTimestamp.Equal(t0) {
		t.Fatalf("next occurrence: %+v", g)
	}
}
