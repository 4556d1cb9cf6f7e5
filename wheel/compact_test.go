package wheel

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// settle flushes until the compactions queued so far are installed, so
// that a benchmark measures the wheel as it is once its background work
// has caught up (in a running relay, all sealed segments but the newest).
func settle(w *Wheel) error {
	for w.job != nil || len(w.compactQ) > 0 {
		if j := w.job; j != nil {
			<-j.done
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// reportCompaction reports the CPU time of the compactions installed so far
// per entry compacted.
func reportCompaction(b *testing.B, w *Wheel) {
	if w.compactEntries > 0 {
		b.ReportMetric(float64(w.compactCPU)/float64(w.compactEntries), "compact-cpu-ns/entry")
	}
}

// compactedCount returns how many segments of w are compacted.
func compactedCount(w *Wheel) int {
	n := 0
	for _, s := range w.segs {
		if s.compacted {
			n++
		}
	}
	return n
}

// fillCompacted adds n entries with payloads due over the next minute to
// small segments and waits for their compaction.
func fillCompacted(t *testing.T, dir string, n int64) (*Wheel, []Entry) {
	t.Helper()
	w, _ := openT(t, dir, Options{SegmentBytes: 8 << 10, Horizon: time.Minute}, t0)
	r := rand.New(rand.NewPCG(3, 4))
	var want []Entry
	for i := range n {
		e := Entry{Due: t0 + r.Int64N(60_000), Partition: int32(i % 3), Offset: i / 3}
		e.Payload = payloadOf(e.Partition, e.Offset)
		mustAdd(t, w, t0, e)
		want = append(want, e)
		if i%100 == 99 {
			mustFlush(t, w)
		}
	}
	mustFlush(t, w)
	if err := settle(w); err != nil {
		t.Fatal(err)
	}
	if c := compactedCount(w); c < w.SegmentCount()-2 || c == 0 {
		t.Fatalf("%d of %d segments compacted", c, w.SegmentCount())
	}
	slices.SortFunc(want, cmpEntry)
	return w, want
}

func checkSame(t *testing.T, got, want []Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if cmpEntry(got[i], want[i]) != 0 || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestCompaction: compacted segments hand out the same entries in the same
// order, with their payloads, before and after a crash and a clean reopen.
func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	w, want := fillCompacted(t, dir, 3000)
	// half now, the rest after a crash (nothing done is flushed after it)
	got := expireAll(t, w, t0+30_000)
	for _, e := range got {
		w.Done(e.Partition, e.Offset)
	}
	mustFlush(t, w)
	half := len(got)
	checkSame(t, got, want[:half])
	crash(w)
	w, rep := openT(t, dir, Options{SegmentBytes: 8 << 10, Horizon: time.Minute}, t0+30_000)
	if len(rep.Problems) != 0 || rep.Recovered != int64(len(want)-half) {
		t.Fatalf("after crash: %+v", rep)
	}
	if compactedCount(w) == 0 {
		t.Fatal("no compacted segment after reopen")
	}
	checkSame(t, expireAll(t, w, t0+60_000), want[half:])
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactionStaleCheckpoint: a crash between the rename of a compacted
// segment and the next checkpoint leaves a checkpoint that lists the
// segment's old size, and a crash before its new index is written leaves
// the old index, of the same size when the segment held no marks; Open must
// accept the first without a rebuild and rebuild the second index.
func TestCompactionStaleCheckpoint(t *testing.T) {
	dir := t.TempDir()
	opt := Options{SegmentBytes: 8 << 10, Horizon: time.Minute}
	w, _ := openT(t, dir, opt, t0)
	r := rand.New(rand.NewPCG(5, 6))
	var want []Entry
	for i := range int64(1000) {
		e := Entry{Due: t0 + r.Int64N(60_000), Partition: 1, Offset: i, Payload: payloadOf(1, i)}
		mustAdd(t, w, t0, e)
		want = append(want, e)
	}
	mustFlush(t, w)
	// keep the checkpoints of before any compaction
	saved := map[string][]byte{}
	names, _ := filepath.Glob(filepath.Join(dir, "*.idx"))
	names = append(names, filepath.Join(dir, "checkpoint.0"), filepath.Join(dir, "checkpoint.1"))
	for _, path := range names {
		if b, err := os.ReadFile(path); err == nil {
			saved[filepath.Base(path)] = b
		}
	}
	if len(saved) < 3 {
		t.Fatalf("saved only %d files", len(saved))
	}
	if err := settle(w); err != nil {
		t.Fatal(err)
	}
	if compactedCount(w) == 0 {
		t.Fatal("nothing compacted")
	}
	crash(w)
	for name, b := range saved {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, rep := openT(t, dir, opt, t0)
	defer w.Close()
	if rep.Recovered != 1000 || rep.Lost != 0 || rep.Truncated != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, p := range rep.Problems { // the old indexes, nothing else
		if !strings.Contains(p, "before or after its compaction; indexing the segment again") {
			t.Fatalf("problem %q", p)
		}
	}
	slices.SortFunc(want, cmpEntry)
	checkSame(t, expireAll(t, w, t0+60_000), want)
}

// TestCompactionRebuild: without checkpoints, compacted segments are
// replayed like log segments (only the marks they dropped are forgotten).
func TestCompactionRebuild(t *testing.T) {
	dir := t.TempDir()
	w, want := fillCompacted(t, dir, 2000)
	crash(w)
	for _, name := range []string{"checkpoint.0", "checkpoint.1"} {
		os.Remove(filepath.Join(dir, name))
	}
	w, rep := openT(t, dir, Options{SegmentBytes: 8 << 10, Horizon: time.Minute}, t0)
	defer w.Close()
	if rep.Recovered != int64(len(want)) || rep.Lost != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, p := range rep.Problems {
		if strings.Contains(p, "chain") {
			t.Fatalf("chain problem: %s", p)
		}
	}
	checkSame(t, expireAll(t, w, t0+60_000), want)
}

// TestCompactionRelocates: entries scanned (tick queue) or added late
// before their segment was compacted still come out with their payloads.
func TestCompactionRelocates(t *testing.T) {
	dir := t.TempDir()
	opt := Options{SegmentBytes: 8 << 10, Horizon: time.Minute}
	w, _ := openT(t, dir, opt, t0)
	defer w.Close()
	var want []Entry
	// a burst in one tick, spread over many segments, each entry next to
	// one due at a random later time (else the segments are grouped and
	// not compacted)
	r := rand.New(rand.NewPCG(7, 8))
	for i := range int64(600) {
		e := Entry{Due: t0 + 1000 + i%50, Partition: 2, Offset: i, Payload: payloadOf(2, i)}
		mustAdd(t, w, t0, e)
		want = append(want, e)
		mustAdd(t, w, t0, Entry{Due: t0 + 10_000 + r.Int64N(40_000), Partition: 5, Offset: i, Payload: payloadOf(5, i)})
	}
	mustFlush(t, w)
	slices.SortFunc(want, cmpEntry)
	// scan the tick, hand out a few, then let compaction move the rest
	var got []Entry
	if _, err := w.Expire(t0+1100, 10, func(e Entry) { got = append(got, e) }); err != nil {
		t.Fatal(err)
	}
	if !w.q.has() {
		t.Fatal("nothing left in the tick queue")
	}
	// roll more segments and add late entries (due before now) to them
	for i := range int64(400) {
		e := Entry{Due: t0 + 500 + i, Partition: 3, Offset: i, Payload: payloadOf(3, i)}
		mustAdd(t, w, t0+1100, e)
		want = append(want, e)
	}
	for i := range int64(600) { // roll past the late ones
		mustAdd(t, w, t0+1100, Entry{Due: t0 + 50_000, Partition: 4, Offset: i, Payload: make([]byte, 40)})
	}
	mustFlush(t, w)
	if err := settle(w); err != nil {
		t.Fatal(err)
	}
	if w.compacted == 0 {
		t.Fatal("nothing compacted")
	}
	for {
		n, err := w.Expire(t0+1100, 1000, func(e Entry) { got = append(got, e) })
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if w.Corrupt() != 0 || len(w.Problems()) != 0 {
		t.Fatalf("corrupt %d, problems %v", w.Corrupt(), w.Problems())
	}
	slices.SortFunc(got, cmpEntry)
	slices.SortFunc(want, cmpEntry)
	checkSame(t, got, want)
}

// TestPrevPatcher: patching the checksum of a changed prev field gives the
// checksum of the changed record, for many lengths.
func TestPrevPatcher(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var pp prevPatcher
	for n := entryHeaderSize; n < entryHeaderSize+200; n++ {
		rec := make([]byte, n)
		for i := range rec {
			rec[i] = byte(r.Uint32())
		}
		crc := checksum(rec[4:])
		old, neu := le.Uint32(rec[20:]), r.Uint32()
		le.PutUint32(rec[20:], neu)
		if got, want := pp.patch(crc, rec[4:], old^neu), checksum(rec[4:]); got != want {
			t.Fatalf("length %d: patched %08x, want %08x", n, got, want)
		}
	}
}

// TestNoCompaction: with NoCompaction nothing is rewritten, and a directory
// with compacted segments still reads back.
func TestNoCompaction(t *testing.T) {
	dir := t.TempDir()
	w, want := fillCompacted(t, dir, 2000)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	opt := Options{SegmentBytes: 8 << 10, Horizon: time.Minute, NoCompaction: true}
	w, rep := openT(t, dir, opt, t0)
	defer w.Close()
	if len(rep.Problems) != 0 {
		t.Fatalf("problems %v", rep.Problems)
	}
	before := compactedCount(w)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range int64(500) { // roll more segments, with random due times (grouped ones are not compacted anyway)
		e := Entry{Due: t0 + r.Int64N(60_000), Partition: 7, Offset: i, Payload: payloadOf(7, i)}
		mustAdd(t, w, t0, e)
		want = append(want, e)
	}
	mustFlush(t, w)
	if err := settle(w); err != nil {
		t.Fatal(err)
	}
	if w.compacted != 0 || compactedCount(w) != before {
		t.Fatalf("compacted %d (installs %d), before %d", compactedCount(w), w.compacted, before)
	}
	slices.SortFunc(want, cmpEntry)
	checkSame(t, expireAll(t, w, t0+60_000), want)
}

// TestGroupedNotCompacted: segments whose entries were added due together
// (a burst), in due order, or as partitions each in due order read in turn
// a batch at a time (sparse: shorter chains than groupedChain) are not
// rewritten, neither when sealed nor after a restart, and hand out the same
// entries in order; segments of random due times are (fillCompacted).
func TestGroupedNotCompacted(t *testing.T) {
	roundRobin := func(i int64) Entry { return Entry{Due: t0 + 30_000, Partition: int32(i % 3), Offset: i / 3} }
	for _, tc := range []struct {
		name  string
		entry func(i int64) Entry
	}{
		{"burst", roundRobin},
		{"in-order", func(i int64) Entry {
			e := roundRobin(i)
			e.Due = t0 + 1000 + i*10
			return e
		}},
		{"partitions-in-turn", func(i int64) Entry {
			// batches of 50 of each of 4 partitions in turn, each
			// partition 40 ms apart in due order: 2.5 entries per
			// tick and partition, chains of 1 or 2 per segment
			const batch, parts = 50, 4
			b := i / batch
			k := (b/parts)*batch + i%batch
			return Entry{Due: t0 + 1000 + k*40, Partition: int32(b % parts), Offset: k}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, opt := t.TempDir(), Options{SegmentBytes: 8 << 10, Horizon: 2 * time.Minute}
			w, _ := openT(t, dir, opt, t0)
			var want []Entry
			for i := range int64(2000) {
				e := tc.entry(i)
				e.Payload = payloadOf(e.Partition, e.Offset)
				mustAdd(t, w, t0, e)
				want = append(want, e)
				if i%100 == 99 {
					mustFlush(t, w)
				}
			}
			mustFlush(t, w)
			if err := settle(w); err != nil {
				t.Fatal(err)
			}
			if w.SegmentCount() < 5 {
				t.Fatalf("%d segments, want several sealed", w.SegmentCount())
			}
			if c := compactedCount(w); c != 0 {
				t.Fatalf("%d of %d segments compacted, want none", c, w.SegmentCount())
			}
			// Nor after a restart: their indexes say they are grouped.
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w, _ = openT(t, dir, opt, t0)
			defer w.Close()
			if err := settle(w); err != nil {
				t.Fatal(err)
			}
			if c := compactedCount(w); c != 0 || w.compacted != 0 {
				t.Fatalf("after a restart %d of %d segments compacted, want none", c, w.SegmentCount())
			}
			slices.SortFunc(want, cmpEntry)
			checkSame(t, expireAll(t, w, t0+120_000), want)
		})
	}
}
