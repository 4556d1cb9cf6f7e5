package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// restartReady bounds how long a relay restarted after a kill -9 takes to
// be ready: without static membership the group holds the killed member's
// partitions until its session times out (KDELAY_SESSION_TIMEOUT, default
// 10s), then rebalances.
const restartReady = 2 * time.Minute

// spread returns n delays from lo to hi, in a scattered order.
func spread(n int, lo, hi time.Duration) []time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		j := (i * 7919) % n
		ds[i] = lo + time.Duration(int64(hi-lo)*int64(j)/int64(n))
	}
	return ds
}

// sendSpread sends len(ds) records named prefix-NNNN to target with the
// delays ds, in bursts of burst records every gap.
func (s *scenario) sendSpread(prefix, target string, ds []time.Duration, burst int, gap time.Duration) {
	s.t.Helper()
	for i := 0; i < len(ds); i += burst {
		var recs []*kgo.Record
		for j := i; j < min(i+burst, len(ds)); j++ {
			recs = append(recs, s.stamped(fmt.Sprintf("%s-%04d", prefix, j), levels.Delay{Target: target, Delay: ds[j]}))
		}
		s.send(recs...)
		if i+burst < len(ds) {
			time.Sleep(gap) // pacing the producer, not waiting for a condition
		}
	}
}

// waitArrived waits until at least frac of keys have arrived.
func (s *scenario) waitArrived(keys []string, frac float64, timeout time.Duration, relays ...*relayProc) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	want := int(frac * float64(len(keys)))
	for s.obs.arrived(keys) < want {
		for _, p := range relays {
			p.checkAlive()
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("only %d of %d records arrived within %s", s.obs.arrived(keys), len(keys), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKill9RestartStatic: the kill -9 of TestKill9Restart (at-least-once
// mode) with static group membership (KDELAY_INSTANCE_ID): the restarted
// relay, with the same instance ID, takes the partitions back at once,
// without waiting for the session timeout.
func TestKill9RestartStatic(t *testing.T) {
	t.Parallel()
	ready := killAndRestart(t, "kill9static", map[string]string{"KDELAY_INSTANCE_ID": "relay-0"},
		"kill -9 and restart, static membership (KDELAY_INSTANCE_ID)")
	if limit := 8 * time.Second; ready > limit {
		t.Errorf("restarted relay with the same instance ID ready after %s, want under %s (no wait for the session timeout)", ready, limit)
	}
}

// killAndRestart runs the kill -9 scenario and returns how long the
// restarted relay took to be ready. Duplicates must be one batch: every
// duplicated record was in flight at the kill (checkInFlight), and their
// first copies were all forwarded within one short window.
func killAndRestart(t *testing.T, name string, vars map[string]string, label string) time.Duration {
	s := newScenario(t, name, scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 3}, vars: vars})
	r1 := s.startRelay("", 90*time.Second)
	// Kill right after the observer sees the 350th record: its batch may
	// not be committed yet, so the kill is likely to land in flight.
	killNow := s.obs.seen(350)
	s.sendSpread("k", s.target("orders"), spread(1000, time.Second, 8*time.Second), 100, 300*time.Millisecond)
	keys := s.sentKeys("k-")
	select {
	case <-killNow:
	case <-time.After(time.Minute):
		r1.checkAlive()
		t.Fatalf("only %d of %d records arrived within a minute", s.obs.arrived(keys), len(keys))
	}
	r1.kill()
	ft := s.faultNow(t, "kill -9")
	killedAt := ft.at
	t.Logf("killed the relay with %d of %d records delivered", s.obs.arrived(keys), len(keys))
	r2 := s.startRelay(r1.dataDir, restartReady)
	ready := time.Since(killedAt)
	s.await(keys, s.lastDue(keys).Add(restartReady), r2)
	f := s.check(t, label, keys, -1)
	s.checkInFlight(t, label, keys, f, ft)

	var first []time.Time
	for _, k := range f.dupKeys {
		first = append(first, s.obs.arrivals(k)[0].ts)
	}
	if len(first) > 0 {
		last := slices.MaxFunc(first, time.Time.Compare)
		window := last.Sub(slices.MinFunc(first, time.Time.Compare))
		t.Logf("duplicates after kill -9: %d records, first copies forwarded within %s, %s before the kill",
			f.duplicated, window, killedAt.Sub(last).Round(time.Millisecond))
		if window > time.Second {
			t.Errorf("duplicated records were first forwarded over %s: more than the one batch in flight", window)
		}
	} else {
		t.Logf("duplicates after kill -9: 0")
	}
	t.Logf("restarted relay ready %s after the kill", ready.Round(time.Millisecond))
	r2.stop()
	return ready
}

// TestDataDirWiped: the relay stops (SIGTERM) with records resting in its
// wheel, its data directory is deleted, and it starts again on an empty
// one: the wheel's records are re-read from Kafka, since commits never
// passed them. Nothing lost, nothing early; duplicates (records forwarded
// past a wheel entry that held the commit back) must all have been in
// flight at the stop (checkInFlight: none is left after a clean stop, the
// done set in the commit metadata says what was forwarded above the
// committed offset).
func TestDataDirWiped(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "wiped", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 3}})
	r1 := s.startRelay("", 90*time.Second)
	s.sendSpread("w", s.target("orders"), spread(600, time.Second, 12*time.Second), 200, 300*time.Millisecond)
	keys := s.sentKeys("w-")
	s.waitArrived(keys, 0.3, time.Minute, r1)
	pending := r1.metric("kdelay_wheel_pending_entries")
	r1.stop()
	ft := s.faultNow(t, "graceful stop")

	var files int
	_ = filepath.WalkDir(r1.dataDir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return nil
	})
	if err := os.RemoveAll(r1.dataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("wiped %s (%d files; %v records were pending in the wheel) with %d of %d records delivered",
		r1.dataDir, files, pending, s.obs.arrived(keys), len(keys))
	if pending <= 0 {
		t.Errorf("no records pending in the wheel when it was wiped: the scenario tests nothing")
	}
	r2 := s.startRelay(r1.dataDir, 90*time.Second)
	s.await(keys, s.lastDue(keys).Add(90*time.Second), r2)
	label := "graceful stop, restart with the data dir wiped"
	s.checkInFlight(t, label, keys, s.check(t, label, keys, -1), ft)
	r2.stop()
}

// waitFor polls cond until it holds, failing the test after timeout; the
// relays must stay alive meanwhile.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, relays ...*relayProc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, p := range relays {
			p.checkAlive()
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
