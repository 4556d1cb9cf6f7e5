// Package relay is kdelay's engine: a consumer-group member on the delay
// topic that forwards every record to its target topic when it is due.
//
// One goroutine runs the loop (docs/architecture.md). Each iteration it polls the
// delay topic (until the next wake-up at most), appends the records to their
// partition's queue, then collects what can go now:
//
//   - the wheel's expired entries (records that waited locally);
//   - the head records of each partition whose level time (record timestamp
//   - the level's duration) has passed: due ones are forwarded, those due
//     within the wheel horizon go into the wheel, later ones cascade back to
//     the delay topic with an absolute kdelay-deliver-at, bad ones go to the
//     dead-letter topic.
//
// The batch is produced with the idempotent producer (acks=all); retriable
// errors are retried with backoff while nothing is committed. After the acks
// the wheel is flushed (group commit) and offsets are committed
// synchronously at the lowest offset not yet done, at most once per
// commitEvery (100ms): a record resting in the wheel holds the commit back,
// so losing the wheel loses nothing.
//
// A partition whose head is not yet at its level time is paused; its head
// stays in memory and the loop wakes up at that time. Rebalances are blocked
// while a batch is in flight (kgo.BlockRebalanceOnPoll); a revoked or lost
// partition's wheel entries are dropped, since its next owner re-reads them
// from the committed offset.
package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"
	"go.opentelemetry.io/otel/trace"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/offsetmap"
	"github.com/kdelay/kdelay/wheel"
)

// Options configure [New].
type Options struct {
	// Config is the validated configuration (config.Load).
	Config config.Config
	// Log receives the relay's and franz-go's logs; default slog.Default().
	Log *slog.Logger
	// Registry receives the relay's metrics and franz-go's (prefix
	// kdelay_kafka_); default a private registry.
	Registry prometheus.Registerer
	// Now is the clock; default time.Now.
	Now func() time.Time
	// KafkaOpts are appended to the client options built from Config
	// (tests, tuning).
	KafkaOpts []kgo.Opt
	// MaxBatch bounds the records produced and committed per iteration;
	// default 4096.
	MaxBatch int
	// MaxPartitionBytes bounds the bytes (keys, values, headers) buffered
	// per partition before it is paused; default 8 MiB.
	MaxPartitionBytes int
	// MetadataLimit is the broker's offset.metadata.max.bytes, the bound
	// of each commit's metadata; default DefaultMetadataLimit (Kafka's
	// default).
	MetadataLimit int
	// OpenWheel opens the local timer store; default [wheel.Open] as a
	// [WheelStore]. Tests use it to make the store fail.
	OpenWheel func(dir string, opt wheel.Options, now int64) (Store, wheel.Report, error)
	// OnIdle is called, from the relay's loop, when it goes idle after a
	// busy spell: IdleAfter without a record to handle after an
	// iteration that handled some. The kdelay process returns its memory
	// to the OS there (runtime/debug.FreeOSMemory): after a burst the Go
	// heap, and so the RSS, would otherwise stay near its peak for
	// minutes. Default: nothing.
	OnIdle func()
	// IdleAfter is the quiet time before OnIdle; default 2s.
	IdleAfter time.Duration
	// TracerProvider, when set, gives each forward a span that continues
	// the producer's trace (trace.go); default nil: no spans, no headers.
	TracerProvider trace.TracerProvider

	// maxPoll bounds each poll of the loop (default 1s, so that readiness
	// and gauges stay fresh). Tests lengthen it to see what a poll that
	// nothing wakes holds back.
	maxPoll time.Duration
}

// Relay forwards delay-topic records when due. Create it with [New], run it
// with [Relay.Run]; it is not reusable after Run returns.
type Relay struct {
	cfg config.Config
	log *slog.Logger
	now func() time.Time
	pol policy
	m   *metrics
	cl  *kgo.Client
	txn *kgo.GroupTransactSession // exactly-once mode; nil at least once
	// prev are the produce attempts of the last batch (at-least-once
	// mode): the next iteration waits for them (up to flightWait) after
	// deciding its own batch, so deciding overlaps the acks. Loop only.
	prev    *attempts
	onIdle  func()
	maxPoll time.Duration
	tracer  *tracer // nil: tracing off
	// pollCancel ends the loop's current poll (r.mu held): an assignment
	// taken up inside it wakes the loop at once (onAssigned).
	pollCancel context.CancelFunc
	idleAfter  time.Duration
	busyAt     time.Time // last iteration that handled records; zero once idle was reported (loop only)
	lastIter   time.Time // when the loop last decided a batch (loop only)
	// gaugeNext and gaugeLag are updateGauges' per-level scratch (index:
	// level), kept so that every iteration does not allocate them.
	gaugeNext []time.Time
	gaugeLag  []int64
	// payload is addToWheel's buffer for the entry it encodes (r.mu held).
	payload []byte
	// fires is what is left of fromWheel's current chunk (r.mu held).
	fires []wheelFire
	// series remembers the occurrences fired, to drop a duplicate copy
	// of one (recur.go; r.mu held).
	series seriesMarks
	// The produce-call clock of kdelay_send_lateness_seconds (sendClock):
	// the iteration it was read in, the reading, and calls since.
	sendIter  time.Time
	sendNs    int64
	sendCalls int
	commitAt  time.Time // at least once: when the loop last sent a commit (loop only)
	commitDue time.Time // at least once: when the commit put off by commitEvery is due; zero: none (loop only)
	suspect   bool      // membership unconfirmed after the loop stood still (loop only)
	confirmAt time.Time // while suspect: when to ask the coordinator again (loop only)
	// asgGen is the group generation whose assignment the relay holds
	// (set by onAssigned; -1 before the first). confirmMember confirms
	// only a membership of that generation.
	asgGen    atomic.Int32
	maxBatch  int
	maxBytes  int
	metaLimit int
	openW     func(dir string, opt wheel.Options, now int64) (Store, wheel.Report, error)
	bind      binding  // what the data directory indexes
	cx        *cancels // the cancel set and its barrier (cancel.go)

	mu          sync.Mutex // guards everything below; the group callbacks run on kgo's goroutines
	wheel       Store      // nil while unavailable (reset failed): waits cascade through Kafka
	wheelErr    error      // a wheel failure seen in this iteration; the wheel is reset after it
	wheelRetry  time.Time  // when to try opening an unavailable wheel again
	wheelBroken time.Duration
	corrupt     int64 // the wheel's corrupt-record count already acted upon
	// compactSeen, compactEntriesSeen: the wheel's Compacted already counted.
	compactSeen        int
	compactEntriesSeen int64
	// syncOnCommit (KDELAY_WHEEL_SYNC=batch, at least once): the wheel is
	// opened with wheel.SyncManual and fsynced before each offset commit
	// (startCommit, syncForCommit), not after each batch.
	syncOnCommit bool
	// committing, when not nil, is closed when the committer's commit in
	// flight is done (startCommit).
	committing chan struct{}
	// barrierMoved, when not nil, is closed when the cancel barrier moves:
	// something due was held by it in this iteration (held), so the poll
	// ends then.
	barrierMoved <-chan struct{}
	parts        map[int32]*partState
	firstAsg     bool // the first assignment has been taken up
	resync       map[int32]int64
	fatal        error // stops Run: the group's state cannot be used by this relay
	// groupMoved: a revoke or a loss since the transact session's last
	// End (exactly once); see beginTxn.
	groupMoved atomic.Bool

	// txnOpen: a transaction has begun and not ended (exactly once; the
	// loop's own). An iteration with nothing to produce or commit leaves
	// it open for the next one (endTxn).
	txnOpen bool
	fences  []time.Time // recent fences of the producer (fenced)
	lock    *dirLock    // the data directory's, held from New to Close
	txnID   string      // exactly once: the transactional ID (transactionalID)

	health    health
	stopping  atomic.Bool
	joined    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// partState is one owned partition of the delay topic.
type partState struct {
	p       int32
	level   int
	queue   []*kgo.Record // polled, not yet handled, offset order
	bytes   int           // keys, values and headers held in queue
	next    int64         // offset after the last record appended to queue
	paused  bool
	handled int64   // every offset <= handled is done, in the wheel or in retries
	retries []*item // failed produces set aside, with their next attempt time
	flight  []*item // produced, outcome not yet settled
	commit  int64   // last committed offset, -1 if none
	hwm     int64   // high watermark as of the last fetch, -1 if unknown
	waitFor time.Time

	// After an assignment with local state, records up to catchUp (the
	// highest offset the wheel had taken) are read again; those among
	// them that the wheel fires meanwhile are in fired, so that their
	// second reading is skipped. -1 and nil once the queue is past it.
	catchUp int64
	fired   map[int64]struct{}

	commitEnd int64 // end of the done set last committed
	// settled counts the records settled (each may change the done set);
	// committedAt is its value when the last commit that went through
	// was computed. They differ while something settled is uncommitted,
	// also when it settled during that commit's round trip.
	settled, committedAt uint64
	doneSet              offsetmap.Set // the done set of the last commit (what a resync may skip)
	known                offsetmap.Set // done above the commit, from the commit metadata
}

// pop removes the queue's head.
func (ps *partState) pop() {
	ps.bytes -= recordBytes(ps.queue[0])
	ps.queue[0] = nil
	ps.queue = ps.queue[1:]
}

func (ps *partState) clearQueue() { ps.queue, ps.bytes = nil, 0 }

func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// New checks what the data directory indexes against the delay topic
// (binding.go), opens the wheel in cfg.DataDir and creates the Kafka
// client, which starts joining the group at once; records are read only
// once Run runs. It refuses a level table other than the one the pending
// records were written under (unless cfg.AllowLevelChange).
func New(opts Options) (*Relay, error) {
	cfg := opts.Config
	if cfg.Table() == nil {
		return nil, errors.New("relay: configuration not validated (use config.Load)")
	}
	r := &Relay{
		cfg:       cfg,
		log:       opts.Log,
		now:       opts.Now,
		pol:       policy{table: cfg.Table(), cfg: cfg, horizon: cfg.WheelHorizon},
		maxBatch:  opts.MaxBatch,
		maxBytes:  opts.MaxPartitionBytes,
		metaLimit: opts.MetadataLimit,
		openW:     opts.OpenWheel,
		onIdle:    opts.OnIdle,
		idleAfter: opts.IdleAfter,
		tracer:    newTracer(opts.TracerProvider, cfg.Topic),
		maxPoll:   cmp.Or(opts.maxPoll, time.Second),
		parts:     make(map[int32]*partState),
		resync:    make(map[int32]int64),
	}
	r.asgGen.Store(-1)
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.maxBatch <= 0 {
		r.maxBatch = 4096
	}
	if r.idleAfter <= 0 {
		r.idleAfter = 2 * time.Second
	}
	if r.maxBytes <= 0 {
		r.maxBytes = 8 << 20
	}
	if r.metaLimit <= 0 {
		r.metaLimit = DefaultMetadataLimit
	}
	if r.openW == nil {
		r.openW = func(dir string, opt wheel.Options, now int64) (Store, wheel.Report, error) {
			w, rep, err := wheel.Open(dir, opt, now)
			if err != nil {
				return nil, rep, err
			}
			return WheelStore(w), rep, nil
		}
	}
	r.health = health{stallAfter: cfg.StallTimeout, progressAt: r.now()}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("relay: metrics: %w", err)
	}
	r.m = m

	kopts, err := cfg.KafkaOpts(r.log)
	if err != nil {
		return nil, err
	}
	kopts = append(kopts, opts.KafkaOpts...)
	if r.lock, err = lockDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			r.lock.unlock()
		}
	}()
	if err := r.preflight(kopts); err != nil {
		return nil, err
	}
	if cfg.Delivery == ExactlyOnce {
		if r.txnID, err = r.transactionalID(); err != nil {
			return nil, err
		}
	}
	if err := r.openCancels(kopts, reg); err != nil {
		return nil, err
	}
	if err := r.openWheel(); err != nil {
		r.closeCancels()
		return nil, err
	}

	kopts = append(kopts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(heartbeatInterval),
		kgo.FetchMaxWait(cfg.FetchMaxWait),
		kgo.FetchMaxPartitionBytes(fetchPartitionBytes),
		// Records of aborted transactions are never delivered. Markers
		// are kept so that the commit can pass them (a partition ending in
		// a marker would otherwise show a lag of one for ever).
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.OnPartitionsAssigned(r.onAssigned),
		kgo.AdjustFetchOffsetsFn(r.adjustStart),
		kgo.OnPartitionsRevoked(r.onRevoked),
		kgo.OnPartitionsLost(r.onLost),
		kgo.RecordPartitioner(newPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Counted from each attempt's timestamp, which startProduce sets
		// when it hands the attempt over.
		kgo.RecordDeliveryTimeout(30*time.Second),
		// Each batch is produced at once and waited for: lingering only
		// adds latency (franz-go's default is 10ms).
		kgo.ProducerLinger(0),
		// A leader change costs one metadata refresh; franz-go's default
		// floor of 5s between refreshes would make every record late by 5s.
		kgo.MetadataMinAge(500*time.Millisecond),
		kgo.WithHooks(kprom.NewMetrics("kdelay_kafka", kprom.Registerer(reg))),
	)
	if cfg.InstanceID != "" {
		kopts = append(kopts, kgo.InstanceID(cfg.InstanceID))
	}
	kopts = append(kopts, opts.KafkaOpts...) // again: they win over the defaults above
	if cfg.Delivery == ExactlyOnce {
		kopts = append(kopts, kgo.TransactionalID(r.txnID), kgo.TransactionTimeout(txnTimeout(cfg.SessionTimeout)), txnVersions())
		sess, err := kgo.NewGroupTransactSession(kopts...)
		if err != nil {
			r.wheel.Close()
			r.closeCancels()
			return nil, fmt.Errorf("relay: kafka transactional client: %w", err)
		}
		r.txn, r.cl = sess, sess.Client()
		r.log.Info("exactly-once delivery", "transactional_id", r.txnID, "transaction_timeout", txnTimeout(cfg.SessionTimeout).String())
		ok = true
		return r, nil
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		r.wheel.Close()
		r.closeCancels()
		return nil, fmt.Errorf("relay: kafka client: %w", err)
	}
	r.cl = cl
	ok = true
	return r, nil
}

// openWheel opens the wheel of the data directory (New; a reset).
func (r *Relay) openWheel() error {
	policy := syncPolicy(r.cfg.WheelSync)
	if r.syncOnCommit = policy == wheel.SyncBatch && r.cfg.Delivery != ExactlyOnce; r.syncOnCommit {
		policy = wheel.SyncManual // fsynced before each commit (startCommit, syncForCommit)
	}
	w, rep, err := r.openW(filepath.Join(r.cfg.DataDir, "wheel"), wheel.Options{
		Horizon: r.cfg.WheelHorizon,
		Sync:    policy,
	}, r.now().UnixMilli())
	if err != nil {
		return fmt.Errorf("relay: open wheel in %s: %w", r.cfg.DataDir, err)
	}
	r.wheel = w
	r.corrupt = w.Corrupt()
	r.compactSeen, r.compactEntriesSeen = 0, 0 // a new wheel: its own compactions from Open on
	r.logRecovery(rep)
	return nil
}

func syncPolicy(s string) wheel.SyncPolicy {
	switch strings.ToLower(s) {
	case "interval":
		return wheel.SyncInterval
	case "none":
		return wheel.SyncNone
	default:
		return wheel.SyncBatch
	}
}

func (r *Relay) logRecovery(rep wheel.Report) {
	attrs := []any{"recovered", rep.Recovered, "pending", r.wheel.Pending()}
	if rep.Lost > 0 || rep.Truncated > 0 || len(rep.Problems) > 0 {
		attrs = append(attrs, "lost", rep.Lost, "lost_ranges", fmt.Sprint(rep.LostRanges),
			"truncated_bytes", rep.Truncated, "problems", strings.Join(rep.Problems, "; "))
		r.log.Warn("wheel recovered with losses; the lost records are re-read from Kafka", attrs...)
		return
	}
	r.log.Info("wheel opened", attrs...)
}

// Ready reports whether the relay is in its group, has taken up its first
// assignment, is not shutting down and is making progress; see [Relay.Why].
func (r *Relay) Ready() bool {
	return r.joined.Load() && !r.stopping.Load() && r.health.why() == ""
}

// Why says why the relay is not making progress ("" when it is): one of
// the kdelay_stalled reasons.
func (r *Relay) Why() string { return r.health.why() }

// Live reports an error when the relay has had due work and delivered
// nothing for KDELAY_STALL_TIMEOUT: /healthz then fails, so that a
// supervisor restarts it.
func (r *Relay) Live() error { return r.health.live() }

// Client returns the relay's Kafka client (for status and admin requests).
func (r *Relay) Client() *kgo.Client { return r.cl }

// Run runs the relay until ctx is done, then shuts down in order: stop
// polling, finish or hand back the batch in flight (bounded by the
// configured shutdown timeout), commit, flush the wheel, leave the group.
// It returns nil after a clean shutdown, and an error when the relay
// cannot go on (its delay topic was recreated, or its group holds records
// of another level table); see [ErrRebind].
func (r *Relay) Run(ctx context.Context) error {
	// work outlives ctx by the shutdown timeout so a batch in flight can
	// finish and be committed.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(ctx, func() {
		r.stopping.Store(true)
		time.AfterFunc(r.cfg.ShutdownTimeout, cancelWork)
	})
	defer stop()
	watch, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	go r.watchTopic(watch)

	err := r.loop(ctx, work)
	if cerr := r.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// Close leaves the group, closes the client and the wheel. Run calls it on
// its way out; call it yourself only for a relay whose Run was never called.
// It is safe to call more than once.
func (r *Relay) Close() error {
	r.closeOnce.Do(func() {
		r.stopping.Store(true)
		r.m.ready.Set(0)
		r.cl.Close() // leaves the group; onRevoked keeps the wheel while stopping
		r.closeCancels()
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.wheel != nil {
			if err := r.wheel.Close(); err != nil {
				r.closeErr = fmt.Errorf("relay: close wheel: %w", err)
			}
		}
		r.lock.unlock()
	})
	return r.closeErr
}

func (r *Relay) loop(ctx, work context.Context) error {
	for ctx.Err() == nil {
		r.mu.Lock()
		if r.fatal != nil {
			r.mu.Unlock()
			return r.fatal
		}
		r.maintainWheel(r.now())
		wake := r.nextWake(r.now())
		if r.suspect {
			wake = r.confirmAt // nothing is decided until the membership is confirmed
		}
		moved := r.barrierMoved
		var committed <-chan struct{}
		if !r.commitDue.IsZero() {
			committed = r.committing // a commit waits for the one in flight
		}
		r.mu.Unlock()
		// Wake at least once a second so readiness and gauges stay fresh.
		if idle := r.now().Add(r.maxPoll); wake.IsZero() || wake.After(idle) {
			wake = idle
		}
		// A timeout on the relay's own clock (Options.Now), not a
		// deadline on the wall clock.
		pollCtx, cancel := context.WithTimeout(ctx, wake.Sub(r.now()))
		r.mu.Lock()
		r.pollCancel = cancel
		r.mu.Unlock()
		if prev := r.prev; prev != nil || moved != nil || committed != nil {
			// The last batch's outcomes are still coming: wake when
			// they are in, to settle and commit them. Records held by
			// the cancel barrier: wake when it moves. A commit due
			// behind the one in flight: wake when that is done.
			var landed <-chan struct{}
			if prev != nil {
				landed = prev.done
			}
			go func() {
				select {
				case <-landed:
					cancel()
				case <-moved:
					cancel()
				case <-committed:
					cancel()
				case <-pollCtx.Done():
				}
			}()
		}
		fetches := r.cl.PollRecords(pollCtx, r.maxBatch)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				r.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if _, gen := r.cl.GroupMetadata(); gen >= 0 {
			r.joined.Store(true)
		}
		// Exactly once: the transaction begins once the poll is back, so
		// that no rebalance falls inside it (they wait for AllowRebalance).
		// Records polled while it cannot begin stay queued.
		began := r.txn == nil || r.beginTxn(ctx)

		if r.suspect && !r.now().Before(r.confirmAt) {
			// Asked at most every confirmRetry: a poll that returns
			// records early must not turn the check into a spin.
			if r.confirmMember(work) {
				r.suspect = false
				r.log.Info("group membership confirmed")
			} else {
				r.confirmAt = r.now().Add(confirmRetry)
			}
		}

		// Rebalances are blocked from here to AllowRebalance: the seeks
		// and the batch see one assignment.
		r.mu.Lock()
		seeked := r.applyResync()
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if ps := r.parts[fp.Partition]; ps != nil && fp.Topic == r.cfg.Topic && fp.HighWatermark >= 0 {
				ps.hwm = fp.HighWatermark
			}
		})
		fetches.EachRecord(func(rec *kgo.Record) {
			if !seeked[rec.Partition] { // polled before the seek: read again after it
				r.enqueue(rec)
			}
		})
		now := r.now()
		// A loop that stood still since it last decided a batch (the
		// process frozen or starved, anywhere in the iteration) for long
		// enough to have missed its session may have lost its partitions
		// without knowing yet: at least once, nothing fences its forwards,
		// so it forwards nothing until the group coordinator confirms it
		// is still a member (next iterations, confirmMember).
		if r.txn == nil && !r.suspect && !r.lastIter.IsZero() && now.Sub(r.lastIter) > r.standStill() {
			r.suspect, r.confirmAt = true, now
			r.log.Warn("the loop stood still past the session timeout; confirming group membership before forwarding", "stood_still", now.Sub(r.lastIter).Round(time.Millisecond).String())
		}
		r.lastIter = now
		var b, solo []*item
		started := newAttempts()
		if r.suspect || !began {
			started.release() // records stay queued until membership is confirmed or lost, or a transaction begins
		} else {
			b, solo, started = r.collect(work, now)
		}
		r.mu.Unlock()

		if r.txn != nil {
			// endTxn below waits for every attempt.
		} else if err := r.deliver(work, solo, r.prev); err != nil {
			// Shutdown timeout while waiting: hand the batch back.
			// Nothing of it is committed; the next owner re-reads it.
			r.log.Warn("shutdown: batch handed back uncommitted", "records", len(b)+len(solo), "err", err)
			r.cl.AllowRebalance()
			return nil
		}
		if r.txn != nil && began {
			if err := r.endTxn(work, b, solo, started); err != nil {
				r.log.Warn("shutdown: transaction aborted, batch handed back", "records", len(b)+len(solo), "err", err)
				r.cl.AllowRebalance()
				return nil
			}
		} else {
			// This batch's produces go on while the next is polled
			// and decided; its outcomes settle in a later finish.
			r.mu.Lock()
			r.prev = started
			if started.finished() {
				r.prev = nil
			}
			r.finish(b, true)
			if due := r.commitAt.Add(commitEvery); now.Before(due) || r.committing != nil {
				r.commitDue = due // at most one commit per commitEvery, one in flight
			} else {
				r.commitDue = time.Time{}
				if offsets := r.commitOffsets(); len(offsets) > 0 {
					r.commitAt = now
					r.startCommit(work, offsets)
				}
			}
			r.mu.Unlock()
		}
		r.mu.Lock()
		r.updatePauses()
		r.updateGauges(now)
		r.mu.Unlock()
		r.m.ready.Set(boolFloat(r.Ready()))
		r.cl.AllowRebalance()
		r.idle(now, len(b)+len(solo) > 0)
	}
	// Shutdown: what is in flight lands (or the shutdown timeout passes),
	// and what landed is committed.
	if r.txn != nil {
		if r.txnOpen { // empty: nothing of it reached the broker
			r.abortTxn("shutdown")
		}
		return nil // every other transaction ended with its iteration
	}
	r.drain(work)
	r.awaitCommit(work)
	r.mu.Lock()
	r.finish(nil, true)
	r.syncForCommit()
	offsets := r.commitOffsets()
	r.mu.Unlock()
	r.commit(work, offsets)
	return nil
}

// idle calls onIdle once the loop has had nothing to handle for idleAfter
// since it last had (busy says whether this iteration had).
func (r *Relay) idle(now time.Time, busy bool) {
	switch {
	case busy:
		r.busyAt = now
	case !r.busyAt.IsZero() && now.Sub(r.busyAt) >= r.idleAfter:
		r.busyAt = time.Time{}
		if r.onIdle != nil {
			r.onIdle()
		}
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// enqueue appends a polled record to its partition's queue, skipping what
// this relay already handled (restart with an intact wheel) or already
// queued (a seek after assignment).
func (r *Relay) enqueue(rec *kgo.Record) {
	ps := r.parts[rec.Partition]
	if ps == nil || rec.Topic != r.cfg.Topic {
		return // not ours (any more); its owner reads it
	}
	if rec.Offset <= ps.handled || rec.Offset < ps.next {
		return
	}
	ps.next = rec.Offset + 1
	ps.queue = append(ps.queue, rec)
	ps.bytes += recordBytes(rec)
	if !rec.Attrs.IsControl() {
		r.m.level(ps.level).consumed.Inc()
	}
}

// nextWake returns when the loop must run again at the latest: now if a
// head record is ready, else the earliest level time of a waiting head,
// retry or wheel expiry; zero when nothing waits.
func (r *Relay) nextWake(now time.Time) time.Time {
	var wake time.Time
	earlier := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	for _, ps := range r.parts {
		for _, it := range ps.retries {
			earlier(it.nextTry)
		}
		if len(ps.flight) > 0 {
			earlier(now.Add(20 * time.Millisecond)) // settle outcomes as they land
		}
		if len(ps.queue) == 0 || r.crowded(ps) {
			continue
		}
		if ps.waitFor.IsZero() {
			earlier(now) // not yet decided: work to do
			continue
		}
		earlier(ps.waitFor)
	}
	if !r.commitDue.IsZero() && r.committing == nil {
		earlier(r.commitDue) // else the poll ends when the one in flight is done
	}
	if r.firstAsg && r.wheel != nil {
		if ms, ok := r.wheel.NextExpiry(); ok {
			earlier(r.fireWake(time.UnixMilli(ms), now))
		}
	}
	if !wake.IsZero() && !wake.After(now) {
		wake = now.Add(time.Millisecond) // poll without blocking
	}
	return wake
}

// updatePauses pauses a partition while its head waits for its level time,
// while its queue holds more than queueCap records or maxBytes bytes, or
// while its retries fill its room, and resumes it otherwise. A partition
// being drained stays fetching, so the next batch is usually buffered by
// the time the loop polls again.
func (r *Relay) updatePauses() {
	var pause, resume []int32
	for p, ps := range r.parts {
		full := len(ps.queue) >= r.queueCap() || ps.bytes >= r.maxBytes || r.crowded(ps)
		switch want := !ps.waitFor.IsZero() || full; {
		case want && !ps.paused:
			pause = append(pause, p)
			ps.paused = true
		case !want && ps.paused:
			resume = append(resume, p)
			ps.paused = false
		}
	}
	if len(pause) > 0 {
		r.cl.PauseFetchPartitions(map[string][]int32{r.cfg.Topic: pause})
	}
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(map[string][]int32{r.cfg.Topic: resume})
	}
}

// confirmMember asks the group coordinator whether this relay is still the
// member it was: a Heartbeat with its member ID and generation. A member
// that lost its partitions while it stood still (expelled at its session
// timeout, fenced by a restart with the same instance ID) is refused, and
// its client is told to rejoin, which reports the partitions lost. It
// reports whether the coordinator confirmed the membership.
//
// It asks even when the relay has nothing to commit: a relay that stood
// still before it handled a single record has nothing to lose, but what
// it would forward the new owner forwards too (a woken zombie going on
// unasked would duplicate every record of its old partitions).
// A rebalance in progress confirms the membership: the member keeps its
// partitions until it revokes them, after this iteration.
func (r *Relay) confirmMember(ctx context.Context) bool {
	member, gen := r.cl.GroupMetadata()
	if member == "" || gen < 0 {
		return false // not in a group session: partitions come back through onAssigned
	}
	if held := r.asgGen.Load(); gen != held {
		// A rejoin is under way (the client learns the new generation
		// from JoinGroup, before its assignment): the partitions held
		// are generation held's, and the new one may have given them
		// to another relay. Its Heartbeat would be answered "no
		// error" while the group completes the rebalance, so asking
		// proves nothing; onAssigned (after the revoke of what was
		// lost) brings the generation to confirm.
		return false
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = r.cfg.Group, member, gen
	if r.cfg.InstanceID != "" {
		req.InstanceID = kmsg.StringPtr(r.cfg.InstanceID)
	}
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	resp, err := req.RequestWith(ctx, r.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	switch {
	case err == nil, errors.Is(err, kerr.RebalanceInProgress):
		return true
	case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.FencedInstanceID):
		r.log.Warn("group membership lost while the loop stood still; rejoining", "member", member, "generation", gen, "err", err)
		r.cl.ForceRebalance()
	default:
		r.log.Warn("group membership not confirmed; asking again", "err", err)
	}
	return false
}

// heartbeatInterval is the group heartbeat interval (franz-go's default,
// set here because standStill depends on it).
const heartbeatInterval = 3 * time.Second

// standStill is how long the loop may stand still before it asks whether
// it is still a member. The coordinator expels a member a session timeout
// after its last heartbeat, which can be up to a heartbeat interval before
// the loop stopped: a freeze of the session timeout minus that interval
// can already cost the partitions (TestZombie). Asking costs one Heartbeat
// round trip, so the bound errs low: minus another second, at least 1s.
func (r *Relay) standStill() time.Duration {
	return max(r.cfg.SessionTimeout-heartbeatInterval-time.Second, time.Second)
}

// confirmRetry is how long a loop whose membership is unconfirmed waits
// before it asks the coordinator again (it forwards nothing meanwhile).
const confirmRetry = 100 * time.Millisecond

// handOverWait bounds how long a revoke waits for the revoked partitions'
// produces in flight (the group's rebalance waits for it).
const handOverWait = 5 * time.Second

// commitEvery is the shortest time between two offset commits of the loop,
// at least once. A commit is a round trip the loop waits for, so one per
// iteration would hold every record due meanwhile. A crash re-delivers
// what was forwarded since the last commit: up to commitEvery of it.
// Revokes, membership checks and shutdown commit at once.
const commitEvery = 100 * time.Millisecond

// slowProduce is how long a produce may be in flight before the relay
// reports itself retrying (not ready).
const slowProduce = 5 * time.Second

// fetchPartitionBytes is the most a fetch asks of one partition (Kafka
// returns at least one whole batch, however large, so a larger record is
// still read). franz-go's default is 1 MiB. A fetched record keeps the
// whole response or decompressed batch it was read from alive until the
// relay lets it go, so a smaller fetch bounds the memory of a relay
// ingesting as fast as it can at no cost in throughput
// (docs/benchmarks.md).
const fetchPartitionBytes = 128 << 10

// queueCap bounds the records held per partition before it is paused.
func (r *Relay) queueCap() int { return 2 * r.maxBatch }

// updateGauges sets the relay's gauges and its health from what the loop
// holds. The loop calls it after every iteration, under mu: it allocates
// nothing and hashes no label values (the series are resolved once).
func (r *Relay) updateGauges(now time.Time) {
	paused, retrying, deadRetrying, due := 0, 0, 0, false
	nlev := r.pol.table.Levels()
	if cap(r.gaugeNext) < nlev+1 {
		r.gaugeNext, r.gaugeLag = make([]time.Time, nlev+1), make([]int64, nlev+1)
	}
	next, lag := r.gaugeNext[:nlev+1], r.gaugeLag[:nlev+1]
	clear(next)
	clear(lag)
	for _, ps := range r.parts {
		if ps.hwm >= 0 && ps.level <= nlev {
			lag[ps.level] += max(0, ps.hwm-max(ps.commit, 0))
		}
		if ps.paused {
			paused++
		}
		retrying += len(ps.retries)
		for _, it := range ps.retries {
			if it.kind == kDead {
				deadRetrying++
			}
		}
		for _, it := range ps.flight {
			// A produce franz-go keeps retrying (NOT_ENOUGH_REPLICAS
			// below min ISR, a leader away) is not ours to retry yet,
			// but the relay is not making progress: say so.
			if !it.finished.Load() && now.Sub(it.sentAt) > slowProduce {
				retrying++
			}
		}
		if (len(ps.queue) > 0 && ps.waitFor.IsZero()) || len(ps.flight) > 0 {
			due = true
		}
		if !ps.waitFor.IsZero() && ps.level <= nlev {
			if t := next[ps.level]; t.IsZero() || ps.waitFor.Before(t) {
				next[ps.level] = ps.waitFor
			}
		}
	}
	pending := int64(0)
	if r.wheel != nil {
		pending = r.wheel.Pending()
		if ms, ok := r.wheel.NextExpiry(); ok {
			due = due || ms <= now.UnixMilli()
			r.m.wheelNext.Set(float64(ms) / 1000)
		} else {
			r.m.wheelNext.Set(0)
		}
	}
	r.m.paused.Set(float64(paused))
	r.m.assigned.Set(float64(len(r.parts)))
	r.m.wheelPending.Set(float64(pending))
	r.countCompactions()
	r.m.retrying.Set(float64(retrying))
	for level := 1; level <= nlev; level++ {
		v := 0.0
		if t := next[level]; !t.IsZero() {
			v = float64(t.UnixMilli()) / 1000
		}
		ls := r.m.level(level)
		ls.nextDue.Set(v)
		ls.lag.Set(float64(lag[level]))
	}
	r.health.update(now, status{
		due:          due || retrying > 0 || r.suspect,
		retrying:     retrying > 0 || r.suspect, // holding its forwards until membership is confirmed
		deadRetrying: deadRetrying > 0,
		noWheel:      r.wheel == nil,
	})
	for i, why := range stallReasons {
		r.m.stalledBy[i].Set(boolFloat(r.health.has(why)))
	}
}

// onAssigned takes up newly assigned partitions: the committed offset from
// the group, wheel entries below it trimmed (another owner did them), and
// the handled watermark from the wheel so a restart with an intact data
// directory skips what it already did. A partition without a committed
// offset never trusts a local watermark.
func (r *Relay) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	ps := assigned[r.cfg.Topic]
	committed, known := r.fetchCommitted(ctx, cl)
	r.mu.Lock()
	defer r.mu.Unlock()
	// Every session calls onAssigned, whatever it adds, after the revoke
	// of what it lost: what r.parts holds from here is this generation's.
	_, gen := cl.GroupMetadata()
	r.asgGen.Store(gen)
	if !r.firstAsg {
		// Entries of partitions not given back to us belong to their new
		// owner, who re-reads them from Kafka.
		for p := int32(0); p < r.pol.table.Partitions(); p++ {
			if !slices.Contains(ps, p) {
				r.wheelDrop(p)
			}
		}
		r.firstAsg = true
		r.joined.Store(true)
	}
	// The poll this runs in was given its deadline before the assignment
	// (up to maxPoll away when nothing waited, and the wheel's expiries
	// are not looked at before the first assignment): end it, so that the
	// loop looks again now: after a restart the wheel's due entries would
	// otherwise go out up to a second late.
	if r.pollCancel != nil {
		r.pollCancel()
	}
	for _, p := range ps {
		st := &partState{p: p, level: r.pol.table.LevelOf(p), handled: -1, commit: -1, hwm: -1, catchUp: -1}
		if st.level == 0 {
			r.log.Error("delay topic has more partitions than levels x partitions-per-level; extra partition is not read", "partition", p)
			continue
		}
		c, ok := committed[p]
		if ok && c.table != "" && c.table != r.bind.Levels && !r.cfg.AllowLevelChange {
			r.fatal = &LevelChangeError{Partition: p, Committed: c.table, Current: r.bind.Levels}
			r.log.Error("refusing the assignment", "err", r.fatal)
		}
		switch {
		case ok:
			st.commit, st.handled = c.at, c.at-1
			st.known, st.commitEnd, st.doneSet = c.done, c.done.End, c.done
			if r.wheel != nil {
				if err := r.wheel.Trim(p, c.at); err != nil {
					r.wheelFailed("trim", err)
				}
				r.doneFromMetadata(p, c.done)
				st.handled = max(r.wheel.Handled(p), st.handled)
				if hi, ok := r.wheel.Highest(p); ok && hi > st.handled {
					st.catchUp, st.fired = hi, make(map[int64]struct{})
				}
			}
		default:
			// No commit (a new or recreated topic, or the fetch failed):
			// nothing local is trusted, the partition is read from where
			// the group starts.
			r.wheelDrop(p)
		}
		if st.handled >= 0 && st.handled+1 > max(st.commit, 0) {
			r.resync[p] = st.handled + 1
		}
		st.next = st.handled + 1
		r.parts[p] = st
		r.log.Info("partition assigned", "partition", p, "level", st.level, "committed", st.commit, "handled", st.handled, "commit_known", known)
	}
	if r.wheel != nil {
		if err := r.wheel.Flush(); err != nil {
			r.wheelFailed("flush", err)
		}
	}
}

func (r *Relay) wheelDrop(p int32) {
	if r.wheel == nil {
		return
	}
	if err := r.wheel.Drop(p); err != nil {
		r.wheelFailed("drop", err)
	}
}

// commitInfo is a partition's committed offset and the level table its
// committer recorded in the commit metadata ("" when none).
type commitInfo struct {
	at    int64
	table string
	done  offsetmap.Set // done above at, per the metadata (empty if none)
}

// fetchCommitted returns the group's committed offsets of the delay topic.
// A failed fetch is retried a few times; if it keeps failing, known is
// false and the result is empty, which onAssigned treats as "no commit":
// nothing local is trusted, so a failure costs duplicates, never records.
func (r *Relay) fetchCommitted(ctx context.Context, cl *kgo.Client) (map[int32]commitInfo, bool) {
	out := make(map[int32]commitInfo)
	var err error
	// Retriable errors (an offset commit pending in another relay's open
	// transaction: UNSTABLE_OFFSET_COMMIT; a coordinator moving) are
	// retried until the transaction timeout has surely passed (another
	// relay's may be longer than this one's: at least 40 s); others a few
	// times.
	deadline := r.now().Add(max(2*txnTimeout(r.cfg.SessionTimeout), 40*time.Second))
	for attempt, wait := 0, 200*time.Millisecond; attempt < 4 || (kerr.IsRetriable(err) && r.now().Before(deadline)); attempt, wait = attempt+1, min(2*wait, 2*time.Second) {
		var resp kadm.OffsetResponses
		// RequireStable: a commit pending in an open transaction (exactly-
		// once mode, the previous owner's last batch) is waited for, not
		// read as the older one.
		resp, err = kadm.NewClient(cl).FetchOffsets(kadm.RequireStable(ctx), r.cfg.Group)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			resp.Each(func(o kadm.OffsetResponse) {
				if o.Topic == r.cfg.Topic && o.Err == nil && o.At >= 0 {
					ci := commitInfo{at: o.At, table: tableOfMetadata(o.Metadata)}
					done, ok, derr := doneOfMetadata(o.Metadata, o.At)
					switch {
					case derr != nil:
						r.log.Warn("ignoring the done set of a commit's metadata (its records are read again)", "partition", o.Partition, "err", derr)
					case ok:
						ci.done = done
					}
					out[o.Partition] = ci
				}
			})
			return out, true
		}
		select {
		case <-ctx.Done():
			return out, false
		case <-time.After(wait):
		}
	}
	r.log.Warn("fetch committed offsets failed; reading the assigned partitions without trusting local state (duplicates possible)", "err", err)
	return out, false
}

// applyResync seeks partitions whose position must change: past what the
// wheel already holds after an assignment, or back to the committed offset
// after a reset. It runs with rebalances blocked and r.mu held, and
// returns the partitions it moved.
func (r *Relay) applyResync() map[int32]bool {
	if len(r.resync) == 0 {
		return nil
	}
	moved := make(map[int32]bool, len(r.resync))
	set := make(map[int32]kgo.EpochOffset, len(r.resync))
	for p, off := range r.resync {
		if _, ok := r.parts[p]; ok {
			set[p] = kgo.EpochOffset{Epoch: -1, Offset: off}
			moved[p] = true
		}
	}
	clear(r.resync)
	if len(set) > 0 {
		r.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{r.cfg.Topic: set})
	}
	return moved
}

// adjustStart starts each newly assigned partition where onAssigned found
// that the local state reaches (r.resync: handled+1, past the committed
// offset when the wheel holds or did everything between), so that the
// first fetch does not read records only to seek past them (docs/architecture.md).
// franz-go calls it after OnPartitionsAssigned, before fetching
// (kgo.AdjustFetchOffsetsFn); entries it does not consume stay in r.resync
// for applyResync.
func (r *Relay) adjustStart(_ context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range offsets[r.cfg.Topic] {
		if off, ok := r.resync[p]; ok && r.parts[p] != nil {
			offsets[r.cfg.Topic][p] = kgo.NewOffset().At(off).WithEpoch(-1)
			delete(r.resync, p)
		}
	}
	return offsets, nil
}

// The group callbacks use the client they are given: they may run before
// New has stored r.cl.

func (r *Relay) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	r.groupMoved.Store(true)
	r.handOver(ctx, revoked[r.cfg.Topic])
	r.release(cl, revoked[r.cfg.Topic], "revoked")
}

// handOver, at least once, lets the produces in flight to the revoked
// partitions land (up to handOverWait) and commits what is done, so that
// the next owner does not deliver them again. Exactly-once mode has
// nothing in flight here: every transaction ended with its iteration.
func (r *Relay) handOver(ctx context.Context, ps []int32) {
	if len(ps) == 0 || r.txn != nil || r.stopping.Load() {
		return
	}
	r.mu.Lock()
	var groups []*attempts
	for _, p := range ps {
		if st := r.parts[p]; st != nil {
			for _, it := range st.flight {
				if !it.finished.Load() && it.group != nil && !slices.Contains(groups, it.group) {
					groups = append(groups, it.group)
				}
			}
		}
	}
	r.mu.Unlock()
	t := time.NewTimer(handOverWait)
	defer t.Stop()
wait:
	for i, g := range groups {
		select {
		case <-g.done:
		case <-t.C:
			r.log.Warn("revoke: produces still in flight after the hand-over wait; the next owner may deliver their records again",
				"partitions", ps, "batches_in_flight", len(groups)-i, "waited", handOverWait.String())
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	r.awaitCommit(ctx)
	r.mu.Lock()
	r.finish(nil, true)
	r.syncForCommit()
	all := r.commitOffsets()
	reqs := make(map[int32]commitReq, len(ps))
	for _, p := range ps {
		if c, ok := all[p]; ok {
			reqs[p] = c
		}
	}
	r.mu.Unlock()
	r.commit(ctx, reqs)
}

func (r *Relay) onLost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	r.groupMoved.Store(true)
	r.release(cl, lost[r.cfg.Topic], "lost")
}

// release forgets partitions that are no longer ours. What was done is
// committed (each iteration commits what landed; a revoke hands over its
// produces in flight first, handOver); wheel entries, retries and what is
// still in flight are dropped because the new owner re-reads them from the
// committed offset. On
// shutdown the wheel is kept, so a restart that gets the partitions back
// sends no duplicate.
func (r *Relay) release(cl *kgo.Client, ps []int32, why string) {
	if len(ps) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ps {
		delete(r.parts, p)
		delete(r.resync, p)
		if !r.stopping.Load() {
			r.wheelDrop(p)
		}
	}
	if r.wheel != nil {
		if err := r.wheel.Flush(); err != nil {
			r.wheelFailed("flush", err)
		}
	}
	cl.ResumeFetchPartitions(map[string][]int32{r.cfg.Topic: ps}) // pauses survive rebalances
	r.log.Info("partitions "+why, "partitions", ps)
}

// countCompactions adds the wheel's compactions installed since the last
// call to kdelay_wheel_compactions_total and the entries they copied to
// kdelay_wheel_compacted_entries_total. r.mu is held.
func (r *Relay) countCompactions() {
	if r.wheel == nil {
		return
	}
	segs, entries := r.wheel.Compacted()
	if segs > r.compactSeen {
		r.m.compactions.Add(float64(segs - r.compactSeen))
		r.m.compactedEntries.Add(float64(entries - r.compactEntriesSeen))
	}
	r.compactSeen, r.compactEntriesSeen = segs, entries
}
