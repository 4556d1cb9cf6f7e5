package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestRunRefusesBadTopics(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr)

	r := kdelay(t, t.Context(), env, nil, "run")
	mustCode(t, r, exitFailure)
	mustContain(t, "missing topic", r.stderr, "delay topic delay-topic does not exist; create it with `kdelay topic create` (18 partitions: 18 levels x 1)")

	_, adm := admin(t, addr)
	if _, err := adm.CreateTopic(t.Context(), 6, -1, nil, "delay-topic"); err != nil {
		t.Fatal(err)
	}
	r = kdelay(t, t.Context(), env, nil, "run")
	mustCode(t, r, exitFailure)
	mustContain(t, "mis-sized topic", r.stderr, "delay topic delay-topic has 6 partitions, but 18 levels x 1 partitions per level need 18", "`kdelay topic create`")

	// The right delay topic for six levels, but no dead-letter topic.
	r = kdelay(t, t.Context(), env, nil, "run", "--levels", "1s 2s 3s 4s 5s 6s")
	mustCode(t, r, exitFailure)
	mustContain(t, "missing dead-letter topic", r.stderr, "dead-letter topic delay-topic.dlq does not exist; create it with `kdelay topic create`")

	// Both, but no cancel topic.
	if _, err := adm.CreateTopic(t.Context(), 1, -1, nil, "delay-topic.dlq"); err != nil {
		t.Fatal(err)
	}
	r = kdelay(t, t.Context(), env, nil, "run", "--levels", "1s 2s 3s 4s 5s 6s")
	mustCode(t, r, exitFailure)
	mustContain(t, "missing cancel topic", r.stderr, "cancel topic delay-topic.cancel does not exist; create it with `kdelay topic create`")
}

// started is a command running in the background.
type started struct {
	cancel context.CancelFunc
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan int // the exit code
}

func start(t *testing.T, env map[string]string, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	s := &started{cancel: cancel, stdout: newSyncBuffer(), stderr: newSyncBuffer(), done: make(chan int, 1)}
	go func() { s.done <- run(ctx, args, env, nil, s.stdout, s.stderr) }()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// stop cancels the command (the signal) and returns its exit code and how
// long it took to exit.
func (s *started) stop(t *testing.T, bound time.Duration) (int, time.Duration) {
	t.Helper()
	begin := time.Now()
	s.cancel()
	select {
	case code := <-s.done:
		s.done <- code // for the cleanup
		return code, time.Since(begin)
	case <-time.After(bound):
		t.Fatalf("did not exit within %s of the signal; stderr:\n%s", bound, s.stderr)
		return 0, 0
	}
}

// httpAddr waits for the log line of the HTTP server and returns its
// address.
func (s *started) httpAddr(t *testing.T) string {
	t.Helper()
	var addr string
	s.stderr.waitFor(t, 20*time.Second, "the http server log line", func(out string) bool {
		for line := range strings.SplitSeq(out, "\n") {
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "http server listening" {
				addr = l.Addr
				return true
			}
		}
		return false
	})
	return addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// eventually polls cond every 10ms until it holds.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// metricSum sums the samples of a metric family in a Prometheus text
// exposition.
func metricSum(body, name string) float64 {
	var sum float64
	for line := range strings.SplitSeq(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// holdRequest makes the cluster hold the next request of key until the
// returned function is called.
func holdRequest(c *kfake.Cluster, key kmsg.Key) (release func()) {
	ch := make(chan struct{})
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl()
		c.SleepControl(func() { <-ch })
		return nil, nil, false
	})
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func TestRunHTTPEndpoints(t *testing.T) {
	t.Parallel()
	c, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "100ms 200ms 400ms", "KDELAY_LOG_LEVEL", "info",
		"KDELAY_HTTP_ADDR", "127.0.0.1:0", "KDELAY_SHUTDOWN_TIMEOUT", "10s")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	_, adm := admin(t, addr)
	if _, err := adm.CreateTopic(t.Context(), 1, -1, nil, "target"); err != nil {
		t.Fatal(err)
	}
	releaseJoin := holdRequest(c, kmsg.JoinGroup)
	defer releaseJoin()
	s := start(t, env, "run")
	base := "http://" + s.httpAddr(t)

	// Before the first assignment: alive, not ready, metrics served.
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q before the assignment", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d %q before the assignment, want 503", code, body)
	}
	// The relay's series appear once it is created (after Kafka answered).
	var body string
	eventually(t, 20*time.Second, "relay metrics served", func() bool {
		var code int
		code, body = get(t, base+"/metrics")
		return code == http.StatusOK && strings.Contains(body, "kdelay_ready 0") && strings.Contains(body, "kdelay_kafka_")
	})
	mustContain(t, "/metrics", body, "kdelay_ready 0", "go_goroutines", "process_cpu_seconds_total", "kdelay_kafka_")

	// Ready once the first assignment is taken up, on an idle delay topic.
	releaseJoin()
	eventually(t, 20*time.Second, "/readyz 200", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	})
	mustCode(t, kdelay(t, t.Context(), env, nil, "send", "--target", "target", "--delay", "0", "--value", "x"), exitOK)
	eventually(t, 20*time.Second, "a forwarded record in /metrics", func() bool {
		_, body := get(t, base+"/metrics")
		return metricSum(body, "kdelay_records_forwarded_total") >= 1
	})
	_, body = get(t, base+"/metrics")
	mustContain(t, "/metrics", body, "kdelay_records_forwarded_total{", "kdelay_lateness_seconds_bucket{", "kdelay_ready 1")

	// Shutdown begins: hold the relay's LeaveGroup so the server stays up,
	// and see readiness off meanwhile.
	releaseLeave := holdRequest(c, kmsg.LeaveGroup)
	defer releaseLeave()
	begin := time.Now()
	s.cancel()
	eventually(t, 10*time.Second, "/readyz 503 during shutdown", func() bool {
		code, body := get(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "shutting down")
	})
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d during shutdown", code)
	}
	select {
	case code := <-s.done:
		t.Fatalf("exited (code %d) while its LeaveGroup was held", code)
	default:
	}
	releaseLeave()
	code, _ := s.stop(t, 15*time.Second)
	if code != exitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, s.stderr)
	}
	t.Logf("exit 0 %s after the signal (LeaveGroup held meanwhile)", time.Since(begin).Round(time.Millisecond))
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("HTTP server still up after exit")
	}
}

// delivery is a record seen on the target topic.
type delivery struct {
	key     string
	due     time.Time // kdelay-due-at
	written time.Time // the forwarded record's timestamp: when the relay produced it
}

// collect consumes topic from its start into a channel.
func collect(t *testing.T, addr, topic string) <-chan delivery {
	t.Helper()
	cl, _ := admin(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ch := make(chan delivery, 1<<16)
	go func() {
		for {
			fs := cl.PollFetches(t.Context())
			if fs.IsClientClosed() || t.Context().Err() != nil {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				ms, err := strconv.ParseInt(header(r, "kdelay-due-at"), 10, 64)
				if err != nil {
					t.Errorf("record %s without kdelay-due-at: %v", r.Key, r.Headers)
				}
				ch <- delivery{string(r.Key), time.UnixMilli(ms), r.Timestamp}
			})
		}
	}()
	return ch
}

func TestRunSIGTERMRestartLosesNothing(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "200ms 500ms 1s 2s", "KDELAY_SHUTDOWN_TIMEOUT", "10s", "KDELAY_LOG_LEVEL", "info")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	_, adm := admin(t, addr)
	if _, err := adm.CreateTopic(t.Context(), 3, -1, nil, "target"); err != nil {
		t.Fatal(err)
	}
	deliveries := collect(t, addr, "target")

	s := start(t, env, "run")
	const perDelay = 150
	delays := []string{"0", "300ms", "700ms", "1500ms", "2500ms", "4s"}
	sentAt := time.Now()
	want := make(map[string]time.Duration)
	for _, d := range delays {
		r := kdelay(t, t.Context(), env, nil, "send", "--target", "target", "--delay", d,
			"--key", "d"+d+"-{i}", "--value", "v", "--count", strconv.Itoa(perDelay))
		mustCode(t, r, exitOK)
		dd, _ := parseDelay(d)
		for i := range perDelay {
			want[fmt.Sprintf("d%s-%d", d, i)] = dd
		}
	}

	got := make(map[string]int)
	var early []string
	take := func(d delivery) {
		got[d.key]++
		if d.written.Before(d.due) {
			early = append(early, fmt.Sprintf("%s written %s before its due time %s", d.key, d.written, d.due))
		}
		if wantDelay, ok := want[d.key]; !ok {
			t.Errorf("unexpected key %s", d.key)
		} else if d.due.Before(sentAt.Add(wantDelay).Truncate(time.Millisecond)) {
			t.Errorf("%s due at %s, before send time + %s", d.key, d.due, wantDelay)
		}
	}
	// SIGTERM while busy: some records delivered, many still waiting.
	for len(got) < 200 {
		select {
		case d := <-deliveries:
			take(d)
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d deliveries before the signal; stderr:\n%s", len(got), s.stderr)
		}
	}
	code, took := s.stop(t, 10*time.Second+shutdownGrace)
	if code != exitOK {
		t.Fatalf("exit code %d after SIGTERM; stderr:\n%s", code, s.stderr)
	}
	t.Logf("first run: exit 0 %s after the signal, %d of %d keys delivered by then", took.Round(time.Millisecond), len(got), len(want))
	if len(got) == len(want) {
		t.Logf("every record was delivered before the signal: the restart path was not exercised")
	}

	s2 := start(t, env, "run")
	timeout := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case d := <-deliveries:
			take(d)
		case <-timeout:
			missing := 0
			for k := range want {
				if got[k] == 0 {
					missing++
				}
			}
			t.Fatalf("%d of %d keys never delivered after the restart; stderr:\n%s", missing, len(want), s2.stderr)
		}
	}
	code, took = s2.stop(t, 10*time.Second+shutdownGrace)
	if code != exitOK {
		t.Fatalf("second run: exit code %d; stderr:\n%s", code, s2.stderr)
	}
	// Both runs are over: the target holds all it will ever hold. Read it
	// to its end, so that every duplicate is counted.
	ends, err := adm.ListEndOffsets(t.Context(), "target")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	seen := func() (n int64) {
		for _, c := range got {
			n += int64(c)
		}
		return n
	}
	for drain := time.After(30 * time.Second); seen() < total; {
		select {
		case d := <-deliveries:
			take(d)
		case <-drain:
			t.Fatalf("read %d of the target's %d records", seen(), total)
		}
	}
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	t.Logf("second run: every key delivered, %d duplicates in the target's %d records; exit 0 %s after the signal", dups, total, took.Round(time.Millisecond))
	if dups != 0 {
		t.Errorf("%d duplicates after a clean (SIGTERM) restart, want 0 (README Guarantees)", dups)
	}
	for _, e := range early {
		t.Error(e)
	}
}

func TestRunHTTPPortBusy(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := kdelay(t, t.Context(), env, nil, "run", "--http-addr", ln.Addr().String())
	mustCode(t, r, exitFailure)
	mustContain(t, "stderr", r.stderr, "http: listen on "+ln.Addr().String()+" (KDELAY_HTTP_ADDR)", "address already in use")
}

// TestRunWaitsForBrokers: with no broker reachable, `kdelay run` does not
// exit (no crash loop): it stays alive and not ready, logs that it retries,
// and stops with exit 0 on SIGTERM.
func TestRunWaitsForBrokers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens here any more
	env := testEnv(t, dead, "KDELAY_LOG_LEVEL", "info", "KDELAY_HTTP_ADDR", "127.0.0.1:0")
	s := start(t, env, "run")
	base := "http://" + s.httpAddr(t)
	s.stderr.waitFor(t, 60*time.Second, "a retry log line", func(out string) bool {
		return strings.Contains(out, "cannot check the delay topic; retrying")
	})
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q while waiting for the brokers", code, body)
	}
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d while waiting for the brokers, want 503", code)
	}
	s.cancel()
	select {
	case code := <-s.done:
		if code != exitOK {
			t.Errorf("exit %d after SIGTERM while waiting, want 0; stderr:\n%s", code, s.stderr.String())
		}
		s.done <- code // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop within 20s of SIGTERM")
	}
}
