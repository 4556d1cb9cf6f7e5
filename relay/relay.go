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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"go.opentelemetry.io/otel/trace"

	"github.com/kdelay/kdelay/config"
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
	// ReadAheadBytes bounds the memory of the records read ahead, before
	// their level time, for the whole relay (readAhead): their keys, values
	// and headers and about 320 bytes each; default 16 MiB.
	ReadAheadBytes int
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
	cfg     config.Config
	log     *slog.Logger
	now     func() time.Time
	pol     policy
	m       *metrics
	cl      *kgo.Client
	mode    delivery // at least once or exactly once (delivery.go)
	onIdle  func()
	maxPoll time.Duration
	tracer  *tracer // nil: tracing off
	// pollCancel ends the loop's current poll (r.mu held): an assignment
	// taken up inside it wakes the loop at once (onAssigned).
	pollCancel context.CancelFunc
	idleAfter  time.Duration
	busyAt     time.Time // last iteration that handled records; zero once idle was reported (loop only)
	lastIter   time.Time // when the loop last decided a batch (loop only)
	warmAt     time.Time // when the last producer warm-up started (warm.go; loop only)
	// gaugeNext and gaugeLag are updateGauges' per-level scratch (index:
	// level), kept so that every iteration does not allocate them.
	gaugeNext []time.Time
	gaugeLag  []int64
	// payload is addToWheel's buffer for the entry it encodes (r.mu held).
	payload []byte
	// pool hands out the items of queue heads and of wheel fires, and
	// takes them back once settled (collect.go; r.mu held).
	pool itemPool
	fin  finishScratch // finish's storage (r.mu held)
	// promise is the promise of every produce attempt (promised), made
	// once in New: a method value passed per record would allocate.
	promise func(*kgo.Record, error)
	// series remembers the occurrences fired, to drop a duplicate copy
	// of one (recur.go; r.mu held).
	series seriesMarks
	// The produce-call clock of kdelay_send_lateness_seconds (sendClock):
	// the iteration it was read in, the reading, and calls since.
	sendIter  time.Time
	sendNs    int64
	sendCalls int
	suspect   bool      // membership unconfirmed after the loop stood still (loop only)
	confirmAt time.Time // while suspect: when to ask the coordinator again (loop only)
	// asgGen is the group generation whose assignment the relay holds
	// (set by onAssigned; -1 before the first). confirmMember confirms
	// only a membership of that generation.
	asgGen    atomic.Int32
	maxBatch  int
	maxBytes  int
	aheadMax  int // ReadAheadBytes
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
	// (startCommit, commitNow), not after each batch.
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

	lock *dirLock // the data directory's, held from New to Close

	health    health
	stopping  atomic.Bool
	joined    atomic.Bool
	warming   atomic.Bool // a producer warm-up is under way (warm.go)
	closeOnce sync.Once
	closeErr  error
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
		aheadMax:  opts.ReadAheadBytes,
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
	r.promise = r.promised
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
	if r.aheadMax <= 0 {
		r.aheadMax = 16 << 20
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
	// The mode is set before the client exists: the group callbacks
	// may run as soon as it does.
	var eo *exactlyOnceMode
	if cfg.Delivery == ExactlyOnce {
		eo = &exactlyOnceMode{r: r}
		if eo.id, err = r.transactionalID(); err != nil {
			return nil, err
		}
		r.mode = eo
	} else {
		r.mode = &atLeastOnceMode{r: r}
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
	if eo != nil {
		kopts = append(kopts, kgo.TransactionalID(eo.id), kgo.TransactionTimeout(txnTimeout(cfg.SessionTimeout)), txnVersions())
		sess, err := kgo.NewGroupTransactSession(kopts...)
		if err != nil {
			r.wheel.Close()
			r.closeCancels()
			return nil, fmt.Errorf("relay: kafka transactional client: %w", err)
		}
		eo.sess, r.cl = sess, sess.Client()
		r.log.Info("exactly-once delivery", "transactional_id", eo.id, "transaction_timeout", txnTimeout(cfg.SessionTimeout).String())
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
		policy = wheel.SyncManual // fsynced before each commit (startCommit, commitNow)
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
	go r.watchPending(watch)

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
