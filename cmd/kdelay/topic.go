package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// adminTimeout bounds each admin exchange with the brokers (metadata,
// topic creation, offsets), so an unreachable cluster fails a command
// instead of hanging it.
const adminTimeout = 30 * time.Second

func (a *app) newTopicCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create or describe the delay and dead-letter topics",
		RunE:  a.groupRunE,
	}
	cmd.AddCommand(a.newTopicCreateCmd(), a.newTopicDescribeCmd())
	return cmd
}

func (a *app) newTopicCreateCmd() *cobra.Command {
	var (
		rf       int16
		dlqParts int32
		cxParts  int32
		configs  []string
		wait     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create the delay topic (levels x k partitions), the dead-letter topic and the cancel topic",
		Long: `Create the delay topic with levels x partitions-per-level partitions, the
dead-letter topic and the cancel topic (KDELAY_CANCEL_TOPIC, compacted, its
retention.ms the maximum delay plus a day, so that a cancel outlives every
record it can cancel). Idempotent: topics that exist keep their partitions,
provided the delay topic has the partition count the levels need (a delay
topic with another count is an error naming both counts); a --config that
differs from an existing topic's value is applied to it, so a changed
setting takes effect on the next run.

It returns once every topic it created is visible in the brokers' metadata
with a leader for every partition (at most --wait), so "kdelay run" started
right after it finds them.

A record stays in the delay topic until its level's time plus at most the
wheel horizon have passed (longer delays cascade: the relay writes them
again with a fresh timestamp), so retention.ms must exceed the longest level
plus the wheel horizon (3h with the default levels) plus any relay outage to
be survived. The broker default (7 days) is fine; a shorter --config
retention.ms draws a warning.`,
		Example: `  kdelay topic create
  kdelay topic create --replication-factor 3 --config retention.ms=1209600000`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfgs, err := parseConfigs(configs)
			if err != nil {
				return err
			}
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			log := cfg.Logger(a.stderr)
			cl, err := newClient(cfg, log, waitOpts...)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			adm := kadm.NewClient(cl)
			res, _, err := ensureTopics(ctx, adm, cfg, topicSpec{rf: rf, dlqPartitions: dlqParts, cancelPartitions: cxParts, configs: cfgs})
			for _, line := range res.lines {
				fmt.Fprintln(a.stdout, line)
			}
			if err != nil {
				return err
			}
			if err := waitVisible(cmd.Context(), adm, res.created, wait); err != nil {
				return err
			}
			if v, ok := cfgs["retention.ms"]; ok {
				if ms, perr := strconv.ParseInt(*v, 10, 64); perr == nil && ms >= 0 && time.Duration(ms)*time.Millisecond < minRetention(cfg) {
					log.Warn("retention.ms is shorter than the longest level plus the wheel horizon: records can be deleted before they are forwarded",
						"retention", levels.FormatDuration(time.Duration(ms)*time.Millisecond), "minimum", levels.FormatDuration(minRetention(cfg)))
				}
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.Int16Var(&rf, "replication-factor", -1, "replication factor of both topics; -1 = the broker default")
	f.Int32Var(&dlqParts, "dlq-partitions", 1, "partitions of the dead-letter topic; -1 = the broker default")
	f.Int32Var(&cxParts, "cancel-partitions", 1, "partitions of the cancel topic; -1 = the broker default")
	f.StringArrayVar(&configs, "config", nil, "topic config key=value for the delay and dead-letter topics, repeatable (e.g. retention.ms=1209600000); applied to existing topics too")
	f.DurationVar(&wait, "wait", time.Minute, "how long to wait for created topics to have a leader for every partition")
	return cmd
}

// waitOpts are the client options of a client used with waitVisible: kgo
// answers metadata requests at most every MetadataMinAge (default 5s), so
// polling for a topic just created would otherwise wait that long.
var waitOpts = []kgo.Opt{kgo.MetadataMinAge(50 * time.Millisecond)}

// waitVisible waits until every topic of want (name: partition count, or
// -1 for the broker default) is in the metadata with a leader for each of
// its partitions, polling with a backoff of 50ms to 1s, for at most
// timeout. Its error says what was missing at the end.
func waitVisible(ctx context.Context, adm *kadm.Client, want map[string]int32, timeout time.Duration) error {
	if len(want) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	names := slices.Sorted(maps.Keys(want))
	backoff := 50 * time.Millisecond
	for {
		missing, err := notVisible(ctx, adm, want, names)
		if err == nil && missing == "" {
			return nil
		}
		if err != nil {
			missing = err.Error()
		}
		select {
		case <-ctx.Done():
			if cmdCtxDone := context.Cause(ctx); errors.Is(cmdCtxDone, context.Canceled) {
				return fmt.Errorf("interrupted waiting for the created topics to have leaders (%s)", missing)
			}
			return fmt.Errorf("created topics not ready within --wait %s: %s; check the brokers' health (kdelay topic describe)", timeout, missing)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// notVisible returns "" when every topic is visible with a leader per
// partition, else what is not.
func notVisible(ctx context.Context, adm *kadm.Client, want map[string]int32, names []string) (string, error) {
	tds, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return "", fmt.Errorf("list topics: %w", err)
	}
	var missing []string
	for _, name := range names {
		td, ok := tds[name]
		if !ok || td.Err != nil {
			missing = append(missing, name+" not in the metadata yet")
			continue
		}
		led := 0
		for _, pd := range td.Partitions {
			if pd.Err == nil && pd.Leader >= 0 {
				led++
			}
		}
		n := want[name]
		if n < 0 {
			n = int32(len(td.Partitions))
		}
		if int32(led) < n || len(td.Partitions) == 0 {
			missing = append(missing, fmt.Sprintf("%s: %d of %d partitions have a leader", name, led, n))
		}
	}
	return strings.Join(missing, "; "), nil
}

// minRetention is how long the delay topic must keep a record at least: a
// record waits its level's duration, then at most the wheel horizon, and is
// committed past or cascaded by then. Relay outages come on top.
func minRetention(cfg config.Config) time.Duration {
	return cfg.Table().Duration(cfg.Table().Levels()) + cfg.WheelHorizon
}

func parseConfigs(kvs []string) (map[string]*string, error) {
	out := make(map[string]*string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usageErrorf("invalid --config %q: want key=value, e.g. retention.ms=604800000", kv)
		}
		out[strings.TrimSpace(k)] = kadm.StringPtr(v)
	}
	return out, nil
}

// topicSpec is how ensureTopics creates missing topics.
type topicSpec struct {
	rf               int16
	dlqPartitions    int32
	cancelPartitions int32 // 0: 1
	configs          map[string]*string
}

// cancelRetention is how long the cancel topic keeps a cancel: the
// longest delay plus a day, so a cancel outlives every record it can
// cancel (a cut-off up to a day after the cancel's own timestamp).
func cancelRetention(cfg config.Config) time.Duration { return cfg.MaxDelay + 24*time.Hour }

// cancelConfigs are the cancel topic's configs: compacted (the last cancel
// or tombstone of an id is kept) and deleted after cancelRetention.
func cancelConfigs(cfg config.Config) map[string]*string {
	return map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact,delete"),
		"retention.ms":   kadm.StringPtr(strconv.FormatInt(cancelRetention(cfg).Milliseconds(), 10)),
	}
}

// ensured is what ensureTopics found or did.
type ensured struct {
	lines   []string         // one per topic
	created map[string]int32 // topics it created: their partition counts (-1: broker default)
}

// ensureTopics creates the delay and dead-letter topics unless they exist,
// applies to existing ones the configs of spec that differ, and returns one
// line per topic saying what it found or did, and whether it created the
// delay topic. A delay topic with a partition count other than the level
// table's is an error.
func ensureTopics(ctx context.Context, adm *kadm.Client, cfg config.Config, spec topicSpec) (res ensured, created bool, err error) {
	res.created = make(map[string]int32)
	var lines []string
	defer func() { res.lines = lines }()
	tab := cfg.Table()
	if spec.cancelPartitions == 0 {
		spec.cancelPartitions = 1
	}
	want := map[string]int32{cfg.Topic: tab.Partitions(), cfg.DLQTopic: spec.dlqPartitions, cfg.CancelTopic: spec.cancelPartitions}
	role := map[string]string{cfg.Topic: "delay topic", cfg.DLQTopic: "dead-letter topic", cfg.CancelTopic: "cancel topic"}
	for _, topic := range []string{cfg.Topic, cfg.DLQTopic, cfg.CancelTopic} {
		n, exists, err := partitionCount(ctx, adm, topic)
		if err != nil {
			return res, created, err
		}
		configs := spec.configs
		if topic == cfg.CancelTopic {
			configs = cancelConfigs(cfg)
		}
		if !exists {
			resp, err := adm.CreateTopic(ctx, want[topic], spec.rf, configs, topic)
			switch {
			case err == nil:
				lines = append(lines, fmt.Sprintf("created %s %s: %s%s", role[topic], topic, partitionsPhrase(resp.NumPartitions, topic == cfg.Topic, tab), rfPhrase(resp.ReplicationFactor)))
				created = created || topic == cfg.Topic
				res.created[topic] = want[topic]
				continue
			case errors.Is(err, kerr.TopicAlreadyExists):
				// Created meanwhile (another relay's job): check it below.
				if n, _, err = partitionCount(ctx, adm, topic); err != nil {
					return res, created, err
				}
			default:
				msg := err.Error()
				if resp.ErrMessage != "" {
					msg += ": " + resp.ErrMessage
				}
				return res, created, fmt.Errorf("create %s %s: %s", role[topic], topic, msg)
			}
		}
		if topic == cfg.Topic && n != tab.Partitions() {
			return res, created, mismatchError(cfg, n)
		}
		line := fmt.Sprintf("exists  %s %s: %s", role[topic], topic, partitionsPhrase(n, topic == cfg.Topic, tab))
		if len(configs) > 0 && (topic != cfg.CancelTopic || len(spec.configs) > 0) {
			changed, err := alignConfigs(ctx, adm, topic, configs)
			if err != nil {
				lines = append(lines, line)
				return res, created, err
			}
			if len(changed) == 0 {
				line += " (configs as given)"
			} else {
				line += " (updated " + strings.Join(changed, ", ") + ")"
			}
		}
		lines = append(lines, line)
	}
	return res, created, nil
}

// alignConfigs sets on an existing topic each config of want whose value
// differs, and returns "key=value" for each one it changed, sorted.
func alignConfigs(ctx context.Context, adm *kadm.Client, topic string, want map[string]*string) ([]string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("describe configs of %s: %w", topic, brokerErr(err))
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return nil, fmt.Errorf("describe configs of %s: %w", topic, err)
	}
	have := make(map[string]string, len(rc.Configs))
	for _, c := range rc.Configs {
		have[c.Key] = c.MaybeValue()
	}
	var alter []kadm.AlterConfig
	var changed []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := have[k]; ok && v == *want[k] {
			continue
		}
		alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: want[k]})
		changed = append(changed, k+"="+*want[k])
	}
	if len(alter) == 0 {
		return nil, nil
	}
	resp, err := adm.AlterTopicConfigs(ctx, alter, topic)
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = fmt.Errorf("%w: %s", r.Err, r.ErrMessage)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("update configs of %s (%s): %w", topic, strings.Join(changed, ", "), err)
	}
	return changed, nil
}

func partitionsPhrase(n int32, delay bool, tab *levels.Table) string {
	s := plural(int(n), "partition")
	if n < 0 {
		s = "broker default partitions"
	}
	if delay {
		s += fmt.Sprintf(" (%d levels x %d)", tab.Levels(), tab.PerLevel())
	}
	return s
}

func rfPhrase(rf int16) string {
	if rf <= 0 {
		return ""
	}
	return fmt.Sprintf(", replication factor %d", rf)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// partitionCount returns the number of partitions of topic and whether it
// exists.
func partitionCount(ctx context.Context, adm *kadm.Client, topic string) (int32, bool, error) {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, false, fmt.Errorf("list topic %s: %w", topic, brokerErr(err))
	}
	td, ok := tds[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return 0, false, nil
	}
	if td.Err != nil {
		return 0, false, fmt.Errorf("topic %s: %w", topic, td.Err)
	}
	return int32(len(td.Partitions)), true, nil
}

// brokerErr makes the error of a request that never got an answer, or
// could not connect, say so and name the setting to check.
func brokerErr(err error) error {
	var oe *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer from the brokers within %s (check --brokers / KDELAY_BROKERS): %w", adminTimeout, err)
	case errors.As(err, &oe) && oe.Op == "dial":
		return fmt.Errorf("cannot connect to the brokers (check --brokers / KDELAY_BROKERS): %w", err)
	}
	return err
}

func mismatchError(cfg config.Config, n int32) error {
	tab := cfg.Table()
	return fmt.Errorf("delay topic %s has %d partitions, but %d levels x %d partitions per level need %d; "+
		"set KDELAY_LEVELS and KDELAY_PARTITIONS_PER_LEVEL to the topic's layout, "+
		"or point KDELAY_TOPIC at a new topic and run `kdelay topic create`",
		cfg.Topic, n, tab.Levels(), tab.PerLevel(), tab.Partitions())
}

// checkTopics verifies that the delay topic exists with levels x k
// partitions and that the dead-letter and cancel topics exist; its errors
// name the fix, `kdelay topic create`.
func checkTopics(ctx context.Context, adm *kadm.Client, cfg config.Config) error {
	n, ok, err := partitionCount(ctx, adm, cfg.Topic)
	if err != nil {
		return err
	}
	if !ok {
		return &layoutError{fmt.Errorf("delay topic %s does not exist; create it with `kdelay topic create` (%d partitions: %d levels x %d)",
			cfg.Topic, cfg.Table().Partitions(), cfg.Table().Levels(), cfg.Table().PerLevel()), true}
	}
	if n != cfg.Table().Partitions() {
		return &layoutError{mismatchError(cfg, n), false}
	}
	if _, ok, err = partitionCount(ctx, adm, cfg.DLQTopic); err != nil {
		return err
	} else if !ok {
		return &layoutError{fmt.Errorf("dead-letter topic %s does not exist; create it with `kdelay topic create`", cfg.DLQTopic), true}
	}
	if _, ok, err = partitionCount(ctx, adm, cfg.CancelTopic); err != nil {
		return err
	} else if !ok {
		return &layoutError{fmt.Errorf("cancel topic %s does not exist; create it with `kdelay topic create` (compacted, retention beyond KDELAY_MAX_DELAY)", cfg.CancelTopic), true}
	}
	return nil
}

// layoutError is a missing or mis-sized topic: an operator must act;
// retrying does not help, except for a missing topic just created (missing).
type layoutError struct {
	err     error
	missing bool
}

func (e *layoutError) Error() string { return e.err.Error() }
func (e *layoutError) Unwrap() error { return e.err }

// newClient returns a plain client built from the configuration (no group,
// no consumption), for admin requests.
func newClient(cfg config.Config, log *slog.Logger, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := cfg.KafkaOpts(log)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

func (a *app) newTopicDescribeCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "Show the delay topic's partitions per level, leaders and configs",
		Example: `  kdelay topic describe
  kdelay topic describe --json | jq '.partitions[] | select(.leader < 0)'`,
		Args: cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadClientConfig(cmd)
			if err != nil {
				return err
			}
			cl, err := newClient(cfg, cfg.Logger(a.stderr))
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			d, rcs, err := collectTopics(ctx, kadm.NewClient(cl), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, d)
			}
			printTopics(a.stdout, d, rcs, cfg)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// configsOfInterest are the topic configs that matter to kdelay.
var configsOfInterest = []string{
	"retention.ms", "retention.bytes", "cleanup.policy", "min.insync.replicas",
	"max.message.bytes", "message.timestamp.type",
}

// topicsReport is kdelay topic describe's output (--json prints it as is).
type topicsReport struct {
	Topic          string            `json:"topic"`
	Partitions     []partitionInfo   `json:"partitions"`
	PartitionsNeed int32             `json:"partitions_needed"` // levels x partitions per level
	Mismatch       bool              `json:"mismatch"`
	Configs        map[string]string `json:"configs"`
	DLQ            dlqInfo           `json:"dlq"`
}

type partitionInfo struct {
	Level     int     `json:"level"` // 0: beyond the level table
	Delay     string  `json:"delay,omitempty"`
	Partition int32   `json:"partition"`
	Leader    int32   `json:"leader"`
	Replicas  []int32 `json:"replicas"`
	ISR       []int32 `json:"isr"`
}

type dlqInfo struct {
	Topic      string            `json:"topic"`
	Exists     bool              `json:"exists"`
	Partitions int               `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
}

func collectTopics(ctx context.Context, adm *kadm.Client, cfg config.Config) (*topicsReport, kadm.ResourceConfigs, error) {
	tab := cfg.Table()
	tds, err := adm.ListTopics(ctx, cfg.Topic, cfg.DLQTopic)
	if err != nil {
		return nil, nil, fmt.Errorf("list topics: %w", brokerErr(err))
	}
	td, ok := tds[cfg.Topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return nil, nil, fmt.Errorf("delay topic %s does not exist; create it with `kdelay topic create`", cfg.Topic)
	}
	if td.Err != nil {
		return nil, nil, fmt.Errorf("topic %s: %w", cfg.Topic, td.Err)
	}
	d := &topicsReport{Topic: cfg.Topic, PartitionsNeed: tab.Partitions(), DLQ: dlqInfo{Topic: cfg.DLQTopic}}
	d.Mismatch = int32(len(td.Partitions)) != tab.Partitions()
	for _, pd := range td.Partitions.Sorted() {
		pi := partitionInfo{Partition: pd.Partition, Leader: pd.Leader, Replicas: pd.Replicas, ISR: pd.ISR}
		if l := tab.LevelOf(pd.Partition); l > 0 {
			pi.Level, pi.Delay = l, levels.FormatDuration(tab.Duration(l))
		}
		d.Partitions = append(d.Partitions, pi)
	}
	names := []string{cfg.Topic}
	if dlq, ok := tds[cfg.DLQTopic]; ok && dlq.Err == nil {
		d.DLQ.Exists, d.DLQ.Partitions = true, len(dlq.Partitions)
		names = append(names, cfg.DLQTopic)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, nil, fmt.Errorf("describe topic configs: %w", brokerErr(err))
	}
	d.Configs = interesting(rcs, cfg.Topic)
	if d.DLQ.Exists {
		d.DLQ.Configs = interesting(rcs, cfg.DLQTopic)
	}
	return d, rcs, nil
}

// interesting returns the configsOfInterest of topic.
func interesting(rcs kadm.ResourceConfigs, topic string) map[string]string {
	out := make(map[string]string)
	if rc, err := rcs.On(topic, nil); err == nil && rc.Err == nil {
		for _, c := range rc.Configs {
			if slices.Contains(configsOfInterest, c.Key) {
				out[c.Key] = c.MaybeValue()
			}
		}
	}
	return out
}

func printTopics(w io.Writer, d *topicsReport, rcs kadm.ResourceConfigs, cfg config.Config) {
	tab := cfg.Table()
	fmt.Fprintf(w, "delay topic %s: %s, levels need %d (%d levels x %d)", cfg.Topic, plural(len(d.Partitions), "partition"), tab.Partitions(), tab.Levels(), tab.PerLevel())
	if d.Mismatch {
		fmt.Fprint(w, "  MISMATCH")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEVEL\tDELAY\tPARTITION\tLEADER\tREPLICAS\tISR")
	for _, p := range d.Partitions {
		level, delay := "-", "-"
		if p.Level > 0 {
			level, delay = strconv.Itoa(p.Level), p.Delay
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", level, delay, p.Partition, p.Leader, ints(p.Replicas), ints(p.ISR))
	}
	tw.Flush()
	fmt.Fprintln(w)
	printConfigs(w, rcs, cfg.Topic, cfg)
	fmt.Fprintln(w)
	if !d.DLQ.Exists {
		fmt.Fprintf(w, "dead-letter topic %s: missing; create it with `kdelay topic create`\n", cfg.DLQTopic)
		return
	}
	fmt.Fprintf(w, "dead-letter topic %s: %s\n", cfg.DLQTopic, plural(d.DLQ.Partitions, "partition"))
	printConfigs(w, rcs, cfg.DLQTopic, cfg)
}

func printConfigs(w io.Writer, rcs kadm.ResourceConfigs, topic string, cfg config.Config) {
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		fmt.Fprintf(w, "  configs of %s: unavailable (%v)\n", topic, errors.Join(err, rc.Err))
		return
	}
	got := make(map[string]kadm.Config, len(rc.Configs))
	for _, c := range rc.Configs {
		got[c.Key] = c
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, k := range configsOfInterest {
		c, ok := got[k]
		if !ok {
			continue
		}
		v := c.MaybeValue()
		note := configSource(c.Source)
		if k == "retention.ms" {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms >= 0 {
				d := time.Duration(ms) * time.Millisecond
				note += ", " + levels.FormatDuration(d)
				if topic == cfg.Topic && d < minRetention(cfg) {
					note += fmt.Sprintf(", WARNING: shorter than the longest level plus the wheel horizon, %s", levels.FormatDuration(minRetention(cfg)))
				}
			}
		}
		if k == "cleanup.policy" && topic == cfg.Topic && strings.Contains(v, "compact") {
			note += ", WARNING: compaction drops delayed records that share a key"
		}
		fmt.Fprintf(tw, "  %s\t%s\t(%s)\n", k, v, note)
	}
	tw.Flush()
}

// configSource says where a config value comes from.
func configSource(s kmsg.ConfigSource) string {
	switch s {
	case kmsg.ConfigSourceDynamicTopicConfig:
		return "set on the topic"
	case kmsg.ConfigSourceDefaultConfig:
		return "default"
	case kmsg.ConfigSourceStaticBrokerConfig, kmsg.ConfigSourceDynamicBrokerConfig, kmsg.ConfigSourceDynamicDefaultBrokerConfig:
		return "broker config"
	default:
		return strings.ToLower(s.String())
	}
}

func ints(xs []int32) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(int(x))
	}
	return strings.Join(s, ",")
}
