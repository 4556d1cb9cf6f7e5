package relay

import (
	"context"
	"time"
)

// delivery is how the relay finishes a batch and commits what is done:
// at least once (atLeastOnceMode, commit.go) or exactly once (exactlyOnceMode,
// txn.go), chosen by KDELAY_DELIVERY. The loop and the group callbacks
// call it at fixed points; polling, deciding and producing a batch, and
// the ledgers, are shared.
type delivery interface {
	// begin starts the loop's iteration after its poll, rebalances
	// blocked; false: nothing is decided in it, the records polled stay
	// queued.
	begin(ctx context.Context) bool
	// end finishes the iteration's batch (b, solo, the attempts started
	// for them; began is begin's answer): it waits for what it must,
	// settles the outcomes into the ledgers and commits. An error (the
	// shutdown timeout, ctx, ended first; already logged) hands the batch
	// back uncommitted and ends the loop.
	end(ctx context.Context, now time.Time, began bool, b, solo []*item, started *attempts) error
	// stop commits what is done once the loop has stopped polling.
	stop(ctx context.Context)
	// handOver settles and commits what is done in revoked partitions
	// before they go (onRevoked).
	handOver(ctx context.Context, partitions []int32)
	// waits returns what the loop's poll must end for besides its wake-up
	// time: the last batch's acks landing (nil: none outstanding) and when
	// a commit put off is due (zero: none). Loop only.
	waits() (landed <-chan struct{}, commitDue time.Time)
	// transactional reports whether outcomes and offsets commit in
	// transactions that the group's generation fences: a relay that stood
	// still needs no membership check, and an aborted batch leaves no
	// trace to deduplicate.
	transactional() bool
}

// Delivery modes.
const (
	AtLeastOnce = "at-least-once"
	ExactlyOnce = "exactly-once"
)
