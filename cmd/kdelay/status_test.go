package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 5s 10s", "KDELAY_PARTITIONS_PER_LEVEL", "1")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)

	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	for _, args := range [][]string{
		{"send", "--target", "demo", "--at", past, "--value", "a", "--count", "2", "--force"}, // partition 0, due
		{"send", "--target", "demo", "--delay", "1h", "--value", "b", "--force"},              // partition 2, waiting
	} {
		mustCode(t, kdelay(t, t.Context(), env, nil, args...), exitOK)
	}
	cl, adm := admin(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// A record without kdelay headers on partition 1, two dead letters.
	if err := cl.ProduceSync(t.Context(),
		&kgo.Record{Topic: "delay-topic", Partition: 1, Value: []byte("no headers")},
		&kgo.Record{Topic: "delay-topic.dlq", Partition: 0, Value: []byte("x")},
		&kgo.Record{Topic: "delay-topic.dlq", Partition: 0, Value: []byte("y")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The group has done the first record of partition 0.
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "delay-topic", Partition: 0, At: 1, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(t.Context(), "kdelay", offs); err != nil {
		t.Fatal(err)
	}

	r := kdelay(t, t.Context(), env, nil, "status")
	mustCode(t, r, exitOK)
	mustContain(t, "status", r.stdout,
		"delay topic delay-topic, group kdelay",
		"LEVEL  DELAY  PARTITION  COMMITTED  END  LAG  NEXT DUE",
		"due (invalid head: dead-lettered next)",
		"waiting",
		"lag 3; dead letters in delay-topic.dlq: 2",
	)

	r = kdelay(t, t.Context(), env, nil, "status", "--json")
	mustCode(t, r, exitOK)
	var rep statusReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if rep.DeadLetters != 2 || rep.Lag != 3 || len(rep.Levels) != 3 {
		t.Fatalf("report %+v", rep)
	}
	type want struct {
		committed, end, lag int64
		state               string
		nextDue             func(*time.Time) bool
	}
	none := func(d *time.Time) bool { return d == nil }
	for i, w := range []want{
		{1, 2, 1, stateDue, func(d *time.Time) bool { return d != nil && d.Before(time.Now()) }},
		{-1, 1, 1, stateDue, none},
		{-1, 1, 1, stateWaiting, func(d *time.Time) bool { return d != nil && time.Until(*d) > 59*time.Minute }},
	} {
		ls := rep.Levels[i]
		if len(ls.Partitions) != 1 {
			t.Fatalf("level %d: %d partitions", i+1, len(ls.Partitions))
		}
		p := ls.Partitions[0]
		if p.Committed != w.committed || p.End != w.end || p.Lag != w.lag || p.State != w.state || ls.State != w.state || !w.nextDue(p.NextDue) {
			t.Errorf("level %d: got %+v (next due %v), want %+v", i+1, p, p.NextDue, w)
		}
	}
	if rep.Levels[1].Partitions[0].HeadError == "" {
		t.Errorf("level 2: no head error for a record without headers")
	}
}
