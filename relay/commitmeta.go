package relay

import "github.com/kdelay/kdelay/offsetmap"

// CommitDone returns the done set that the commit metadata md of a
// delay-topic partition committed at committed records: the offsets above
// the commit that a relay already forwarded, cascaded, cancelled or
// dead-lettered. ok is false when md records none (nothing done above the
// commit, or a set too large for the metadata limit, or a committer other
// than kdelay); an error wraps offsetmap.ErrMalformed. It is the decoder
// the relays use when they take a partition over, exported for readers
// outside the group (kdelay schedules, kdelay console).
func CommitDone(md string, committed int64) (done offsetmap.Set, ok bool, err error) {
	return doneOfMetadata(md, committed)
}

// CommitLevels returns the level table recorded in commit metadata md
// ("1s 5s ... / 1"), "" when the committer recorded none.
func CommitLevels(md string) string { return tableOfMetadata(md) }
