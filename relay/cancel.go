package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/cancel"
	"github.com/kdelay/kdelay/levels"
)

// Cancels. Every relay reads the whole cancel topic into a
// cancel.Set before it takes part in the group, and keeps it current. A
// record with a kdelay-id is checked against the set before it is
// forwarded, put into the wheel, cascaded or retried; a cancelled record is
// settled like a done one (kCancelled: its offset is handled, a wheel entry
// is done), dropped, or written to KDELAY_CANCELLED_TOPIC when that is set.
//
// The fire barrier: a record due at t is not forwarded before the reader
// has read the cancel topic up to end offsets listed no earlier than
// t - KDELAY_CANCEL_MARGIN. So a cancel the broker acknowledged at least
// the margin before t is always in the set when the record goes.

// ErrNoCancelTopic is returned by [New] when the cancel topic does not
// exist; `kdelay topic create` creates it.
var ErrNoCancelTopic = cancel.ErrNoTopic

// cancels is the relay's cancel reader and its metrics.
type cancels struct {
	rd        *cancel.Reader
	margin    time.Duration
	stop      context.CancelFunc
	done      chan struct{}
	cancelled *prometheus.CounterVec // level
	invalid   *prometheus.CounterVec // reason
}

// kCancelled is an item cancelled by the cancel set: settled undelivered
// (out nil), or produced to KDELAY_CANCELLED_TOPIC.
const kCancelled = kSkip + 1

// holdRetry is how soon a record held by the barrier is looked at again.
const holdRetry = 10 * time.Millisecond

// openCancels creates the cancel reader, reads the cancel topic through
// (within preflightTimeout) and starts moving the barrier. Called by New
// before the group client exists, so nothing is forwarded, wheeled or
// cascaded before the set is rebuilt.
func (r *Relay) openCancels(kopts []kgo.Opt, reg prometheus.Registerer) error {
	c := &cancels{
		margin: r.cfg.CancelMargin,
		cancelled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_records_cancelled_total", Help: "Delayed records not delivered because a cancel on the cancel topic matched their kdelay-id, by level of their partition.",
		}, []string{"level"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_cancels_invalid_total", Help: "Cancel-topic records ignored, by reason: bad_id (empty key or longer than 255 bytes), bad_cancel_before (kdelay-cancel-before is not epoch milliseconds).",
		}, []string{"reason"}),
	}
	for _, why := range []string{cancel.InvalidID, cancel.InvalidBefore} {
		c.invalid.WithLabelValues(why)
	}
	rd, err := cancel.NewReader(cancel.Options{
		Topic:     r.cfg.CancelTopic,
		KafkaOpts: kopts,
		Retain:    r.cfg.MaxDelay,
		Every:     min(25*time.Millisecond, max(r.cfg.CancelMargin/4, time.Millisecond)),
		Now:       r.now,
		Log:       r.log,
		Invalid:   func(why string) { c.invalid.WithLabelValues(why).Inc() },
	})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	c.rd = rd
	start := time.Now()
	ctx, cancelSync := context.WithTimeout(context.Background(), preflightTimeout)
	defer cancelSync()
	for wait := 200 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err = rd.Sync(ctx)
		if err == nil || errors.Is(err, cancel.ErrNoTopic) || ctx.Err() != nil {
			break
		}
		r.log.Warn("reading the cancel topic; retrying", "topic", r.cfg.CancelTopic, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	if err != nil {
		rd.Close()
		return fmt.Errorf("relay: cancel topic %s (create it with `kdelay topic create`): %w", r.cfg.CancelTopic, err)
	}
	r.log.Info("cancel set rebuilt", "topic", r.cfg.CancelTopic, "cancels", rd.Set().Len(), "took", time.Since(start).Round(time.Millisecond).String())
	for _, col := range []prometheus.Collector{
		c.cancelled, c.invalid,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kdelay_cancels", Help: "Live cancels in the relay's cancel set (read from the cancel topic, kept until cut-off + KDELAY_MAX_DELAY).",
		}, func() float64 { return float64(rd.Set().Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kdelay_cancel_barrier_lag_seconds", Help: "How far the fire barrier is behind the clock: records due within this much plus KDELAY_CANCEL_MARGIN wait for it.",
		}, func() float64 { return r.now().Sub(rd.Through()).Seconds() }),
	} {
		if err := reg.Register(col); err != nil {
			rd.Close()
			return fmt.Errorf("relay: metrics: %w", err)
		}
	}
	ctx, c.stop = context.WithCancel(context.Background())
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		_ = rd.Run(ctx) // returns nil when ctx ends; failed rounds are logged
	}()
	r.cx = c
	return nil
}

// closeCancels stops the reader (Close; New's failure paths).
func (r *Relay) closeCancels() {
	if r.cx == nil {
		return
	}
	r.cx.stop()
	<-r.cx.done
	r.cx.rd.Close()
}

// fireLimit is the latest due time that may be forwarded at now: now,
// or earlier while the barrier lags (its time plus the margin).
func (r *Relay) fireLimit(now time.Time) time.Time {
	if r.cx == nil {
		return now
	}
	if lim := r.cx.rd.Through().Add(r.cx.margin); lim.Before(now) {
		return lim
	}
	return now
}

// held reports whether a record due at due must wait for the barrier at
// now, and if so when to look again at the latest: the loop's poll is also
// cut short when the barrier moves (barrierMoved). r.mu is held.
func (r *Relay) held(due, now time.Time) (time.Time, bool) {
	if r.cx == nil {
		return time.Time{}, false
	}
	through, moved := r.cx.rd.Moved()
	if !due.After(through.Add(r.cx.margin)) {
		return time.Time{}, false
	}
	r.wantRound(due)
	r.barrierMoved = moved
	return now.Add(holdRetry), true
}

// wantRound asks the cancel reader for the barrier round that lets a
// record due at t go at t: one started at t minus the margin (rounds run
// only when wanted, and once a second between, because each is a request
// to the broker). The loop asks for the round of its next wake-up, so a
// record that waited is not held when it comes due.
func (r *Relay) wantRound(t time.Time) {
	if r.cx == nil || t.IsZero() {
		return
	}
	r.cx.rd.Want(t.Add(-r.cx.margin))
}

// fireWake is when the loop must wake for a wheel expiry at t: t, or, while
// the barrier holds t, holdRetry from now at the latest if that is later
// (the poll is cut short when the barrier moves). An expiry the barrier
// does not hold wakes the loop at t exactly, so it is not late. r.mu is
// held.
func (r *Relay) fireWake(t, now time.Time) time.Time {
	if wait, ok := r.held(t, now); ok && t.Before(wait) {
		return wait
	}
	return t
}

// isCancelled reports whether rec (a delay-topic record, or a wheel entry
// decoded) is cancelled by the set.
func (r *Relay) isCancelled(rec *kgo.Record) bool {
	if r.cx == nil || rec == nil {
		return false
	}
	id := levels.ID(rec.Headers)
	if id == "" {
		return false
	}
	return r.cx.rd.Cancelled([]byte(id), levels.OriginalTimestamp(rec.Headers, rec.Timestamp))
}

// cancelledItem returns the kCancelled item that replaces it when its
// record is cancelled, nil otherwise. Forwards, fires and cascades are
// checked (first attempts and retries); dead letters are not.
func (r *Relay) cancelledItem(it *item, now time.Time) *item {
	switch it.kind {
	case kDead, kSkip, kCancelled:
		return nil // a queue head not yet given its kind is a kForward (zero)
	}
	if !r.isCancelled(it.orig) {
		return nil
	}
	c := &item{kind: kCancelled, part: it.part, offset: it.offset, level: it.level, fromQueue: it.fromQueue, orig: it.orig, due: it.due, pair: it.pair}
	if t := r.cfg.CancelledTopic; t != "" {
		c.out = r.cancelledRecord(it.orig, t, it.part, it.offset, now)
	}
	return c
}

// cancelDone counts a settled cancelled item and finishes its wheel entry.
func (r *Relay) cancelDone(it *item) {
	r.cx.cancelled.WithLabelValues(levelLabel(it.level)).Inc()
	if !it.fromQueue {
		r.wheelDone(it)
	}
}
