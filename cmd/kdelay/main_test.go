package main

import (
	"bytes"
	"context"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader,
// which can wait for some text to appear.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{})} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until cond holds for the text written so far.
func (b *syncBuffer) waitFor(t *testing.T, timeout time.Duration, what string, cond func(string) bool) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		s, ch := b.buf.String(), b.changed
		b.mu.Unlock()
		if cond(s) {
			return s
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s; output so far:\n%s", timeout, what, s)
		case <-t.Context().Done():
			t.Fatalf("test ended waiting for %s", what)
		}
	}
}

type result struct {
	code           int
	stdout, stderr string
}

// kdelay runs the command line as main would, with env as the whole
// environment.
func kdelay(t *testing.T, ctx context.Context, env map[string]string, stdin io.Reader, args ...string) result {
	t.Helper()
	// Safe for concurrent use: a command's Kafka client may still log
	// from its own goroutines (a connection being set up while the client
	// closes) after the command has returned.
	out, errb := newSyncBuffer(), newSyncBuffer()
	code := run(ctx, args, env, stdin, out, errb)
	return result{code, out.String(), errb.String()}
}

// newCluster starts a one-broker kfake cluster for the test.
func newCluster(t *testing.T, opts ...kfake.Opt) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()[0]
}

// testEnv is the environment of a command under test: the cluster, JSON
// logs at warn, no HTTP server, a private data directory, plus extra.
func testEnv(t *testing.T, addr string, extra ...string) map[string]string {
	t.Helper()
	env := map[string]string{
		"KDELAY_BROKERS":    addr,
		"KDELAY_LOG_FORMAT": "json",
		"KDELAY_LOG_LEVEL":  "warn",
		"KDELAY_HTTP_ADDR":  "off",
		"KDELAY_DATA_DIR":   t.TempDir(),
		// A missing topic fails at once, not after a grace.
		"KDELAY_MISSING_TOPIC_GRACE": "0",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

func with(env map[string]string, kv ...string) map[string]string {
	env = maps.Clone(env)
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

// admin returns an admin client on the cluster.
func admin(t *testing.T, addr string, opts ...kgo.Opt) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

func mustCode(t *testing.T, r result, want int) {
	t.Helper()
	if r.code != want {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, want, r.stdout, r.stderr)
	}
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--help"},
		{"run", "--help"},
		{"dev", "--help"},
		{"send", "--help"},
		{"topic", "--help"},
		{"topic", "create", "--help"},
		{"topic", "describe", "--help"},
		{"status", "--help"},
		{"levels", "--help"},
		{"version", "--help"},
	} {
		r := kdelay(t, t.Context(), map[string]string{}, nil, args...)
		mustCode(t, r, exitOK)
		mustContain(t, strings.Join(args, " "), r.stdout, "Usage:")
	}
	// Setting flags name their variable and show the default in force,
	// which the variable sets.
	r := kdelay(t, t.Context(), map[string]string{"KDELAY_MAX_DELAY": "48h"}, nil, "run", "--help")
	mustContain(t, "run --help", r.stdout, "--max-delay duration", "(env KDELAY_MAX_DELAY) (default 48h)",
		"--brokers strings", "(env KDELAY_BROKERS) (default localhost:9092)", "--http-addr")
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"unknown command", nil, []string{"bogus"}, []string{`unknown command "bogus"`}},
		{"unknown flag", nil, []string{"levels", "--nope"}, []string{"unknown flag: --nope"}},
		{"send bad delay", nil, []string{"send", "--target", "demo", "--delay", "soon"}, []string{`invalid --delay "soon": not a duration`}},
		{"send negative delay", nil, []string{"send", "--target", "demo", "--delay", "-5s"}, []string{`invalid --delay "-5s": negative`}},
		{"send without target", nil, []string{"send", "--delay", "1s"}, []string{`required flag(s) "target" not set`}},
		{"send without schedule", nil, []string{"send", "--target", "demo"}, []string{"at least one of the flags in the group [delay at level every cron] is required"}},
		{"send two schedules", nil, []string{"send", "--target", "demo", "--delay", "1s", "--level", "2"}, []string{"if any flags in the group [delay at level] are set none of the others can be"}},
		{"send bad level", nil, []string{"send", "--target", "demo", "--level", "19"}, []string{"invalid --level 19: levels are 1..18"}},
		{"send bad at", nil, []string{"send", "--target", "demo", "--at", "tomorrow"}, []string{`invalid --at "tomorrow"`}},
		{"send bad target", nil, []string{"send", "--target", "no such topic", "--delay", "1s"}, []string{`invalid --target "no such topic"`}},
		{"send control header", nil, []string{"send", "--target", "demo", "--delay", "1s", "-H", "kdelay-delay=2s"}, []string{`invalid --header "kdelay-delay=2s"`}},
		{"send bad header", nil, []string{"send", "--target", "demo", "--delay", "1s", "-H", "novalue"}, []string{`invalid --header "novalue": want key=value`}},
		{"send bad count", nil, []string{"send", "--target", "demo", "--delay", "1s", "--count", "0", "--value", "x"}, []string{"invalid --count 0"}},
		{"run bad env", map[string]string{"KDELAY_MAX_DELAY": "x"}, []string{"run"}, []string{`KDELAY_MAX_DELAY="x": not a duration`}},
		{"run every env problem", map[string]string{"KDELAY_MAX_DELAY": "x", "KDELAY_PARTITIONS_PER_LEVEL": "0", "KDELAY_LEVELS": "5s 1s"},
			[]string{"run"}, []string{"invalid configuration:", `KDELAY_MAX_DELAY="x"`, `KDELAY_PARTITIONS_PER_LEVEL="0"`, `KDELAY_LEVELS="5s 1s"`}},
		{"run bad flag syntax", nil, []string{"run", "--max-delay", "soon"}, []string{`invalid argument "soon" for "--max-delay" flag: not a duration`}},
		{"run bad flag value", nil, []string{"run", "--max-delay", "-1h"}, []string{`--max-delay="-1h0m0s": must be positive`}},
		{"levels bad levels", nil, []string{"levels", "--levels", "1s 1s"}, []string{`--levels="1s 1s"`, "not greater than the previous entry"}},
		{"topic bad config", nil, []string{"topic", "create", "--config", "retention"}, []string{`invalid --config "retention": want key=value`}},
		{"dev bad port", nil, []string{"dev", "--port", "70000"}, []string{"invalid --port 70000"}},
		{"extra argument", nil, []string{"levels", "extra"}, []string{`unknown command "extra"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := tc.env
			if env == nil {
				env = map[string]string{}
			}
			r := kdelay(t, t.Context(), env, strings.NewReader(""), tc.args...)
			mustCode(t, r, exitUsage)
			mustContain(t, "stderr", r.stderr, tc.want...)
		})
	}
}
