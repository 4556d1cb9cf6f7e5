package wheel

import "math"

// Time is cut into ticks of Options.Tick; tick t belongs to slot t mod
// nslots. Each segment chains its entries per slot (see segment.go); in
// memory the wheel keeps, per slot, only a span: a lower and an upper bound
// of the due times of the pending entries of the slot that are not yet
// scanned. The spans answer "which tick must be scanned next" and
// NextExpiry without touching the disk.

const maxSlots = 1 << 22

type span struct{ min, max int64 }

func emptySpan() span { return span{math.MaxInt64, math.MinInt64} }

func (s span) empty() bool { return s.min > s.max }

func (s *span) extend(due int64) {
	s.min = min(s.min, due)
	s.max = max(s.max, due)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (w *Wheel) tickOf(due int64) int64 { return floorDiv(due, w.g.tick) }

func (w *Wheel) slotOf(t int64) int {
	n := int64(w.g.nslots)
	m := t % n
	if m < 0 {
		m += n
	}
	return int(m)
}

// covers reports whether slot(t) may hold pending entries of tick t.
func (w *Wheel) covers(t int64) bool {
	sp := w.sum[w.slotOf(t)]
	return !sp.empty() && w.tickOf(sp.min) <= t && t <= w.tickOf(sp.max)
}

// findTick returns the smallest tick in [from, limit] that may hold entries.
// It walks the next lap tick by tick (the caller moves from past what it
// found, so a catch-up costs one step per tick) and beyond that takes, per
// slot, the first tick its span allows.
func (w *Wheel) findTick(from, limit int64) (int64, bool) {
	if limit < from {
		return 0, false
	}
	n := int64(w.g.nslots)
	end := min(limit, from+n-1)
	for t := from; t <= end; t++ {
		if w.covers(t) {
			return t, true
		}
	}
	if limit == end {
		return 0, false
	}
	from = end + 1
	best, found := int64(math.MaxInt64), false
	for s, sp := range w.sum {
		if sp.empty() {
			continue
		}
		lo := max(from, w.tickOf(sp.min))
		hi := min(limit, w.tickOf(sp.max))
		if lo > hi {
			continue
		}
		t := lo + ((int64(s)-lo)%n+n)%n // smallest t >= lo in slot s
		if t <= hi && t < best {
			best, found = t, true
		}
	}
	return best, found
}

// nextTick returns the next tick >= cur to scan, cached until the spans
// change.
func (w *Wheel) nextTick() (int64, bool) {
	if !w.nextKnown {
		w.nextT, w.nextOK = w.findTick(w.cur, math.MaxInt64/4)
		w.nextKnown = true
	}
	return w.nextT, w.nextOK
}

// noteFuture records a new entry of tick t >= cur, slot s, in the spans.
func (w *Wheel) noteFuture(t int64, s int, due int64) {
	w.sum[s].extend(due)
	if w.sc.on && s == w.sc.s {
		w.sc.next.extend(due) // a later lap of the slot being scanned (Stage): its span keeps it
	}
	if w.nextKnown && (!w.nextOK || t < w.nextT) {
		w.nextT, w.nextOK = t, true
	}
}
