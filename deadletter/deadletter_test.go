package deadletter

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

func TestReplayRecord(t *testing.T) {
	tab, err := levels.Parse("1s 1m 1h", 1)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	d := &kgo.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: ts, Headers: []kgo.RecordHeader{
		{Key: levels.HeaderTarget, Value: []byte("orders")}, {Key: levels.HeaderDelay, Value: []byte("2h")},
		{Key: levels.HeaderError, Value: []byte("target missing")}, {Key: levels.HeaderSource, Value: []byte("d/0/1")}}}
	// Replayed 30 minutes after the timestamp: due 90 minutes later, at
	// its original due time, in the level of the remaining delay.
	r, err := ReplayRecord(tab, "delays", d, ts.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s, err := tab.Parse(r.Headers, r.Timestamp)
	if err != nil || !s.Due.Equal(ts.Add(2*time.Hour)) || r.Partition != 2 || r.Topic != "delays" {
		t.Errorf("replayed: partition %d, schedule %+v, %v", r.Partition, s, err)
	}
	for _, h := range r.Headers {
		if h.Key == levels.HeaderError || h.Key == levels.HeaderSource {
			t.Errorf("replayed record keeps %s", h.Key)
		}
	}
	bad := &kgo.Record{Headers: []kgo.RecordHeader{{Key: levels.HeaderTarget, Value: []byte("orders")}}}
	if _, err := ReplayRecord(tab, "delays", bad, ts); !errors.Is(err, levels.ErrNoSchedule) {
		t.Errorf("a dead letter still without a schedule: %v", err)
	}
}

func TestReplayGroupAndFilter(t *testing.T) {
	if g := ReplayGroup("kdelay", ""); g != "kdelay.dlq-replay" {
		t.Errorf("ReplayGroup = %q", g)
	}
	if g := ReplayGroup("kdelay", `target "x" missing`); g != "kdelay.dlq-replay.target__x__missing" {
		t.Errorf("ReplayGroup with a reason = %q", g)
	}
	f, err := NewReasonFilter("MISSING")
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: levels.HeaderError, Value: []byte("target missing")}}}
	if !f.Match(r) || !(ReasonFilter{}).Match(r) {
		t.Error("filter does not match case-insensitively")
	}
	if _, err := NewReasonFilter("("); err == nil {
		t.Error("a bad expression compiles")
	}
}
