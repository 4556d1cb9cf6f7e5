package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// TestConsoleBench measures the console and `kdelay schedules get` over
// N pending records (KDELAY_TEST_CONSOLE_BENCH=N, e.g. 1000000; off by
// default: it is a benchmark, not a check) of 100 bytes, spread over the
// default levels with delays of 1 minute to 2 hours, no relay running.
// It logs: the console's cold start to a complete index, its RSS, the
// latency of GET /schedules/{id} and of the first page of what is due
// next, how soon a cancel shows, and the time of `kdelay schedules get`.
func TestConsoleBench(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KDELAY_TEST_CONSOLE_BENCH"))
	if n <= 0 {
		t.Skip("a benchmark: KDELAY_TEST_CONSOLE_BENCH=<records> runs it (docs/benchmarks.md)")
	}
	s := newScenario(t, "cbench", scenarioOpts{targets: map[string]int32{"orders": 1}})
	target := s.target("orders")
	tab := s.tab
	value := []byte(strings.Repeat("x", 100))
	now := time.Now()
	begin := time.Now()
	var batch []*kgo.Record
	flush := func() {
		if err := s.cl.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range n {
		r := &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: value}
		d := time.Minute + time.Duration(rand.Int64N(int64(2*time.Hour-time.Minute)))
		if err := tab.Stamp(r, s.topic, levels.Delay{Target: target, Delay: d, ID: "id-" + strconv.Itoa(i)}, now); err != nil {
			t.Fatal(err)
		}
		batch = append(batch, r)
		if len(batch) == 10000 {
			flush()
		}
	}
	flush()
	t.Logf("produced %d records in %s", n, time.Since(begin).Round(time.Millisecond))

	// Cold start to a complete index.
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(suite.bin, "console", "--addr", addr)
	cmd.Env = childEnv(s.withVars("KDELAY_CONSOLE_TOKEN", "tok", "KDELAY_LOG_LEVEL", "warn"))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "http://" + addr
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatal("console not ready within 5 minutes")
		}
		time.Sleep(20 * time.Millisecond) // polling the child's probe
	}
	cold := time.Since(start)
	rss := func() string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "VmHWM") {
				out = append(out, strings.Join(strings.Fields(l), " "))
			}
		}
		return strings.Join(out, ", ")
	}
	t.Logf("console: complete index of %d records %s after the start; %s", n, cold.Round(time.Millisecond), rss())

	timeGet := func(path string) time.Duration {
		t0 := time.Now()
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return time.Since(t0)
	}
	pct := func(ds []time.Duration) string {
		slices.Sort(ds)
		return fmt.Sprintf("p50 %s, p99 %s, max %s (%d requests)", ds[len(ds)/2].Round(10*time.Microsecond),
			ds[len(ds)*99/100].Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond), len(ds))
	}
	var byID, page, due []time.Duration
	for range 1000 {
		byID = append(byID, timeGet("/api/v1/schedules/id-"+strconv.Itoa(rand.IntN(n))))
	}
	for range 50 {
		page = append(page, timeGet("/api/v1/schedules?limit=100"))
	}
	for range 20 {
		due = append(due, timeGet("/api/v1/due?bucket=1m&horizon=2h"))
	}
	t.Logf("GET /api/v1/schedules/{id}: %s", pct(byID))
	t.Logf("GET /api/v1/schedules?limit=100 (next due first): %s", pct(page))
	t.Logf("GET /api/v1/due?bucket=1m&horizon=2h: %s", pct(due))
	t.Logf("console after the queries: %s", rss())

	// A cancel, until the index shows it.
	id := "id-" + strconv.Itoa(rand.IntN(n))
	req, _ := http.NewRequest("DELETE", url+"/api/v1/schedules/"+id, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	resp.Body.Close()
	acked := time.Now()
	for {
		resp, err := http.Get(url + "/api/v1/schedules/" + id)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Schedules []struct{ State string } }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if len(body.Schedules) == 1 && body.Schedules[0].State == "cancelled" {
			break
		}
		if time.Since(acked) > 30*time.Second {
			t.Fatal("the cancel did not show within 30s")
		}
		time.Sleep(5 * time.Millisecond) // polling the console
	}
	t.Logf("a cancel showed in the index %s after its acknowledgement", time.Since(acked).Round(time.Millisecond))

	t0 := time.Now()
	r := kdelayCLI(t, s.vars, nil, "schedules", "get", "id-"+strconv.Itoa(rand.IntN(n)))
	if r.code != 0 {
		t.Fatalf("schedules get: %d %s", r.code, r.stderr)
	}
	t.Logf("kdelay schedules get ID over %d records: %s", n, time.Since(t0).Round(time.Millisecond))
}
