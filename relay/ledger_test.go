package relay

import (
	"math"
	"slices"
	"testing"

	"github.com/kdelay/kdelay/offsetmap"
)

const none = math.MaxInt64 // no unsettled record, no wheel entry

// ledgerAt is a ledger committed at commit with done set done, handled up
// to handled, with settled records settled since that commit.
func ledgerAt(commit int64, done offsetmap.Set, handled int64, settled uint64) ledger {
	l := newLedger()
	if commit >= 0 {
		l.takeUp(commit, done)
	}
	l.handle(handled)
	for range settled {
		l.settle()
	}
	return l
}

// cleanAt is a ledger handled up to handled whose last commit, at
// handled+1, said all of it; settled records settled since.
func cleanAt(handled int64, settled uint64) ledger {
	l := ledgerAt(-1, offsetmap.Set{}, handled, 0)
	l.committed(handled+1, handled+1, 0, offsetmap.Set{})
	for range settled {
		l.settle()
	}
	return l
}

func TestLedgerPoint(t *testing.T) {
	known := offsetmap.Set{Base: 10, End: 30, Open: []int64{12}}
	tests := []struct {
		name               string
		l                  ledger
		lowUnsettled, lowW int64
		off, end           int64
		ok                 bool
	}{
		{"nothing handled", newLedger(), none, none, 0, 0, false},
		{"first commit", ledgerAt(-1, offsetmap.Set{}, 4, 1), none, none, 5, 5, true},
		{"held by a record in flight", ledgerAt(-1, offsetmap.Set{}, 9, 1), 3, none, 3, 10, true},
		{"held by the wheel", ledgerAt(-1, offsetmap.Set{}, 9, 1), 7, 2, 2, 10, true},
		{"unsettled above handled do not raise it", ledgerAt(-1, offsetmap.Set{}, 9, 1), 12, none, 10, 10, true},
		{"unchanged since the last commit", cleanAt(9, 0), none, none, 10, 10, false},
		{"settled since, same point", cleanAt(9, 1), none, none, 10, 10, true},
		{"handled further", func() ledger { l := cleanAt(9, 0); l.handle(14); return l }(), none, none, 15, 15, true},
		{"held back below the last commit", cleanAt(9, 0), 4, none, 4, 10, false},
		{"reading again a known set keeps its end", ledgerAt(10, known, 15, 0), 12, none, 12, 30, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			off, end, ok := tt.l.point(tt.lowUnsettled, tt.lowW)
			if ok != tt.ok || (ok && (off != tt.off || end != tt.end)) {
				t.Errorf("point = %d, %d, %v; want %d, %d, %v", off, end, ok, tt.off, tt.end, tt.ok)
			}
		})
	}
}

// TestLedgerSettleDuringCommit: a record settled while a commit is in
// flight (computed before it settled) keeps the ledger dirty once that
// commit returns, so the next commit says it is done.
func TestLedgerSettleDuringCommit(t *testing.T) {
	l := ledgerAt(-1, offsetmap.Set{}, 8, 1)
	off, end, ok := l.point(3, none) // 3 retried, 5 in flight
	if !ok || off != 3 || end != 9 {
		t.Fatalf("point = %d, %d, %v; want 3, 9, true", off, end, ok)
	}
	inFlight := l.settled
	l.settle() // 5 lands
	l.committed(off, end, inFlight, offsetmap.Set{Base: 3, End: 9, Open: []int64{3, 5}})
	if _, _, ok := l.point(3, none); !ok {
		t.Fatal("no commit after a record settled during the last one: its next owner forwards it again")
	}
	l.committed(off, end, l.settled, offsetmap.Set{Base: 3, End: 9, Open: []int64{3}})
	if _, _, ok := l.point(3, none); ok {
		t.Error("a commit after a clean one with nothing new")
	}
}

func TestLedgerCommitted(t *testing.T) {
	done := offsetmap.Set{Base: 5, End: 9, Open: []int64{6}}
	tests := []struct {
		name                string
		at, end             int64
		settled             uint64
		commit, commitEnd   int64
		committedAt         uint64
		wantDoneSet         offsetmap.Set
		beforeAt, beforeEnd int64
		beforeCommittedAt   uint64
	}{
		{"moves forward", 5, 9, 3, 5, 9, 3, done, 2, 4, 1},
		{"an older commit returning moves nothing back", 1, 2, 1, 2, 4, 2, done, 2, 4, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger()
			l.commit, l.commitEnd, l.committedAt = tt.beforeAt, tt.beforeEnd, tt.beforeCommittedAt
			l.committed(tt.at, tt.end, tt.settled, done)
			if l.commit != tt.commit || l.commitEnd != tt.commitEnd || l.committedAt != tt.committedAt {
				t.Errorf("commit, commitEnd, committedAt = %d, %d, %d; want %d, %d, %d", l.commit, l.commitEnd, l.committedAt, tt.commit, tt.commitEnd, tt.committedAt)
			}
			if !slices.Equal(l.doneSet.Open, tt.wantDoneSet.Open) || l.doneSet.Base != tt.wantDoneSet.Base {
				t.Errorf("doneSet = %+v, want %+v", l.doneSet, tt.wantDoneSet)
			}
		})
	}
}

func TestLedgerDoneAbove(t *testing.T) {
	many := make([]int64, maxOpen+1)
	for i := range many {
		many[i] = int64(100 + i)
	}
	known := offsetmap.Set{Base: 10, End: 30, Open: []int64{12, 25}}
	tests := []struct {
		name     string
		l        ledger
		off, end int64
		open     []int64
		want     []int64 // nil with ok false
		ok, over bool
	}{
		{"nothing above the commit", ledgerAt(-1, offsetmap.Set{}, 4, 0), 5, 5, nil, nil, false, false},
		{"one above: still nothing done", ledgerAt(-1, offsetmap.Set{}, 5, 0), 5, 6, nil, nil, false, false},
		{"open sorted and deduplicated", ledgerAt(-1, offsetmap.Set{}, 9, 0), 3, 10, []int64{7, 3, 5, 7}, []int64{3, 5, 7}, true, false},
		{"known open above handled kept", ledgerAt(10, known, 15, 0), 12, 30, []int64{12}, []int64{12, 25}, true, false},
		{"known open below handled read again", ledgerAt(10, known, 26, 0), 12, 30, []int64{12}, []int64{12}, true, false},
		{"too many open", ledgerAt(-1, offsetmap.Set{}, 3000, 0), 0, 3001, many, nil, false, true},
		{"span too large", ledgerAt(-1, offsetmap.Set{}, offsetmap.MaxSpan+10, 0), 0, offsetmap.MaxSpan + 11, nil, nil, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, ok, over := tt.l.doneAbove(tt.off, tt.end, slices.Clone(tt.open))
			if ok != tt.ok || over != tt.over {
				t.Fatalf("ok, over = %v, %v; want %v, %v", ok, over, tt.ok, tt.over)
			}
			if !ok {
				return
			}
			if set.Base != tt.off || set.End != tt.end || !slices.Equal(set.Open, tt.want) {
				t.Errorf("set = %+v, want [%d, %d) open %v", set, tt.off, tt.end, tt.want)
			}
		})
	}
}

func TestLedgerResync(t *testing.T) {
	done := offsetmap.Set{Base: 10, End: 20, Open: []int64{11}}
	tests := []struct {
		name      string
		l         func() ledger
		from      int64
		handled   int64
		knownDone []int64 // offsets the known set must say done after
	}{
		{"never committed", func() ledger { return ledgerAt(-1, offsetmap.Set{}, 7, 2) }, 0, -2, nil},
		{"the committed done set is skipped again", func() ledger {
			l := ledgerAt(10, done, 25, 0)
			for o := int64(10); o < 20; o++ {
				l.knownDone(o) // read through once: the known set is gone
			}
			return l
		}, 10, 9, []int64{12, 19}},
		{"a done set of another commit is not", func() ledger {
			l := ledgerAt(10, done, 25, 0)
			l.committed(12, 26, 0, offsetmap.Set{})
			l.known = offsetmap.Set{}
			return l
		}, 12, 11, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.l()
			l.catchUp, l.fired = 30, map[int64]struct{}{22: {}}
			if from := l.resync(); from != tt.from || l.handled != tt.handled {
				t.Errorf("resync = %d with handled %d; want %d, %d", from, l.handled, tt.from, tt.handled)
			}
			if l.catchUp != -1 || l.fired != nil {
				t.Errorf("catch-up kept after a resync: %d %v", l.catchUp, l.fired)
			}
			for _, o := range tt.knownDone {
				if !l.knownDone(o) {
					t.Errorf("offset %d not known done after the resync", o)
				}
			}
			if tt.knownDone == nil && l.knownDone(tt.from+2) {
				t.Errorf("offset %d known done after the resync", tt.from+2)
			}
		})
	}
}

func TestLedgerTakeUpAndStart(t *testing.T) {
	done := offsetmap.Set{Base: 10, End: 14, Open: []int64{12}}
	tests := []struct {
		name      string
		commit    int64 // -1: none
		wheel     int64 // the wheel's persisted watermark, -1: none
		hi        int64 // the wheel's highest offset, -1: none
		from      int64
		seek      bool
		catchUpTo int64
	}{
		{"fresh partition", -1, -1, -1, 0, false, -1},
		{"commit only", 10, -1, -1, 10, false, -1},
		{"wheel handled further", 10, 15, 15, 16, true, -1},
		{"wheel behind the commit", 10, 4, 4, 10, false, -1},
		{"wheel took records above its watermark", 10, 15, 40, 16, true, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger()
			if tt.commit >= 0 {
				l.takeUp(tt.commit, done)
				if l.commitEnd != done.End || l.handled != tt.commit-1 {
					t.Fatalf("takeUp: commitEnd %d, handled %d", l.commitEnd, l.handled)
				}
				l.restore(tt.wheel, tt.hi, tt.hi >= 0)
			}
			from, seek := l.start()
			if from != tt.from || seek != tt.seek || l.catchUp != tt.catchUpTo {
				t.Errorf("start = %d, %v with catchUp %d; want %d, %v, %d", from, seek, l.catchUp, tt.from, tt.seek, tt.catchUpTo)
			}
		})
	}
}

// TestLedgerSkips: what a queue head read again skips, in reading order.
func TestLedgerSkips(t *testing.T) {
	l := ledgerAt(10, offsetmap.Set{Base: 10, End: 14, Open: []int64{12}}, 9, 0)
	l.restore(20, 25, true)
	l.firedAhead(22, 21) // fired, not read again yet
	l.firedAhead(19, 21) // already read: nothing to skip
	l.firedAhead(30, 21) // beyond the catch-up
	type read struct {
		off               int64
		catching, knownOK bool
	}
	for _, r := range []read{{10, false, true}, {12, false, false}, {13, false, true}, {14, false, false}, {19, false, false}, {22, true, false}, {25, false, false}, {30, false, false}} {
		if got := l.catchingUp(r.off); got != r.catching {
			t.Errorf("catchingUp(%d) = %v, want %v", r.off, got, r.catching)
		}
		if got := l.knownDone(r.off); got != r.knownOK {
			t.Errorf("knownDone(%d) = %v, want %v", r.off, got, r.knownOK)
		}
	}
	if l.fired != nil || l.catchUp != -1 || l.known.End != 0 {
		t.Errorf("catch-up or known set kept past their end: %d %v %+v", l.catchUp, l.fired, l.known)
	}
}

func TestLedgerPersisted(t *testing.T) {
	l := ledgerAt(-1, offsetmap.Set{}, 9, 0)
	for _, tt := range []struct{ low, want int64 }{{none, 9}, {12, 9}, {10, 9}, {5, 4}, {0, -1}} {
		if got := l.persisted(tt.low); got != tt.want {
			t.Errorf("persisted(%d) = %d, want %d", tt.low, got, tt.want)
		}
	}
}
