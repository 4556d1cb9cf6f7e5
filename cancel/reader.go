package cancel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// Reasons a cancel record is ignored, the values of Options.Invalid's
// argument (and of kdelay_cancels_invalid_total's reason label).
const (
	InvalidID     = "bad_id"            // empty key, or longer than MaxIDLen
	InvalidBefore = "bad_cancel_before" // kdelay-cancel-before is not epoch ms
)

// ErrNoTopic is returned by [Reader.Sync] when the cancel topic does not
// exist.
var ErrNoTopic = errors.New("cancel: the cancel topic does not exist")

// Options configure [NewReader].
type Options struct {
	// Topic is the cancel topic (KDELAY_CANCEL_TOPIC).
	Topic string
	// KafkaOpts connect to the cluster (seed brokers, TLS, SASL); the
	// reader adds its consumption options.
	KafkaOpts []kgo.Opt
	// Retain is how long a cancel is kept after its cut-off
	// (KDELAY_MAX_DELAY).
	Retain time.Duration
	// Every is the shortest time between two barrier rounds; default 25ms.
	Every time.Duration
	// Idle is the longest time between two rounds while none is wanted
	// ([Reader.Want]); default 1s.
	Idle time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Log receives warnings about ignored cancels; default slog.Default().
	Log *slog.Logger
	// Invalid, when set, is called for every cancel record ignored, with
	// its reason (InvalidID, InvalidBefore).
	Invalid func(reason string)
}

// Reader reads the whole cancel topic into a [Set] and keeps it current.
// Create it with [NewReader] (which starts reading), call [Reader.Sync] to
// have read everything written so far, [Reader.Run] to keep the barrier
// moving, and [Reader.Close] at the end.
type Reader struct {
	set     *Set
	cl      *kgo.Client
	adm     *kadm.Client
	topic   string
	every   time.Duration
	idle    time.Duration
	now     func() time.Time
	log     *slog.Logger
	invalid func(string)

	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	pos     map[int32]int64 // next offset to read, per partition read from
	changed chan struct{}   // closed and replaced when pos advances
	through time.Time       // the barrier: every cancel acked before it is in set
	moved   chan struct{}   // closed and replaced when through advances
	readErr error           // the last fetch error, for Sync's message
	wantAt  time.Time       // the earliest round start wanted and not yet run (zero: none)
	wanted  chan struct{}   // Run's wake-up when a round is wanted sooner (buffered, 1)
}

// NewReader creates the reader's client (no consumer group: every
// partition from its start, read_committed) and starts reading.
func NewReader(o Options) (*Reader, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Every <= 0 {
		o.Every = 25 * time.Millisecond
	}
	if o.Idle <= 0 {
		o.Idle = time.Second
	}
	opts := append(append([]kgo.Opt(nil), o.KafkaOpts...),
		kgo.ConsumeTopics(o.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Markers advance the position, so that a partition ending in one
		// counts as read.
		kgo.KeepControlRecords(),
		// A fetch waiting at the broker returns as soon as a cancel
		// arrives: the wait bounds only the fetches of a quiet topic.
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.MetadataMinAge(time.Second),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("cancel: kafka client: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &Reader{
		set: NewSet(o.Retain), cl: cl, adm: kadm.NewClient(cl), topic: o.Topic, every: o.Every, idle: o.Idle,
		now: o.Now, log: o.Log, invalid: o.Invalid, stop: stop, done: make(chan struct{}),
		pos: make(map[int32]int64), changed: make(chan struct{}), moved: make(chan struct{}),
		wanted: make(chan struct{}, 1),
	}
	go r.poll(ctx)
	return r, nil
}

// Set returns the reader's set.
func (r *Reader) Set() *Set { return r.set }

// Cancelled reports whether a delayed record with id and original
// timestamp ts is cancelled by what has been read so far.
func (r *Reader) Cancelled(id []byte, ts time.Time) bool {
	_, ok := r.set.Cancelled(id, ts.UnixMilli())
	return ok
}

// Through returns the barrier: every cancel the broker acknowledged
// before it has been read into the set (zero before the first Sync).
func (r *Reader) Through() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.through
}

// Moved returns the barrier and a channel closed when it next moves past
// it.
func (r *Reader) Moved() (time.Time, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.through, r.moved
}

// Close stops reading and closes the client.
func (r *Reader) Close() {
	r.stop()
	<-r.done
	r.cl.Close()
}

func (r *Reader) poll(ctx context.Context) {
	defer close(r.done)
	for ctx.Err() == nil {
		fs := r.cl.PollFetches(ctx)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("cancel topic %s partition %d: %w", t, p, err)
			}
		})
		now := r.now()
		advanced := map[int32]int64{}
		fs.EachRecord(func(rec *kgo.Record) {
			if !rec.Attrs.IsControl() {
				r.apply(rec, now)
			}
			advanced[rec.Partition] = rec.Offset + 1
		})
		r.mu.Lock()
		if ferr != nil {
			r.readErr = ferr
		}
		if len(advanced) > 0 {
			for p, off := range advanced {
				r.pos[p] = max(r.pos[p], off)
			}
			close(r.changed)
			r.changed = make(chan struct{})
		}
		r.mu.Unlock()
	}
}

// apply puts one cancel record into the set.
func (r *Reader) apply(rec *kgo.Record, now time.Time) {
	if len(rec.Key) == 0 || len(rec.Key) > MaxIDLen {
		r.bad(InvalidID, rec, fmt.Sprintf("key of %d bytes; an id is 1 to %d bytes", len(rec.Key), MaxIDLen))
		return
	}
	if rec.Value == nil {
		r.set.Delete(rec.Key)
		return
	}
	cutoff := rec.Timestamp.UnixMilli()
	for i := len(rec.Headers) - 1; i >= 0; i-- {
		if h := rec.Headers[i]; h.Key == levels.HeaderCancelBefore {
			ms, err := strconv.ParseInt(strings.TrimSpace(string(h.Value)), 10, 64)
			if err != nil || ms < 0 {
				r.bad(InvalidBefore, rec, fmt.Sprintf("%s=%q is not epoch milliseconds", levels.HeaderCancelBefore, cut(h.Value)))
				return
			}
			cutoff = ms
			break
		}
	}
	r.set.Put(rec.Key, cutoff, now)
}

func cut(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

func (r *Reader) bad(reason string, rec *kgo.Record, detail string) {
	r.log.Warn("cancel ignored", "reason", reason, "detail", detail, "key", cut(rec.Key),
		"source", levels.Source(rec.Topic, rec.Partition, rec.Offset))
	if r.invalid != nil {
		r.invalid(reason)
	}
}

// Sync runs one barrier round: it takes the time t, lists the cancel
// topic's end offsets (last stable offsets) and waits until every
// partition has been read up to them; then Through is at least t. It
// returns ErrNoTopic (wrapped) when the topic does not exist, and ctx's
// error when it ends first.
func (r *Reader) Sync(ctx context.Context) error {
	t := r.now()
	ends, err := r.adm.ListCommittedOffsets(ctx, r.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("%w: %s: %w", ErrNoTopic, r.topic, err)
		}
		return fmt.Errorf("cancel: end offsets of %s: %w", r.topic, err)
	}
	if len(ends) == 0 || len(ends[r.topic]) == 0 {
		return fmt.Errorf("%w: %s", ErrNoTopic, r.topic)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	for {
		r.mu.Lock()
		behind := 0
		for p, off := range want {
			if r.pos[p] < off {
				behind++
			}
		}
		if behind == 0 {
			if t.After(r.through) {
				r.through = t
				close(r.moved)
				r.moved = make(chan struct{})
			}
			r.mu.Unlock()
			return nil
		}
		ch, rerr := r.changed, r.readErr
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			if rerr != nil {
				return fmt.Errorf("cancel: %d partition(s) of %s not read through: %w (last read error: %w)", behind, r.topic, ctx.Err(), rerr)
			}
			return fmt.Errorf("cancel: %d partition(s) of %s not read through: %w", behind, r.topic, ctx.Err())
		}
	}
}

// Want asks Run for a round that starts at at or later, as soon after at
// as Options.Every allows: a record due at t needs a round started at t
// minus the margin at the latest (the round's time is the barrier).
// Between the rounds wanted Run rounds once per Options.Idle.
func (r *Reader) Want(at time.Time) {
	r.mu.Lock()
	sooner := r.wantAt.IsZero() || at.Before(r.wantAt)
	if sooner {
		r.wantAt = at
	}
	r.mu.Unlock()
	if sooner {
		select {
		case r.wanted <- struct{}{}:
		default:
		}
	}
}

// nextRound returns when the round after one started at start is due: at
// the time wanted, or Options.Idle after start at the latest, never
// sooner than Options.Every (250ms after a failed round) after start.
func (r *Reader) nextRound(start time.Time, failed bool) time.Time {
	r.mu.Lock()
	at := r.wantAt
	r.mu.Unlock()
	next := start.Add(r.idle)
	if !at.IsZero() && at.Before(next) {
		next = at
	}
	soonest := start.Add(r.every)
	if failed {
		soonest = start.Add(max(r.every, 250*time.Millisecond))
	}
	if next.Before(soonest) {
		next = soonest
	}
	return next
}

// Run moves the barrier until ctx ends: one round ([Reader.Sync]) when one
// is wanted ([Reader.Want]), and once per Options.Idle between; never two
// within Options.Every. Expired cancels are forgotten once a minute. A
// failed round is logged and retried; Run returns nil when ctx ends.
func (r *Reader) Run(ctx context.Context) error {
	lastExpire := r.now()
	fails := 0
	t := time.NewTimer(time.Hour) // reset before each wait
	defer t.Stop()
	for ctx.Err() == nil {
		start := r.now()
		r.mu.Lock()
		if !r.wantAt.After(start) {
			r.wantAt = time.Time{} // this round is the one wanted
		}
		r.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.Sync(rctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			fails++
			if fails == 1 || fails%40 == 0 {
				r.log.Warn("cancel topic barrier round failed; records due meanwhile wait", "topic", r.topic, "err", err, "failures", fails)
			}
		case err == nil:
			fails = 0
		}
		if now := r.now(); now.Sub(lastExpire) >= time.Minute {
			r.set.Expire(now)
			lastExpire = now
		}
		for ctx.Err() == nil {
			wait := r.nextRound(start, err != nil).Sub(r.now())
			if wait <= 0 {
				break
			}
			t.Reset(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			case <-r.wanted: // wanted sooner: the next round's time again
				t.Stop() // no stale tick after Stop (Go 1.23 timers)
			}
		}
	}
	return nil
}
