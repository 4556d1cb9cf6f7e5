// Package schedules tells what kdelay has scheduled from Kafka alone,
// without asking the relays: each partition of the delay topic from the
// relay group's committed offset to its end, minus the offsets the commit
// metadata records as done, minus the records a cancel on the cancel topic
// cancels, with a cascaded copy counted as the schedule it continues.
//
// An [Index] holds those records (their schedule, not their value) and
// answers queries; it is pure: records, commits and cancels go in, the
// clock is passed to every query. A [Follower] fills an Index from Kafka
// and keeps it current (kdelay console); [Build] reads once to the end and
// stops (kdelay schedules).
//
// The rules are the relay's own: the schedule is read from the headers by
// [levels.Table.Parse]; a record is cancelled when the cancel set holds its
// kdelay-id with a cut-off after its original timestamp
// ([levels.OriginalTimestamp]); the done set is decoded by
// [relay.CommitDone].
//
// What is pending can only be told up to the relays' progress: a record a
// relay forwarded a moment ago stays pending here until its commit (at
// most a second or so later with the relay's commit interval) says so.
package schedules

import (
	"time"
)

// States of a schedule, at the time of a query.
const (
	// StateWaiting: in a level partition whose level time has not passed
	// (the relay holds it at the head of the partition), or one about to
	// cascade.
	StateWaiting = "waiting"
	// StateWheel: its level time has passed and its due time lies within
	// the wheel horizon: a relay holds it in its wheel.
	StateWheel = "wheel"
	// StateDue: its due time has passed and no commit says it is done yet
	// (being delivered, or the relays are behind or down).
	StateDue = "due"
	// StateCancelled: a cancel matches it; the relay drops it instead of
	// delivering it.
	StateCancelled = "cancelled"
	// StateDone: above the committed offset but in the commit's done set:
	// forwarded, cascaded or dead-lettered.
	StateDone = "done"
	// StateInvalid: its headers break the producer contract; the relay
	// dead-letters it.
	StateInvalid = "invalid"
)

// Pending reports whether a state is one of the pending ones: waiting,
// wheel or due.
func Pending(state string) bool {
	return state == StateWaiting || state == StateWheel || state == StateDue
}

// Locations of a schedule's record.
const (
	// LocationLevel: the record as its producer (or a dead-letter replay)
	// wrote it, in a level partition.
	LocationLevel = "level"
	// LocationCascaded: a copy the relay re-produced to the delay topic
	// because the due time lay beyond the wheel horizon.
	LocationCascaded = "cascaded"
)

// Schedule is one delayed record as a query reports it.
type Schedule struct {
	ID     string `json:"id"`
	Target string `json:"target"`
	Key    string `json:"key"`
	// DueAt is when the record is due (zero for an invalid one).
	DueAt time.Time `json:"due_at"`
	// Level is the level of the partition the record is in.
	Level     int   `json:"level"`
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
	// OriginalTimestamp is the record's timestamp as its producer wrote
	// it (a cascaded copy carries it in kdelay-original-timestamp): a
	// cancel's cut-off is compared with it.
	OriginalTimestamp time.Time `json:"original_timestamp"`
	State             string    `json:"state"`
	Location          string    `json:"location"`
	// CancelCutoff is the cut-off of the cancel that matches, when State
	// is cancelled (or done and cancelled).
	CancelCutoff *time.Time `json:"cancel_cutoff,omitempty"`
	// Error is why the record breaks the contract, when State is invalid.
	Error string `json:"error,omitempty"`
	// Recurring describes the series of a kdelay-every or kdelay-cron
	// record ("every 2s, occurrence 3 of 5"): DueAt is then its next
	// occurrence.
	Recurring string `json:"recurring,omitempty"`
}
