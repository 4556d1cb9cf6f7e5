package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdelay/kdelay/relay"
)

// childEnv is the environment of a kdelay child: this process's
// environment without any KDELAY_* variable (so a developer's settings do
// not leak into a scenario), plus vars. A race-enabled child stops at its
// first data race with exit code 66.
func childEnv(vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KDELAY_") || strings.HasPrefix(kv, "GORACE=") {
			continue
		}
		env = append(env, kv)
	}
	if suite.race {
		env = append(env, "GORACE=halt_on_error=1 exitcode=66")
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// cliResult is the outcome of a short kdelay command.
type cliResult struct {
	code           int
	stdout, stderr string
}

// kdelayCLI runs `kdelay args...` with vars as its KDELAY_* environment and
// waits for it (at most a minute).
func kdelayCLI(t *testing.T, vars map[string]string, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.bin, args...)
	cmd.Env = childEnv(vars)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	if err != nil && res.code <= 0 {
		t.Fatalf("kdelay %s: %v\nstderr:\n%s", strings.Join(args, " "), err, res.stderr)
	}
	return res
}

// statusJSON is the part of `kdelay status --json` the tests read.
type statusJSON struct {
	Lag         int64 `json:"lag"`
	DeadLetters int64 `json:"dead_letters"`
}

// kdelayStatus runs `kdelay status --json`.
func kdelayStatus(t *testing.T, vars map[string]string) statusJSON {
	t.Helper()
	res := kdelayCLI(t, vars, nil, "status", "--json")
	var st statusJSON
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || res.code != 0 {
		t.Fatalf("kdelay status --json: exit %d, %v\nstdout:\n%s\nstderr:\n%s", res.code, err, res.stdout, res.stderr)
	}
	return st
}

// relayProc is one `kdelay run` child process.
type relayProc struct {
	t       *testing.T
	name    string
	vars    map[string]string
	dataDir string
	logPath string
	httpURL string

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	code int           // exit code, valid after done
	sig  syscall.Signal
	gone bool // stopped or killed on purpose

	fencedOK bool // an exit with relay.ErrFenced is expected (allowFencedExit)
}

// allowFencedExit accepts, from now on, that the relay stops on its own
// with relay.ErrFenced (exit code 1, the error in its log): what an
// exactly-once relay does when its producer cannot recover from a fence,
// so that its supervisor starts it again. Any other exit still fails the
// test.
func (p *relayProc) allowFencedExit() { p.fencedOK = true }

// fencedExit reports whether the relay exited with relay.ErrFenced and
// allowFencedExit accepts that.
func (p *relayProc) fencedExit() bool {
	return p.fencedOK && p.exited() && p.code == 1 && strings.Contains(p.logText(), relay.ErrFenced.Error())
}

// freePort returns a port that nothing listened on a moment ago. A child
// that loses the race to another process fails its listen at once, and
// startRelay retries with another port.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startRelay starts `kdelay run` with vars plus its own data directory (an
// empty dataDir: a new one), HTTP port and log file, and waits until
// /readyz answers 200 (at most readyTimeout).
func startRelay(t *testing.T, name string, vars map[string]string, dataDir string, readyTimeout time.Duration) *relayProc {
	t.Helper()
	if dataDir == "" {
		dataDir = filepath.Join(t.TempDir(), name+"-data")
	}
	for attempt := 1; ; attempt++ {
		p := launchRelay(t, name, vars, dataDir, attempt)
		err := p.waitReady(readyTimeout)
		if err == nil {
			return p
		}
		if attempt < 3 && p.exited() && strings.Contains(p.logText(), "address already in use") {
			t.Logf("%s: HTTP port taken by another process; retrying on another port", name)
			continue
		}
		p.dumpLog(60)
		t.Fatalf("%s: %v", name, err)
	}
}

func launchRelay(t *testing.T, name string, vars map[string]string, dataDir string, attempt int) *relayProc {
	t.Helper()
	port := freePort(t)
	env := maps.Clone(vars)
	env["KDELAY_DATA_DIR"] = dataDir
	env["KDELAY_HTTP_ADDR"] = fmt.Sprintf("127.0.0.1:%d", port)
	env["KDELAY_LOG_FORMAT"] = "json"
	if _, ok := env["KDELAY_FETCH_MAX_WAIT"]; !ok {
		env["KDELAY_FETCH_MAX_WAIT"] = "50ms"
	}
	logDir := t.TempDir()
	if dir := os.Getenv(envLogs); dir != "" {
		logDir = filepath.Join(dir, t.Name())
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := &relayProc{
		t: t, name: name, vars: vars, dataDir: dataDir,
		logPath: filepath.Join(logDir, fmt.Sprintf("%s-%d.log", name, attempt)),
		httpURL: fmt.Sprintf("http://127.0.0.1:%d", port),
		done:    make(chan struct{}),
	}
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(suite.bin, "run")
	p.cmd.Env = childEnv(env)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		logf.Close()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.sig = ws.Signal()
		}
		close(p.done)
	}()
	t.Logf("%s: started pid %d, data %s, http %s, log %s", name, p.cmd.Process.Pid, dataDir, p.httpURL, p.logPath)
	// Registered after t.TempDir, so it runs before the log is removed.
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
			if !t.Failed() {
				t.Errorf("%s: still running at the end of the test (killed)", name)
			}
		}
		if strings.Contains(p.logText(), "WARNING: DATA RACE") {
			t.Errorf("%s: data race in the kdelay child", name)
			p.dumpLog(200)
			return
		}
		if t.Failed() {
			p.dumpGroupStory(80)
			p.dumpLog(40)
		}
	})
	return p
}

func (p *relayProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady polls GET /readyz until it answers 200.
func (p *relayProc) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	start := time.Now()
	last := "no answer"
	for {
		if p.exited() {
			return fmt.Errorf("exited with code %d before it was ready (last /readyz: %s)", p.code, last)
		}
		resp, err := client.Get(p.httpURL + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.t.Logf("%s: ready after %s", p.name, time.Since(start).Round(time.Millisecond))
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s (last /readyz: %s)", timeout, last)
		}
		select {
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and expects a clean exit (code 0) within the
// shutdown timeout plus its grace.
func (p *relayProc) stop() {
	p.t.Helper()
	p.gone = true
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("%s: SIGTERM: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.dumpLog(40)
		p.t.Fatalf("%s: did not exit within 40s of SIGTERM", p.name)
	}
	if p.fencedExit() {
		p.t.Logf("%s: had stopped on its own, fenced (exit 1)", p.name)
		return
	}
	if p.code != 0 {
		p.dumpLog(40)
		p.t.Fatalf("%s: exit code %d after SIGTERM, want 0", p.name, p.code)
	}
	p.t.Logf("%s: stopped by SIGTERM in %s, exit 0", p.name, time.Since(start).Round(time.Millisecond))
}

// kill sends SIGKILL (a crash: no shutdown at all) and waits for the exit.
func (p *relayProc) kill() {
	p.t.Helper()
	p.gone = true
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("%s: SIGKILL: %v", p.name, err)
	}
	<-p.done
	p.t.Logf("%s: killed (SIGKILL), signal %v", p.name, p.sig)
}

// checkAlive fails the test if the relay exited on its own.
func (p *relayProc) checkAlive() {
	p.t.Helper()
	if p.exited() && !p.gone {
		if p.fencedExit() {
			p.gone = true
			p.t.Logf("%s: stopped on its own, fenced (exit 1, for its supervisor to start it again)", p.name)
			return
		}
		p.dumpLog(60)
		p.t.Fatalf("%s: exited on its own with code %d", p.name, p.code)
	}
}

func (p *relayProc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// groupStory is what dumpGroupStory keeps of a child's log: its group
// membership and what it owned when (a duplicate forwarded by a relay
// that did not own its partition any more shows there, where the last
// lines have long scrolled past it).
var groupStory = []string{
	`"partition assigned"`, `"partitions revoked"`, `"partitions lost"`,
	`"joined"`, `"synced"`, `stood still`, `membership`, `"commit failed"`,
}

// dumpGroupStory logs up to the last n lines of the child's log that tell
// its group membership (groupStory), each cut to 300 bytes.
func (p *relayProc) dumpGroupStory(n int) {
	var story []string
	for line := range strings.Lines(p.logText()) {
		for _, k := range groupStory {
			if strings.Contains(line, k) {
				story = append(story, strings.TrimRight(line[:min(len(line), 300)], "\n"))
				break
			}
		}
	}
	if len(story) > n {
		story = story[len(story)-n:]
	}
	p.t.Logf("%s: group membership, %d lines of %s:\n%s", p.name, len(story), p.logPath, strings.Join(story, "\n"))
}

// dumpLog logs the last n lines of the child's stderr.
func (p *relayProc) dumpLog(n int) {
	lines := strings.Split(strings.TrimRight(p.logText(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	p.t.Logf("%s: last %d lines of %s:\n%s", p.name, len(lines), p.logPath, strings.Join(lines, "\n"))
}

// metric returns the sum of every series of the named metric on the
// child's /metrics, or -1 when it cannot be read.
func (p *relayProc) metric(name string) float64 {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(p.httpURL + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		// "name{labels} value [timestamp]": labels contain no spaces here.
		if v, err := strconv.ParseFloat(fields[1], 64); err == nil {
			sum += v
			found = true
		}
	}
	if !found {
		return 0
	}
	return sum
}

// logLines returns the child's JSON log lines that contain every one of
// the substrings.
func (p *relayProc) logLines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(p.logText(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}
