package integration

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kdelay/kdelay/levels"
)

// Recurring series on the real broker, written by kcat as a producer
// that knows nothing of kdelay but its headers would write them.

// kcatSeries writes one series record with kcat to partition 0 of the
// delay topic (the partition is a hint; the relay reads the headers).
func (s *scenario) kcatSeries(key string, kv ...string) {
	s.t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		skipOrFailInCI(s.t, "kcat not on PATH: the series tests write their records with it (Debian: apt-get install -y kcat)")
	}
	args := []string{"-P", "-b", strings.Join(s.seeds, ","), "-t", s.topic, "-p", "0", "-K", "\t", "-H", "x-producer=kcat"}
	for i := 0; i+1 < len(kv); i += 2 {
		args = append(args, "-H", kv[i]+"="+kv[i+1])
	}
	cmd := exec.Command(kcat, args...)
	cmd.Stdin = strings.NewReader(key + "\tvalue-" + key + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// firing is one forwarded copy of a series.
type firing struct {
	due, produced, seen time.Time
	occurrence          int
}

func (s *scenario) firings(key string) []firing {
	var out []firing
	for _, a := range s.obs.arrivals(key) {
		f := firing{due: a.due, produced: a.ts, seen: a.at}
		for _, h := range a.headers {
			if h.Key == levels.HeaderOccurrence {
				f.occurrence, _ = strconv.Atoi(string(h.Value))
			}
		}
		out = append(out, f)
	}
	return out
}

// waitFirings waits until key has n firings (or a firing numbered n when
// byNumber), failing after timeout.
func (s *scenario) waitFirings(key string, n int, byNumber bool, timeout time.Duration, relays ...*relayProc) []firing {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		fs := s.firings(key)
		if !byNumber && len(fs) >= n || byNumber && slices.ContainsFunc(fs, func(f firing) bool { return f.occurrence >= n }) {
			return fs
		}
		for _, p := range relays {
			p.checkAlive()
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("series %s: %d firings within %s, want %d: %s", key, len(fs), timeout, n, fmtFirings(fs))
		}
		time.Sleep(20 * time.Millisecond) // polling the observer
	}
}

func fmtFirings(fs []firing) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "#%d due %s (+%s) ", f.occurrence, f.due.UTC().Format("15:04:05.000"), f.produced.Sub(f.due).Round(time.Millisecond))
	}
	return b.String()
}

// checkSeries checks a series' firings: never early (the relay's produce
// timestamp and the observer's clock), each occurrence once (due times
// and numbers strictly increasing by arrival), on the grid start + n ×
// step, numbered 1, 2, ... Late is the largest lateness of the produce.
func checkSeries(t *testing.T, key string, fs []firing, start time.Time, step time.Duration) (late time.Duration) {
	t.Helper()
	for i, f := range fs {
		if f.produced.Before(f.due) || f.seen.Before(f.due) {
			t.Errorf("%s: firing #%d due %s forwarded early (produced %s)", key, f.occurrence, f.due.UTC(), f.produced.UTC())
		}
		if off := f.due.Sub(start); off < 0 || off%step != 0 {
			t.Errorf("%s: firing #%d due %s off the grid %s + n × %s", key, f.occurrence, f.due.UTC(), start.UTC(), step)
		}
		if i > 0 && (!f.due.After(fs[i-1].due) || f.occurrence != fs[i-1].occurrence+1) {
			t.Errorf("%s: firing %d (#%d due %s) after #%d due %s: a duplicate or a fork", key, i, f.occurrence, f.due.UTC(), fs[i-1].occurrence, fs[i-1].due.UTC())
		}
		late = max(late, f.produced.Sub(f.due))
	}
	if len(fs) > 0 && fs[0].occurrence != 1 {
		t.Errorf("%s: first firing numbered %d", key, fs[0].occurrence)
	}
	return late
}

// TestSeries: one relay, three series written by kcat: every 2 s five
// times from a given start (on its grid, never early), a six-field cron
// every third second four times (on its seconds), and an every 1 s series
// stopped by `kdelay cancel` (no firing once the cancel is acknowledged
// and the margin passed).
func TestSeries(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "series", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 3}})
	relay := s.startRelay("", 90*time.Second)
	target := s.target("orders")
	start := time.Now().Add(3 * time.Second).Truncate(time.Second)
	s.kcatSeries("every", levels.HeaderTarget, target, levels.HeaderID, "every-2s", levels.HeaderEvery, "2s",
		levels.HeaderDeliverAt, strconv.FormatInt(start.UnixMilli(), 10), levels.HeaderCount, "5")
	s.kcatSeries("cron", levels.HeaderTarget, target, levels.HeaderID, "cron-3s", levels.HeaderCron, "*/3 * * * * *", levels.HeaderCount, "4")
	s.kcatSeries("cancel", levels.HeaderTarget, target, levels.HeaderID, "cancel-me", levels.HeaderEvery, "1s")

	s.waitFirings("cancel", 2, false, time.Minute, relay)
	res := kdelayCLI(t, s.vars, nil, "cancel", "--id", "cancel-me")
	if res.code != 0 {
		t.Fatalf("kdelay cancel: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	cancelled := time.Now()

	s.waitFirings("every", 5, false, time.Minute, relay)
	s.waitFirings("cron", 4, false, time.Minute, relay)
	// One more period of each, to see that nothing fires beyond count.
	time.Sleep(3 * time.Second) // waiting for what must not happen
	every, cron := s.firings("every"), s.firings("cron")
	if len(every) != 5 || len(cron) != 4 {
		t.Errorf("firings: every %d (want 5), cron %d (want 4)", len(every), len(cron))
	}
	late := checkSeries(t, "every", every, start, 2*time.Second)
	if len(every) > 0 && !every[0].due.Equal(start) {
		t.Errorf("every: first firing due %s, want %s", every[0].due.UTC(), start.UTC())
	}
	t.Logf("every 2s: %s", fmtFirings(every))
	if len(cron) > 0 {
		late = max(late, checkSeries(t, "cron", cron, cron[0].due, 3*time.Second))
		if cron[0].due.UnixMilli()%3000 != 0 {
			t.Errorf("cron: first firing due %s, not on a third second", cron[0].due.UTC())
		}
	}
	t.Logf("cron */3 s: %s", fmtFirings(cron))
	stopped := s.firings("cancel")
	checkSeries(t, "cancel", stopped, stopped[0].due, time.Second)
	for _, f := range stopped {
		if f.produced.After(cancelled.Add(time.Second)) {
			t.Errorf("cancelled series fired #%d (due %s) %s after the cancel was acknowledged", f.occurrence, f.due.UTC(), f.produced.Sub(cancelled))
		}
	}
	t.Logf("cancelled series: %d firings before the cancel: %s", len(stopped), fmtFirings(stopped))
	t.Logf("largest lateness of a firing (relay's produce timestamp): %s", late.Round(time.Millisecond))
	if n := relay.metric("kdelay_records_cancelled_total"); n < 1 {
		t.Errorf("kdelay_records_cancelled_total = %v, want the series' next occurrence", n)
	}
	relay.stop()
}

// TestSeriesCatchUp: a relay stopped for several periods of an every 2 s
// series; the next relay fires it once for the latest occurrence it
// missed, then goes on on the grid.
func TestSeriesCatchUp(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "catchup", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 1}})
	r1 := s.startRelay("", 90*time.Second)
	start := time.Now().Add(2 * time.Second).Truncate(time.Second)
	s.kcatSeries("s", levels.HeaderTarget, s.target("orders"), levels.HeaderID, "catch-up", levels.HeaderEvery, "2s",
		levels.HeaderDeliverAt, strconv.FormatInt(start.UnixMilli(), 10))
	s.waitFirings("s", 1, false, time.Minute, r1)
	r1.stop()
	down := time.Now()
	time.Sleep(9 * time.Second) // the downtime: four or five occurrences pass
	r2 := s.startRelay(r1.dataDir, 90*time.Second)
	up := time.Now()
	fs := s.waitFirings("s", 4, false, time.Minute, r2)
	r2.stop()
	checkSeries(t, "s", fs, start, 2*time.Second)
	missed := int(fs[1].due.Sub(fs[0].due)/(2*time.Second)) - 1
	t.Logf("stopped %s, restarted %s later: %s", down.Format("15:04:05.000"), up.Sub(down).Round(time.Millisecond), fmtFirings(fs))
	if missed < 3 {
		t.Errorf("the second firing is due %s: only %d occurrences missed during %s down", fs[1].due.UTC(), missed, up.Sub(down))
	}
	// Once for what was missed: the latest occurrence before the restart
	// (its firing may be read a little after ready), then the grid.
	if fs[1].due.After(up) || up.Sub(fs[1].due) > 2*time.Second+time.Second {
		t.Errorf("catch-up firing due %s; the relay was back at %s", fs[1].due.UTC(), up.UTC())
	}
	for _, f := range fs[2:] {
		if f.due.Before(up) {
			t.Errorf("a second catch-up firing, due %s before the restart at %s: a catch-up storm", f.due.UTC(), up.UTC())
		}
	}
}

// TestSeriesExactlyOnceKill9: exactly-once mode, an every 2 s series of
// ten firings; the relay is killed with SIGKILL after two firings and
// restarted on its data directory, killed again after two more and
// restarted on an empty one. A read_committed consumer sees each
// occurrence it fired once, on the grid, numbered without a gap or a
// repeat, to the tenth (occurrences passed while no relay ran are
// skipped by the catch-up rule: their numbers go to the next firing).
func TestSeriesExactlyOnceKill9(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "serieseos", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 3},
		vars: map[string]string{"KDELAY_DELIVERY": "exactly-once", "KDELAY_INSTANCE_ID": "series-0"}})
	r1 := s.startRelay("", 90*time.Second)
	start := time.Now().Add(2 * time.Second).Truncate(time.Second)
	s.kcatSeries("eos", levels.HeaderTarget, s.target("orders"), levels.HeaderID, "eos-series", levels.HeaderEvery, "2s",
		levels.HeaderDeliverAt, strconv.FormatInt(start.UnixMilli(), 10), levels.HeaderCount, "10")
	s.waitFirings("eos", 2, false, time.Minute, r1)
	r1.kill()
	r2 := s.startRelay(r1.dataDir, restartReady)
	s.waitFirings("eos", 4, false, time.Minute, r2)
	r2.kill()
	r3 := s.startRelay("", restartReady) // the data directory lost
	s.waitFirings("eos", 10, true, 2*time.Minute, r3)
	time.Sleep(3 * time.Second) // waiting for what must not happen: an eleventh firing or a late duplicate
	fs := s.firings("eos")
	r3.stop()
	t.Logf("exactly-once through two kill -9 (one with the data directory lost): %s", fmtFirings(fs))
	checkSeries(t, "eos", fs, start, 2*time.Second)
	if n := len(fs); n == 0 || fs[n-1].occurrence != 10 {
		t.Errorf("the series ended at firing %d, want 10", fs[max(n-1, 0)].occurrence)
	}
}
