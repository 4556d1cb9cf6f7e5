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

// TestSyncStart: SyncStart writes without an fsync, its Syncer makes the
// batch survive a power loss, and a Sync while a Syncer is outstanding
// fsyncs what that Syncer holds before it returns (else it would skip the
// files the Syncer took and report durable what is not).
func TestSyncStart(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "w")
	opt := Options{Sync: SyncManual}
	w, _ := openT(t, dir, opt, t0)
	d := watchDisk(t, dir)
	pendingAfterLoss := func(name string) int64 {
		t.Helper()
		d.powerLoss(t, filepath.Join(base, name))
		o, _ := openT(t, filepath.Join(base, name), opt, t0)
		defer o.Close()
		return o.Pending()
	}
	add := func(from, to int64) {
		for off := from; off < to; off++ {
			mustAdd(t, w, t0, Entry{Due: t0 + 1000, Partition: 0, Offset: off, Payload: payloadOf(0, off)})
		}
	}
	add(0, 10)
	s, err := w.SyncStart()
	if err != nil {
		t.Fatal(err)
	}
	if n := pendingAfterLoss("started"); n != 0 {
		t.Errorf("power loss after SyncStart: %d entries pending, want 0 (SyncStart must not fsync)", n)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := pendingAfterLoss("synced"); n != 10 {
		t.Errorf("power loss after the Syncer returned: %d entries pending, want 10", n)
	}

	add(10, 20)
	if _, err := w.Expire(t0+1000, 3, func(e Entry) {
		if err := w.Done(e.Partition, e.Offset); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	s2, err := w.SyncStart()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil { // s2 not run by its caller yet
		t.Fatal(err)
	}
	if n := pendingAfterLoss("sync-over-syncer"); n != 17 {
		t.Errorf("power loss after Sync with a Syncer outstanding: %d entries pending, want 17 (20 added, 3 done)", n)
	}
	if err := s2.Sync(); err != nil {
		t.Errorf("the Syncer run by Sync: %v", err)
	}
	s3, err := w.SyncStart()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil { // with s3 outstanding
		t.Fatal(err)
	}
	if err := s3.Sync(); err != nil {
		t.Errorf("the Syncer run by Close: %v", err)
	}
}
