package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium returns Debian's chromium (or KDELAY_TEST_CHROMIUM). The
// browser test runs only with KDELAY_TEST_BROWSER=1 (CI's console step
// sets it and installs chromium); asked for, it fails when chromium is
// missing rather than skipping.
func chromium(t *testing.T) string {
	t.Helper()
	if os.Getenv("KDELAY_TEST_BROWSER") != "1" {
		t.Skip("the browser test runs with KDELAY_TEST_BROWSER=1 (CI's console step); it needs chromium")
	}
	if p := os.Getenv("KDELAY_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("KDELAY_TEST_BROWSER=1 but chromium is not installed (apt-get install -y chromium)")
	return ""
}

// consoleAddr waits for the console's log line and returns its address.
func (s *started) consoleAddr(t *testing.T) string {
	t.Helper()
	var addr string
	s.stderr.waitFor(t, 30*time.Second, "the console log line", func(out string) bool {
		for line := range strings.SplitSeq(out, "\n") {
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "console listening" {
				addr = l.Addr
				return true
			}
		}
		return false
	})
	return addr
}

// TestConsoleInBrowser: a real browser (headless chromium) loads the
// console's page, filters the schedules by id, clicks cancel (with the
// token entered in the page), and the cancelled record never arrives,
// while its twin, due at the same time, does.
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	cluster, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 5s 10s", "KDELAY_LOG_LEVEL", "info", "KDELAY_CONSOLE_TOKEN", "tok-123")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	_, adm := admin(t, addr)
	if _, err := adm.CreateTopic(t.Context(), 1, -1, nil, "out"); err != nil {
		t.Fatal(err)
	}
	deliveries := collect(t, addr, "out")
	start(t, env, "run")
	con := start(t, env, "console", "--addr", "127.0.0.1:0")
	url := "http://" + con.consoleAddr(t) + "/"
	for _, id := range []string{"keep", "gone"} {
		mustCode(t, kdelay(t, t.Context(), env, nil, "send", "--target", "out", "--delay", "20s", "--id", id, "--key", "k-"+id, "--value", "v"), exitOK)
	}
	sent := time.Now()

	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1100),
	)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx)
	defer cancelCtx()
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelT()

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("browser: %s: %v\nconsole stderr:\n%s", what, err, con.stderr)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("browser: text of %s: %v", sel, err)
		}
		return v
	}
	step("load the page", chromedp.Navigate(url),
		chromedp.WaitVisible(css(`#schedules tbody tr[data-id="gone"]`)),
		chromedp.WaitVisible(css(`#levels tbody tr`)))
	step("enter the token", chromedp.SendKeys(css(`#token`), "tok-123"), chromedp.Click(css(`#token-save`)))
	step("filter by id", chromedp.SendKeys(css(`#f-id`), "gone"), chromedp.Click(css(`#filter-apply`)),
		chromedp.WaitNotPresent(css(`#schedules tbody tr[data-id="keep"]`)))
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#schedules tbody tr").length`))
	if err != nil {
		t.Fatal(err)
	}
	health, state := text(`#health`), text(`#schedules tbody tr[data-id="gone"] .badge`)
	step("click cancel twice", chromedp.Click(css(`button[data-cancel="gone"]`)),
		chromedp.WaitVisible(css(`button[data-cancel="gone"].confirm`)),
		chromedp.Click(css(`button[data-cancel="gone"]`)),
		chromedp.WaitVisible(css(`button[data-cancelled="true"]`)))
	after := text(`#toast`)
	// The page as it reloads the filtered table: the row shows cancelled.
	step("the row turns cancelled", chromedp.Click(css(`#filter-reset`)),
		chromedp.WaitNotPresent(css(`#schedules tbody tr[data-id="gone"]`)))
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	cancelledAt := time.Since(sent)
	if rows != 1 || state != "waiting" || health != "live" || !strings.Contains(after, "Cancelled gone") {
		t.Errorf("page: %d rows after the id filter, state %q, health %q, toast %q", rows, state, health, after)
	}
	if p := os.Getenv("KDELAY_TEST_BROWSER_SHOT"); p != "" {
		if err := os.WriteFile(filepath.Clean(p), shot, 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Logf("cancelled in the browser %s after the send (due 20s after it)", cancelledAt.Round(time.Millisecond))

	// keep arrives at its due time; gone never does (nor within 2s after).
	deadline := time.After(40 * time.Second)
	var keepAt time.Time
	for keepAt.IsZero() || time.Since(keepAt) < 2*time.Second {
		select {
		case d := <-deliveries:
			switch d.key {
			case "k-keep":
				keepAt = time.Now()
			case "k-gone":
				t.Fatalf("the record cancelled in the browser arrived (due %s)", d.due)
			}
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("k-keep not delivered within 40s; relay and console logs:\n%s", con.stderr)
		}
	}

	// The brokers go away: the page says so.
	cluster.Close()
	step("the brokers-away banner", chromedp.WaitVisible(css(`#banner`)))
	if b := text(`#banner`); !strings.Contains(b, "Kafka does not answer") || text(`#health`) != "brokers away" {
		t.Errorf("banner %q, health %q", b, text(`#health`))
	}
}
