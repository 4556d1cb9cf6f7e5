package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// quickRun is what runQuick gives back: results.json as read back, the
// output directory and what was printed.
type quickRun struct {
	res            results
	out            string
	stdout, stderr string
}

// runQuick runs the bench in --quick mode with the relay in process,
// writing to a temporary directory, with the extra args, within timeout.
func runQuick(t *testing.T, timeout time.Duration, extra ...string) quickRun {
	t.Helper()
	q := quickRun{out: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := append([]string{"--quick", "--relay", "inproc", "--out", q.out, "--progress=false"}, extra...)
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	q.stdout, q.stderr = stdout.String(), stderr.String()
	b, err := os.ReadFile(filepath.Join(q.out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &q.res); err != nil {
		t.Fatal(err)
	}
	return q
}

// TestQuick runs the bench in --quick mode against kfake with the relay in
// process, so that the tool cannot rot. It checks that every scenario
// delivers everything, never early, in both delivery modes, that the
// exactly-once runs are paired with their at-least-once runs, and that the
// outputs (with the goals table) are written.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bench for a few seconds")
	}
	q := runQuick(t, 2*time.Minute,
		"--scenarios", "ceiling,serial,pipelined,direct,level,wheel,duerate,recovery,sustained", "--delivery", "at-least-once,exactly-once",
		"--records", "1000", "--recovery-records", "3000", "--recovery-lead", "3s", "--due-rate", "500", "--due-seconds", "2",
		"--sustained-relays", "1,2", "--sustained-rates", "300", "--sustained-refine", "0")
	got := map[string]*result{}
	var sustained []int // relay counts of the sustained steps
	for _, r := range q.res.Results {
		if r.Sustained != nil {
			sustained = append(sustained, r.Sustained.Relays)
			if r.DueRate != 300 || r.Sustained.OfferedRate == 0 {
				t.Errorf("%s: %+v", r.name(), r.Sustained)
			}
		}
		got[r.Scenario+" "+r.mode()] = r
		if r.Err != "" {
			t.Errorf("%s: %s", r.name(), r.Err)
		}
		// Every exactly-once run has its at-least-once partner of the same
		// round (kfake's LogAppendTime is one per produce request, so the
		// drain rates and their ratios are 0 here: TestPairRatios checks
		// the arithmetic).
		if r.mode() == exactlyOnce && r.Scenario != "duerate" {
			partner := false
			for _, p := range q.res.Results {
				partner = partner || (p.Scenario == r.Scenario && p.mode() == atLeastOnce && p.Size == r.Size && p.Rep == r.Rep && p.Err == "")
			}
			if !partner {
				t.Errorf("%s: no at-least-once run of the same round", r.name())
			}
		}
		t.Logf("%s: %.1fs", r.name(), r.WallSeconds)
		if r.Early != 0 || r.Duplicates != 0 {
			t.Errorf("%s: %d early, %d duplicates", r.name(), r.Early, r.Duplicates)
		}
		if r.Foreign != 0 {
			t.Errorf("%s: %d records the collector did not know (the primer is known)", r.name(), r.Foreign)
		}
		if r.Scenario != "recovery" && r.Delivered != r.Records {
			t.Errorf("%s: delivered %d of %d", r.name(), r.Delivered, r.Records)
		}
	}
	if !slices.Equal(sustained, []int{1, 2}) {
		t.Errorf("sustained steps for relay counts %v, want one each for 1, 2", sustained)
	}
	for _, s := range []string{"ceiling", "serial", "pipelined", "direct", "level", "wheel", "duerate", "recovery", "sustained"} {
		if got[s+" "+atLeastOnce] == nil {
			t.Errorf("no result for %s", s)
		}
	}
	for _, s := range []string{"direct", "level", "wheel", "duerate"} {
		if got[s+" "+exactlyOnce] == nil {
			t.Errorf("no exactly-once result for %s", s)
		}
	}
	for _, mode := range []string{atLeastOnce, exactlyOnce} {
		if w := got["wheel "+mode]; w != nil && w.ViaWheel != w.Records {
			t.Errorf("wheel %s: %d of %d forwarded via the wheel", mode, w.ViaWheel, w.Records)
		}
		// The level path read at its level time: nothing read ahead.
		if d := got["direct "+mode]; d != nil && (d.Direct != d.Records || d.ViaWheel != 0) {
			t.Errorf("direct %s: %d direct, %d via the wheel, of %d", mode, d.Direct, d.ViaWheel, d.Records)
		}
		// Every burst reports its first record's lateness.
		for _, s := range []string{"direct", "level", "wheel"} {
			if r := got[s+" "+mode]; r != nil && r.FirstLatenessMs == nil {
				t.Errorf("%s %s: no first-record lateness", s, mode)
			}
		}
	}
	// The ceiling measures its client's CPU, the reference of the relay's.
	if c := got["ceiling "+atLeastOnce]; c != nil && c.ClientCPUSeconds <= 0 {
		t.Errorf("ceiling: no client CPU measured")
	}
	// Both pipes measure their CPU, the floor under the relay's.
	for _, p := range []string{"serial", "pipelined"} {
		if r := got[p+" "+atLeastOnce]; r != nil && cpuPerRecord(r) <= 0 {
			t.Errorf("%s: no pipe CPU measured", p)
		}
	}
	if rc := got["recovery "+atLeastOnce]; rc != nil && (rc.Recovery == nil || rc.Recovery.PendingAtStop != 3000 || rc.Delivered == 0) {
		t.Errorf("recovery: %+v, %d delivered", rc.Recovery, rc.Delivered)
	}
	for _, f := range []string{"results.md", "lateness-cdf.svg"} {
		b, err := os.ReadFile(filepath.Join(q.out, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, want := range []string{"| level 100B |", "### Sustained due rate", "| 2 | ", "| level 100B exactly-once |", "### Goals: ", "| issue 12 | level 100B exactly-once | "} {
		if !strings.Contains(q.stdout, want) {
			t.Errorf("markdown lacks %q:\n%s", want, q.stdout)
		}
	}
}

// TestQuickWarmup runs a warm-up round before the measured one: its runs
// are printed and not kept. The sampler of --broker-pid (this process as
// the broker) runs beside them; kfake drains too fast for a figure.
func TestQuickWarmup(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bench for a few seconds")
	}
	q := runQuick(t, time.Minute, "--scenarios", "ceiling,level",
		"--records", "1000", "--warmup", "1", "--broker-pid", strconv.Itoa(os.Getpid()))
	var names []string
	for _, r := range q.res.Results {
		names = append(names, r.name())
	}
	if !slices.Equal(names, []string{"ceiling 100B", "level 100B"}) || q.res.Warmup != 1 {
		t.Errorf("kept runs %v, warm-up rounds %d; want the measured ceiling and level only, 1", names, q.res.Warmup)
	}
	for _, want := range []string{"warm-up, not kept: == ceiling 100B", "warm-up, not kept: == level 100B"} {
		if !strings.Contains(q.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, q.stderr)
		}
	}
	if !strings.Contains(q.stdout, "1 warm-up round(s) of the bursts not kept") {
		t.Errorf("the header does not say a warm-up round ran:\n%s", q.stdout)
	}
}
