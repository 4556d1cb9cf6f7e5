package main

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/schedules"
)

// TestSchedulesCommands: with a relay running, kdelay schedules reports
// each record in its true state: in the wheel, waiting in its level
// partition, cascaded (one schedule, the original timestamp), cancelled
// (by schedules cancel), and a delivered one no longer.
func TestSchedulesCommands(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 2s 30s")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	cl, adm := admin(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if _, err := adm.CreateTopic(t.Context(), 1, -1, nil, "out"); err != nil {
		t.Fatal(err)
	}
	deliveries := collect(t, addr, "out")
	start(t, env, "run")

	send := func(id, delay string) {
		t.Helper()
		mustCode(t, kdelay(t, t.Context(), env, nil, "send", "--target", "out", "--delay", delay, "--id", id, "--key", "k-"+id, "--value", "v"), exitOK)
	}
	send("now", "0")
	send("wheel", "20s") // level 2 (2s): in the wheel from 2s on
	send("far", "2m")    // level 3 (30s): waiting for 30s
	send("gone", "2m")
	// Written at level 1 with a due time 2m ahead: the relay cascades it
	// after 1s (beyond the 28s horizon).
	ts := time.Now()
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: "delay-topic", Partition: 0, Key: []byte("k-cascade"), Value: []byte("v"), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: "kdelay-target", Value: []byte("out")}, {Key: "kdelay-id", Value: []byte("cascade")},
			{Key: "kdelay-deliver-at", Value: []byte(strconv.FormatInt(ts.Add(2*time.Minute).UnixMilli(), 10))}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := kdelay(t, t.Context(), env, nil, "schedules", "cancel", "gone")
	mustCode(t, r, exitOK)
	mustContain(t, "schedules cancel", r.stdout, "cancelled id gone: records with original timestamps before ", "acknowledged")

	select {
	case d := <-deliveries:
		if d.key != "k-now" {
			t.Fatalf("delivered %s first", d.key)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("k-now not delivered")
	}
	list := func(args ...string) []schedules.Schedule {
		t.Helper()
		r := kdelay(t, t.Context(), env, nil, append([]string{"schedules", "list", "--json"}, args...)...)
		mustCode(t, r, exitOK)
		var ss []schedules.Schedule
		if err := json.Unmarshal([]byte(r.stdout), &ss); err != nil {
			t.Fatalf("list --json: %v\n%s", err, r.stdout)
		}
		return ss
	}
	byID := func(ss []schedules.Schedule) map[string]schedules.Schedule {
		m := make(map[string]schedules.Schedule)
		for _, s := range ss {
			if _, dup := m[s.ID]; dup {
				t.Errorf("id %s listed twice: %+v", s.ID, ss)
			}
			m[s.ID] = s
		}
		return m
	}
	var got map[string]schedules.Schedule
	eventually(t, 25*time.Second, "the wheel and the cascade", func() bool {
		got = byID(list("--state", "all"))
		return got["wheel"].State == schedules.StateWheel && got["cascade"].Location == schedules.LocationCascaded
	})
	if s := got["far"]; s.State != schedules.StateWaiting || s.Location != schedules.LocationLevel || s.Level != 3 {
		t.Errorf("far: %+v, want waiting in level 3", s)
	}
	if s := got["gone"]; s.State != schedules.StateCancelled || s.CancelCutoff == nil {
		t.Errorf("gone: %+v, want cancelled", s)
	}
	if s := got["cascade"]; s.State != schedules.StateWaiting || s.Level != 3 || !s.OriginalTimestamp.Equal(ts.Truncate(time.Millisecond)) {
		t.Errorf("cascade: %+v, want waiting in level 3 with the original timestamp %s", s, ts)
	}
	if s := got["wheel"]; s.Level != 2 || s.Target != "out" || s.Key != "k-wheel" {
		t.Errorf("wheel: %+v", s)
	}
	// Delivered and committed: gone from the pending range.
	eventually(t, 20*time.Second, "the delivered record's commit", func() bool {
		return kdelay(t, t.Context(), env, nil, "schedules", "get", "now").code == exitFailure
	})
	r = kdelay(t, t.Context(), env, nil, "schedules", "get", "now")
	mustContain(t, "get of a delivered id", r.stderr, "no record with id now above the commits of group kdelay")

	pending := byID(list())
	if _, ok := pending["gone"]; ok || len(pending) != 3 {
		t.Errorf("pending: %v, want wheel, far and cascade", pending)
	}
	if ss := list("--level", "2"); len(ss) != 1 || ss[0].ID != "wheel" {
		t.Errorf("--level 2: %+v", ss)
	}
	if ss := list("--id", "far", "--target", "out"); len(ss) != 1 || ss[0].ID != "far" {
		t.Errorf("--id far: %+v", ss)
	}
	if ss := list("--due-to", strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)); len(ss) != 1 || ss[0].ID != "wheel" {
		t.Errorf("--due-to now+1m: %+v", ss)
	}
	if ss := list("--limit", "1"); len(ss) != 1 || ss[0].ID != "wheel" {
		t.Errorf("--limit 1: %+v", ss)
	}
	r = kdelay(t, t.Context(), env, nil, "schedules", "get", "cascade")
	mustCode(t, r, exitOK)
	mustContain(t, "get (table)", r.stdout, "ID", "cascade", "waiting", "cascaded", "1 schedule")
	r = kdelay(t, t.Context(), env, nil, "schedules", "list", "--due-from", "soon")
	mustCode(t, r, exitUsage)
	mustContain(t, "bad --due-from", r.stderr, `invalid --due-from "soon"`)
}
