package relay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Stall reasons, the values of kdelay_stalled's reason label.
const (
	// stallRetrying: records are set aside after a failed produce.
	stallRetrying = "retrying"
	// stallDeadLetter: the dead-letter topic refuses records.
	stallDeadLetter = "dead_letter_failing"
	// stallNoWheel: the wheel failed and is not yet back; waits cascade.
	stallNoWheel = "wheel_unavailable"
	// stallNoProgress: due work and nothing delivered for StallTimeout.
	stallNoProgress = "no_progress"
)

var stallReasons = []string{stallRetrying, stallDeadLetter, stallNoWheel, stallNoProgress}

// status is what one iteration of the loop saw.
type status struct {
	due          bool // something could go now (a ready head, an expired entry, a retry)
	retrying     bool
	deadRetrying bool
	noWheel      bool
}

// health turns the loop's view into readiness and liveness. It is written
// by the loop and read by the HTTP handlers.
type health struct {
	stallAfter time.Duration

	mu         sync.Mutex
	progressAt time.Time // last delivery, or last time nothing was due
	reasons    map[string]bool
}

// progress records a delivery (or that nothing is due).
func (r *Relay) progress() {
	r.health.mu.Lock()
	r.health.progressAt = r.now()
	r.health.mu.Unlock()
}

func (h *health) update(now time.Time, s status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !s.due {
		h.progressAt = now // idle is not stuck
	}
	if h.reasons == nil {
		h.reasons = make(map[string]bool, len(stallReasons))
	}
	h.reasons[stallRetrying] = s.retrying // set in place: once per iteration, no allocation
	h.reasons[stallDeadLetter] = s.deadRetrying
	h.reasons[stallNoWheel] = s.noWheel
	h.reasons[stallNoProgress] = s.due && now.Sub(h.progressAt) >= h.stallAfter
}

func (h *health) has(why string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reasons[why]
}

// why returns the first reason that makes the relay not ready, "" if none.
// A missing wheel does not: the relay delivers without it.
func (h *health) why() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range []string{stallNoProgress, stallDeadLetter, stallRetrying} {
		if h.reasons[r] {
			return r
		}
	}
	return ""
}

// ErrStalled is returned by [Relay.Live] when the relay has due work and
// has delivered nothing for KDELAY_STALL_TIMEOUT.
var ErrStalled = errors.New("relay: stalled")

func (h *health) live() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reasons[stallNoProgress] {
		return fmt.Errorf("%w: due work and nothing delivered since %s (KDELAY_STALL_TIMEOUT %s)",
			ErrStalled, h.progressAt.UTC().Format(time.RFC3339), h.stallAfter)
	}
	return nil
}

// isNetErr reports a connection-level error: the broker went away.
func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}
