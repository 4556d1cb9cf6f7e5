package wheel

import "slices"

// Stage does ahead of time the work Expire does when a tick comes due: the
// scan of the tick (every segment's chain of its slot read, the pending
// entries sorted), so that the tick's first entry is handed out as soon as
// it is due, not after the scan of the whole tick (a burst of 200,000
// entries takes 20 to 100 ms). Call it while there is nothing else to do.
//
// When no scanned entry waits to be handed out and the next tick that may
// hold pending entries begins at most lead ms after now, Stage begins its
// scan; it then walks about budget records of the tick's chains per call,
// and reports true while the scan is not finished: call it again. Expire
// finishes the scan if the tick comes due first. Nothing comes out early:
// the staged entries wait for their due times like any other.
//
// An entry added for a staged tick, or for a tick before it, is held in
// memory as when added for a tick already scanned; once more than
// maxLateAhead are held so while the staged tick is not yet due, the
// staging is undone (the tick is scanned again when due) and that tick is
// not staged again.
func (w *Wheel) Stage(now, lead int64, budget int) (bool, error) {
	if err := w.usable(); err != nil {
		return false, err
	}
	w.observe(now)
	if !w.sc.on {
		if w.q.has() || w.pending == 0 {
			return false, nil // a tick being handed out: it comes first
		}
		t, found := w.nextTick()
		if !found || t*w.g.tick > now+lead || t+1 == w.noStage {
			return false, nil
		}
		w.cur = t + 1
		w.beginScan(t)
	}
	if err := w.scanSteps(max(budget, 1)); err != nil {
		return false, w.fail(err)
	}
	return w.sc.on, nil
}

// maxLateAhead bounds the entries held in memory (Wheel.late) while a
// tick is staged ahead of its time; beyond it, unstage.
const maxLateAhead = scanBatch

// checkLate undoes a staging that holds too many late entries in memory.
// It is called by Add after it held one there.
func (w *Wheel) checkLate() {
	if (!w.sc.on && !w.q.has()) || w.q.tick <= w.tickOf(w.lastNow) {
		return // not staged ahead, or the tick is due: its entries may be in flight
	}
	w.unstage()
}

// unstage undoes the scan of tick q.tick, begun or finished, none of whose
// entries was handed out (none is due yet): the tick is scanned again when
// due. The entries added for it since then, held in memory, are left to
// that scan: each lies in its slot's chain like any other. Entries added
// for ticks before it stay in memory (no scan will come for them).
func (w *Wheel) unstage() {
	t := w.q.tick
	w.noStage = t + 1
	w.sc.on = false
	clear(w.stage)
	w.stage = w.stage[:0]
	w.cursors = w.cursors[:0]
	w.q.begin(t) // empties it
	w.cur = t
	w.sum[w.slotOf(t)].extend(t * w.g.tick)
	w.sum[w.slotOf(t)].extend((t+1)*w.g.tick - 1)
	w.late = slices.DeleteFunc(w.late, func(c cand) bool { return w.tickOf(c.due) >= t })
	slices.SortFunc(w.late, cmpCand) // a sorted slice is a heap
	w.nextKnown = false
}
