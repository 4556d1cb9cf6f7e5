package relay

import (
	"context"
	"slices"

	"github.com/kdelay/kdelay/offsetmap"
)

// A transaction's end can fail without saying whether it committed: the
// EndTxn reached the transaction coordinator, which wrote the commit, and
// its answer was lost (the coordinator's broker died, the wait ran out).
// franz-go then reports the end as failed and leaves the outcome to the
// caller. Read again from the older commit, the transaction's records
// would be forwarded a second time, in a transaction that commits: a
// duplicate for read_committed consumers. The transaction's offset commit
// is part of it, so the group's committed offsets tell: they are the
// transaction's if and only if it committed.

// txnOutcome is what the group's committed offsets say of a transaction
// whose end failed.
type txnOutcome int

const (
	txnAborted   txnOutcome = iota // the offsets are the ones before it
	txnCommitted                   // the offsets are the transaction's
	txnUnknown                     // not readable, or the transaction changed none of them
)

func (o txnOutcome) String() string {
	switch o {
	case txnAborted:
		return "aborted"
	case txnCommitted:
		return "committed"
	}
	return "unknown"
}

// judgeTxn compares the group's commits (group) with a transaction's
// (reqs) and the ones before it (before), partition by partition. Only
// partitions whose commit the transaction changed tell anything; they must
// all agree, or the outcome is unknown (another committer moved them).
func judgeTxn(reqs map[int32]commitReq, before, group map[int32]commitInfo) txnOutcome {
	var committed, aborted int
	for p, c := range reqs {
		mine := commitInfo{at: c.at.Offset, done: c.done}
		if sameCommit(mine, before[p]) {
			continue // the same either way
		}
		g, ok := group[p]
		switch {
		case ok && sameCommit(g, mine):
			committed++
		case sameCommit(g, before[p]): // none before and none now also agree
			aborted++
		default:
			return txnUnknown
		}
	}
	switch {
	case committed > 0 && aborted == 0:
		return txnCommitted
	case aborted > 0 && committed == 0:
		return txnAborted
	}
	return txnUnknown
}

// sameCommit reports whether a and b commit the same offset with the same
// done set (the level table is the relay's own, the same in both).
func sameCommit(a, b commitInfo) bool {
	return a.at == b.at && sameSet(a.done, b.done)
}

func sameSet(a, b offsetmap.Set) bool {
	if a.End <= a.Base && b.End <= b.Base {
		return true // both empty
	}
	return a.Base == b.Base && a.End == b.End && slices.Equal(a.Open, b.Open)
}

// commitsBefore is, for each partition of reqs, the last commit the ledger
// knows went through (-1: none). r.mu is held.
func (r *Relay) commitsBefore(reqs map[int32]commitReq) map[int32]commitInfo {
	out := make(map[int32]commitInfo, len(reqs))
	for p := range reqs {
		if ps := r.parts[p]; ps != nil {
			out[p] = commitInfo{at: ps.led.commit, done: ps.led.doneSet}
		}
	}
	return out
}

// outcome reads the group's committed offsets, stable (a commit pending in
// a transaction still open is waited for), and judges the transaction by
// them. The transaction must have ended first (abortTxn: franz-go's
// producer ID reload fences whatever is still open). r.mu is not held.
func (e *exactlyOnceMode) outcome(ctx context.Context, reqs map[int32]commitReq, before map[int32]commitInfo) txnOutcome {
	group, ok := e.r.fetchCommitted(ctx, e.r.cl)
	if !ok {
		return txnUnknown
	}
	// fetchCommitted leaves out partitions with no commit: compare them
	// as "none" (-1), as the ledger has them.
	for p := range reqs {
		if _, ok := group[p]; !ok {
			group[p] = commitInfo{at: -1}
		}
	}
	return judgeTxn(reqs, before, group)
}
