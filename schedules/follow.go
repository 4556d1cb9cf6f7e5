package schedules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/cancel"
	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/offsetmap"
	"github.com/kdelay/kdelay/relay"
)

var (
	// ErrNoTopic is returned when the delay topic does not exist.
	ErrNoTopic = errors.New("schedules: the delay topic does not exist")
	// ErrPartitions is returned when the delay topic's partition count is
	// not the level table's.
	ErrPartitions = errors.New("schedules: the delay topic's partitions do not match the levels")
	// ErrUnavailable wraps the error of a Follower that cannot reach the
	// brokers.
	ErrUnavailable = errors.New("schedules: brokers unavailable")
)

// Options configure a [Follower].
type Options struct {
	// KafkaOpts connect to the cluster (seed brokers, TLS, SASL).
	KafkaOpts []kgo.Opt
	// Topic, Group and CancelTopic: the delay topic, the relays' consumer
	// group and the cancel topic (KDELAY_TOPIC, KDELAY_GROUP,
	// KDELAY_CANCEL_TOPIC).
	Topic, Group, CancelTopic string
	// Table is the level table (KDELAY_LEVELS, KDELAY_PARTITIONS_PER_LEVEL).
	Table *levels.Table
	// Horizon is the relays' wheel horizon (KDELAY_WHEEL_HORIZON); 0: the
	// table's largest gap.
	Horizon time.Duration
	// Retain is how long a cancel is kept after its cut-off
	// (KDELAY_MAX_DELAY).
	Retain time.Duration
	// CommitEvery is how often the group's commits are read; default 1s.
	CommitEvery time.Duration
	// ID, when set, indexes only the records with that kdelay-id (kdelay
	// schedules get): the topic is read all the same, but nothing else is
	// parsed or held.
	ID string
	// Log receives warnings; default slog.Default().
	Log *slog.Logger
}

// PartitionStatus is where a partition of the delay topic stands.
type PartitionStatus struct {
	Partition int32 `json:"partition"`
	Level     int   `json:"level"`
	// Committed is the group's committed offset, -1 when none.
	Committed int64 `json:"committed"`
	// End is the last stable offset (what read_committed readers see).
	End int64 `json:"end"`
	// Lag is End minus Committed (minus the log start without a commit).
	Lag int64 `json:"lag"`
	// Done counts the offsets above the commit its metadata says are done.
	Done int64 `json:"done"`
	// Read is the index's position: the next offset it reads.
	Read int64 `json:"read"`
}

// Member is a relay in the group.
type Member struct {
	ClientID   string  `json:"client_id"`
	Host       string  `json:"host"`
	InstanceID string  `json:"instance_id,omitempty"`
	Partitions []int32 `json:"partitions"`
}

// Group is the relays' consumer group as last described.
type Group struct {
	Name    string   `json:"name"`
	State   string   `json:"state"`
	Members []Member `json:"members"`
}

// Follower keeps an [Index] current from Kafka: it reads the cancel topic
// into a cancel set, the relay group's commits (offsets and done sets,
// every Options.CommitEvery) and the delay topic from those commits on,
// read_committed, outside the group. Create it with [NewFollower], call
// [Follower.Run], and [Follower.Close] at the end. Its methods are safe
// for concurrent use.
type Follower struct {
	o   Options
	idx *Index
	rd  *cancel.Reader
	adm *kadm.Client
	acl *kgo.Client

	ready     chan struct{}
	readyOnce sync.Once

	mu      sync.Mutex
	parts   map[int32]*PartitionStatus
	group   Group
	lastOK  time.Time // last commit round that reached the brokers
	lastErr error
	wantEnd map[int32]int64 // the ends to reach before Ready
}

// NewFollower creates the clients and starts reading the cancel topic.
func NewFollower(o Options) (*Follower, error) {
	if o.CommitEvery <= 0 {
		o.CommitEvery = time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	rd, err := cancel.NewReader(cancel.Options{Topic: o.CancelTopic, KafkaOpts: o.KafkaOpts, Retain: o.Retain, Every: 100 * time.Millisecond, Log: o.Log})
	if err != nil {
		return nil, fmt.Errorf("schedules: %w", err)
	}
	acl, err := kgo.NewClient(o.KafkaOpts...)
	if err != nil {
		rd.Close()
		return nil, fmt.Errorf("schedules: kafka client: %w", err)
	}
	return &Follower{
		o: o, idx: NewIndex(o.Table, o.Horizon, rd.Set()), rd: rd, adm: kadm.NewClient(acl), acl: acl,
		ready: make(chan struct{}), parts: make(map[int32]*PartitionStatus),
		group: Group{Name: o.Group, State: "unknown", Members: []Member{}},
	}, nil
}

// Index returns the index the follower keeps current.
func (f *Follower) Index() *Index { return f.idx }

// Ready returns a channel closed once the index is complete: the cancel
// topic read through, the commits read, and every partition read up to
// its end as of the start.
func (f *Follower) Ready() <-chan struct{} { return f.ready }

// Health returns nil while the brokers answer: a round of reading the
// commits went through within the last five rounds (at least 1s); else an
// error wrapping ErrUnavailable with the last failure.
func (f *Follower) Health() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	limit := max(5*f.o.CommitEvery, time.Second)
	if f.lastOK.IsZero() || time.Since(f.lastOK) > limit {
		if f.lastErr != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, f.lastErr)
		}
		return fmt.Errorf("%w: no answer yet", ErrUnavailable)
	}
	return nil
}

// Partitions returns the partitions' status, in partition order.
func (f *Follower) Partitions() []PartitionStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]PartitionStatus, 0, len(f.parts))
	for _, p := range f.parts {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// Group returns the relays' group as last described.
func (f *Follower) Group() Group {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.group
	g.Members = append([]Member(nil), g.Members...)
	return g
}

// Close stops the cancel reader and closes the clients. Call it after Run
// returned.
func (f *Follower) Close() {
	f.rd.Close()
	f.acl.Close()
}

// Run reads until ctx ends: it returns nil then, or an error when the
// delay topic is missing or does not match the level table, or when the
// first read fails and once is set (Build). Failures after the start are
// retried and reported by Health.
func (f *Follower) Run(ctx context.Context) error { return f.run(ctx, false) }

func (f *Follower) run(ctx context.Context, once bool) error {
	// The start: the cancel set, the commits, the ends to reach.
	var commits map[int32]commitAt
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err := f.start(ctx, &commits)
		if err == nil {
			break
		}
		if once || errors.Is(err, ErrNoTopic) || errors.Is(err, ErrPartitions) || errors.Is(err, cancel.ErrNoTopic) || ctx.Err() != nil {
			if ctx.Err() != nil && !once {
				return nil
			}
			return err
		}
		f.failed(err)
		f.o.Log.Warn("schedules: cannot read the delay topic's state yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	rctx, stopCancels := context.WithCancel(ctx)
	cancelsDone := make(chan struct{})
	go func() {
		defer close(cancelsDone)
		_ = f.rd.Run(rctx) // failed rounds are logged and retried
	}()
	defer func() { stopCancels(); <-cancelsDone }()

	offsets := make(map[int32]kgo.Offset)
	for p := range f.o.Table.Partitions() {
		if c, ok := commits[p]; ok && c.at >= 0 {
			offsets[p] = kgo.NewOffset().At(c.at)
		} else {
			offsets[p] = kgo.NewOffset().AtStart()
		}
	}
	opts := append(append([]kgo.Opt(nil), f.o.KafkaOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{f.o.Topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // markers advance the position to the end
		kgo.FetchMaxWait(250*time.Millisecond),
		// A fetched record keeps its whole batch alive until the index
		// has copied what it keeps: small fetches bound that memory.
		kgo.FetchMaxPartitionBytes(256<<10),
		kgo.FetchMaxBytes(4<<20),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("schedules: kafka client: %w", err)
	}
	defer cl.Close()
	f.checkReady()
	lastRound := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, f.o.CommitEvery)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				f.o.Log.Warn("schedules: fetch", "topic", t, "partition", p, "err", err)
			}
		})
		read := make(map[int32]int64)
		fs.EachRecord(func(r *kgo.Record) {
			if f.o.ID == "" || levels.ID(r.Headers) == f.o.ID {
				f.idx.Add(r)
			}
			read[r.Partition] = r.Offset + 1
		})
		if len(read) > 0 {
			f.mu.Lock()
			for p, o := range read {
				ps := f.status(p)
				ps.Read = max(ps.Read, o)
			}
			f.mu.Unlock()
			f.checkReady()
		}
		if time.Since(lastRound) >= f.o.CommitEvery {
			lastRound = time.Now()
			if back := f.round(ctx); len(back) > 0 {
				set := make(map[int32]kgo.EpochOffset)
				for p, at := range back {
					f.idx.Reset(p)
					set[p] = kgo.EpochOffset{Epoch: -1, Offset: at}
				}
				cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{f.o.Topic: set})
			}
		}
	}
}

// status returns partition p's status. f.mu is held.
func (f *Follower) status(p int32) *PartitionStatus {
	ps := f.parts[p]
	if ps == nil {
		ps = &PartitionStatus{Partition: p, Level: f.o.Table.LevelOf(p), Committed: -1}
		f.parts[p] = ps
	}
	return ps
}

func (f *Follower) failed(err error) {
	f.mu.Lock()
	f.lastErr = err
	f.mu.Unlock()
}

func (f *Follower) checkReady() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wantEnd == nil {
		return
	}
	for p, end := range f.wantEnd {
		ps := f.status(p)
		if ps.Read < end && max(ps.Committed, 0) < end {
			return
		}
	}
	f.readyOnce.Do(func() { close(f.ready) })
}

type commitAt struct {
	at int64
	md string
}

// start reads the cancel topic through, the commits and the ends.
func (f *Follower) start(ctx context.Context, commits *map[int32]commitAt) error {
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	ends, err := f.adm.ListCommittedOffsets(actx, f.o.Topic)
	if err == nil {
		err = ends.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) || err == nil && len(ends[f.o.Topic]) == 0 {
		return fmt.Errorf("%w: %s (create it with `kdelay topic create`)", ErrNoTopic, f.o.Topic)
	}
	if err != nil {
		return fmt.Errorf("schedules: end offsets of %s: %w", f.o.Topic, err)
	}
	if n := len(ends[f.o.Topic]); n != int(f.o.Table.Partitions()) {
		return fmt.Errorf("%w: %s has %d partitions, the levels (%s x %d) want %d", ErrPartitions, f.o.Topic, n, f.o.Table, f.o.Table.PerLevel(), f.o.Table.Partitions())
	}
	if err := f.rd.Sync(actx); err != nil {
		return fmt.Errorf("schedules: cancel topic: %w", err)
	}
	c, err := f.commits(actx)
	if err != nil {
		return err
	}
	*commits = c
	want := make(map[int32]int64)
	f.mu.Lock()
	ends.Each(func(o kadm.ListedOffset) {
		want[o.Partition] = o.Offset
		ps := f.status(o.Partition)
		ps.End = o.Offset
		ps.Read = 0
	})
	f.wantEnd = want
	f.lastOK, f.lastErr = time.Now(), nil
	f.mu.Unlock()
	f.apply(c)
	return nil
}

// commits reads the group's committed offsets and metadata of the delay
// topic.
func (f *Follower) commits(ctx context.Context) (map[int32]commitAt, error) {
	out := make(map[int32]commitAt)
	os, err := f.adm.FetchOffsets(ctx, f.o.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("schedules: committed offsets of group %s: %w", f.o.Group, err)
	}
	os.Each(func(o kadm.OffsetResponse) {
		if o.Topic == f.o.Topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = commitAt{at: o.At, md: o.Metadata}
		}
	})
	return out, nil
}

// apply gives the index the commits and returns the partitions whose
// commit went back, with their new committed offset.
func (f *Follower) apply(c map[int32]commitAt) map[int32]int64 {
	back := make(map[int32]int64)
	for p := range f.o.Table.Partitions() {
		ca, ok := c[p]
		at := int64(-1)
		var done offsetmap.Set
		if ok {
			at = ca.at
			if d, has, err := relay.CommitDone(ca.md, at); err != nil {
				f.o.Log.Warn("schedules: commit metadata's done set does not decode; counting those records as pending", "partition", p, "err", err)
			} else if has {
				done = d
			}
		}
		if f.idx.Commit(p, at, done) && at >= 0 {
			back[p] = at
		}
		f.mu.Lock()
		ps := f.status(p)
		ps.Committed = at
		ps.Done = int64(0)
		if done.End > done.Base {
			ps.Done = done.End - done.Base - int64(len(done.Open))
		}
		ps.Lag = max(ps.End-max(at, 0), 0)
		f.mu.Unlock()
	}
	return back
}

// round reads the commits, the ends and the group once; it returns the
// partitions to read again (their commit went back).
func (f *Follower) round(ctx context.Context) map[int32]int64 {
	actx, cancel := context.WithTimeout(ctx, max(f.o.CommitEvery, 2*time.Second))
	defer cancel()
	c, err := f.commits(actx)
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = f.adm.ListCommittedOffsets(actx, f.o.Topic)
		if err == nil {
			err = ends.Error()
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			f.failed(err)
		}
		return nil
	}
	f.mu.Lock()
	ends.Each(func(o kadm.ListedOffset) { f.status(o.Partition).End = o.Offset })
	f.mu.Unlock()
	back := f.apply(c)
	g := Group{Name: f.o.Group, State: "unknown", Members: []Member{}}
	if gs, err := f.adm.DescribeGroups(actx, f.o.Group); err == nil {
		if d, ok := gs[f.o.Group]; ok && d.Err == nil {
			g.State = d.State
			for _, m := range d.Members {
				mem := Member{ClientID: m.ClientID, Host: m.ClientHost, Partitions: []int32{}}
				if m.InstanceID != nil {
					mem.InstanceID = *m.InstanceID
				}
				if a, ok := m.Assigned.AsConsumer(); ok {
					for _, t := range a.Topics {
						if t.Topic == f.o.Topic {
							mem.Partitions = append(mem.Partitions, t.Partitions...)
						}
					}
				}
				g.Members = append(g.Members, mem)
			}
		}
	}
	f.mu.Lock()
	f.lastOK, f.lastErr, f.group = time.Now(), nil, g
	f.mu.Unlock()
	return back
}

// Build reads the delay topic once to its end as of the call and returns
// the complete index (kdelay schedules). The index's cancel set stays
// usable; nothing keeps it current.
func Build(ctx context.Context, o Options) (*Index, error) {
	f, err := NewFollower(o)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- f.run(ctx, true) }()
	select {
	case <-f.Ready():
		stop()
		<-done
		return f.idx, nil
	case err := <-done:
		stop()
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	case <-ctx.Done():
		<-done
		return nil, ctx.Err()
	}
}
