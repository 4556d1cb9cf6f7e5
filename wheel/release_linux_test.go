package wheel

import "testing"

// rssFileKB returns RssFile of /proc/self/status: the mapped file pages
// the process's RSS counts (segments, and the test binary's own text).
func rssFileKB(t *testing.T) int64 {
	t.Helper()
	v, ok := procStatusKB()["RssFile"]
	if !ok {
		t.Skip("no RssFile in /proc/self/status")
	}
	return v
}

// TestBurstReleasesMappedPages: a burst (100 MB of entries due in the same
// millisecond, handed out from one scan) does not map the whole wheel into
// the process: the pages read are released every releaseBytes, not only
// every releaseEvery scans.
func TestBurstReleasesMappedPages(t *testing.T) {
	const n, size = 96_000, 1024
	w, _ := openT(t, t.TempDir(), Options{SegmentBytes: 8 << 20, Sync: SyncNone}, t0)
	payload := make([]byte, size)
	for i := range n {
		if err := w.Add(t0, Entry{Due: t0 + 1000, Partition: int32(i % 4), Offset: int64(i / 4), Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	base, peak := rssFileKB(t), int64(0)
	for got := 0; got < n; {
		k, err := w.Expire(t0+1000, 1000, func(e Entry) { w.Done(e.Partition, e.Offset) })
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			t.Fatalf("wheel ran dry after %d of %d entries", got, n)
		}
		got += k
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, rssFileKB(t)-base)
	}
	// 100 MB read; at most releaseBytes (32 MiB) of it, plus the
	// fault-around of the pages on both sides of each segment's range,
	// stays mapped. A fixed figure, so that raising releaseBytes fails.
	if limit := int64(48 << 10); peak > limit {
		t.Errorf("mapped file pages grew by %d KiB while handing out the burst, want at most %d KiB", peak, limit)
	}
	t.Logf("mapped file pages grew by at most %d KiB over %d MiB handed out", peak, n*size>>20)
}
