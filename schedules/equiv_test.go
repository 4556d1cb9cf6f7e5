package schedules

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/cancel"
	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
)

// TestIndexAgreesWithModel feeds the same random stream of records
// (valid, invalid, recurring, cascaded copies and copies of copies,
// duplicate ids, re-reads), commits with done sets,
// commits going back with the partition read again, and cancels to the
// Index and to the model (the first, pointer-per-record index) and
// compares every answer: Query under many filters and page by page, Get,
// Due, Levels, Windows and Len.
func TestIndexAgreesWithModel(t *testing.T) {
	for _, tc := range []struct {
		seed     uint64
		perLevel int
		steps    int
		every    int
	}{
		{1, 1, 3000, 100},
		{2, 2, 3000, 150},
		{3, 3, 30000, 3000}, // past the orders' buffers and compactions
	} {
		t.Run(fmt.Sprintf("seed%d", tc.seed), func(t *testing.T) {
			tab, err := levels.Parse("1s 10s 1m 1h", tc.perLevel)
			if err != nil {
				t.Fatal(err)
			}
			rnd := rand.New(rand.NewPCG(tc.seed, 42))
			cs := cancel.NewSet(48 * time.Hour)
			x, m := NewIndex(tab, 0, cs), newModel(tab, 0, cs)
			g := &gen{rnd: rnd, tab: tab, logs: make(map[int32][]*kgo.Record), next: make(map[int32]int64), committed: make(map[int32]int64)}
			now := t0
			for step := range tc.steps {
				now = now.Add(time.Duration(rnd.IntN(200)) * time.Millisecond)
				switch k := rnd.IntN(100); {
				case k < 80:
					r := g.record(now)
					if a, b := x.Add(r), m.Add(r); a != b {
						t.Fatalf("step %d: Add(%d/%d) = %v, model %v", step, r.Partition, r.Offset, a, b)
					}
				case k < 84: // a re-read of an older record
					if r := g.old(); r != nil {
						if a, b := x.Add(r), m.Add(r); a != b {
							t.Fatalf("step %d: re-read Add(%d/%d) = %v, model %v", step, r.Partition, r.Offset, a, b)
						}
					}
				case k < 95:
					p, at, done := g.commit()
					if a, b := x.Commit(p, at, done), m.Commit(p, at, done); a != b {
						t.Fatalf("step %d: Commit(%d, %d) = %v, model %v", step, p, at, a, b)
					} else if a {
						x.Reset(p)
						m.Reset(p)
						for _, r := range g.logs[p] {
							if r.Offset >= at {
								x.Add(r)
								m.Add(r)
							}
						}
					}
				case k < 99:
					if id := g.id(); id != "" {
						cs.Put([]byte(id), now.Add(time.Duration(rnd.IntN(4000)-2000)*time.Millisecond).UnixMilli(), now)
					}
				default:
					if id := g.id(); id != "" {
						cs.Delete([]byte(id))
					}
				}
				if step%tc.every == tc.every-1 {
					compare(t, step, g, x, m, now.Add(time.Duration(rnd.IntN(7200))*time.Second))
				}
			}
			compare(t, tc.steps, g, x, m, now)
		})
	}
}

func compare(t *testing.T, step int, g *gen, x *Index, m *model, now time.Time) {
	t.Helper()
	if a, b := x.Len(), m.Len(); a != b {
		t.Fatalf("step %d: Len %d, model %d", step, a, b)
	}
	filters := []Filter{
		{}, {States: AllStates}, {Limit: 7}, {Limit: 1, States: AllStates},
		{Target: "t1"}, {Target: "t2", Limit: 5, States: AllStates}, {Key: "k3", States: AllStates},
		{Level: 2}, {Level: 4, Limit: 9}, {States: []string{StateDone}}, {States: []string{StateCancelled, StateInvalid}},
		{States: []string{StateWheel}, Limit: 3}, {DueFrom: now, DueTo: now.Add(30 * time.Minute)},
		{DueFrom: now.Add(-time.Hour), Limit: 11, States: AllStates}, {DueTo: now, States: AllStates},
		{ID: g.id()}, {ID: g.id(), States: AllStates}, {ID: g.id(), Limit: 1, States: AllStates}, {ID: "nope"},
	}
	for _, f := range filters {
		for page := 0; ; page++ {
			a, an := x.Query(f, now)
			b, bn := m.Query(f, now)
			if !reflect.DeepEqual(a, b) || an != bn {
				t.Fatalf("step %d: Query(%+v) page %d:\n got %d %v next %q\nwant %d %v next %q", step, f, page, len(a), keysOf(a), an, len(b), keysOf(b), bn)
			}
			if an == "" || page == 5 {
				break
			}
			f.After = an
		}
	}
	for range 20 {
		id := g.id()
		a, b := x.Get(id, now), m.Get(id, now)
		if !slices.IsSortedFunc(a, byPartOffset) {
			t.Fatalf("step %d: Get(%q) not in partition and offset order: %v", step, id, keysOf(a))
		}
		slices.SortFunc(b, byPartOffset)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("step %d: Get(%q):\n got %v\nwant %v", step, id, a, b)
		}
	}
	if a, b := x.Due(now, time.Minute, 2*time.Hour), m.Due(now, time.Minute, 2*time.Hour); !reflect.DeepEqual(a, b) {
		t.Fatalf("step %d: Due:\n got %+v\nwant %+v", step, a, b)
	}
	if a, b := x.Levels(now), m.Levels(now); !reflect.DeepEqual(a, b) {
		t.Fatalf("step %d: Levels:\n got %+v\nwant %+v", step, a, b)
	}
	bounds := []time.Duration{time.Minute, 10 * time.Minute, time.Hour}
	if a, b := x.Windows(now, bounds), m.Windows(now, bounds); !reflect.DeepEqual(a, b) {
		t.Fatalf("step %d: Windows:\n got %v\nwant %v", step, a, b)
	}
}

func byPartOffset(a, b Schedule) int {
	if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
		return c
	}
	return cmp.Compare(a.Offset, b.Offset)
}

func keysOf(ss []Schedule) []string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%d/%d:%s:%s", s.Partition, s.Offset, s.ID, s.State))
	}
	return out
}

// gen writes a random delay topic.
type gen struct {
	rnd       *rand.Rand
	tab       *levels.Table
	logs      map[int32][]*kgo.Record
	next      map[int32]int64 // the next offset of each partition
	committed map[int32]int64
	ids       int
}

func (g *gen) id() string {
	if g.ids == 0 {
		return ""
	}
	return "id" + strconv.Itoa(g.rnd.IntN(g.ids+1))
}

func (g *gen) put(r *kgo.Record) *kgo.Record {
	r.Topic = "delays"
	r.Offset = g.next[r.Partition] + int64(g.rnd.IntN(3)) // transaction markers leave gaps
	g.next[r.Partition] = r.Offset + 1
	g.logs[r.Partition] = append(g.logs[r.Partition], r)
	return r
}

// record returns the next record: mostly a producer's, sometimes a
// cascaded copy of one already written.
func (g *gen) record(now time.Time) *kgo.Record {
	rnd := g.rnd
	p := rnd.Int32N(g.tab.Partitions())
	if rnd.IntN(6) == 0 {
		if src := g.old(); src != nil {
			if s, err := g.tab.Parse(src.Headers, src.Timestamp); err == nil {
				return g.put(&kgo.Record{Partition: p, Timestamp: now, Key: src.Key, Value: src.Value,
					Headers: levels.CascadeHeadersAt(src.Headers, s.Due, src.Timestamp)})
			}
		}
	}
	key := "k" + strconv.Itoa(rnd.IntN(20))
	ts := now.Add(-time.Duration(rnd.IntN(3600)) * time.Second)
	hs := []string{"kdelay-target", "t" + strconv.Itoa(rnd.IntN(3))}
	switch rnd.IntN(10) {
	case 0: // no schedule: invalid
	case 1:
		hs = append(hs, "kdelay-every", "1m", "kdelay-count", "3", "kdelay-deliver-at", ms(ts.Add(time.Minute)))
	case 2, 3:
		hs = append(hs, "kdelay-delay", strconv.Itoa(rnd.IntN(4)+1)+"h")
	default:
		hs = append(hs, "kdelay-deliver-at", ms(ts.Add(time.Duration(rnd.IntN(7200))*time.Second)))
	}
	if rnd.IntN(5) != 0 {
		g.ids++
		id := "id" + strconv.Itoa(g.ids)
		if rnd.IntN(4) == 0 {
			id = g.id() // an id used before
		}
		hs = append(hs, "kdelay-id", id)
	}
	r := rec(p, 0, ts, key, hs...)
	if rnd.IntN(10) == 0 {
		r.Value = []byte("same") // alike values: copies of alike records
	}
	return g.put(r)
}

// old returns a record written before, nil when none.
func (g *gen) old() *kgo.Record {
	l := g.logs[g.rnd.Int32N(g.tab.Partitions())]
	if len(l) == 0 {
		return nil
	}
	return l[g.rnd.IntN(len(l))]
}

// commit returns a commit of a partition: mostly forward, with a done set
// above it, sometimes back.
func (g *gen) commit() (int32, int64, offsetmap.Set) {
	p := g.rnd.Int32N(g.tab.Partitions())
	c, end := g.committed[p], g.next[p]
	at := c
	if end > c {
		at = c + g.rnd.Int64N(end-c+1)
	}
	if g.rnd.IntN(10) == 0 {
		at = g.rnd.Int64N(c + 1) // back
	}
	g.committed[p] = at
	var done offsetmap.Set
	if end > at && g.rnd.IntN(2) == 0 {
		done = offsetmap.Set{Base: at, End: at + g.rnd.Int64N(end-at+1)}
		for o := done.Base; o < done.End; o++ {
			if g.rnd.IntN(2) == 0 {
				done.Open = append(done.Open, o)
			}
		}
	}
	return p, at, done
}

// TestManyTargets: past the 65535 interned target names, a record keeps
// its target name with its id and key; answers stay the model's.
func TestManyTargets(t *testing.T) {
	tab := table(t)
	x, m := NewIndex(tab, 0, nil), newModel(tab, 0, nil)
	const n = 1<<16 + 10
	for i := range n {
		r := rec(int32(i%4), int64(i/4), t0, "k"+strconv.Itoa(i), "kdelay-target", "t"+strconv.Itoa(i), "kdelay-delay", "2h", "kdelay-id", "id"+strconv.Itoa(i))
		x.Add(r)
		m.Add(r)
	}
	for _, i := range []int{0, 1<<16 - 2, 1<<16 - 1, 1 << 16, n - 1} {
		f := Filter{Target: "t" + strconv.Itoa(i)}
		a, _ := x.Query(f, t0)
		b, _ := m.Query(f, t0)
		if len(a) != 1 || !reflect.DeepEqual(a, b) {
			t.Errorf("target t%d: %+v, want %+v", i, a, b)
		}
		if g := x.Get("id"+strconv.Itoa(i), t0); len(g) != 1 || g[0].Target != "t"+strconv.Itoa(i) {
			t.Errorf("Get(id%d): %+v", i, g)
		}
	}
}
