package wheel

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// crash abandons w as kill -9 would: files closed, nothing more written.
func crash(w *Wheel) { w.closeFiles(); w.closed = true }

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no segment")
	}
	slices.Sort(segs)
	return segs[len(segs)-1]
}

func TestTornTailReportsLost(t *testing.T) {
	dir := t.TempDir()
	w, _ := openT(t, dir, Options{}, t0)
	for i := range int64(100) {
		mustAdd(t, w, t0, Entry{Due: t0 + 5000, Partition: 0, Offset: i, Payload: payloadOf(0, i)})
	}
	w.SetHandled(0, 500) // declared ahead of entries added later: must come down
	mustFlush(t, w)
	var posOf110 int64
	for i := int64(100); i < 200; i++ {
		if i == 110 {
			posOf110 = w.active.size + int64(len(w.wbuf))
		}
		mustAdd(t, w, t0, Entry{Due: t0 + 5000, Partition: 0, Offset: i, Payload: payloadOf(0, i)})
	}
	mustFlush(t, w)
	crash(w)
	// a bit flip in entry 110 cuts the log there
	path := lastSegment(t, dir)
	b, _ := os.ReadFile(path)
	b[posOf110+45] ^= 0x40
	os.WriteFile(path, b, 0o644)

	w, rep := openT(t, dir, Options{}, t0)
	defer w.Close()
	if rep.Recovered != 110 || rep.Lost != 90 || rep.Truncated == 0 {
		t.Fatalf("report %+v", rep)
	}
	if want := []Range{{0, 110, 199}}; !slices.Equal(rep.LostRanges, want) {
		t.Fatalf("lost ranges %+v want %+v", rep.LostRanges, want)
	}
	if h := w.Handled(0); h >= 110 {
		t.Fatalf("Handled %d not below the cut entry", h)
	}
	if got := expireAll(t, w, t0+5000); len(got) != 110 {
		t.Fatalf("got %d", len(got))
	}
	// the cut is final: a second reopen reports nothing
	w.Close()
	w, rep = openT(t, dir, Options{}, t0)
	defer w.Close()
	if rep.Lost != 0 || rep.Truncated != 0 || len(rep.Problems) != 0 || rep.Recovered != 110 {
		t.Fatalf("second report %+v", rep)
	}
}

func TestTruncatedTail(t *testing.T) {
	dir := t.TempDir()
	w, _ := openT(t, dir, Options{}, t0)
	for i := range int64(50) {
		mustAdd(t, w, t0, Entry{Due: t0 + 100, Offset: i, Payload: make([]byte, 30)})
	}
	mustFlush(t, w)
	crash(w)
	path := lastSegment(t, dir)
	st, _ := os.Stat(path)
	os.Truncate(path, st.Size()-13)
	w, rep := openT(t, dir, Options{}, t0)
	defer w.Close()
	if rep.Recovered != 49 || rep.Truncated == 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestCheckpointFallback(t *testing.T) {
	dir := t.TempDir()
	opt := Options{SegmentBytes: 4 << 10, Horizon: time.Minute}
	w, _ := openT(t, dir, opt, t0)
	for i := range int64(500) {
		mustAdd(t, w, t0, Entry{Due: t0 + i*100, Partition: 3, Offset: i, Payload: payloadOf(3, i)})
	}
	w.SetHandled(3, 499)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, _ = openT(t, dir, opt, t0)
	for _, e := range expireAll(t, w, t0+10_000) {
		w.Done(e.Partition, e.Offset)
	}
	mustFlush(t, w)
	crash(w)
	// the newest checkpoint is torn: the other one and the log are used
	newest := ckptPath(dir, w.ckptGen)
	b, _ := os.ReadFile(newest)
	os.WriteFile(newest, b[:len(b)/2], 0o644)
	w, rep := openT(t, dir, opt, t0)
	defer w.Close()
	if rep.Recovered != 399 || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "checkpoint") {
		t.Fatalf("report %+v", rep)
	}
	if w.Handled(3) != 499 {
		t.Fatalf("handled %d", w.Handled(3))
	}
	got := expireAll(t, w, t0+60_000)
	if len(got) != 399 || got[0].Offset != 101 {
		t.Fatalf("got %d first %+v", len(got), got[0])
	}
}

func TestRebuildWithoutCheckpoint(t *testing.T) {
	dir := t.TempDir()
	opt := Options{SegmentBytes: 4 << 10}
	w, _ := openT(t, dir, opt, t0)
	for i := range int64(300) {
		mustAdd(t, w, t0, Entry{Due: t0 + 1000 + i, Partition: 1, Offset: i, Payload: payloadOf(1, i)})
	}
	w.SetHandled(1, 299)
	mustFlush(t, w)
	for _, e := range expireAll(t, w, t0+1099) {
		w.Done(e.Partition, e.Offset)
	}
	w.Close()
	os.Remove(filepath.Join(dir, "checkpoint.0"))
	os.Remove(filepath.Join(dir, "checkpoint.1"))
	w, rep := openT(t, dir, opt, t0)
	defer w.Close()
	if rep.Recovered != 200 || len(rep.Problems) == 0 {
		t.Fatalf("report %+v", rep)
	}
	if w.Handled(1) != -1 {
		t.Fatalf("handled %d after a rebuild", w.Handled(1))
	}
	if got := expireAll(t, w, t0+2000); len(got) != 200 || got[0].Offset != 100 {
		t.Fatalf("got %d", len(got))
	}
}

func TestForeignFiles(t *testing.T) {
	dir := t.TempDir()
	w, _ := openT(t, dir, Options{}, t0)
	mustAdd(t, w, t0, Entry{Due: t0 + 10, Offset: 1, Payload: []byte("x")})
	w.Close()
	junk := bytes.Repeat([]byte("not a wheel file "), 100)
	for _, name := range []string{"00000009.seg", "checkpoint.0", "checkpoint.1", "00000001.idx", "notes.txt"} {
		os.WriteFile(filepath.Join(dir, name), junk, 0o644)
	}
	w, rep := openT(t, dir, Options{}, t0)
	defer w.Close()
	if len(rep.Problems) < 3 {
		t.Fatalf("problems %q", rep.Problems)
	}
	if _, err := os.Stat(filepath.Join(dir, "00000009.seg.bad")); err != nil {
		t.Fatalf("foreign segment not moved aside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal("unrelated file touched")
	}
	if got := expireAll(t, w, t0+10); len(got) != 1 || string(got[0].Payload) != "x" {
		t.Fatalf("got %+v", got)
	}
	t.Logf("problems: %q", rep.Problems)
}

func TestBitRotInSealedSegment(t *testing.T) {
	dir := t.TempDir()
	opt := Options{SegmentBytes: 4 << 10}
	w, _ := openT(t, dir, opt, t0)
	for i := range int64(200) {
		mustAdd(t, w, t0, Entry{Due: t0 + 1000, Offset: i, Payload: make([]byte, 64)})
	}
	w.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	slices.Sort(segs)
	f, _ := os.OpenFile(segs[0], os.O_RDWR, 0)
	b, _ := io.ReadAll(f)
	b[segHeaderSize+entryHeaderSize+5] ^= 1 // the payload of the first entry
	f.WriteAt(b, 0)
	f.Close()
	w, _ = openT(t, dir, opt, t0)
	defer w.Close()
	got := expireAll(t, w, t0+1000)
	if len(got) == 200 || len(got) == 0 || len(w.Problems()) == 0 {
		t.Fatalf("got %d entries, problems %q", len(got), w.Problems())
	}
	checkOrder(t, got)
}
