package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestQuick runs the bench in --quick mode against kfake with the relay in
// process, so that the tool cannot rot. It checks that every scenario
// delivers everything, never early, and that the outputs are written.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bench for a few seconds")
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := []string{"--quick", "--relay", "inproc", "--out", out, "--progress=false",
		"--scenarios", "baseline,level,wheel,duerate,recovery",
		"--records", "1000", "--recovery-records", "3000", "--recovery-lead", "3s", "--due-rate", "500", "--due-seconds", "2"}
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	var res results
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	got := map[string]*result{}
	for _, r := range res.Results {
		got[r.Scenario] = r
		t.Logf("%s: %.1fs", r.name(), r.WallSeconds)
		if r.Early != 0 || r.Duplicates != 0 {
			t.Errorf("%s: %d early, %d duplicates", r.name(), r.Early, r.Duplicates)
		}
		if r.Scenario != "recovery" && r.Delivered != r.Records {
			t.Errorf("%s: delivered %d of %d", r.name(), r.Delivered, r.Records)
		}
	}
	for _, s := range []string{"baseline", "level", "wheel", "duerate", "recovery"} {
		if got[s] == nil {
			t.Errorf("no result for %s", s)
		}
	}
	if w := got["wheel"]; w != nil && w.ViaWheel != w.Records {
		t.Errorf("wheel: %d of %d forwarded via the wheel", w.ViaWheel, w.Records)
	}
	if rc := got["recovery"]; rc != nil && (rc.Recovery == nil || rc.Recovery.PendingAtStop != 3000 || rc.Delivered == 0) {
		t.Errorf("recovery: %+v, %d delivered", rc.Recovery, rc.Delivered)
	}
	for _, f := range []string{"results.md", "lateness-cdf.svg"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(stdout.String(), "| level 100B |") {
		t.Errorf("markdown table missing the level row:\n%s", stdout.String())
	}
}
