package integration

import (
	"syscall"
	"testing"
	"time"
)

// Exactly-once mode on the real broker (issue 12): every fault of the
// at-least-once suite, and a zombie, with KDELAY_DELIVERY=exactly-once; the
// observer reads read_committed and must see every record exactly once,
// none early, none lost.

// eosScenario is a scenario whose relays run in exactly-once mode.
func eosScenario(t *testing.T, name string, perLevel int) *scenario {
	return newScenario(t, name, scenarioOpts{
		levels: "1s 2s 4s 8s", perLevel: perLevel, targets: map[string]int32{"orders": 3},
		vars: map[string]string{"KDELAY_DELIVERY": "exactly-once", "KDELAY_SESSION_TIMEOUT": "6s"},
	})
}

// eosRelay starts a relay with its own transactional ID (a restart of the
// same relay passes the same id: like a pod, it fences its predecessor).
func (s *scenario) eosRelay(id, dataDir string) *relayProc {
	s.t.Helper()
	return startRelay(s.t, id, s.withVars("KDELAY_TRANSACTIONAL_ID", s.prefix+"-"+id), dataDir, 90*time.Second)
}

// TestExactlyOnceKill9: killed mid-batch (SIGKILL right after the 350th
// delivery), restarted on the same data directory, then again with it
// wiped.
func TestExactlyOnceKill9(t *testing.T) {
	t.Parallel()
	for _, wipe := range []bool{false, true} {
		name := "eo-kill9"
		if wipe {
			name = "eo-kill9-wiped"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := eosScenario(t, name, 1)
			r1 := s.eosRelay("relay-a", "")
			killNow := s.obs.seen(350)
			s.sendSpread("k", s.target("orders"), spread(1000, time.Second, 8*time.Second), 100, 300*time.Millisecond)
			keys := s.sentKeys("k-")
			select {
			case <-killNow:
			case <-time.After(time.Minute):
				t.Fatalf("only %d of %d records arrived within a minute", s.obs.arrived(keys), len(keys))
			}
			r1.kill()
			dir := r1.dataDir
			if wipe {
				dir = ""
			}
			r2 := s.eosRelay("relay-a", dir)
			s.await(keys, s.lastDue(keys).Add(restartReady), r2)
			f := s.check(t, "exactly-once: kill -9 mid-batch, restart"+map[bool]string{true: " with the data dir wiped"}[wipe], keys, 0)
			s.logDuplicates(f)
			r2.stop()
		})
	}
}

// TestExactlyOnceRestart: a graceful restart (SIGTERM) mid-run.
func TestExactlyOnceRestart(t *testing.T) {
	t.Parallel()
	s := eosScenario(t, "eo-restart", 1)
	r1 := s.eosRelay("relay-a", "")
	s.sendSpread("g", s.target("orders"), spread(600, time.Second, 8*time.Second), 100, 300*time.Millisecond)
	keys := s.sentKeys("g-")
	s.waitArrived(keys, 0.4, time.Minute, r1)
	r1.stop()
	r2 := s.eosRelay("relay-a", r1.dataDir)
	s.await(keys, s.lastDue(keys).Add(restartReady), r2)
	s.check(t, "exactly-once: graceful restart", keys, 0)
	r2.stop()
}

// TestExactlyOnceRelays: two relays share the topic, a third joins, one is
// killed; partitions move at each step.
func TestExactlyOnceRelays(t *testing.T) {
	t.Parallel()
	s := eosScenario(t, "eo-relays", 2)
	target := s.target("orders")
	a := s.eosRelay("relay-a", "")
	b := s.eosRelay("relay-b", "")
	s.sendSpread("m1", target, spread(400, time.Second, 10*time.Second), 100, 200*time.Millisecond)
	c := s.eosRelay("relay-c", "")
	s.sendSpread("m2", target, spread(400, time.Second, 8*time.Second), 100, 200*time.Millisecond)
	keys := append(s.sentKeys("m1-"), s.sentKeys("m2-")...)
	s.waitArrived(keys, 0.4, time.Minute, a, b, c)
	b.kill()
	s.await(keys, s.lastDue(keys).Add(restartReady), a, c)
	s.logDuplicates(s.check(t, "exactly-once: two relays, a third joins, one killed", keys, 0))
	a.stop()
	c.stop()
}

// TestExactlyOnceZombie: a relay frozen (SIGSTOP) past its session timeout
// loses its partitions to the other; resumed (SIGCONT), it must not get a
// single record committed: its transactions are fenced by the group
// generation.
func TestExactlyOnceZombie(t *testing.T) {
	t.Parallel()
	s := eosScenario(t, "eo-zombie", 1)
	target := s.target("orders")
	a := s.eosRelay("relay-a", "")
	b := s.eosRelay("relay-b", "")
	waitFor(t, time.Minute, "both relays own partitions", func() bool {
		na, nb := a.metric("kdelay_assigned_partitions"), b.metric("kdelay_assigned_partitions")
		return na > 0 && nb > 0 && na+nb == float64(s.tab.Partitions())
	}, a, b)
	s.sendSpread("z", target, spread(600, time.Second, 10*time.Second), 100, 200*time.Millisecond)
	keys := s.sentKeys("z-")
	s.waitArrived(keys, 0.2, time.Minute, a, b)
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	waitFor(t, time.Minute, "relay-a owns every partition", func() bool {
		return a.metric("kdelay_assigned_partitions") == float64(s.tab.Partitions())
	}, a)
	t.Logf("relay-b frozen; relay-a took every partition %s later", time.Since(frozen).Round(time.Millisecond))
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.await(keys, s.lastDue(keys).Add(restartReady), a)
	s.check(t, "exactly-once: a zombie relay (SIGSTOP past the session timeout, then SIGCONT)", keys, 0)
	a.stop()
	b.stop()
}

// TestExactlyOnceBrokerRestart (real broker only, not parallel): the broker
// restarts while the relay forwards.
func TestExactlyOnceBrokerRestart(t *testing.T) {
	requireCtl(t)
	s := eosScenario(t, "eo-brokerrestart", 1)
	target := s.target("orders")
	r := s.eosRelay("relay-a", "")
	s.sendSpread("b1", target, spread(500, time.Second, 10*time.Second), 250, 200*time.Millisecond)
	keys := s.sentKeys("b1-")
	s.waitArrived(keys, 0.2, time.Minute, r)
	restartBroker(testContext(t, 3*time.Minute), t, suite.ctl)
	s.sendSpread("b2", target, spread(300, time.Second, 5*time.Second), 150, 200*time.Millisecond)
	keys = append(keys, s.sentKeys("b2-")...)
	s.await(keys, s.lastDue(keys).Add(restartReady), r)
	s.check(t, "exactly-once: broker restart mid-run", keys, 0)
	r.stop()
}

// logDuplicates logs where each copy of a duplicated record came from.
func (s *scenario) logDuplicates(f figures) {
	for _, k := range f.dupKeys {
		for _, a := range s.obs.arrivals(k) {
			s.t.Logf("duplicate %s: source %s, at %s/%d@%d, produced %s", k, a.source, a.topic, a.partition, a.offset, a.ts.Format("15:04:05.000"))
		}
	}
}
