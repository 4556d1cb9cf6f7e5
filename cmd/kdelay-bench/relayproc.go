package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/relay"
)

// relayProc is one running relay: a `kdelay run` child process, or a
// relay.Relay in this process. Both serve /metrics and /readyz on addr.
type relayProc struct {
	addr    string
	started time.Time

	cmd     *exec.Cmd // exec mode
	logFile *os.File

	peakAnon, peakFile atomic.Int64 // sampled RssAnon and RssFile maxima, exec mode

	cancel context.CancelFunc // inproc mode
	done   chan error
	srv    *http.Server
}

// relayEnv is the relay's configuration as KDELAY_* variables.
type relayEnv map[string]string

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// buildKdelay builds ./cmd/kdelay of this module into dir.
func buildKdelay(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the kdelay module; give --kdelay")
	}
	bin := filepath.Join(dir, "kdelay")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kdelay")
	cmd.Dir = filepath.Dir(gomod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/kdelay: %w\n%s", err, b)
	}
	return bin, nil
}

// goRuntimeVars are the variables of the environment that change the Go
// runtime of the relay child (its memory in particular).
var goRuntimeVars = []string{"GOMEMLIMIT", "GOGC", "GODEBUG", "GOMAXPROCS"}

// relayGoEnv lists the Go runtime variables set in this process's
// environment, which the relay child inherits ("GOMEMLIMIT=64MiB"); empty:
// none.
func relayGoEnv() string {
	var set []string
	for _, k := range goRuntimeVars {
		if v, ok := os.LookupEnv(k); ok {
			set = append(set, k+"="+v)
		}
	}
	return strings.Join(set, " ")
}

// startRelay starts a relay with env and waits until it is ready (in its
// group, first assignment taken up).
func (b *bench) startRelay(ctx context.Context, name string, env relayEnv) (*relayProc, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	full := relayEnv{
		"KDELAY_BROKERS":          b.brokers,
		"KDELAY_HTTP_ADDR":        addr,
		"KDELAY_LOG_LEVEL":        "info",
		"KDELAY_LOG_FORMAT":       "text",
		"KDELAY_SHUTDOWN_TIMEOUT": "30s",
	}
	if b.o.wheelSync != "" {
		full["KDELAY_WHEEL_SYNC"] = b.o.wheelSync
	}
	for k, v := range env {
		full[k] = v
	}
	logPath := filepath.Join(b.o.out, "relay-"+name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	p := &relayProc{addr: addr, logFile: lf, started: time.Now()}
	if b.o.relayMode == "exec" {
		cmd := exec.Command(b.kdelayBin, "run")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, config.Prefix) {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		for k, v := range full {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Stdout, cmd.Stderr = lf, lf
		if err := cmd.Start(); err != nil {
			lf.Close()
			return nil, fmt.Errorf("start %s run: %w", b.kdelayBin, err)
		}
		p.cmd = cmd
		p.done = make(chan error, 1)
		exited := make(chan struct{})
		go func() {
			err := cmd.Wait()
			close(exited)
			p.done <- err
		}()
		go p.sample(exited)
	} else {
		cfg, err := config.Load(full)
		if err != nil {
			lf.Close()
			return nil, err
		}
		reg := prometheus.NewRegistry()
		log := slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		r, err := relay.New(relay.Options{Config: cfg, Log: log, Registry: reg})
		if err != nil {
			lf.Close()
			return nil, err
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			lf.Close()
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !r.Ready() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go p.srv.Serve(ln)
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		p.cancel = cancel
		p.done = make(chan error, 1)
		go func() { p.done <- r.Run(rctx) }()
	}
	if err := p.waitReady(ctx, 60*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("relay %s: %w (log: %s)", name, err, logPath)
	}
	return p, nil
}

func (p *relayProc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("exited before ready: %v", err)
		default:
		}
		resp, err := http.Get("http://" + p.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %s", timeout)
}

// stop sends SIGTERM (or cancels the in-process relay) and waits for the
// exit; it returns how long the shutdown took.
func (p *relayProc) stop() (time.Duration, error) {
	start := time.Now()
	var err error
	if p.cmd != nil {
		p.cmd.Process.Signal(syscall.SIGTERM)
	} else {
		p.cancel()
	}
	select {
	case err = <-p.done:
	case <-time.After(60 * time.Second):
		if p.cmd != nil {
			p.cmd.Process.Kill()
		}
		err = errors.New("relay did not stop within 60s")
	}
	if p.srv != nil {
		p.srv.Close()
	}
	p.logFile.Close()
	return time.Since(start), err
}

// sample records the maxima of RssAnon (the heap, stacks: the relay's own
// memory) and RssFile (mapped files: the wheel's segments, reclaimable page
// cache) every 50ms until the child exits. VmHWM is their peak sum.
func (p *relayProc) sample(exited <-chan struct{}) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-exited:
			return
		case <-t.C:
		}
		if v := p.procStatus("RssAnon:"); v > p.peakAnon.Load() {
			p.peakAnon.Store(v)
		}
		if v := p.procStatus("RssFile:"); v > p.peakFile.Load() {
			p.peakFile.Store(v)
		}
	}
}

// peakRSS is the child's VmHWM in bytes; 0 for an in-process relay.
func (p *relayProc) peakRSS() int64 { return p.procStatus("VmHWM:") }

// rss is the child's current VmRSS in bytes.
func (p *relayProc) rss() int64 { return p.procStatus("VmRSS:") }

func (p *relayProc) procStatus(field string) int64 {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// metrics scrapes /metrics and returns each sample by its name with labels
// as printed ("name{a=\"b\"}"), and by its bare name summed over labels.
func (p *relayProc) metrics() (map[string]float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body)
}

// cpuSeconds is the relay's process_cpu_seconds_total (user and system,
// every thread, since its start); ok is false without it (in process: the
// relay's registry has no process collector, its CPU is not its own).
func (p *relayProc) cpuSeconds() (float64, bool) {
	m, err := p.metrics()
	if err != nil {
		return 0, false
	}
	v, ok := m["process_cpu_seconds_total"]
	return v, ok
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := make(map[string]float64)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		full := line[:i]
		out[full] = v
		if j := strings.IndexByte(full, '{'); j >= 0 {
			out[full[:j]] += v
		}
	}
	return out, sc.Err()
}

// sumWhere sums the samples of name whose labels contain sub.
func sumWhere(m map[string]float64, name, sub string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, name+"{") && strings.Contains(k, sub) {
			s += v
		}
	}
	return s
}
