package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// binding is what a data directory indexes. Its wheel is valid only for
// the cluster and the incarnation (topic ID) of the delay topic it was
// written for, and its records were scheduled under one level table. It is
// kept next to the wheel as binding.json.
type binding struct {
	Version   int    `json:"version"`
	ClusterID string `json:"cluster_id"`
	Topic     string `json:"topic"`
	TopicID   string `json:"topic_id"`
	// Levels is the level table: "<levels> / <partitions per level>".
	Levels string `json:"levels"`
}

const bindingFile = "binding.json"

// LevelChangeError is returned by [New] and [Relay.Run] when records still
// pending in the delay topic were written under another level table: with
// this table, records with a kdelay-level header would be due at another
// time, possibly earlier than their producer meant.
type LevelChangeError struct {
	Where     string // the data directory, or "partition N's commit"
	Partition int32  // -1 when found in the data directory
	Committed string // the table recorded there
	Current   string // this relay's table
}

func (e *LevelChangeError) Error() string {
	where := e.Where
	if where == "" {
		where = fmt.Sprintf("the commit of delay-topic partition %d", e.Partition)
	}
	return fmt.Sprintf("relay: records pending in the delay topic were scheduled under the level table %q (recorded in %s), this relay has %q; "+
		"drain them with the old KDELAY_LEVELS / KDELAY_PARTITIONS_PER_LEVEL first, or set KDELAY_ALLOW_LEVEL_CHANGE=true to accept that records with a kdelay-level header are due by the new table",
		e.Committed, where, e.Current)
}

// ErrTopicRecreated is returned by [Relay.Run] when the delay topic was
// deleted and created again under the running relay: the relay stops so
// that a restart binds its data directory to the new topic.
var ErrTopicRecreated = errors.New("relay: the delay topic was recreated; restart kdelay to read the new topic (its local wheel is discarded)")

// preflight binds the data directory to the delay topic: a wheel written
// for another cluster or another incarnation of the topic is discarded,
// and a level table other than the one pending records were written under
// is refused (unless KDELAY_ALLOW_LEVEL_CHANGE).
func (r *Relay) preflight(kopts []kgo.Opt) error {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("relay: kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), preflightTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	// The cluster may still be settling (a coordinator loading after a
	// broker restart): retriable errors are retried until the timeout.
	for wait := 200 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err = r.bindTo(ctx, adm)
		if err == nil || !(kerr.IsRetriable(err) || isNetErr(err)) || ctx.Err() != nil {
			return err
		}
		r.log.Warn("checking the delay topic and the group; retrying", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// preflightTimeout bounds New's check of the delay topic and the group.
const preflightTimeout = 2 * time.Minute

func (r *Relay) bindTo(ctx context.Context, adm *kadm.Client) error {
	cur, err := r.currentBinding(ctx, adm)
	if err != nil {
		return err
	}
	r.bind = cur
	old, err := readBinding(r.cfg.DataDir)
	if err != nil {
		r.log.Warn("unreadable "+bindingFile+"; discarding the local wheel", "err", err)
		old = binding{ClusterID: "?"}
	}
	same := old.ClusterID == cur.ClusterID && old.Topic == cur.Topic && old.TopicID == cur.TopicID
	if !same {
		dir := filepath.Join(r.cfg.DataDir, "wheel")
		if _, err := os.Stat(dir); err == nil {
			r.log.Warn("the data directory indexes another delay topic (or an earlier one of the same name); discarding its wheel, the records are read from Kafka",
				"dir", dir, "was_cluster", old.ClusterID, "was_topic", old.Topic, "was_topic_id", old.TopicID,
				"cluster", cur.ClusterID, "topic", cur.Topic, "topic_id", cur.TopicID)
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("relay: discard the wheel of another topic in %s: %w", dir, err)
			}
		}
	}
	if !r.cfg.AllowLevelChange {
		if err := r.checkLevels(ctx, adm, old, same); err != nil {
			return err
		}
	}
	return writeBinding(r.cfg.DataDir, cur)
}

func (r *Relay) currentBinding(ctx context.Context, adm *kadm.Client) (binding, error) {
	md, err := adm.Metadata(ctx, r.cfg.Topic)
	if err != nil {
		return binding{}, fmt.Errorf("relay: metadata of delay topic %s: %w", r.cfg.Topic, err)
	}
	td, ok := md.Topics[r.cfg.Topic]
	if !ok || td.Err != nil {
		return binding{}, fmt.Errorf("relay: delay topic %s: %w", r.cfg.Topic, errors.Join(td.Err, kerr.UnknownTopicOrPartition))
	}
	return binding{
		Version:   1,
		ClusterID: md.Cluster,
		Topic:     r.cfg.Topic,
		TopicID:   td.ID.String(),
		Levels:    fmt.Sprintf("%s / %d", r.pol.table, r.pol.table.PerLevel()),
	}, nil
}

// checkLevels refuses a level table that differs from the one recorded in
// the data directory (same topic) or in a partition's commit metadata,
// when that partition still has records pending.
func (r *Relay) checkLevels(ctx context.Context, adm *kadm.Client, old binding, same bool) error {
	pending, commits, err := r.pendingPartitions(ctx, adm)
	if err != nil {
		return err
	}
	cur := r.bind.Levels
	if same && old.Levels != "" && old.Levels != cur && len(pending) > 0 {
		return &LevelChangeError{Where: "the data directory " + r.cfg.DataDir, Partition: -1, Committed: old.Levels, Current: cur}
	}
	for p := range pending {
		if t := commits[p].table; t != "" && t != cur {
			return &LevelChangeError{Partition: p, Committed: t, Current: cur}
		}
	}
	return nil
}

// pendingPartitions returns the delay-topic partitions with records past
// their committed offset (or the log start, when nothing is committed), and
// the group's commits.
func (r *Relay) pendingPartitions(ctx context.Context, adm *kadm.Client) (map[int32]bool, map[int32]commitInfo, error) {
	starts, err := adm.ListStartOffsets(ctx, r.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("relay: start offsets of %s: %w", r.cfg.Topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, r.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("relay: end offsets of %s: %w", r.cfg.Topic, err)
	}
	commits := make(map[int32]commitInfo)
	resp, err := adm.FetchOffsets(kadm.RequireStable(ctx), r.cfg.Group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil, fmt.Errorf("relay: committed offsets of group %s: %w", r.cfg.Group, err)
	}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == r.cfg.Topic && o.Err == nil && o.At >= 0 {
			commits[o.Partition] = commitInfo{at: o.At, table: tableOfMetadata(o.Metadata)}
		}
	})
	pending := make(map[int32]bool)
	ends.Each(func(e kadm.ListedOffset) {
		from := int64(0)
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok {
			from = s.Offset
		}
		if c, ok := commits[e.Partition]; ok {
			from = max(from, c.at)
		}
		if e.Offset > from {
			pending[e.Partition] = true
		}
	})
	return pending, commits, nil
}

func readBinding(dir string) (binding, error) {
	var b binding
	data, err := os.ReadFile(filepath.Join(dir, bindingFile))
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return b, err
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("%s: %w", bindingFile, err)
	}
	return b, nil
}

// writeBinding replaces binding.json atomically.
func writeBinding(dir string, b binding) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(dir, bindingFile, append(data, '\n'))
}

// watchTopic checks the delay topic's ID every topicCheckEvery; when the
// topic was recreated, Run stops with ErrTopicRecreated.
func (r *Relay) watchTopic(ctx context.Context) {
	adm := kadm.NewClient(r.cl)
	t := time.NewTicker(topicCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := r.currentBinding(ctx, adm)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("delay topic check", "err", err)
			}
			continue
		}
		if cur.TopicID != r.bind.TopicID {
			r.log.Error("the delay topic was recreated", "topic", r.cfg.Topic, "was_topic_id", r.bind.TopicID, "topic_id", cur.TopicID)
			r.mu.Lock()
			r.fatal = ErrTopicRecreated
			r.mu.Unlock()
			return
		}
	}
}

const topicCheckEvery = 10 * time.Second
