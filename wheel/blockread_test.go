package wheel

import "testing"

// TestBurstReadsOnce: a burst due in one millisecond, its partitions
// interleaved in runs of about 50 KiB as a relay adds what it fetched, is
// read back from the active segment about twice: once by the scan, which
// walks the slot's chain backwards, once by the hand-out, which goes
// forwards partition by partition. Reading the aligned block around each
// miss read most blocks three times over, for the record that runs past
// each block's end.
func TestBurstReadsOnce(t *testing.T) {
	if !mappedWrites {
		t.Skip("the active segment is read through its mapping here")
	}
	const n, size, parts, run = 20_000, 200, 4, 200
	w, _ := openT(t, t.TempDir(), Options{SegmentBytes: 64 << 20, Sync: SyncNone}, t0)
	defer w.Close()
	payload := make([]byte, size)
	for i := range n {
		// runs of one partition, as a fetch of each in turn adds them
		p := int32(i / run % parts)
		off := int64(i/(run*parts)*run + i%run)
		mustAdd(t, w, t0, Entry{Due: t0 + 1000, Partition: p, Offset: off, Payload: payload})
	}
	mustFlush(t, w)
	written := w.active.size
	if got := expireAll(t, w, t0+1000); len(got) != n {
		t.Fatalf("handed out %d of %d entries", len(got), n)
	}
	read := w.blocks.bytes
	t.Logf("%d KiB written, %d KiB read back (%.2fx)", written>>10, read>>10, float64(read)/float64(written))
	if limit := written * 5 / 2; read > limit {
		t.Errorf("read back %d bytes of %d written, want at most %d", read, written, limit)
	}
}
