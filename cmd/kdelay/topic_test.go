package main

import (
	"strings"
	"testing"
)

func TestTopicCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr)

	r := kdelay(t, t.Context(), env, nil, "topic", "create", "--config", "retention.ms=604800000")
	mustCode(t, r, exitOK)
	mustContain(t, "first create", r.stdout,
		"created delay topic delay-topic: 18 partitions (18 levels x 1)",
		"created dead-letter topic delay-topic.dlq: 1 partition")

	r = kdelay(t, t.Context(), env, nil, "topic", "create")
	mustCode(t, r, exitOK)
	mustContain(t, "second create", r.stdout,
		"exists  delay topic delay-topic: 18 partitions (18 levels x 1)\n",
		"exists  dead-letter topic delay-topic.dlq: 1 partition\n")

	// Configs given again are left alone (TestTopicCreateUpdatesConfigs
	// covers a changed one).
	r = kdelay(t, t.Context(), env, nil, "topic", "create", "--config", "retention.ms=604800000")
	mustCode(t, r, exitOK)
	mustContain(t, "third create", r.stdout, "exists  delay topic delay-topic: 18 partitions (18 levels x 1) (configs as given)")
	if strings.Contains(r.stderr, "retention.ms is shorter") {
		t.Errorf("retention warning for a long retention: %s", r.stderr)
	}

	_, adm := admin(t, addr)
	rcs, err := adm.DescribeTopicConfigs(t.Context(), "delay-topic")
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rcs.On("delay-topic", nil)
	var retention string
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			retention = c.MaybeValue()
		}
	}
	if retention != "604800000" {
		t.Errorf("retention.ms = %q, want 604800000", retention)
	}

	// Scaled levels with two partitions per level, on other topics.
	r = kdelay(t, t.Context(), with(env, "KDELAY_TOPIC", "small", "KDELAY_LEVELS", "1s 2s 4s", "KDELAY_PARTITIONS_PER_LEVEL", "2"),
		nil, "topic", "create", "--replication-factor", "1")
	mustCode(t, r, exitOK)
	mustContain(t, "scaled create", r.stdout, "created delay topic small: 6 partitions (3 levels x 2), replication factor 1", "small.dlq")
}

func TestTopicCreateWrongPartitionCount(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	_, adm := admin(t, addr)
	if _, err := adm.CreateTopic(t.Context(), 10, -1, nil, "delay-topic"); err != nil {
		t.Fatal(err)
	}
	r := kdelay(t, t.Context(), testEnv(t, addr), nil, "topic", "create")
	mustCode(t, r, exitFailure)
	mustContain(t, "stderr", r.stderr, "delay topic delay-topic has 10 partitions, but 18 levels x 1 partitions per level need 18")
}

func TestTopicCreateShortRetentionWarns(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	r := kdelay(t, t.Context(), testEnv(t, addr), nil, "topic", "create", "--config", "retention.ms=3600000")
	mustCode(t, r, exitOK)
	mustContain(t, "stderr", r.stderr, "retention.ms is shorter than the longest level plus the wheel horizon", `"minimum":"3h"`)
}

func TestTopicDescribe(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 5s 10s", "KDELAY_PARTITIONS_PER_LEVEL", "2")

	r := kdelay(t, t.Context(), env, nil, "topic", "describe")
	mustCode(t, r, exitFailure)
	mustContain(t, "stderr before create", r.stderr, "delay topic delay-topic does not exist; create it with `kdelay topic create`")

	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--config", "retention.ms=5000"), exitOK)
	r = kdelay(t, t.Context(), env, nil, "topic", "describe")
	mustCode(t, r, exitOK)
	mustContain(t, "describe", r.stdout,
		"delay topic delay-topic: 6 partitions, levels need 6 (3 levels x 2)",
		"LEVEL  DELAY  PARTITION  LEADER  REPLICAS  ISR",
		"retention.ms",
		"(set on the topic, 5s, WARNING: shorter than the longest level plus the wheel horizon, 15s)",
		"cleanup.policy",
		"dead-letter topic delay-topic.dlq: 1 partition",
	)
	var rows int
	for line := range strings.SplitSeq(r.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && (f[0] == "1" || f[0] == "2" || f[0] == "3") {
			rows++
		}
	}
	if rows != 6 {
		t.Errorf("%d partition rows, want 6:\n%s", rows, r.stdout)
	}
	mustContain(t, "describe", r.stdout, "3      10s    5")
}
