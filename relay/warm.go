package relay

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The loop readies the producer (warmProducer) when due work, a queue
// head's level time or a wheel expiry, is at most warmLead away, and at
// most once per warmEvery: the first produce after a quiet time would
// otherwise wait, after the due time, for the producer ID and a new
// produce connection one after the other. warmLead is longer than the
// loop's longest sleep (maxPoll), so that an iteration falls inside it;
// warmEvery keeps a relay that always has due work from asking at every
// iteration. Nothing is produced, decided or committed differently.
const (
	warmLead  = 2 * time.Second
	warmEvery = 10 * time.Second
)

// warmUp starts readying the producer on its own goroutine, bounded by
// ctx, when due work is at most warmLead from now, no warm-up started in
// the last warmEvery and none is under way. r.mu is held (loop only).
func (r *Relay) warmUp(ctx context.Context, now time.Time) {
	if !r.warmAt.IsZero() && now.Sub(r.warmAt) < warmEvery {
		return
	}
	due, ok := r.nextDue(now)
	if !ok || due.Sub(now) > warmLead {
		return
	}
	if !r.warming.CompareAndSwap(false, true) {
		return // one at a time: the one under way readies the same producer
	}
	r.warmAt = now
	loadID := !r.mode.transactional() // a transaction loads its own producer ID
	go func() {
		defer r.warming.Store(false)
		if err := r.warmProducer(ctx, loadID); err != nil {
			r.log.Debug("producer warm-up", "err", err) // the produce itself tries again
		}
	}()
}

// warmProducer loads the idempotent producer's ID (loadID) and opens a
// produce connection to each broker.
func (r *Relay) warmProducer(ctx context.Context, loadID bool) error {
	// A broker that does not answer holds up no later warm-up for long.
	ctx, cancel := context.WithTimeout(ctx, warmEvery)
	defer cancel()
	var errs []error
	if loadID {
		if _, _, err := r.cl.ProducerID(ctx); err != nil {
			errs = append(errs, fmt.Errorf("relay: warm-up: producer id: %w", err))
		}
	}
	if err := r.cl.EnsureProduceConnectionIsOpen(ctx, -1); err != nil {
		errs = append(errs, fmt.Errorf("relay: warm-up: produce connections: %w", err))
	}
	return errors.Join(errs...)
}

// nextDue returns the earliest time a queue head or a wheel expiry comes
// due (now for a head not yet decided); false when nothing waits. r.mu is
// held.
func (r *Relay) nextDue(now time.Time) (time.Time, bool) {
	var due time.Time
	earlier := func(t time.Time) {
		if due.IsZero() || t.Before(due) {
			due = t
		}
	}
	for _, ps := range r.parts {
		switch {
		case len(ps.queue) == 0:
		case ps.waitFor.IsZero():
			earlier(now)
		default:
			earlier(ps.waitFor)
		}
	}
	if r.firstAsg && r.wheel != nil {
		if ms, ok := r.wheel.NextExpiry(); ok {
			earlier(time.UnixMilli(ms))
		}
	}
	return due, !due.IsZero()
}
