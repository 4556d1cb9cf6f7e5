package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// TestMigrateETF1: kdelay migrate etf1 on kfake: a dry run writes nothing,
// a run copies the live schedules (one overdue, one updated) and lists
// the one it cannot carry, a second run copies nothing.
func TestMigrateETF1(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 5s 10s 30s")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--topic", "orders"), exitOK)

	r := kdelay(t, t.Context(), env, nil, "migrate", "etf1", "--from", "schedules")
	mustCode(t, r, exitFailure)
	mustContain(t, "stderr without the source topic", r.stderr, "topic does not exist: schedules")

	cl, adm := admin(t, addr)
	if _, err := adm.CreateTopic(t.Context(), 2, 1, map[string]*string{"cleanup.policy": kadmStr("compact")}, "schedules"); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour).Unix()
	put := func(id string, value []byte, epoch int64, hs ...string) {
		rec := &kgo.Record{Topic: "schedules", Key: []byte(id), Value: value}
		if value != nil {
			rec.Headers = []kgo.RecordHeader{
				{Key: "scheduler-epoch", Value: []byte(strconv.FormatInt(epoch, 10))},
				{Key: "scheduler-target-topic", Value: []byte("orders")},
				{Key: "scheduler-target-key", Value: []byte("key-" + id)},
			}
		}
		for i := 0; i+1 < len(hs); i += 2 {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: hs[i], Value: []byte(hs[i+1])})
		}
		if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	put("a", []byte("va"), future, "trace", "t-a")
	put("b", []byte("old"), future)
	put("b", []byte("vb"), future+30)
	put("c", []byte("vc"), future)
	put("c", nil, 0)
	put("d", []byte("vd"), time.Now().Add(-time.Minute).Unix())
	put("e", []byte("ve"), future, "kdelay-every", "1m")

	r = kdelay(t, t.Context(), env, nil, "migrate", "etf1", "--from", "schedules", "--dry-run")
	mustCode(t, r, exitOK)
	mustContain(t, "dry run", r.stdout, "dry run (nothing written): etf1 schedules from schedules to delay-topic: 7 records read, 5 schedule ids",
		"copy        a -> orders due ", "copy        d -> orders due ", "(overdue: at once)", "deleted     c (deleted in etf1)",
		"skip        e (schedules/", "header kdelay-every", "live         3 (1 overdue", "copied       3", "skipped      1 (kdelay_header 1)")
	if n := len(readTopicAll(t, addr, "delay-topic")); n != 0 {
		t.Fatalf("dry run wrote %d records", n)
	}

	r = kdelay(t, t.Context(), env, nil, "migrate", "etf1", "--from", "schedules")
	mustCode(t, r, exitOK)
	mustContain(t, "run", r.stdout, "migrated etf1 schedules from schedules to delay-topic", "copied       3", "skip        e (")
	tab, _ := levels.Parse("1s 5s 10s 30s", 1)
	recs := readTopicAll(t, addr, "delay-topic")
	if len(recs) != 3 {
		t.Fatalf("delay topic holds %d records, want 3", len(recs))
	}
	for _, rec := range recs {
		h := headerMap(rec)
		s, err := tab.Parse(rec.Headers, rec.Timestamp)
		if err != nil || s.Target != "orders" || string(rec.Key) != "key-"+s.ID {
			t.Errorf("record %s: %+v, %v", rec.Key, s, err)
		}
		want := map[string]string{"a": "va", "b": "vb", "d": "vd"}[s.ID]
		if string(rec.Value) != want {
			t.Errorf("id %s value %q, want %q", s.ID, rec.Value, want)
		}
		if s.ID == "a" && h["trace"] != "t-a" {
			t.Errorf("a lost its header trace: %v", h)
		}
		if s.ID == "b" && h["kdelay-deliver-at"] != strconv.FormatInt((future+30)*1000, 10) {
			t.Errorf("b due %s, want the updated epoch", h["kdelay-deliver-at"])
		}
	}

	r = kdelay(t, t.Context(), env, nil, "migrate", "etf1", "--from", "schedules", "--json")
	mustCode(t, r, exitOK)
	mustContain(t, "second run", r.stdout, `"copied": 0`, `"already": 3`, `"kdelay_header": 1`)
	if n := len(readTopicAll(t, addr, "delay-topic")); n != 3 {
		t.Errorf("second run: delay topic holds %d records, want 3", n)
	}
}

func kadmStr(s string) *string { return &s }

// readTopicAll reads topic from the start to its current end.
func readTopicAll(t *testing.T, addr, topic string) []*kgo.Record {
	t.Helper()
	_, adm := admin(t, addr)
	ends, err := adm.ListEndOffsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range ends[topic] {
		n += int(o.Offset)
	}
	if n == 0 {
		return nil
	}
	return consume(t, addr, topic, n)
}
