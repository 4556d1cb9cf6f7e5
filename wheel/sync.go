package wheel

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// SyncManual fsyncs only when the caller asks, with [Wheel.Sync] or
// [Wheel.SyncStart]: Flush then writes without an fsync. What was written
// survives kill -9; what was written since the last sync may be lost to a
// power loss (never a checkpoint ahead of the data: checkpoints follow a
// Sync). The relay uses it at least once, to fsync once per offset commit
// instead of once per batch.
const SyncManual = SyncNone + 1

// Sync is Flush followed by an fsync, whatever the sync policy: once it
// returns, everything buffered before it survives kill -9 and power loss.
func (w *Wheel) Sync() error { return w.checkedFlush(true) }

// SyncStart is [Wheel.Sync] cut in two, so that the caller's goroutine
// does not wait for the disk: it writes what is buffered (as Flush does)
// and returns a Syncer holding the files written since the last sync.
// Once the Syncer's Sync returns nil, everything buffered before
// SyncStart survives a power loss; the wheel meanwhile goes on, on its own
// goroutine, and the Syncer shares none of its state.
//
// Checkpoints, deleting free segments and installing or starting a
// compaction need what precedes them on disk first; when one of them is
// due, SyncStart does a whole Sync itself, before it returns, and the
// Syncer it returns has nothing left to do. That happens about once per
// quarter segment written (Options.SegmentBytes/4).
//
// At most one Syncer is outstanding: SyncStart, Sync and Close first
// finish the one before (running it if nobody has) and fail the wheel if
// its fsync failed. A Syncer's failure is not retried: the wheel is then
// failed (reopen to recover), as after a failed Sync.
func (w *Wheel) SyncStart() (*Syncer, error) {
	if err := w.usable(); err != nil {
		return nil, err
	}
	if err := w.awaitSyncer(); err != nil {
		return nil, w.fail(err)
	}
	if w.housekeepingDue() {
		if err := w.checkedFlush(true); err != nil {
			return nil, err
		}
		return &Syncer{}, nil
	}
	if err := w.flush(false); err != nil {
		return nil, w.fail(err)
	}
	s := &Syncer{}
	for _, seg := range w.segs {
		if seg.dirty {
			// Its own descriptor of the same file: the wheel may close
			// or replace seg.f before the fsync runs.
			f, err := os.OpenFile(seg.path, os.O_RDWR, 0)
			if err != nil {
				s.close()
				return nil, w.fail(fmt.Errorf("wheel: sync %s: %w", seg.path, err))
			}
			s.files = append(s.files, f)
			seg.dirty = false
		}
		if seg.idxFile != nil { // written once when the segment was sealed
			s.files = append(s.files, seg.idxFile)
			seg.idxFile = nil
		}
	}
	if w.dirDirty {
		d, err := os.Open(w.dir)
		if err != nil {
			s.close()
			return nil, w.fail(fmt.Errorf("wheel: sync dir: %w", err))
		}
		s.files = append(s.files, d)
		w.dirDirty = false
	}
	w.syncer = s
	return s, nil
}

// housekeepingDue reports whether the next durable flush has more to do
// than the fsync (flush): a checkpoint, a reclaim that would free a
// segment, a compaction to install or to start.
func (w *Wheel) housekeepingDue() bool {
	if w.sinceCkpt >= w.ckptEvery || w.compactWaits() {
		return true
	}
	if w.job == nil && len(w.compactQ) > 0 {
		return true
	}
	if w.sinceReclaim >= reclaimEvery || (w.pending == 0 && len(w.segs) > 1) {
		if len(w.freeSegments()) > 0 {
			return true
		}
		w.sinceReclaim = 0 // nothing to free: look again after reclaimEvery more
	}
	return false
}

// awaitSyncer finishes the outstanding Syncer, if any, and returns its
// error. Called before anything that counts on what it syncs.
func (w *Wheel) awaitSyncer() error {
	s := w.syncer
	if s == nil {
		return nil
	}
	w.syncer = nil
	return s.Sync()
}

// Syncer is the fsync half of [Wheel.SyncStart]. Its Sync may be called
// from any goroutine, once or more: it runs once, and every call returns
// its result.
type Syncer struct {
	once  sync.Once
	files []*os.File
	err   error
}

// Sync fsyncs the files written before the SyncStart that returned s and
// closes s's descriptors of them.
func (s *Syncer) Sync() error {
	s.once.Do(func() {
		var errs []error
		for _, f := range s.files {
			if err := fsync(f); err != nil {
				errs = append(errs, fmt.Errorf("wheel: sync %s: %w", f.Name(), err))
			}
		}
		s.close()
		s.err = errors.Join(errs...)
	})
	return s.err
}

func (s *Syncer) close() {
	for _, f := range s.files {
		f.Close()
	}
	s.files = nil
}
