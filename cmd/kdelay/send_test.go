package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// consume reads n records of topic from the start.
func consume(t *testing.T, addr, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, _ := admin(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s", len(recs), n, topic)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

func headerMap(r *kgo.Record) map[string]string {
	m := make(map[string]string)
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

func TestSend(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 5s 10s 30s", "KDELAY_PARTITIONS_PER_LEVEL", "2")

	r := kdelay(t, t.Context(), env, nil, "send", "--target", "demo", "--delay", "1s")
	mustCode(t, r, exitFailure)
	mustContain(t, "stderr without topic", r.stderr, "delay topic delay-topic does not exist; create it with `kdelay topic create`")

	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--topic", "demo"), exitOK)

	before := time.Now()
	r = kdelay(t, t.Context(), env, nil, "send", "--target", "demo", "--delay", "12s",
		"--key", "order-{i}", "--value", "v{i}", "-H", "trace=abc", "--count", "20", "--partition", "1", "--progress")
	mustCode(t, r, exitOK)
	mustContain(t, "summary", r.stdout, "sent 20 records to delay-topic for target demo", "partitions  4 (level 3, 10s): ", "due  ")
	mustContain(t, "progress bar on stderr", r.stderr, "sending", "20/20")

	recs := consume(t, addr, "delay-topic", 20)
	seen := make(map[string]bool)
	tab, _ := levels.Parse("1s 5s 10s 30s", 2)
	for _, rec := range recs {
		h := headerMap(rec)
		if h["kdelay-target"] != "demo" || h["kdelay-delay"] != "12000" || h["kdelay-target-partition"] != "1" || h["trace"] != "abc" {
			t.Errorf("record %s headers %v", rec.Key, h)
		}
		i := strings.TrimPrefix(string(rec.Key), "order-")
		if string(rec.Value) != "v"+i {
			t.Errorf("key %s value %s", rec.Key, rec.Value)
		}
		if want := tab.PartitionFor(3, rec.Key); rec.Partition != want {
			t.Errorf("key %s in partition %d, want %d (level 3 by key hash)", rec.Key, rec.Partition, want)
		}
		s, err := tab.Parse(rec.Headers, rec.Timestamp)
		if err != nil || s.Due.Before(before.Add(12*time.Second)) {
			t.Errorf("key %s: schedule %+v, %v", rec.Key, s, err)
		}
		seen[string(rec.Key)] = true
	}
	for i := range 20 {
		if !seen["order-"+strconv.Itoa(i)] {
			t.Errorf("order-%d not sent", i)
		}
	}

	// Value from stdin, by level and by absolute time.
	r = kdelay(t, t.Context(), env, strings.NewReader("from stdin"), "send", "--target", "demo", "--level", "2", "--key", "lvl")
	mustCode(t, r, exitOK)
	mustContain(t, "level summary", r.stdout, "sent 1 record", "(level 2, 5s): 1")
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	r = kdelay(t, t.Context(), env, nil, "send", "--target", "demo", "--at", at.Format(time.RFC3339Nano), "--key", "at", "--value", "x")
	mustCode(t, r, exitOK)
	mustContain(t, "at summary", r.stdout, "(level 4, 30s): 1", fmtTime(at))

	recs = consume(t, addr, "delay-topic", 22)
	for _, rec := range recs {
		h := headerMap(rec)
		switch string(rec.Key) {
		case "lvl":
			if string(rec.Value) != "from stdin" || h["kdelay-level"] != "2" {
				t.Errorf("level record: value %q headers %v", rec.Value, h)
			}
		case "at":
			if h["kdelay-deliver-at"] != strconv.FormatInt(at.UnixMilli(), 10) {
				t.Errorf("at record headers %v", h)
			}
		}
	}
}

func TestSendSeries(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 5s 10s 30s")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--topic", "demo"), exitOK)

	for _, bad := range [][]string{
		{"--every", "500ms", "--id", "s"},
		{"--every", "2s"}, // no --id
		{"--cron", "61 * * * *", "--id", "s"},
		{"--cron", "* * * * *", "--timezone", "Mars/Base", "--id", "s"},
		{"--every", "2s", "--timezone", "Europe/Berlin", "--id", "s"},
		{"--delay", "1s", "--times", "3"},
		{"--every", "2s", "--cron", "* * * * *", "--id", "s"},
	} {
		r := kdelay(t, t.Context(), env, nil, append([]string{"send", "--target", "demo", "--value", "x"}, bad...)...)
		if r.code == exitOK {
			t.Errorf("send %v accepted", bad)
		}
	}
	before := time.Now().Truncate(time.Millisecond) // due times are whole milliseconds
	mustCode(t, kdelay(t, t.Context(), env, nil, "send", "--target", "demo", "--value", "e", "--key", "every",
		"--every", "2s", "--id", "s-every", "--times", "3", "--until", "2099-01-01T00:00:00Z"), exitOK)
	mustCode(t, kdelay(t, t.Context(), env, nil, "send", "--target", "demo", "--value", "c", "--key", "cron",
		"--cron", "*/10 * * * * *", "--timezone", "Europe/Berlin", "--id", "s-cron"), exitOK)
	tab, _ := levels.Parse("1s 5s 10s 30s", 1)
	for _, rec := range consume(t, addr, "delay-topic", 2) {
		h := headerMap(rec)
		s, err := tab.Parse(rec.Headers, rec.Timestamp)
		if err != nil || s.Recur == nil {
			t.Fatalf("%s: %v, %v", rec.Key, h, err)
		}
		if _, ok := h["kdelay-delay"]; ok {
			t.Errorf("%s: a series without a first time got kdelay-delay: %v", rec.Key, h)
		}
		switch string(rec.Key) {
		case "every":
			if h["kdelay-every"] != "2s" || h["kdelay-count"] != "3" || h["kdelay-id"] != "s-every" || h["kdelay-until"] != "4070908800000" {
				t.Errorf("every headers %v", h)
			}
			if s.Due.Before(before.Add(2 * time.Second)) {
				t.Errorf("every: first occurrence %s, want 2s after the send", s.Due)
			}
		case "cron":
			if h["kdelay-cron"] != "*/10 * * * * *" || h["kdelay-timezone"] != "Europe/Berlin" {
				t.Errorf("cron headers %v", h)
			}
			if s.Due.UnixMilli()%10_000 != 0 || s.Due.Before(before) {
				t.Errorf("cron: first occurrence %s, want the next tenth second", s.Due)
			}
		}
		if want := tab.PartitionFor(tab.LevelFor(s.Delay), rec.Key); rec.Partition != want {
			t.Errorf("%s in partition %d, want %d (the first occurrence's level)", rec.Key, rec.Partition, want)
		}
	}
}
