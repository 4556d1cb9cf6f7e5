package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBounce: three relays on one host, started as a user would (no
// transactional or instance ID: each exactly-once relay takes the ID its
// data directory keeps). While records due 0.5–10 s out are sent at
// 100 per second, one relay after the other is bounced every 8 s: kill -9
// and SIGTERM in turn, every other restart with its data directory wiped.
// 0 lost, 0 early; exactly once: no duplicate (the observer reads
// read_committed); at least once: every duplicate was in flight at one of
// the faults. The lateness figures go to the test report.
//
// First, a fourth process started on relay-a's data directory must refuse
// to start (one relay per data directory) and leave relay-a unharmed.
func TestBounce(t *testing.T) {
	t.Parallel()
	for _, mode := range deliveryModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := modeScenario(t, "bounce", mode, 2)
			target := s.target("orders")
			names := []string{"relay-a", "relay-b", "relay-c"}
			dirs := make([]string, len(names))
			relays := make([]*relayProc, len(names))
			for i, n := range names {
				dirs[i] = t.TempDir()
				relays[i] = s.namedRelay(n, dirs[i])
			}

			twin := launchRelay(t, "relay-a-twin", s.vars, dirs[0], 1)
			waitFor(t, 30*time.Second, "the second relay on relay-a's data directory exits", twin.exited)
			if twin.code == 0 || !strings.Contains(twin.logText(), "is in use by") {
				twin.dumpLog(20)
				t.Fatalf("a second relay on a data directory in use: exit code %d, want non-zero with 'is in use by' in its log", twin.code)
			}
			relays[0].checkAlive()

			var keys []string
			var faults []fault
			const rounds = 4
			for round := range rounds {
				prefix := fmt.Sprintf("r%d", round)
				s.sendSpread(prefix, target, spread(800, 500*time.Millisecond, 10*time.Second), 25, 250*time.Millisecond)
				keys = append(keys, s.sentKeys(prefix+"-")...)
				i := round % len(relays)
				wipe := round%2 == 1
				what := "SIGTERM"
				if round%2 == 0 {
					what = "kill -9"
					relays[i].kill()
				} else {
					relays[i].stop()
				}
				if wipe {
					what += ", data directory wiped"
					if err := os.RemoveAll(dirs[i]); err != nil {
						t.Fatal(err)
					}
				}
				faults = append(faults, s.faultNow(t, what+" of "+names[i]))
				t.Logf("round %d: %s of %s with %d of %d records delivered", round, what, names[i], s.obs.arrived(keys), len(keys))
				relays[i] = s.namedRelay(names[i], dirs[i])
			}
			s.await(keys, s.lastDue(keys).Add(restartReady), relays...)
			f := s.checkFaults(t, "three relays on one host, one bounced every 8 s (kill -9 and SIGTERM, data directory wiped every other time)", keys, faults...)
			t.Logf("lateness %s: ts-due p50 %s p99 %s; arrival-due p50 %s p99 %s", mode,
				pct(f.late, 0.50), pct(f.late, 0.99), pct(f.arrive, 0.50), pct(f.arrive, 0.99))
			for _, r := range relays {
				r.stop()
			}
		})
	}
}
