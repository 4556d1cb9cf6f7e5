package relay

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The wheel is a cache of the delay topic: whatever it holds, the
// committed offsets never passed. So a wheel that fails (a full or failing
// disk, a damaged record) is never repaired in place: it is discarded and
// every owned partition is read again from its committed offset. Until a
// new wheel opens, records that would wait in it cascade through Kafka.

// Bounds of the wait before a discarded wheel is opened again.
const (
	minWheelRetry = 10 * time.Second
	maxWheelRetry = 5 * time.Minute
)

// wheelFailed records a wheel failure; the loop resets the wheel before
// its next poll. The first failure of an iteration is kept.
func (r *Relay) wheelFailed(op string, err error) {
	if r.wheelErr == nil {
		r.wheelErr = fmt.Errorf("wheel %s: %w", op, err)
	}
}

// maintainWheel resets a failed or damaged wheel and reopens one that is
// unavailable once its wait is over. r.mu is held.
func (r *Relay) maintainWheel(now time.Time) {
	if r.wheel != nil && r.wheelErr == nil {
		if c := r.wheel.Corrupt(); c > r.corrupt {
			r.wheelErr = fmt.Errorf("wheel: %d damaged record(s) found", c-r.corrupt)
		}
	}
	if r.wheelErr != nil {
		r.resetWheel(now)
		return
	}
	if r.wheel == nil && !now.Before(r.wheelRetry) {
		if err := r.openWheel(); err != nil {
			r.wheelRetry = now.Add(r.wheelBroken)
			r.log.Error("wheel still unavailable; waits cascade through Kafka", "retry_in", r.wheelBroken, "err", err)
			return
		}
		r.log.Info("wheel available again")
	}
}

// resetWheel discards the wheel and its files and re-reads every owned
// partition from its committed offset.
func (r *Relay) resetWheel(now time.Time) {
	r.log.Error("wheel failed; discarding it and re-reading every owned partition from its committed offset",
		"err", r.wheelErr, "partitions", len(r.parts))
	r.m.wheelResets.Inc()
	if r.wheel != nil {
		if err := r.wheel.Close(); err != nil {
			r.log.Warn("close failed wheel", "err", err)
		}
		r.wheel = nil
	}
	dir := filepath.Join(r.cfg.DataDir, "wheel")
	if err := os.RemoveAll(dir); err != nil {
		r.log.Warn("remove failed wheel", "dir", dir, "err", err)
	}
	r.wheelErr = nil
	r.wheelBroken = min(max(2*r.wheelBroken, minWheelRetry), maxWheelRetry)
	r.wheelRetry = now.Add(r.wheelBroken)
	for _, ps := range r.parts {
		r.resyncPartition(ps)
	}
}
