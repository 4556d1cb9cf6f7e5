package wheel

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

// stageAll calls Stage until the scan it began is finished, and returns
// the calls it took.
func stageAll(t testing.TB, w *Wheel, now, lead int64, budget int) int {
	t.Helper()
	calls := 0
	for {
		calls++
		more, err := w.Stage(now, lead, budget)
		if err != nil {
			t.Fatalf("Stage: %v", err)
		}
		if !more {
			return calls
		}
		if calls > 1<<20 {
			t.Fatal("Stage never finishes")
		}
	}
}

// TestStage: a tick staged ahead of its time hands out nothing early, and
// at its due time everything pending in it, in due order, with what was
// added for it (or for an earlier tick) after it was staged, without what
// was done, trimmed or dropped meanwhile; a staged tick survives a clean
// reopen and a crash.
func TestStage(t *testing.T) {
	const due = t0 + 5_050 // tick 50 of 100 ms after t0
	type step func(t *testing.T, w *Wheel, dir string) *Wheel
	for _, tc := range []struct {
		name   string
		n      int   // entries added before staging, due at due + i%3
		budget int   // Stage's budget
		now    int64 // when staged
		after  step  // between staging and the due time
		want   func(p int32, off int64) bool
		spill  bool // the staged tick must have spilled
	}{
		{name: "small", n: 100, budget: 7, now: due - 900},
		{name: "one call", n: 100, budget: 1 << 20, now: due - 900},
		{name: "spilled", n: 2*scanBatch + 5, budget: 1000, now: due - 900, spill: true},
		{name: "late adds", n: 300, budget: 10, now: due - 900, after: func(t *testing.T, w *Wheel, _ string) *Wheel {
			for i := range int64(20) {
				mustAdd(t, w, due-900, Entry{Due: due - 60 + 3*i, Partition: 9, Offset: i, Payload: payloadOf(9, i)}) // this tick and the one before
			}
			return w
		}},
		{name: "done trim drop", n: 300, budget: 10, now: due - 900, after: func(t *testing.T, w *Wheel, _ string) *Wheel {
			if err := w.Done(0, 3); err != nil {
				t.Fatal(err)
			}
			if err := w.Trim(1, 50); err != nil {
				t.Fatal(err)
			}
			if err := w.Drop(2); err != nil {
				t.Fatal(err)
			}
			return w
		}, want: func(p int32, off int64) bool { return !(p == 0 && off == 3) && !(p == 1 && off < 50) && p != 2 }},
		{name: "reopen", n: 300, budget: 10, now: due - 900, after: func(t *testing.T, w *Wheel, dir string) *Wheel {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w, _ = openT(t, dir, Options{SegmentBytes: 1 << 20}, due-800)
			return w
		}},
		{name: "crash", n: 300, budget: 10, now: due - 900, after: func(t *testing.T, w *Wheel, dir string) *Wheel {
			mustFlush(t, w)
			if err := w.writeCheckpoint(); err != nil {
				t.Fatal(err)
			}
			crash(w)
			w, _ = openT(t, dir, Options{SegmentBytes: 1 << 20}, due-800)
			return w
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, _ := openT(t, dir, Options{SegmentBytes: 1 << 20}, t0)
			defer func() { w.Close() }()
			var want []Entry
			for i := range tc.n {
				p := int32(i % 4)
				off := int64(i / 4)
				e := Entry{Due: due + int64(i%3), Partition: p, Offset: off, Payload: payloadOf(p, off)}
				mustAdd(t, w, t0, e)
				if tc.want == nil || tc.want(p, off) {
					want = append(want, e)
				}
			}
			mustAdd(t, w, t0, Entry{Due: due + 100, Partition: 8, Offset: 1}) // the next tick: not staged with this one
			mustFlush(t, w)
			if more, err := w.Stage(tc.now, 100, tc.budget); err != nil || more {
				t.Fatalf("Stage with the tick 800 ms after the lead: %v, %v", more, err)
			}
			calls := stageAll(t, w, tc.now, 1000, tc.budget)
			if tc.budget < tc.n && calls < 2 {
				t.Fatalf("staged in %d call(s), budget %d for %d entries", calls, tc.budget, tc.n)
			}
			if w.sc.on || !w.q.has() || w.q.tick != w.tickOf(due) {
				t.Fatalf("not staged: scan on %v, queue %v tick %d", w.sc.on, w.q.has(), w.q.tick)
			}
			if tc.spill && !w.q.spilled {
				t.Fatal("the staged tick did not spill")
			}
			if more, err := w.Stage(tc.now, 1000, tc.budget); err != nil || more {
				t.Fatalf("Stage with a staged tick: %v, %v", more, err)
			}
			if nx, ok := w.NextExpiry(); !ok || nx != due {
				t.Fatalf("NextExpiry %d %v, want %d", nx, ok, due)
			}
			if tc.after != nil {
				w = tc.after(t, w, dir)
			}
			var early []Entry
			if tc.name == "late adds" {
				for i := range int64(20) {
					early = append(early, Entry{Due: due - 60 + 3*i, Partition: 9, Offset: i, Payload: payloadOf(9, i)})
				}
			}
			checkSame(t, expireAll(t, w, due-1), early) // only those due
			var got []Entry
			for {
				n, err := w.Expire(due+2, 1000, func(e Entry) {
					if e.Due > due+2 {
						t.Fatalf("early: %+v", e)
					}
					got = append(got, e)
				})
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
			}
			slices.SortFunc(want, cmpEntry)
			checkOrder(t, got)
			checkSame(t, got, want)
			if nx, ok := w.NextExpiry(); !ok || nx != due+100 {
				t.Fatalf("NextExpiry after the staged tick %d %v, want %d", nx, ok, due+100)
			}
		})
	}
}

// TestStageNotDueYet: Expire before a staged tick is due, or while its
// scan is under way, hands out only what is due (entries added late for
// earlier ticks), and finishes the scan once the tick is due.
func TestStageNotDueYet(t *testing.T) {
	const due = t0 + 5_050
	w, _ := openT(t, t.TempDir(), Options{}, t0)
	defer w.Close()
	for i := range int64(5000) {
		mustAdd(t, w, t0, Entry{Due: due, Partition: 1, Offset: i})
	}
	mustFlush(t, w)
	if more, err := w.Stage(due-500, 1000, 100); err != nil || !more {
		t.Fatalf("Stage: %v, %v (want a scan under way)", more, err)
	}
	mustAdd(t, w, due-500, Entry{Due: due - 400, Partition: 2, Offset: 0}) // a tick before the staged one
	if nx, ok := w.NextExpiry(); !ok || nx != due-400 {
		t.Fatalf("NextExpiry %d %v, want %d", nx, ok, due-400)
	}
	got := expireAll(t, w, due-300)
	if len(got) != 1 || got[0].Partition != 2 {
		t.Fatalf("handed out %v, want the late entry only", got)
	}
	if !w.sc.on {
		t.Fatal("the scan ended without Stage or its due time")
	}
	if nx, ok := w.NextExpiry(); !ok || nx != due {
		t.Fatalf("NextExpiry during the scan %d %v, want %d", nx, ok, due)
	}
	got = expireAll(t, w, due)
	if len(got) != 5000 || w.sc.on {
		t.Fatalf("handed out %d of 5000 at the due time, scan on %v", len(got), w.sc.on)
	}
	checkOrder(t, got)
}

// TestStageUndone: adds for a tick staged ahead beyond maxLateAhead undo
// the staging; every entry still comes out once, in order, and the tick is
// not staged again.
func TestStageUndone(t *testing.T) {
	const due = t0 + 5_050
	for _, finished := range []bool{false, true} {
		w, _ := openT(t, t.TempDir(), Options{}, t0)
		var want []Entry
		add := func(p int32, off, at int64) {
			e := Entry{Due: at, Partition: p, Offset: off, Payload: payloadOf(p, off)}
			mustAdd(t, w, due-900, e)
			want = append(want, e)
		}
		for i := range int64(3000) {
			add(1, i, due+i%7)
		}
		mustFlush(t, w)
		if finished {
			stageAll(t, w, due-900, 1000, 100)
		} else if more, err := w.Stage(due-900, 1000, 100); err != nil || !more {
			t.Fatalf("Stage: %v, %v", more, err)
		}
		for i := range int64(maxLateAhead + 1) {
			add(2, i, due-500+i%550) // ticks before the staged one, and it
		}
		if w.sc.on || w.q.has() || w.cur != w.tickOf(due) {
			t.Fatalf("finished %v: still staged (scan on %v, queue %v, cur %d)", finished, w.sc.on, w.q.has(), w.cur)
		}
		if len(w.late) > maxLateAhead {
			t.Fatalf("%d entries held in memory", len(w.late))
		}
		if more, err := w.Stage(due-900, 1000, 100); err != nil || more {
			t.Fatalf("staged again: %v, %v", more, err)
		}
		mustFlush(t, w)
		got := expireAll(t, w, due+1000)
		slices.SortFunc(want, cmpEntry)
		checkSame(t, got, want)
		w.Close()
	}
}

func TestStagePayloads(t *testing.T) {
	// the active segment's records kept by a staged scan (Wheel.recs) are
	// those handed out, though more are added before the due time
	const due = t0 + 5_050
	w, _ := openT(t, t.TempDir(), Options{}, t0)
	defer w.Close()
	for i := range int64(2000) {
		mustAdd(t, w, t0, Entry{Due: due, Partition: 1, Offset: i, Payload: bytes.Repeat([]byte{byte(i)}, int(i%700))})
	}
	mustFlush(t, w)
	stageAll(t, w, due-900, 1000, 64)
	for i := range int64(2000) {
		mustAdd(t, w, due-800, Entry{Due: due + 200, Partition: 2, Offset: i, Payload: bytes.Repeat([]byte{7}, 300)})
	}
	mustFlush(t, w)
	got := expireAll(t, w, due)
	if len(got) != 2000 {
		t.Fatalf("got %d of 2000", len(got))
	}
	for _, e := range got {
		if !bytes.Equal(e.Payload, bytes.Repeat([]byte{byte(e.Offset)}, int(e.Offset%700))) {
			t.Fatalf("entry %d: payload %d bytes, mixed", e.Offset, len(e.Payload))
		}
	}
}

// TestStageCheckpointMidScan: a checkpoint written while a staged scan is
// under way makes a restart scan the tick again: after a crash or a clean
// close, every entry of it comes out.
func TestStageCheckpointMidScan(t *testing.T) {
	const due = t0 + 5_050
	for _, clean := range []bool{false, true} {
		dir := t.TempDir()
		w, _ := openT(t, dir, Options{}, t0)
		for i := range int64(3000) {
			mustAdd(t, w, t0, Entry{Due: due + i%90, Partition: int32(i % 3), Offset: i})
		}
		mustFlush(t, w)
		if more, err := w.Stage(due-900, 1000, 100); err != nil || !more {
			t.Fatalf("Stage: %v, %v", more, err)
		}
		if clean {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := w.writeCheckpoint(); err != nil {
				t.Fatal(err)
			}
			crash(w)
		}
		w, _ = openT(t, dir, Options{}, due-800)
		got := expireAll(t, w, due+100)
		if len(got) != 3000 {
			t.Fatalf("clean %v: got %d of 3000", clean, len(got))
		}
		checkOrder(t, got)
		w.Close()
	}
}

// TestStageLaterLap: an entry added during a staged scan for a later lap
// of the slot being scanned (a tick staged when already due) is kept in
// the slot's span, and comes out on its lap.
func TestStageLaterLap(t *testing.T) {
	const due = t0 + 5_050
	w, _ := openT(t, t.TempDir(), Options{Horizon: 2 * time.Second}, t0)
	defer w.Close()
	for i := range int64(3000) {
		mustAdd(t, w, t0+4000, Entry{Due: due, Partition: 1, Offset: i})
	}
	mustFlush(t, w)
	now := due + 300
	if more, err := w.Stage(now, 0, 100); err != nil || !more {
		t.Fatalf("Stage: %v, %v", more, err)
	}
	lap := due + int64(w.g.nslots)*w.g.tick
	mustAdd(t, w, now, Entry{Due: lap, Partition: 2, Offset: 0})
	if got := expireAll(t, w, now); len(got) != 3000 {
		t.Fatalf("got %d of 3000", len(got))
	}
	if nx, ok := w.NextExpiry(); !ok || nx > lap {
		t.Fatalf("NextExpiry %d %v, want at most %d", nx, ok, lap)
	}
	if got := expireAll(t, w, lap); len(got) != 1 || got[0].Partition != 2 {
		t.Fatalf("on its lap: %v", got)
	}
}
