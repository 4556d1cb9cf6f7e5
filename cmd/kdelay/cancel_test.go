package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// TestCancelCommands: topic create makes the compacted cancel topic;
// kdelay cancel writes a cancel (and a tombstone with --withdraw); send
// --id --replace writes the cancel first, then the record with the id and
// the cancel's cut-off as its timestamp; status counts the live cancels.
func TestCancelCommands(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 5s 10s")
	r := kdelay(t, t.Context(), env, nil, "topic", "create")
	mustCode(t, r, exitOK)
	mustContain(t, "topic create", r.stdout, "created cancel topic delay-topic.cancel: 1 partition")
	cl, adm := admin(t, addr)
	rcs, err := adm.DescribeTopicConfigs(t.Context(), "delay-topic.cancel")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := rcs.On("delay-topic.cancel", nil); err != nil || !hasConfig(c.Configs, "cleanup.policy", "compact,delete") {
		t.Errorf("cancel topic configs: %+v, %v; want cleanup.policy=compact,delete", c.Configs, err)
	}

	r = kdelay(t, t.Context(), env, nil, "cancel", "--id", "order-1")
	mustCode(t, r, exitOK)
	mustContain(t, "cancel", r.stdout, "cancelled id order-1: records with timestamps before ")
	r = kdelay(t, t.Context(), env, nil, "cancel", "--id", "order-2", "--before", "1700000000000")
	mustCode(t, r, exitOK)
	mustContain(t, "cancel --before", r.stdout, "before 2023-11-14T22:13:20.000Z")
	mustCode(t, kdelay(t, t.Context(), env, nil, "cancel", "--id", "order-2", "--withdraw"), exitOK)
	r = kdelay(t, t.Context(), env, nil, "cancel", "--id", "order-3", "--before", "soon")
	mustCode(t, r, exitUsage)
	mustCode(t, kdelay(t, t.Context(), env, nil, "send", "--target", "demo", "--delay", "1s", "--replace", "--value", "x", "--force"), exitUsage)

	r = kdelay(t, t.Context(), env, nil, "send", "--target", "demo", "--delay", "5s", "--id", "order-4", "--replace", "--value", "x", "--force")
	mustCode(t, r, exitOK)
	mustContain(t, "send --replace", r.stdout, "replacing: 1 cancel written first")

	got := readAll(t, cl, 4, "delay-topic.cancel", "delay-topic")
	var cut, ts int64 = -1, -2
	for _, rec := range got {
		switch {
		case rec.Topic == "delay-topic.cancel" && string(rec.Key) == "order-4":
			for _, h := range rec.Headers {
				if h.Key == levels.HeaderCancelBefore {
					cut = mustInt(t, string(h.Value))
				}
			}
		case rec.Topic == "delay-topic" && levels.ID(rec.Headers) == "order-4":
			ts = rec.Timestamp.UnixMilli()
		}
	}
	if cut != ts {
		t.Errorf("--replace: cancel cut-off %d, new record timestamp %d; want equal", cut, ts)
	}

	r = kdelay(t, t.Context(), env, nil, "status")
	mustCode(t, r, exitOK)
	mustContain(t, "status", r.stdout, "cancel set (delay-topic.cancel): 2 live") // order-1, order-4 (order-2 withdrawn)
}

func hasConfig(cs []kadm.Config, k, v string) bool {
	for _, c := range cs {
		if c.Key == k && c.Value != nil && *c.Value == v {
			return true
		}
	}
	return false
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = 10*n + int64(c-'0')
	}
	return n
}

// readAll reads at least n records of the topics from their start.
func readAll(t *testing.T, cl *kgo.Client, n int, topics ...string) []*kgo.Record {
	t.Helper()
	cl.AddConsumeTopics(topics...)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
