package wheel

import (
	"path/filepath"
	"testing"
)

// TestSyncManual: under SyncManual a Flush writes but does not fsync, so a
// power loss after it keeps none of the batch; Sync makes the batch and its
// done marks survive one.
func TestSyncManual(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "w")
	opt := Options{Sync: SyncManual}
	w, _ := openT(t, dir, opt, t0)
	d := watchDisk(t, dir)
	for off := range int64(10) {
		mustAdd(t, w, t0, Entry{Due: t0 + 1000, Partition: 0, Offset: off, Payload: payloadOf(0, off)})
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	d.powerLoss(t, filepath.Join(base, "after-flush"))
	lost, _ := openT(t, filepath.Join(base, "after-flush"), opt, t0)
	if n := lost.Pending(); n != 0 {
		t.Errorf("power loss after Flush under SyncManual: %d entries pending, want 0 (Flush must not fsync)", n)
	}
	lost.Close()

	if _, err := w.Expire(t0+1000, 3, func(e Entry) {
		if err := w.Done(e.Partition, e.Offset); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	d.powerLoss(t, filepath.Join(base, "after-sync"))
	kept, _ := openT(t, filepath.Join(base, "after-sync"), opt, t0)
	defer kept.Close()
	if n := kept.Pending(); n != 7 {
		t.Errorf("power loss after Sync: %d entries pending, want 7 (10 added, 3 done)", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
