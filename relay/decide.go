package relay

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// action is what the relay does with a delay-topic record at a given time.
type action int

const (
	// actWait: the partition's level time has not come; hold the record.
	actWait action = iota
	// actForward: due; produce to the target now.
	actForward
	// actWheel: level time passed, due within the wheel horizon.
	actWheel
	// actCascade: due beyond the horizon; re-produce to the delay topic.
	actCascade
	// actDeadLetter: the record breaks the contract or the policy.
	actDeadLetter
)

func (a action) String() string {
	return [...]string{"wait", "forward", "wheel", "cascade", "dead-letter"}[a]
}

// decision is the outcome of [policy.decide].
type decision struct {
	act       action
	sched     levels.Schedule
	levelTime time.Time // when the record's partition level lets it go
	wakeAt    time.Time // actWait: when to decide again (levelTime, or earlier to read it ahead)
	reason    string    // metric label, for dead letters
	detail    string    // human reason, for the kdelay-error header
	mismatch  bool      // the record's delay does not belong to its partition's level
	hold      bool      // actWait, read ahead: its partition is read on into memory meanwhile
}

// policy is the pure part of the relay: given a record, its partition's
// level and the time, what to do. It reads no clock.
type policy struct {
	table   *levels.Table
	cfg     config.Config
	horizon time.Duration
}

// decide applies the relay's rule (docs/architecture.md) to one record of a
// partition of level.
// Records that break the contract are dead-lettered at once; the others wait
// for their partition's level time (record timestamp + level duration),
// then go out if due, into the wheel if due within the horizon, or back to
// the delay topic (cascade) if due later.
//
// With ahead > 0 (the wheel is there), a record whose level time is at
// most ahead away and that is due within the horizon is read ahead
// (readAhead), so that a burst of records reaching their level time
// together is read before it is due rather than after: one due at its
// level time waits for it with hold set, its partition read on into
// memory meanwhile (exactly once: into the wheel, as one due later);
// one due later goes into the wheel at once, due at its own due time. A
// record in the wrong level, or due beyond the horizon, waits for its
// level time, its partition paused.
func (p *policy) decide(r *kgo.Record, level int, now time.Time, ahead time.Duration) decision {
	s, err := p.table.Parse(r.Headers, r.Timestamp)
	if err != nil {
		return decision{act: actDeadLetter, reason: levels.Reason(err), detail: err.Error()}
	}
	d := decision{sched: s, levelTime: r.Timestamp.Add(p.table.Duration(level))}
	if ok, why := p.cfg.TargetAllowed(s.Target); !ok {
		d.act, d.reason, d.detail = actDeadLetter, "target_refused", fmt.Sprintf("target %q refused: %s", s.Target, why)
		return d
	}
	if s.Delay > p.cfg.MaxDelay {
		d.act, d.reason, d.detail = actDeadLetter, "delay_too_long", fmt.Sprintf("delay %s exceeds KDELAY_MAX_DELAY %s", s.Delay, p.cfg.MaxDelay)
		return d
	}
	d.mismatch = p.table.LevelFor(s.Delay) != level
	if !d.mismatch && s.Due.Before(d.levelTime) {
		// Only level 1 holds records due before its level time: delays
		// shorter than the first level belong there by the producer rule.
		// They go at their own due time rather than a level late.
		d.levelTime = s.Due
	}
	if now.Before(d.levelTime) {
		d.act, d.wakeAt = actWait, d.levelTime
		if ahead > 0 && !d.mismatch && !s.Due.Before(d.levelTime) {
			switch readAt := d.levelTime.Add(-ahead); {
			case now.Before(readAt):
				d.wakeAt = readAt
			case s.Due.Sub(now) > p.horizon:
				// not read ahead: decided at its level time
			case s.Due.Equal(d.levelTime) && p.cfg.Delivery != ExactlyOnce:
				// It goes at its level time: no need of the wheel. Not
				// exactly once, which commits a transaction per batch:
				// records read as the held ones go would make batches of
				// one fetch, where the wheel hands out whole ones.
				d.hold = true
			default:
				d.act = actWheel
			}
		}
		return d
	}
	switch wait := s.Due.Sub(now); {
	case wait <= 0:
		d.act = actForward
	case wait <= p.horizon:
		d.act = actWheel
	default:
		d.act = actCascade
	}
	return d
}
