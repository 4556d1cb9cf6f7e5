package wheel

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const t0 = int64(1_700_000_000_000) // a unix ms to start tests from

func openT(t testing.TB, dir string, opt Options, now int64) (*Wheel, Report) {
	t.Helper()
	w, rep, err := Open(dir, opt, now)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return w, rep
}

func mustAdd(t testing.TB, w *Wheel, now int64, e Entry) {
	t.Helper()
	if err := w.Add(now, e); err != nil {
		t.Fatalf("Add(%d, %+v): %v", now, e, err)
	}
}

func mustFlush(t testing.TB, w *Wheel) {
	t.Helper()
	if err := w.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// expireAll hands out everything due at now.
func expireAll(t testing.TB, w *Wheel, now int64) []Entry {
	t.Helper()
	var got []Entry
	for {
		n, err := w.Expire(now, 1000, func(e Entry) { got = append(got, e) })
		if err != nil {
			t.Fatalf("Expire: %v", err)
		}
		if n < 1000 {
			return got
		}
	}
}

func payloadOf(p int32, off int64) []byte { return []byte(fmt.Sprintf("p%d/o%d", p, off)) }

func cmpEntry(a, b Entry) int {
	return cmp.Or(cmp.Compare(a.Due, b.Due), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
}

func checkOrder(t testing.TB, got []Entry) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if cmpEntry(got[i-1], got[i]) >= 0 {
			t.Fatalf("entry %d %+v not after %+v", i, got[i], got[i-1])
		}
	}
}

func TestOrderingAndPayload(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{}, t0)
	defer w.Close()
	r := rand.New(rand.NewPCG(1, 2))
	var want []Entry
	off := map[int32]int64{}
	for range 5000 {
		p := int32(r.IntN(4))
		e := Entry{Due: t0 + r.Int64N(10_000), Partition: p, Offset: off[p]}
		off[p]++
		e.Payload = payloadOf(e.Partition, e.Offset)
		mustAdd(t, w, t0, e)
		want = append(want, e)
	}
	mustFlush(t, w)
	slices.SortFunc(want, cmpEntry)
	got := expireAll(t, w, t0+20_000)
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if cmpEntry(got[i], want[i]) != 0 || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("entry %d: got %+v want %+v", i, got[i], want[i])
		}
	}
}

func TestNeverEarly(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{Tick: 100 * time.Millisecond}, t0)
	defer w.Close()
	r := rand.New(rand.NewPCG(3, 4))
	dues := map[int64]int64{}
	for i := range int64(2000) {
		d := t0 + r.Int64N(3000)
		dues[i] = d
		mustAdd(t, w, t0, Entry{Due: d, Offset: i})
	}
	// unflushed entries come out as well
	seen := 0
	for now := t0 - 5; now <= t0+3005; now++ {
		if nx, ok := w.NextExpiry(); ok && nx > now {
			continue // the caller would sleep: nothing may be due
		}
		for _, e := range expireAll(t, w, now) {
			if e.Due > now {
				t.Fatalf("entry due %d handed out at %d", e.Due, now)
			}
			if e.Due != dues[e.Offset] {
				t.Fatalf("due changed")
			}
			if now-e.Due > 0 {
				t.Fatalf("entry due %d handed out late at %d although NextExpiry allowed earlier", e.Due, now)
			}
			seen++
		}
		if nx, ok := w.NextExpiry(); ok && nx <= now {
			t.Fatalf("NextExpiry %d not after now %d after a complete Expire", nx, now)
		}
	}
	if seen != len(dues) {
		t.Fatalf("saw %d of %d", seen, len(dues))
	}
	if _, ok := w.NextExpiry(); ok {
		t.Fatal("NextExpiry with nothing pending")
	}
}

func TestPastDueComesOutNext(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{}, t0)
	defer w.Close()
	mustAdd(t, w, t0, Entry{Due: t0 + 500, Offset: 1})
	if got := expireAll(t, w, t0+1000); len(got) != 1 {
		t.Fatalf("got %d", len(got))
	}
	// the wheel has scanned up to t0+1000: add entries due before that
	mustAdd(t, w, t0+1000, Entry{Due: t0 + 10, Offset: 2})
	mustAdd(t, w, t0+1000, Entry{Due: t0 + 1000, Offset: 3})
	mustAdd(t, w, t0+1000, Entry{Due: t0 + 1001, Offset: 4})
	if nx, ok := w.NextExpiry(); !ok || nx != t0+10 {
		t.Fatalf("NextExpiry = %d, %v", nx, ok)
	}
	got := expireAll(t, w, t0+1000)
	if len(got) != 2 || got[0].Offset != 2 || got[1].Offset != 3 {
		t.Fatalf("got %+v", got)
	}
	if got = expireAll(t, w, t0+1001); len(got) != 1 || got[0].Offset != 4 {
		t.Fatalf("got %+v", got)
	}
}

func TestHorizonEdge(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{Horizon: time.Minute}, t0)
	defer w.Close()
	if err := w.Add(t0, Entry{Due: t0 + 60_000, Offset: 1}); err != nil {
		t.Fatalf("at the horizon: %v", err)
	}
	err := w.Add(t0, Entry{Due: t0 + 60_001, Offset: 2})
	if !errors.Is(err, ErrBeyondHorizon) {
		t.Fatalf("beyond the horizon: %v", err)
	}
	for _, s := range []string{"wheel:", fmt.Sprint(t0 + 60_001), fmt.Sprint(t0), "1m0s"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if w.Pending() != 1 {
		t.Fatalf("pending %d", w.Pending())
	}
	if err := w.Add(t0, Entry{Due: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative due: %v", err)
	}
}

func TestSameSlotBurst(t *testing.T) {
	n := 3*scanBatch + 123 // forces the spill path
	if testing.Short() {
		n = scanBatch + 1
	}
	if s := os.Getenv("KDELAY_WHEEL_BURST"); s != "" {
		n, _ = strconv.Atoi(s) // e.g. 1000000
	}
	w, _ := openT(t, t.TempDir(), Options{SegmentBytes: 4 << 20}, t0)
	defer w.Close()
	r := rand.New(rand.NewPCG(5, 6))
	for i := range n {
		p := int32(i % 7)
		mustAdd(t, w, t0, Entry{Due: t0 + 1000 + r.Int64N(3), Partition: p, Offset: int64(i / 7), Payload: []byte{byte(i)}})
	}
	mustFlush(t, w)
	var got []Entry
	batches := 0
	for {
		k, err := w.Expire(t0+5000, 1000, func(e Entry) { got = append(got, e) })
		if err != nil {
			t.Fatal(err)
		}
		if k > 1000 {
			t.Fatalf("batch of %d", k)
		}
		if len(w.q.mem) > scanBatch {
			t.Fatalf("%d entries in memory", len(w.q.mem))
		}
		batches++
		if k == 0 {
			break
		}
	}
	if len(got) != n {
		t.Fatalf("got %d of %d", len(got), n)
	}
	checkOrder(t, got)
	if !w.q.spilled && n > scanBatch {
		t.Fatal("burst did not spill")
	}
	t.Logf("%d entries of one slot in %d batches of at most 1000, at most %d in memory", n, batches, scanBatch)
}

func TestDropPartition(t *testing.T) {
	dir := t.TempDir()
	w, _ := openT(t, dir, Options{}, t0)
	for i := range int64(100) {
		mustAdd(t, w, t0, Entry{Due: t0 + i, Partition: int32(i % 2), Offset: i})
	}
	w.SetHandled(1, 99)
	mustFlush(t, w)
	if w.Handled(1) != 99 {
		t.Fatalf("handled %d", w.Handled(1))
	}
	if err := w.Drop(1); err != nil {
		t.Fatal(err)
	}
	if w.Handled(1) != -1 || w.Pending() != 50 {
		t.Fatalf("after drop: handled %d pending %d", w.Handled(1), w.Pending())
	}
	if _, ok := w.LowestPending(1); ok {
		t.Fatal("LowestPending after drop")
	}
	// the partition comes back to this relay: the same offsets are re-added
	mustAdd(t, w, t0, Entry{Due: t0 + 7, Partition: 1, Offset: 7, Payload: []byte("again")})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, _ = openT(t, dir, Options{}, t0)
	defer w.Close()
	got := expireAll(t, w, t0+1000)
	var p1 []Entry
	for _, e := range got {
		if e.Partition == 1 {
			p1 = append(p1, e)
		}
	}
	if len(got) != 51 || len(p1) != 1 || string(p1[0].Payload) != "again" {
		t.Fatalf("got %d entries, partition 1: %+v", len(got), p1)
	}
}

func TestDoneSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	opt := Options{SegmentBytes: 8 << 10}
	w, _ := openT(t, dir, opt, t0)
	for i := range int64(300) {
		mustAdd(t, w, t0, Entry{Due: t0 + 1000 + i, Offset: i, Payload: make([]byte, 50)})
	}
	mustFlush(t, w)
	got := expireAll(t, w, t0+1099) // 100 in flight
	if len(got) != 100 {
		t.Fatalf("got %d", len(got))
	}
	for _, e := range got[:60] {
		if err := w.Done(e.Partition, e.Offset); err != nil {
			t.Fatal(err)
		}
	}
	w.SetHandled(0, 299)
	mustFlush(t, w)
	if lp, _ := w.LowestPending(0); lp != 60 {
		t.Fatalf("LowestPending %d", lp)
	}
	// crash: no Close. Reopen from the files as they are.
	w.closeFiles()
	w, rep := openT(t, dir, opt, t0+2000)
	defer w.Close()
	if rep.Recovered != 240 || rep.Lost != 0 {
		t.Fatalf("report %+v", rep)
	}
	if w.Handled(0) != 299 {
		t.Fatalf("handled %d", w.Handled(0))
	}
	if h, _ := w.Highest(0); h != 299 {
		t.Fatalf("highest %d", h)
	}
	got = expireAll(t, w, t0+2000)
	if len(got) != 240 || got[0].Offset != 60 {
		t.Fatalf("got %d, first %+v", len(got), got[0])
	}
	checkOrder(t, got)
}

func TestReclaim(t *testing.T) {
	dir := t.TempDir()
	opt := Options{SegmentBytes: 8 << 10, Horizon: time.Minute}
	w, _ := openT(t, dir, opt, t0)
	defer w.Close()
	r := rand.New(rand.NewPCG(7, 8))
	const n = 2000
	for i := range int64(n) {
		mustAdd(t, w, t0, Entry{Due: t0 + r.Int64N(60_000), Partition: int32(i % 3), Offset: i / 3, Payload: make([]byte, 60)})
	}
	mustFlush(t, w)
	before := w.SegmentCount()
	if before < 10 {
		t.Fatalf("only %d segments", before)
	}
	// forward the first half in due order: old segments hold late entries too
	got := expireAll(t, w, t0+30_000)
	for _, e := range got {
		w.Done(e.Partition, e.Offset)
	}
	mustFlush(t, w)
	w.reclaim()
	mid := w.SegmentCount()
	got = expireAll(t, w, t0+60_000)
	for _, e := range got {
		w.Done(e.Partition, e.Offset)
	}
	mustFlush(t, w)
	if w.Pending() != 0 {
		t.Fatalf("pending %d", w.Pending())
	}
	if c := w.SegmentCount(); c != 1 {
		t.Fatalf("%d segments left (before %d, midway %d)", c, before, mid)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	idx, _ := filepath.Glob(filepath.Join(dir, "*.idx"))
	if len(files) != 1 || len(idx) != 0 {
		t.Fatalf("files left: %v %v", files, idx)
	}
	t.Logf("segments: %d -> %d -> 1", before, mid)
}

func TestReclaimOutOfOrder(t *testing.T) {
	// A segment whose entries are all done goes even when older ones stay.
	dir := t.TempDir()
	opt := Options{SegmentBytes: 4 << 10, Horizon: time.Hour}
	w, _ := openT(t, dir, opt, t0)
	defer w.Close()
	mustAdd(t, w, t0, Entry{Due: t0 + 3_600_000, Partition: 9, Offset: 0, Payload: make([]byte, 100)}) // stays
	for i := range int64(500) {
		mustAdd(t, w, t0, Entry{Due: t0 + 1000, Partition: 1, Offset: i, Payload: make([]byte, 100)})
	}
	mustFlush(t, w)
	before := w.SegmentCount()
	for _, e := range expireAll(t, w, t0+1000) {
		w.Done(e.Partition, e.Offset)
	}
	mustFlush(t, w)
	w.reclaim()
	if c := w.SegmentCount(); c > 2 {
		t.Fatalf("%d segments left of %d", c, before)
	}
	if w.Pending() != 1 {
		t.Fatalf("pending %d", w.Pending())
	}
	got := expireAll(t, w, t0+3_600_000)
	if len(got) != 1 || got[0].Partition != 9 {
		t.Fatalf("got %+v", got)
	}
}

func TestTrim(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{}, t0)
	defer w.Close()
	for i := range int64(10_000) {
		mustAdd(t, w, t0, Entry{Due: t0 + 10, Partition: 2, Offset: 100 + i})
	}
	if err := w.Trim(2, 5000); err != nil {
		t.Fatal(err)
	}
	if lp, _ := w.LowestPending(2); lp != 5000 || w.Pending() != 5100 {
		t.Fatalf("lowest %d pending %d", lp, w.Pending())
	}
	got := expireAll(t, w, t0+10)
	if len(got) != 5100 || got[0].Offset != 5000 {
		t.Fatalf("got %d first %+v", len(got), got[0])
	}
}

func TestReopenAfterDowntime(t *testing.T) {
	dir := t.TempDir()
	w, _ := openT(t, dir, Options{Horizon: time.Minute, Tick: 10 * time.Millisecond}, t0)
	r := rand.New(rand.NewPCG(9, 10))
	for i := range int64(1000) {
		mustAdd(t, w, t0, Entry{Due: t0 + r.Int64N(60_000), Offset: i})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	later := t0 + 3*24*3600*1000
	w, _ = openT(t, dir, Options{Horizon: time.Minute, Tick: 10 * time.Millisecond}, later)
	defer w.Close()
	if nx, ok := w.NextExpiry(); !ok || nx > t0+60_000 {
		t.Fatalf("NextExpiry %d %v", nx, ok)
	}
	// new entries are added while the old ones drain: they wrap the wheel
	for i := range int64(1000) {
		mustAdd(t, w, later, Entry{Due: later + r.Int64N(60_000), Offset: 1000 + i})
	}
	got := expireAll(t, w, later)
	if len(got) != 1000 {
		t.Fatalf("got %d", len(got))
	}
	checkOrder(t, got)
	got = expireAll(t, w, later+60_000)
	if len(got) != 1000 {
		t.Fatalf("got %d", len(got))
	}
	checkOrder(t, got)
}

func TestTickChangeKeepsGeometry(t *testing.T) {
	dir := t.TempDir()
	w, _ := openT(t, dir, Options{Tick: time.Second}, t0)
	mustAdd(t, w, t0, Entry{Due: t0 + 5500, Offset: 1})
	w.Close()
	w, rep := openT(t, dir, Options{Tick: 10 * time.Millisecond}, t0)
	defer w.Close()
	if w.g.tick != 1000 || len(rep.Problems) != 1 {
		t.Fatalf("tick %d problems %q", w.g.tick, rep.Problems)
	}
	if got := expireAll(t, w, t0+5499); len(got) != 0 {
		t.Fatal("early")
	}
	if got := expireAll(t, w, t0+5500); len(got) != 1 {
		t.Fatal("missing")
	}
}

func TestLockedDirectory(t *testing.T) {
	dir := t.TempDir()
	w, _ := openT(t, dir, Options{}, t0)
	defer w.Close()
	if _, _, err := Open(dir, Options{}, t0); err == nil {
		t.Fatal("second Open of the same directory succeeded")
	}
}

func TestClosed(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{}, t0)
	w.Close()
	if err := w.Add(t0, Entry{Due: t0}); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if _, err := w.Expire(t0, 1, func(Entry) {}); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{
		{Tick: 1500 * time.Microsecond},
		{Tick: time.Hour, Horizon: time.Minute},
		{SegmentBytes: 100},
		{Sync: 7},
		{Horizon: 1000 * time.Hour, Tick: time.Millisecond},
	} {
		if _, _, err := Open(t.TempDir(), o, t0); err == nil {
			t.Errorf("Open(%+v) accepted", o)
		}
	}
}

func TestOffsetSet(t *testing.T) {
	var s offsetSet
	r := rand.New(rand.NewPCG(11, 12))
	ref := map[int64]bool{}
	for range 50_000 {
		off := r.Int64N(40_000) + 1_000_000
		switch r.IntN(3) {
		case 0, 1:
			if s.add(off) == ref[off] {
				t.Fatalf("add %d", off)
			}
			ref[off] = true
		case 2:
			if s.remove(off) != ref[off] {
				t.Fatalf("remove %d", off)
			}
			delete(ref, off)
		}
		if r.IntN(5000) == 0 {
			below := r.Int64N(40_000) + 1_000_000
			var n int64
			for o := range ref {
				if o < below {
					delete(ref, o)
					n++
				}
			}
			if got := s.removeBelow(below); got != n {
				t.Fatalf("removeBelow %d: %d want %d", below, got, n)
			}
		}
	}
	if s.count != int64(len(ref)) {
		t.Fatalf("count %d want %d", s.count, len(ref))
	}
	lo := int64(-1)
	for o := range ref {
		if lo < 0 || o < lo {
			lo = o
		}
	}
	if m, _ := s.min(); m != lo {
		t.Fatalf("min %d want %d", m, lo)
	}
	for range 2000 {
		a := r.Int64N(41_000) + 999_500
		b := a + r.Int64N(300)
		want := false
		for o := range ref {
			if o >= a && o <= b {
				want = true
			}
		}
		if s.anyIn(a, b) != want {
			t.Fatalf("anyIn(%d, %d) want %v", a, b, want)
		}
	}
}

// TestModel runs random operations against a simple in-memory model, with
// clean and unclean reopens in between.
func TestModel(t *testing.T) {
	seeds := 8
	if n, err := strconv.Atoi(os.Getenv("KDELAY_WHEEL_MODEL_SEEDS")); err == nil {
		seeds = n
	}
	if testing.Short() {
		seeds = 2
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed) })
	}
}

type mkey struct {
	p   int32
	off int64
}

func runModel(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	dir := t.TempDir()
	opt := Options{Horizon: 20 * time.Second, Tick: time.Duration(1+r.IntN(300)) * time.Millisecond, SegmentBytes: 4 << 10}
	now := t0
	w, _ := openT(t, dir, opt, now)
	defer func() { w.Close() }()
	pending := map[mkey]Entry{}
	flight := map[mkey]bool{}
	next := map[int32]int64{}
	handled := map[int32]int64{}
	for step := range 3000 {
		switch op := r.IntN(100); {
		case op < 40: // add
			p := int32(r.IntN(4))
			e := Entry{Due: now - 500 + r.Int64N(21_000), Partition: p, Offset: next[p]}
			e.Payload = payloadOf(p, e.Offset)
			next[p] += 1 + r.Int64N(3)
			err := w.Add(now, e)
			if e.Due-now > 20_000 {
				if !errors.Is(err, ErrBeyondHorizon) {
					t.Fatalf("step %d: want ErrBeyondHorizon, got %v", step, err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			pending[mkey{p, e.Offset}] = e
		case op < 60: // time passes, expire
			now += r.Int64N(2000)
			max := 1 + r.IntN(50)
			var want []Entry
			for k, e := range pending {
				if !flight[k] && e.Due <= now {
					want = append(want, e)
				}
			}
			slices.SortFunc(want, cmpEntry)
			if len(want) > max {
				want = want[:max]
			}
			var got []Entry
			if _, err := w.Expire(now, max, func(e Entry) { got = append(got, e) }); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("step %d now %d: got %d entries want %d\ngot  %v\nwant %v", step, now, len(got), len(want), got, want)
			}
			for i := range got {
				if cmpEntry(got[i], want[i]) != 0 || !bytes.Equal(got[i].Payload, want[i].Payload) {
					t.Fatalf("step %d: entry %d got %+v want %+v", step, i, got[i], want[i])
				}
				flight[mkey{got[i].Partition, got[i].Offset}] = true
			}
			if len(got) < max {
				if nx, ok := w.NextExpiry(); ok && nx <= now {
					t.Fatalf("step %d: NextExpiry %d <= now %d", step, nx, now)
				}
			}
			var lowest int64 = -1
			for k, e := range pending {
				if !flight[k] && (lowest < 0 || e.Due < lowest) {
					lowest = e.Due
				}
			}
			nx, ok := w.NextExpiry()
			// a bound from entries done before they were due is allowed
			if (lowest >= 0 && !ok) || (ok && lowest >= 0 && nx > lowest) {
				t.Fatalf("step %d: NextExpiry %d %v, earliest %d", step, nx, ok, lowest)
			}
		case op < 75: // done some in flight
			for k := range flight {
				if r.IntN(2) == 0 {
					w.Done(k.p, k.off)
					delete(flight, k)
					delete(pending, k)
				}
			}
		case op < 80:
			p := int32(r.IntN(4))
			h := next[p] - 1
			w.SetHandled(p, h)
			handled[p] = max(handled[p], h)
		case op < 82:
			p := int32(r.IntN(4))
			below := next[p] - r.Int64N(20)
			if err := w.Trim(p, below); err != nil {
				t.Fatal(err)
			}
			for k := range pending {
				if k.p == p && k.off < below {
					delete(pending, k)
					delete(flight, k)
				}
			}
		case op < 83:
			p := int32(r.IntN(4))
			if err := w.Drop(p); err != nil {
				t.Fatal(err)
			}
			for k := range pending {
				if k.p == p {
					delete(pending, k)
					delete(flight, k)
				}
			}
			delete(handled, p)
		case op < 87: // stage the next tick, part of it or all
			if _, err := w.Stage(now, r.Int64N(3000), 1+r.IntN(40)); err != nil {
				t.Fatal(err)
			}
		case op < 93:
			mustFlush(t, w)
		case op < 95: // time jumps without an Expire: adds wrap the wheel
			now += r.Int64N(60_000)
		case op < 97: // clean reopen
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w, _ = openT(t, dir, opt, now)
			clear(flight)
		default: // crash after a flush
			mustFlush(t, w)
			w.closeFiles()
			var rep Report
			w, rep = openT(t, dir, opt, now)
			if rep.Lost != 0 || rep.Truncated != 0 {
				t.Fatalf("step %d: report %+v", step, rep)
			}
			clear(flight)
		}
		if w.Pending() != int64(len(pending)) {
			t.Fatalf("step %d: Pending %d want %d", step, w.Pending(), len(pending))
		}
		for p := range int32(4) {
			lo := int64(-1)
			for k := range pending {
				if k.p == p && (lo < 0 || k.off < lo) {
					lo = k.off
				}
			}
			got, ok := w.LowestPending(p)
			if ok != (lo >= 0) || (ok && got != lo) {
				t.Fatalf("step %d: LowestPending(%d) = %d %v want %d", step, p, got, ok, lo)
			}
		}
	}
}

func TestLargePayload(t *testing.T) {
	dir := t.TempDir()
	opt := Options{SegmentBytes: 4 << 10}
	w, _ := openT(t, dir, opt, t0)
	big := bytes.Repeat([]byte("0123456789"), 3000) // 30 KB, larger than a segment
	for i := range int64(5) {
		mustAdd(t, w, t0, Entry{Due: t0 + 10*i, Offset: i, Payload: big})
		mustAdd(t, w, t0, Entry{Due: t0 + 10*i + 1, Offset: 100 + i, Payload: []byte("small")})
	}
	mustFlush(t, w)
	crash(w)
	w, rep := openT(t, dir, opt, t0)
	defer w.Close()
	if rep.Recovered != 10 || len(rep.Problems) != 0 {
		t.Fatalf("report %+v", rep)
	}
	got := expireAll(t, w, t0+100)
	if len(got) != 10 || !bytes.Equal(got[0].Payload, big) || string(got[1].Payload) != "small" {
		t.Fatalf("got %d entries", len(got))
	}
}

func TestSyncIntervalWatermark(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{Sync: SyncInterval, SyncInterval: time.Second}, t0)
	defer w.Close()
	w.SetHandled(1, 10)
	mustFlush(t, w)
	if h := w.Handled(1); h != -1 {
		t.Fatalf("Handled %d before any fsync", h)
	}
	mustAdd(t, w, t0+1000, Entry{Due: t0 + 2000, Partition: 1, Offset: 11})
	w.SetHandled(1, 11)
	mustFlush(t, w) // a second has passed: this one syncs
	if h := w.Handled(1); h != 11 {
		t.Fatalf("Handled %d after the interval", h)
	}
}

func TestAddAndDoneInsideExpire(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{SegmentBytes: 4 << 10}, t0)
	defer w.Close()
	for i := range int64(200) {
		mustAdd(t, w, t0, Entry{Due: t0 + i, Offset: i, Payload: make([]byte, 100)})
	}
	next := int64(1000)
	var got []Entry
	for range 3 {
		w.Expire(t0+1000, 1000, func(e Entry) {
			got = append(got, e)
			w.Done(e.Partition, e.Offset)
			if e.Offset < 1000 { // re-delay: rolls segments under the running Expire
				if err := w.Add(t0+1000, Entry{Due: t0 + 500, Offset: next, Payload: make([]byte, 100)}); err != nil {
					t.Fatal(err)
				}
				next++
			}
		})
	}
	if len(got) != 400 || w.Pending() != 0 {
		t.Fatalf("got %d, pending %d", len(got), w.Pending())
	}
}

// TestExpireViewPayloads: ExpireView hands out the payload each entry was
// added with, whether the wheel reads it from a sealed segment's mapping,
// the active segment, its write buffer or a scan's kept copy, and Expire's
// copies are the same bytes, theirs to keep after later entries are read.
func TestExpireViewPayloads(t *testing.T) {
	payload := func(i int64) []byte {
		return []byte(strings.Repeat(strconv.FormatInt(i, 10)+"-", 1+int(i%37)))
	}
	fill := func(w *Wheel) {
		for i := range int64(600) {
			mustAdd(t, w, t0, Entry{Due: t0 + 10 + i%50, Partition: int32(i % 3), Offset: i, Payload: payload(i)})
			if i == 450 { // the rest stays in the write buffer
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	view, _ := openT(t, t.TempDir(), Options{SegmentBytes: 16 << 10}, t0) // rolls: sealed segments too
	defer view.Close()
	keep, _ := openT(t, t.TempDir(), Options{SegmentBytes: 16 << 10}, t0)
	defer keep.Close()
	fill(view)
	fill(keep)
	var kept [][]byte
	var keptOff []int64
	for k := 0; k < 600; {
		n, err := keep.Expire(t0+100, 64, func(e Entry) {
			kept, keptOff = append(kept, e.Payload), append(keptOff, e.Offset)
		})
		if err != nil || n == 0 {
			t.Fatalf("Expire: %d, %v after %d", n, err, k)
		}
		k += n
	}
	seen := 0
	for seen < 600 {
		n, err := view.ExpireView(t0+100, 64, func(e Entry) {
			if want := payload(e.Offset); !bytes.Equal(e.Payload, want) {
				t.Errorf("ExpireView offset %d: payload %q, want %q", e.Offset, e.Payload, want)
			}
			if e.Offset != keptOff[seen] {
				t.Errorf("ExpireView #%d: offset %d, Expire's %d", seen, e.Offset, keptOff[seen])
			}
			seen++
		})
		if err != nil || n == 0 {
			t.Fatalf("ExpireView: %d, %v after %d", n, err, seen)
		}
	}
	for i, p := range kept {
		if want := payload(keptOff[i]); !bytes.Equal(p, want) {
			t.Errorf("Expire offset %d: kept payload %q, want %q", keptOff[i], p, want)
		}
	}
	// Added late, for ticks already handed out: read back from the
	// active segment by itself, not from a scan's copy.
	for i := range int64(40) {
		mustAdd(t, view, t0+100, Entry{Due: t0 + 20, Partition: 3, Offset: i, Payload: payload(1000 + i)})
	}
	if err := view.Flush(); err != nil {
		t.Fatal(err)
	}
	late := 0
	if _, err := view.ExpireView(t0+100, 100, func(e Entry) {
		if want := payload(1000 + e.Offset); !bytes.Equal(e.Payload, want) {
			t.Errorf("ExpireView late offset %d: payload %q, want %q", e.Offset, e.Payload, want)
		}
		late++
	}); err != nil || late != 40 {
		t.Fatalf("ExpireView of late entries: %d, %v", late, err)
	}
}

func TestEachPending(t *testing.T) {
	var s offsetSet
	want := []int64{3, 64, 65, 4095, 4096, 9000, 20000}
	for _, o := range want {
		s.add(o)
	}
	var got []int64
	s.each(0, 1<<20, func(o int64) bool { got = append(got, o); return true })
	if !slices.Equal(got, want) {
		t.Errorf("each over all = %v, want %v", got, want)
	}
	got = got[:0]
	s.each(64, 9000, func(o int64) bool { got = append(got, o); return len(got) < 3 })
	if !slices.Equal(got, []int64{64, 65, 4095}) {
		t.Errorf("each [64, 9000] stopping after 3 = %v", got)
	}
	got = got[:0]
	s.each(4097, 8999, func(o int64) bool { got = append(got, o); return true })
	if len(got) != 0 {
		t.Errorf("each over an empty range = %v", got)
	}
}

// TestPayloadsAreTheCallers checks the contract of the payloads handed out:
// each one's capacity is its length, so appending to one, or writing into
// it, never changes another (they may share an allocation), nor what a
// later hand-out of the same record returns.
func TestPayloadsAreTheCallers(t *testing.T) {
	dir := t.TempDir()
	w, _ := openT(t, dir, Options{}, t0)
	const n = 3000 // more than one shared allocation's worth
	for i := range int64(n) {
		mustAdd(t, w, t0, Entry{Due: t0 + 10 + i%7, Partition: 1, Offset: i, Payload: payloadOf(1, i)})
	}
	mustFlush(t, w)
	got := expireAll(t, w, t0+1000)
	if len(got) != n {
		t.Fatalf("got %d entries, want %d", len(got), n)
	}
	appended := make([][]byte, len(got))
	for i := range got {
		p := got[i].Payload
		if cap(p) != len(p) {
			t.Fatalf("entry %d: payload capacity %d, length %d", i, cap(p), len(p))
		}
		appended[i] = append(p, "-appended"...)
	}
	for i, e := range got {
		want := payloadOf(1, e.Offset)
		if !bytes.Equal(e.Payload, want) || !bytes.Equal(appended[i], append(want, "-appended"...)) {
			t.Fatalf("entry %d: payload %q, appended %q after appending to every payload, want %q", i, e.Payload, appended[i], want)
		}
	}
	for _, e := range got {
		clear(e.Payload)
	}
	// not done: a reopen hands them out again, unchanged by the writes above
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, _ = openT(t, dir, Options{}, t0)
	defer w.Close()
	again := expireAll(t, w, t0+1000)
	if len(again) != n {
		t.Fatalf("after reopen: got %d entries, want %d", len(again), n)
	}
	for _, e := range again {
		if !bytes.Equal(e.Payload, payloadOf(1, e.Offset)) {
			t.Fatalf("after reopen: offset %d payload %q, want %q", e.Offset, e.Payload, payloadOf(1, e.Offset))
		}
	}
}

// TestDoneWhileQueued: entries scanned into the tick queue but not handed
// out yet, then done, trimmed or dropped, must not come out.
func TestDoneWhileQueued(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func(w *Wheel) error
		want []int64 // offsets of partition 1 handed out after the first
	}{
		{"done", func(w *Wheel) error { return w.Done(1, 5) }, []int64{1, 2, 3, 4, 6, 7, 8, 9}},
		{"trim", func(w *Wheel) error { return w.Trim(1, 3) }, []int64{3, 4, 5, 6, 7, 8, 9}},
		{"drop", func(w *Wheel) error { return w.Drop(1) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := openT(t, t.TempDir(), Options{}, t0)
			defer w.Close()
			for i := range int64(10) {
				mustAdd(t, w, t0, Entry{Due: t0 + 100 + i, Partition: 1, Offset: i})
			}
			mustFlush(t, w)
			var got []int64
			collect := func(e Entry) { got = append(got, e.Offset) }
			if n, err := w.Expire(t0+1000, 1, collect); err != nil || n != 1 {
				t.Fatalf("Expire: %d, %v", n, err) // scans the tick: all 10 are queued
			}
			if err := tc.op(w); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Expire(t0+1000, 100, collect); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[1:], tc.want) {
				t.Fatalf("handed out %v after the first, want %v", got[1:], tc.want)
			}
		})
	}
}

// TestInOrderBlockReads: entries added in due order lie next to each other
// in the active segment, where Expire reads them a block at a time
// (readActive). Payloads of every size around the block (tiny, a few KiB
// spanning two pages or two blocks, larger than a block), added while earlier ones are
// handed out (the segment grows under a block already read), come out
// whole and unmixed.
func TestInOrderBlockReads(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{}, t0)
	defer w.Close()
	r := rand.New(rand.NewPCG(3, 4))
	sizes := []int{1, 60, 200, 3000, 4090, 4100, 9000, 40000, 65500, 70000}
	var want []Entry
	var off int64
	add := func(due int64) {
		n := sizes[r.IntN(len(sizes))]
		tag := payloadOf(0, off)
		p := bytes.Repeat(tag, n/len(tag)+1)[:n]
		e := Entry{Due: due, Offset: off, Payload: p}
		off++
		mustAdd(t, w, t0, e)
		want = append(want, e)
	}
	for i := range 3000 {
		add(t0 + 1 + int64(i))
	}
	mustFlush(t, w)
	var got []Entry
	for now := t0 + 1; now <= t0+7000; now += 7 {
		got = append(got, expireAll(t, w, now)...)
		if now < t0+3000 {
			add(t0 + 3000 + off) // behind the entries handed out, still in order
			mustFlush(t, w)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if cmpEntry(got[i], want[i]) != 0 || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("entry %d (offset %d, %d bytes): payload or order differs (got %d bytes)", i, want[i].Offset, len(want[i].Payload), len(got[i].Payload))
		}
	}
}

// TestAddAgainAfterDone: an entry handed out, marked done and added again
// (the relay's undo of an exactly-once transaction that did not commit)
// comes out again, also when it was the last one handed out.
func TestAddAgainAfterDone(t *testing.T) {
	w, _ := openT(t, t.TempDir(), Options{Sync: SyncNone}, t0)
	e := Entry{Due: t0 + 100, Partition: 1, Offset: 7, Payload: []byte("x")}
	mustAdd(t, w, t0, e)
	for round := range 3 {
		got := expireAll(t, w, t0+200)
		if len(got) != 1 || got[0].Offset != 7 || string(got[0].Payload) != "x" {
			t.Fatalf("round %d: handed out %+v, want the entry once", round, got)
		}
		if err := w.Done(1, 7); err != nil {
			t.Fatal(err)
		}
		mustAdd(t, w, t0+200, e)
		mustFlush(t, w)
	}
}
