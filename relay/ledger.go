package relay

import (
	"slices"

	"github.com/kdelay/kdelay/offsetmap"
)

// ledger is one partition's account of what is done, and so of what its
// commit may say (docs/architecture.md): the handled watermark, the commit
// point and its done set, what the last commit that went through covered,
// and what an earlier owner's commit said is done above it. Its methods
// are pure: what the wheel and the records in flight hold comes in as
// arguments, and the Relay does the I/O (the wheel, the commit requests).
// The zero ledger is not ready: use newLedger.
type ledger struct {
	// handled: every offset <= handled is done, resting in the wheel, in
	// flight or set aside for a retry; -1: none.
	handled int64
	commit  int64 // last committed offset, -1 if none
	// commitEnd is the end of the done set last committed: every offset
	// below it was done or listed open in that commit.
	commitEnd int64
	// settled counts the records settled (each may change the done set);
	// committedAt is its value when the last commit that went through
	// was computed. They differ while something settled is uncommitted,
	// also when it settled during that commit's round trip.
	settled, committedAt uint64
	doneSet              offsetmap.Set // the done set of the last commit (what a resync may skip)
	known                offsetmap.Set // done above the commit, from the commit metadata, not yet read again

	// After an assignment with local state, records up to catchUp (the
	// highest offset the wheel had taken) are read again; those among
	// them that the wheel fires meanwhile are in fired, so that their
	// second reading is skipped. -1 and nil once the queue is past it.
	catchUp int64
	fired   map[int64]struct{}
}

// newLedger is the ledger of a partition with nothing committed, nothing
// handled.
func newLedger() ledger { return ledger{handled: -1, commit: -1, catchUp: -1} }

// takeUp starts from the group's commit at at, whose metadata said done
// (empty when none) is done above it.
func (l *ledger) takeUp(at int64, done offsetmap.Set) {
	l.commit, l.handled = at, at-1
	l.known, l.commitEnd, l.doneSet = done, done.End, done
}

// restore raises the handled watermark to what the wheel persisted (h;
// -1: nothing) and, when the wheel took records above it (its highest
// offset hi, ok), has them skipped when the wheel fires them before they
// are read again.
func (l *ledger) restore(h, hi int64, ok bool) {
	l.handled = max(h, l.handled)
	if ok && hi > l.handled {
		l.catchUp, l.fired = hi, make(map[int64]struct{})
	}
}

// start is where reading begins after takeUp and restore: past the
// handled watermark. seek says whether that is not where the group starts
// the partition (its committed offset, or 0).
func (l *ledger) start() (from int64, seek bool) {
	from = l.handled + 1
	return from, l.handled >= 0 && from > max(l.commit, 0)
}

// handle raises the handled watermark to h (queue heads taken up to h).
func (l *ledger) handle(h int64) { l.handled = max(l.handled, h) }

// settle counts a record settled: its outcome may change the done set.
func (l *ledger) settle() { l.settled++ }

// persisted is the watermark the wheel may persist: the handled one, but
// below the lowest queue record still unsettled (low), which a restart
// must read again.
func (l *ledger) persisted(low int64) int64 { return min(l.handled, low-1) }

// firedAhead notes that the wheel fired off while the queue's next read is
// at next: read again, it is skipped (catchingUp).
func (l *ledger) firedAhead(off, next int64) {
	if l.fired != nil && off <= l.catchUp && off >= next {
		l.fired[off] = struct{}{}
	}
}

// catchingUp reports whether a queue head at off was fired from the wheel
// since the assignment (so it is done or in flight), and ends the catch-up
// once the queue reaches its end.
func (l *ledger) catchingUp(off int64) bool {
	if l.fired == nil {
		return false
	}
	_, ok := l.fired[off]
	delete(l.fired, off)
	if off >= l.catchUp {
		l.catchUp, l.fired = -1, nil
	}
	return ok
}

// knownDone reports whether the commit metadata said off is done (by an
// earlier owner), and forgets that set once the queue is past it.
func (l *ledger) knownDone(off int64) bool {
	if l.known.End <= l.known.Base {
		return false
	}
	done := l.known.Done(off)
	if off >= l.known.End-1 {
		l.known = offsetmap.Set{}
	}
	return done
}

// point returns the commit point: off, the lowest offset not done (the
// lowest of the first offset not handled, the lowest unsettled record and
// the wheel's lowest pending entry; math.MaxInt64 for none), and end, the
// end of the done set to commit with it. ok is false when nothing was
// handled, or when the last commit that went through already says all of
// it: nothing moved and nothing settled since.
func (l *ledger) point(lowUnsettled, lowWheel int64) (off, end int64, ok bool) {
	if l.handled < 0 {
		return 0, 0, false
	}
	off = min(l.handled+1, lowUnsettled, lowWheel)
	// Still reading again what an earlier commit said is done (after a
	// resync or an assignment): the rest of that set stays in this
	// commit's, or a later resync would forget it and forward those
	// records again.
	end = max(l.handled+1, l.known.End)
	if off <= l.commit && end <= l.commitEnd && l.settled == l.committedAt {
		return off, end, false
	}
	return off, end, true
}

// doneAbove is the done set of a commit at off up to end: every offset
// done but those in open (the wheel's pending entries and the records
// unsettled, in any order, repeats allowed) and those the known set says
// are open above the handled watermark (not read again yet). ok is false
// when the set has nothing done above off, or more than maxOpen open
// offsets, or spans more than offsetmap.MaxSpan: then it is left out of
// the commit (over reports the latter two, a size overflow).
func (l *ledger) doneAbove(off, end int64, open []int64) (set offsetmap.Set, ok, over bool) {
	if end <= off+1 {
		return offsetmap.Set{}, false, false // nothing done above the commit
	}
	if end-off > offsetmap.MaxSpan {
		return offsetmap.Set{}, false, true
	}
	for _, o := range l.known.Open {
		if o > l.handled && o >= off && o < end {
			open = append(open, o)
		}
	}
	if len(open) > maxOpen {
		return offsetmap.Set{}, false, true
	}
	slices.Sort(open)
	open = slices.Compact(open)
	return offsetmap.Set{Base: off, End: end, Open: open}, true, false
}

// committed records a commit that went through: at, with a done set
// (done, empty when left out) ending at end, computed when settled records
// had settled. Each only moves forward: commits return in order, and a
// record that settled during the round trip keeps the ledger dirty.
func (l *ledger) committed(at, end int64, settled uint64, done offsetmap.Set) {
	l.commit = max(l.commit, at)
	l.commitEnd = max(l.commitEnd, end)
	l.committedAt = max(l.committedAt, settled)
	l.doneSet = done
}

// resync forgets what was handled above the commit, for the partition to
// be read again from it, and returns where that reading starts. What the
// last commit said is done above it stays done: read again, it is skipped
// (a duplicate otherwise; in exactly-once mode a duplicate that consumers
// would see).
func (l *ledger) resync() (from int64) {
	l.catchUp, l.fired = -1, nil
	l.handled = l.commit - 1
	if l.doneSet.Base == l.commit {
		l.known = l.doneSet
	}
	return max(l.commit, 0)
}
