package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/schedules"
)

// kcatAt writes one record with kcat to partition p of the delay topic.
func (s *scenario) kcatAt(p int32, key string, kv ...string) {
	s.t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		skipOrFailInCI(s.t, "kcat not on PATH: the schedules test writes its records with it (Debian: apt-get install -y kcat)")
	}
	args := []string{"-P", "-b", strings.Join(s.seeds, ","), "-t", s.topic, "-p", strconv.Itoa(int(p)), "-K", "\t"}
	for i := 0; i+1 < len(kv); i += 2 {
		args = append(args, "-H", kv[i]+"="+kv[i+1])
	}
	cmd := exec.Command(kcat, args...)
	cmd.Stdin = strings.NewReader(key + "\tvalue-" + key + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// startConsole starts `kdelay console` with the scenario's settings plus
// kv, and waits for its /readyz.
func (s *scenario) startConsole(kv ...string) string {
	s.t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(s.t))
	cmd := exec.Command(suite.bin, "console", "--addr", addr)
	cmd.Env = childEnv(s.withVars(kv...))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if s.t.Failed() {
			s.t.Logf("console log:\n%s", logs.String())
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return url
			}
		}
		select {
		case <-done:
			s.t.Fatalf("console exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("console not ready within 60s:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling the child's probe
	}
}

// TestSchedulesStates: on the real broker, records written by kcat are
// reported by `kdelay schedules` and by the console in their true state:
// waiting in a level partition, read into the wheel, cascaded (one
// schedule, the original timestamp), cancelled (by the CLI, and by the
// console's DELETE: that one never arrives), and an already delivered one
// no longer.
func TestSchedulesStates(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "sched", scenarioOpts{levels: "1s 2s 30s", targets: map[string]int32{"orders": 1}})
	relay := s.startRelay("", 90*time.Second)
	url := s.startConsole("KDELAY_CONSOLE_TOKEN", "tok")
	target := s.target("orders")
	t0 := time.Now()
	ms := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).UnixMilli(), 10) }
	tgt, id := levels.HeaderTarget, levels.HeaderID
	s.kcatAt(0, "delivered", tgt, target, id, "delivered", levels.HeaderDelay, "0")
	s.kcatAt(1, "wheel", tgt, target, id, "wheel", levels.HeaderDeliverAt, ms(25*time.Second))
	s.kcatAt(1, "gone", tgt, target, id, "gone", levels.HeaderDeliverAt, ms(15*time.Second))
	s.kcatAt(2, "waiting", tgt, target, id, "waiting", levels.HeaderDelay, "2m")
	s.kcatAt(2, "cancelled", tgt, target, id, "cancelled", levels.HeaderDelay, "2m")
	s.kcatAt(0, "cascade", tgt, target, id, "cascade", levels.HeaderDeliverAt, ms(2*time.Minute)) // beyond the 28s horizon
	written := time.Now()

	if r := kdelayCLI(t, s.vars, nil, "schedules", "cancel", "cancelled"); r.code != 0 {
		t.Fatalf("schedules cancel: %d\n%s", r.code, r.stderr)
	}
	list := func() map[string]schedules.Schedule {
		t.Helper()
		r := kdelayCLI(t, s.vars, nil, "schedules", "list", "--state", "all", "--json")
		if r.code != 0 {
			t.Fatalf("schedules list: %d\n%s", r.code, r.stderr)
		}
		var ss []schedules.Schedule
		if err := json.Unmarshal([]byte(r.stdout), &ss); err != nil {
			t.Fatalf("%v\n%s", err, r.stdout)
		}
		m := map[string]schedules.Schedule{}
		for _, sc := range ss {
			if _, dup := m[sc.ID]; dup {
				t.Errorf("%s listed twice", sc.ID)
			}
			m[sc.ID] = sc
		}
		return m
	}
	var got map[string]schedules.Schedule
	for deadline := time.Now().Add(20 * time.Second); ; {
		got = list()
		if got["wheel"].State == schedules.StateWheel && got["cascade"].Location == schedules.LocationCascaded {
			break
		}
		relay.checkAlive()
		if time.Now().After(deadline) {
			t.Fatalf("wheel and cascade not seen within 20s: %+v", got)
		}
	}
	check := func(who string, sc schedules.Schedule, state, location string, level int) {
		t.Helper()
		if sc.State != state || sc.Location != location || sc.Level != level || sc.Target != target {
			t.Errorf("%s: %s = %+v, want %s/%s at level %d", who, sc.ID, sc, state, location, level)
		}
	}
	check("cli", got["wheel"], schedules.StateWheel, schedules.LocationLevel, 2)
	check("cli", got["waiting"], schedules.StateWaiting, schedules.LocationLevel, 3)
	check("cli", got["cancelled"], schedules.StateCancelled, schedules.LocationLevel, 3)
	check("cli", got["cascade"], schedules.StateWaiting, schedules.LocationCascaded, 3)
	if ot := got["cascade"].OriginalTimestamp; ot.Before(t0.Truncate(time.Millisecond)) || ot.After(written) {
		t.Errorf("cascade's original timestamp %s, want kcat's (between %s and %s)", ot, t0, written)
	}

	// The console: the same states, and a cancel through its API.
	get := func(id string) []schedules.Schedule {
		t.Helper()
		resp, err := http.Get(url + "/api/v1/schedules/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Schedules []schedules.Schedule }
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 404 {
			return nil
		}
		if err := json.Unmarshal(b, &body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", id, resp.StatusCode, b)
		}
		return body.Schedules
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		g := get("cascade")
		if len(g) == 1 && g[0].Location == schedules.LocationCascaded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("console: cascade = %+v", g)
		}
		time.Sleep(50 * time.Millisecond) // polling the console
	}
	for _, c := range []struct {
		id, state, loc string
		level          int
	}{{"wheel", schedules.StateWheel, schedules.LocationLevel, 2}, {"waiting", schedules.StateWaiting, schedules.LocationLevel, 3},
		{"cancelled", schedules.StateCancelled, schedules.LocationLevel, 3}, {"gone", schedules.StateWheel, schedules.LocationLevel, 2}} {
		g := get(c.id)
		if len(g) != 1 {
			t.Errorf("console: %s = %+v, want one", c.id, g)
			continue
		}
		check("console", g[0], c.state, c.loc, c.level)
	}
	req, _ := http.NewRequest("DELETE", url+"/api/v1/schedules/gone", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || time.Since(t0) > 14*time.Second {
		t.Fatalf("DELETE gone: %d %s (%s after the write, due at 15s)", resp.StatusCode, b, time.Since(t0))
	}

	// wheel and delivered arrive; gone never does.
	for len(s.obs.arrivals("wheel")) == 0 || len(s.obs.arrivals("delivered")) == 0 {
		relay.checkAlive()
		if time.Now().After(t0.Add(45 * time.Second)) {
			t.Fatalf("wheel or delivered not arrived 45s after the write")
		}
		time.Sleep(50 * time.Millisecond) // polling the observer
	}
	// A fired record leaves the console's index once the relay's commit
	// passes it (the console reads the commits every second); the figure
	// is docs/console.md's "a fired record gone from the index".
	fired := s.obs.arrivals("wheel")[0].at
	for deadline := time.Now().Add(15 * time.Second); get("wheel") != nil; {
		if time.Now().After(deadline) {
			t.Fatal("console: wheel still listed 15s after its delivery")
		}
		time.Sleep(20 * time.Millisecond) // polling the console
	}
	t.Logf("console: a fired record gone from the index %s after its delivery was seen", time.Since(fired).Round(time.Millisecond))
	time.Sleep(time.Until(t0.Add(27 * time.Second))) // 12s past gone's due time: waiting for what must not happen
	if a := s.obs.arrivals("gone"); len(a) != 0 {
		t.Errorf("gone, cancelled through the console, arrived: %+v", a)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		if r := kdelayCLI(t, s.vars, nil, "schedules", "get", "delivered"); r.code == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("schedules get delivered: still found 15s after its delivery")
		}
	}
	if g := get("delivered"); g != nil {
		t.Errorf("console: delivered = %+v, want 404", g)
	}
	relay.stop()
}
