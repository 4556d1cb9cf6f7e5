package etf1

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/cancel"
	"github.com/kdelay/kdelay/levels"
)

// HeaderSource marks every record Migrate writes to the delay topic: the
// topic/partition/offset of the etf1 record it copies. Like every
// kdelay- header it stays on cascaded copies and is removed on delivery.
// A later run finds its copies by it.
const HeaderSource = "kdelay-etf1-source"

// What Migrate does with a schedule ([Action.Do]).
const (
	DoCopy       = "copy"       // written to the delay topic
	DoReschedule = "reschedule" // changed in etf1 since an earlier run: cancel the earlier copy, write the new one
	DoAlready    = "already"    // copied by an earlier run and unchanged: nothing to do
	DoCancel     = "cancel"     // deleted in etf1 since an earlier run: cancel the earlier copy
	DoDeleted    = "deleted"    // deleted in etf1 and never copied: nothing to do
	DoSkip       = "skip"       // cannot be migrated (Schedule.Skip says why)
)

// Options configure [Migrate].
type Options struct {
	// Source is the etf1 schedules topic (required).
	Source string
	// Topic and CancelTopic are kdelay's delay and cancel topics
	// (KDELAY_TOPIC, KDELAY_CANCEL_TOPIC; required).
	Topic, CancelTopic string
	// Table is the level table (required): it picks each copy's partition
	// as `kdelay send` does.
	Table *levels.Table
	// KafkaOpts connect to the cluster (seed brokers, TLS, SASL).
	KafkaOpts []kgo.Opt
	// MaxDelay, when positive, sets aside schedules due further ahead
	// (KDELAY_MAX_DELAY: a relay would dead-letter them).
	MaxDelay time.Duration
	// Allowed, when set, says whether a target may be written
	// (KDELAY_TARGET_ALLOW/DENY) and why not.
	Allowed func(target string) (bool, string)
	// DryRun reads both topics and decides, but writes nothing.
	DryRun bool
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Plan, when set, is called with every schedule and what is done with
	// it, in source partition and offset order, before anything is written.
	Plan func(Action)
}

// Action is what Migrate does with one schedule.
type Action struct {
	*Schedule
	// Do is one of the Do* values.
	Do string
	// Overdue: due before the run started, so delivered at once.
	Overdue bool
}

// Report is what Migrate read, decided and wrote.
type Report struct {
	Source string `json:"source"`
	Topic  string `json:"topic"`
	DryRun bool   `json:"dry_run"`
	// Started is when the run began: overdue means due before it.
	Started time.Time `json:"started"`
	// Read is the number of records read from the source; Keys the
	// schedule ids among them.
	Read int `json:"read"`
	Keys int `json:"keys"`
	// Live schedules (the latest record is not a tombstone and can be
	// migrated), of which Overdue are due before Started.
	Live    int `json:"live"`
	Overdue int `json:"overdue"`
	// Deleted ids: the latest record is a tombstone.
	Deleted int `json:"deleted"`
	// Copied, Rescheduled, Already and Cancelled count the actions
	// (DoCopy, DoReschedule, DoAlready, DoCancel); with DryRun what
	// would be done.
	Copied      int `json:"copied"`
	Rescheduled int `json:"rescheduled"`
	Already     int `json:"already"`
	Cancelled   int `json:"cancelled"`
	// Skipped counts the schedules set aside, by reason (the Skip*
	// values).
	Skipped map[string]int `json:"skipped"`
	// Partitions counts the records written per delay-topic partition.
	Partitions map[int32]int `json:"partitions"`
	// Failed counts the writes that failed.
	Failed int `json:"failed"`
	// SourceGaps and TopicGaps are the partitions of the source and of
	// the delay topic that ended below the end offset listed at the start
	// with nothing readable in between (the log cleaner removed their last
	// records).
	SourceGaps []Gap `json:"source_gaps,omitempty"`
	TopicGaps  []Gap `json:"topic_gaps,omitempty"`
}

// Migrate copies the live schedules of the etf1 topic o.Source to kdelay's
// delay topic. Each copy has kdelay-id = the schedule id, the target topic
// and key of scheduler-target-topic and scheduler-target-key, the value
// and other headers of the etf1 record, kdelay-deliver-at = scheduler-epoch
// × 1000, and [HeaderSource]; it goes to the partition `kdelay send` would
// choose. A schedule already due is delivered at once by the relay.
//
// A run is idempotent. It first reads the delay topic (to its end as of
// the start) for the copies earlier runs wrote, by [HeaderSource], then for
// each schedule: the same etf1 record copied before: nothing (DoAlready); a
// different record of the same id copied before (updated in etf1 since):
// a cancel of the id on the cancel topic, cut-off now, then the new copy
// (DoReschedule, as `kdelay send --replace`); never copied: the copy
// (DoCopy). An id deleted in etf1 whose copy exists gets a cancel
// (DoCancel). Copies older than the delay topic's retention are not found:
// run it again only within that time.
//
// It returns the report and, when a write failed or the run could not
// finish, an error; the report then says how far it got.
func Migrate(ctx context.Context, o Options) (Report, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	rep := Report{Source: o.Source, Topic: o.Topic, DryRun: o.DryRun, Started: o.Now(),
		Skipped: make(map[string]int), Partitions: make(map[int32]int)}
	switch {
	case o.Source == "" || o.Topic == "" || o.CancelTopic == "" || o.Table == nil:
		return rep, errors.New("etf1: migrate: Source, Topic, CancelTopic and Table are required")
	case o.Source == o.Topic || o.Source == o.CancelTopic:
		return rep, fmt.Errorf("etf1: migrate: the source %s is kdelay's own topic", o.Source)
	}
	cl, err := kgo.NewClient(append(slices.Clone(o.KafkaOpts), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return rep, fmt.Errorf("etf1: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	n, err := partitions(ctx, adm, o.Topic)
	if err != nil {
		return rep, err
	}
	if int32(n) != o.Table.Partitions() {
		return rep, fmt.Errorf("etf1: delay topic %s has %d partitions, the level table %d (%d levels x %d)",
			o.Topic, n, o.Table.Partitions(), o.Table.Levels(), o.Table.PerLevel())
	}
	if _, err := partitions(ctx, adm, o.CancelTopic); err != nil {
		return rep, err
	}

	var rd Reducer
	if rep.Read, rep.SourceGaps, err = readTopic(ctx, o.KafkaOpts, adm, o.Source, rd.Add); err != nil {
		return rep, err
	}
	copies := make(map[string]map[string]bool) // id -> sources copied
	if _, rep.TopicGaps, err = readTopic(ctx, o.KafkaOpts, adm, o.Topic, func(r *kgo.Record) {
		src, ok := lastHeader(r.Headers, HeaderSource)
		if !ok {
			return
		}
		id := levels.ID(r.Headers)
		if copies[id] == nil {
			copies[id] = make(map[string]bool)
		}
		copies[id][src] = true
	}); err != nil {
		return rep, err
	}
	scheds := rd.Schedules()
	missing, err := missingTargets(ctx, adm, scheds)
	if err != nil {
		return rep, err
	}

	acts := make([]Action, 0, len(scheds))
	for _, s := range scheds {
		a := Action{Schedule: s}
		if s.ID != "" {
			rep.Keys++
		}
		switch {
		case s.Deleted:
			rep.Deleted++
			a.Do = DoDeleted
			if len(copies[s.ID]) > 0 {
				a.Do = DoCancel
				rep.Cancelled++
			}
		case s.Skip == "" && o.MaxDelay > 0 && s.Due.Sub(rep.Started) > o.MaxDelay:
			s.Skip, s.Why = SkipMaxDelay, fmt.Sprintf("due %s, beyond KDELAY_MAX_DELAY %s", s.Due.UTC().Format(time.RFC3339), levels.FormatDuration(o.MaxDelay))
		case s.Skip == "" && o.Allowed != nil:
			if ok, why := o.Allowed(s.Target); !ok {
				s.Skip, s.Why = SkipRefused, fmt.Sprintf("target %s refused: %s", s.Target, why)
			}
		}
		if s.Skip == "" && !s.Deleted && missing[s.Target] {
			s.Skip, s.Why = SkipNoTargetTop, fmt.Sprintf("target topic %s does not exist", s.Target)
		}
		if !s.Deleted {
			if s.Skip != "" {
				a.Do = DoSkip
				rep.Skipped[s.Skip]++
			} else {
				rep.Live++
				a.Overdue = s.Due.Before(rep.Started)
				if a.Overdue {
					rep.Overdue++
				}
				switch {
				case copies[s.ID][s.Source]:
					a.Do = DoAlready
					rep.Already++
				case len(copies[s.ID]) > 0:
					a.Do = DoReschedule
					rep.Rescheduled++
				default:
					a.Do = DoCopy
					rep.Copied++
				}
			}
		}
		if o.Plan != nil {
			o.Plan(a)
		}
		acts = append(acts, a)
	}
	if o.DryRun {
		return rep, nil
	}
	return rep, o.write(ctx, cl, acts, &rep)
}

// write carries out the actions: copies are produced asynchronously, a
// reschedule's cancel and a cancel synchronously before anything after
// them.
func (o Options) write(ctx context.Context, cl *kgo.Client, acts []Action, rep *Report) error {
	cx, err := kgo.NewClient(slices.Clone(o.KafkaOpts)...) // cancels: Kafka's default partitioner
	if err != nil {
		return fmt.Errorf("etf1: kafka client: %w", err)
	}
	defer cx.Close()
	var (
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		rep.Failed++
		if firstErr == nil {
			firstErr = err
		}
	}
	for _, a := range acts {
		if ctx.Err() != nil {
			break
		}
		now := o.Now()
		switch a.Do {
		case DoCancel:
			if _, err := cancel.Write(ctx, cx, o.CancelTopic, a.ID, time.Time{}, now); err != nil {
				fail(fmt.Errorf("etf1: cancel %s: %w", a.ID, err))
			}
			continue
		case DoCopy, DoReschedule:
		default:
			continue
		}
		rec := &kgo.Record{Key: a.Key, Value: a.Value, Headers: slices.Clone(a.Headers), Timestamp: now}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderSource, Value: []byte(a.Source)})
		d := levels.Delay{Target: a.Target, At: a.Due, ID: a.ID}
		if a.Do == DoReschedule {
			c, err := o.Table.Replace(rec, o.Topic, o.CancelTopic, a.ID, d, now)
			if err != nil {
				fail(fmt.Errorf("etf1: %s: %w", a.ID, err))
				continue
			}
			if err := cx.ProduceSync(ctx, c).FirstErr(); err != nil {
				fail(fmt.Errorf("etf1: cancel the earlier copy of %s: %w", a.ID, err))
				continue
			}
		} else if err := o.Table.Stamp(rec, o.Topic, d, now); err != nil {
			fail(fmt.Errorf("etf1: %s: %w", a.ID, err))
			continue
		}
		id := a.ID
		cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			if err != nil {
				fail(fmt.Errorf("etf1: copy %s: %w", id, err))
				return
			}
			mu.Lock()
			rep.Partitions[r.Partition]++
			mu.Unlock()
		})
	}
	if err := cl.Flush(ctx); err != nil {
		fail(fmt.Errorf("etf1: flush: %w", err))
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = fmt.Errorf("etf1: migrate: %w", ctx.Err())
	}
	if firstErr != nil {
		return fmt.Errorf("%d writes failed; the first: %w (running it again completes it)", rep.Failed, firstErr)
	}
	return nil
}

// missingTargets returns the targets of the live schedules that do not
// exist.
func missingTargets(ctx context.Context, adm *kadm.Client, scheds []*Schedule) (map[string]bool, error) {
	seen := make(map[string]bool)
	var targets []string
	for _, s := range scheds {
		if !s.Deleted && s.Skip == "" && !seen[s.Target] {
			seen[s.Target] = true
			targets = append(targets, s.Target)
		}
	}
	missing := make(map[string]bool)
	if len(targets) == 0 {
		return missing, nil
	}
	td, err := adm.ListTopics(ctx, targets...)
	if err != nil {
		return nil, fmt.Errorf("etf1: metadata of the targets: %w", err)
	}
	for _, t := range targets {
		d, ok := td[t]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			missing[t] = true
		case d.Err != nil:
			return nil, fmt.Errorf("etf1: metadata of target %s: %w", t, d.Err)
		}
	}
	return missing, nil
}

// lastHeader returns the last header named key, as kdelay reads them.
func lastHeader(hs []kgo.RecordHeader, key string) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return string(hs[i].Value), true
		}
	}
	return "", false
}
