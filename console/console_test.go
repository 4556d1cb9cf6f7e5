package console

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/schedules"
)

// fixture is a kfake cluster with kdelay's topics, a console over it and a
// producer.
type fixture struct {
	t   *testing.T
	c   *kfake.Cluster
	cfg config.Config
	cl  *kgo.Client
	f   *schedules.Follower
	url string
}

const token = "s3cret"

func newFixture(t *testing.T, tok string, authAll bool) *fixture {
	t.Helper()
	cfg, err := config.Load(map[string]string{"KDELAY_LEVELS": "1s 10s 1m 1h", "KDELAY_TOPIC": "delays", "KDELAY_MAX_DELAY": "24h", "KDELAY_TARGET_DENY": "secret.*"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "delays"), kfake.SeedTopics(1, "delays.cancel", "delays.dlq", "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	kopts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(kopts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	log := slog.New(slog.DiscardHandler)
	f, err := schedules.NewFollower(schedules.Options{KafkaOpts: kopts, Topic: cfg.Topic, Group: cfg.Group, CancelTopic: cfg.CancelTopic,
		Table: cfg.Table(), Retain: cfg.MaxDelay, CommitEvery: 100 * time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	srv, err := New(Options{Index: f, Config: cfg, KafkaOpts: kopts, Token: tok, AuthAll: authAll, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close(); cancel(); <-done; f.Close() })
	select {
	case <-f.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("index not ready")
	}
	return &fixture{t: t, c: c, cfg: cfg, cl: cl, f: f, url: hs.URL}
}

// delayed produces a record with id to partition p, due in d.
func (x *fixture) delayed(p int32, id string, d time.Duration) {
	x.t.Helper()
	now := time.Now()
	r := &kgo.Record{Topic: "delays", Partition: p, Key: []byte("k-" + id), Value: []byte("v"), Timestamp: now,
		Headers: []kgo.RecordHeader{{Key: "kdelay-target", Value: []byte("out")}, {Key: "kdelay-id", Value: []byte(id)},
			{Key: "kdelay-deliver-at", Value: []byte(strconv.FormatInt(now.Add(d).UnixMilli(), 10))}}}
	if err := x.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		x.t.Fatal(err)
	}
}

// do sends a request and decodes the JSON answer into out (when not nil).
func (x *fixture) do(method, path, tok, body string, out any) int {
	x.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, x.url+path, rd)
	if err != nil {
		x.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		x.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(path, "/api/") && !strings.HasPrefix(ct, "application/json") {
		x.t.Errorf("%s %s: Content-Type %q, want JSON", method, path, ct)
	}
	if len(resp.Header.Values("Set-Cookie")) > 0 {
		x.t.Errorf("%s %s sets a cookie", method, path)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			x.t.Fatalf("%s %s: %v\n%s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// eventually polls cond until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReadAPI(t *testing.T) {
	x := newFixture(t, token, false)
	for i := range 5 {
		x.delayed(3, "s"+strconv.Itoa(i), time.Duration(i+2)*time.Hour)
	}
	x.delayed(2, "soon", 30*time.Second)
	var page schedulePage
	eventually(t, "six schedules", func() bool {
		x.do("GET", "/api/v1/schedules", "", "", &page)
		return len(page.Schedules) == 6
	})
	if page.Schedules[0].ID != "soon" || page.Next != "" {
		t.Errorf("first page %+v", page)
	}
	// Pages of two.
	var ids []string
	cursor := ""
	for range 3 {
		var p schedulePage
		if code := x.do("GET", "/api/v1/schedules?limit=2&cursor="+cursor, "", "", &p); code != 200 {
			t.Fatalf("page: %d", code)
		}
		for _, s := range p.Schedules {
			ids = append(ids, s.ID)
		}
		cursor = p.Next
	}
	if strings.Join(ids, ",") != "soon,s0,s1,s2,s3,s4" || cursor != "" {
		t.Errorf("paged ids %v, last cursor %q", ids, cursor)
	}
	if x.do("GET", "/api/v1/schedules?level=3", "", "", &page); len(page.Schedules) != 1 || page.Schedules[0].ID != "soon" {
		t.Errorf("level=3: %+v", page.Schedules)
	}
	var one idSchedules
	if code := x.do("GET", "/api/v1/schedules/s2", "", "", &one); code != 200 || len(one.Schedules) != 1 || one.Schedules[0].Key != "k-s2" {
		t.Errorf("GET s2: %d %+v", code, one)
	}
	var e apiError
	if code := x.do("GET", "/api/v1/schedules/nope", "", "", &e); code != 404 || !strings.Contains(e.Error, "nope") {
		t.Errorf("GET unknown id: %d %+v", code, e)
	}
	for _, tc := range []struct{ path, param string }{
		{"/api/v1/schedules?due_from=yesterday", "due_from"},
		{"/api/v1/schedules?level=9", "level"},
		{"/api/v1/schedules?limit=100000", "limit"},
		{"/api/v1/schedules?cursor=xyz", "cursor"},
		{"/api/v1/due?bucket=0s", "bucket"},
		{"/api/v1/due?bucket=1s&horizon=24h", "horizon"},
		{"/api/v1/dead-letters?reason=(", "reason"},
	} {
		e = apiError{}
		if code := x.do("GET", tc.path, "", "", &e); code != 400 || e.Param != tc.param {
			t.Errorf("GET %s: %d %+v, want 400 naming %s", tc.path, code, e, tc.param)
		}
	}
	var h schedules.Histogram
	code := x.do("GET", "/api/v1/due?bucket=1h&horizon=4h", "", "", &h)
	n := h.Later + h.Overdue
	for _, b := range h.Buckets {
		n += b.Count
	}
	// "soon" falls in the bucket of its due time: the first, or the
	// second when the test runs in the last 30 s of an hour.
	soon := -1
	if len(h.Buckets) > 0 {
		soon = int(page.Schedules[0].DueAt.Sub(h.Buckets[0].Start) / time.Hour)
	}
	if code != 200 || len(h.Buckets) != 4 || n != 6 || soon < 0 || soon > 1 || h.Buckets[soon].Count < 1 || h.Buckets[soon].ByLevel["3"] != 1 {
		t.Errorf("due: %d %+v (soon in bucket %d)", code, h, soon)
	}
	var st statusAnswer
	eventually(t, "the status's lag", func() bool {
		code = x.do("GET", "/api/v1/status", "", "", &st)
		return code == 200 && st.Lag == 6
	})
	if !st.Index.Ready || len(st.Levels) != 4 || st.Levels[3].Pending != 5 || st.Writes != "token" || st.Lag != 6 {
		t.Errorf("status: %d %+v", code, st)
	}
	if code := x.do("GET", "/api/v2/schedules", "", "", &e); code != 404 {
		t.Errorf("unknown endpoint: %d", code)
	}
	_, metrics := getText(t, x.url+"/metrics")
	for _, want := range []string{`kdelay_console_pending{level="3",window="1m"} 1`, `kdelay_console_pending{level="4",window="1d"} 5`,
		`kdelay_console_pending{level="4",window="1h"} 0`, `kdelay_console_index_records 6`, `kdelay_console_ready 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, metrics)
		}
	}
	// The page and its assets, embedded; the probes.
	for _, p := range []string{"/", "/app.js", "/style.css", "/healthz", "/readyz"} {
		resp, err := http.Get(x.url + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
}

func TestWrites(t *testing.T) {
	x := newFixture(t, token, false)
	x.delayed(3, "a", 2*time.Hour)
	eventually(t, "a indexed", func() bool { return len(x.f.Index().Get("a", time.Now())) == 1 })
	var e apiError
	if code := x.do("DELETE", "/api/v1/schedules/a", "", "", &e); code != 401 {
		t.Errorf("DELETE without a token: %d %+v", code, e)
	}
	if code := x.do("DELETE", "/api/v1/schedules/a", "wrong", "", &e); code != 401 {
		t.Errorf("DELETE with a wrong token: %d", code)
	}
	if code := x.do("DELETE", "/api/v1/schedules/unknown", token, "", &e); code != 404 {
		t.Errorf("DELETE of an unknown id: %d", code)
	}
	var ca cancelAnswer
	before := time.Now()
	if code := x.do("DELETE", "/api/v1/schedules/a", token, "", &ca); code != 200 || ca.Pending != 1 || ca.Cutoff.Before(before.Truncate(time.Millisecond)) || ca.Topic != "delays.cancel" {
		t.Fatalf("DELETE: %d %+v", code, ca)
	}
	eventually(t, "a cancelled in the index", func() bool {
		g := x.f.Index().Get("a", time.Now())
		return len(g) == 1 && g[0].State == schedules.StateCancelled
	})

	var sa scheduleAnswer
	code := x.do("POST", "/api/v1/schedules", token, `{"target":"out","key":"k1","value":"hello","headers":{"trace":"1"},"delay":"90m","id":"p1"}`, &sa)
	if code != 201 || sa.Level != 4 || sa.ID != "p1" || sa.Partition != 3 || time.Until(sa.DueAt) < 89*time.Minute {
		t.Fatalf("POST: %d %+v", code, sa)
	}
	eventually(t, "p1 indexed", func() bool { return len(x.f.Index().Get("p1", time.Now())) == 1 })
	for _, tc := range []struct{ body, reason string }{
		{`{"target":"out","delay":"soon"}`, "bad_delay"},
		{`{"target":"out","delay":"-5s"}`, "negative_delay"},
		{`{"target":"out","level":9}`, "level_out_of_range"},
		{`{"target":"out","deliver_at":"tomorrow"}`, "bad_deliver_at"},
		{`{"target":"out"}`, "no_schedule"},
		{`{"target":"out","delay":"1s","level":1}`, "no_schedule"},
		{`{"target":"bad topic","delay":"1s"}`, "bad_target"},
		{`{"target":"secret.x","delay":"1s"}`, "target_refused"},
		{`{"target":"out","delay":"48h"}`, "delay_too_long"},
		{`{"target":"missing","delay":"1s"}`, "target_missing"},
		{`{"target":"out","delay":"1s","target_partition":3}`, "bad_target_partition"},
		{`{"target":"out","delay":"1s","id":"` + strings.Repeat("x", 256) + `"}`, "bad_id"},
		{`{"target":"out","delay":"1s","colour":"red"}`, ""},
		{`{"target":"out","delay":"1s","headers":{"kdelay-level":"2"}}`, ""},
	} {
		e = apiError{}
		if code := x.do("POST", "/api/v1/schedules", token, tc.body, &e); code != 400 || e.Reason != tc.reason || e.Error == "" {
			t.Errorf("POST %s: %d %+v, want 400 with reason %q", tc.body, code, e, tc.reason)
		}
	}
	if x.f.Index().Len() != 2 {
		t.Errorf("refused POSTs wrote records: %d indexed", x.f.Index().Len())
	}

	// Dead letters: list and replay (once).
	dl := &kgo.Record{Topic: "delays.dlq", Partition: 0, Key: []byte("d1"), Value: []byte("v"), Headers: []kgo.RecordHeader{
		{Key: "kdelay-target", Value: []byte("out")}, {Key: "kdelay-delay", Value: []byte("1h")}, {Key: "kdelay-id", Value: []byte("d1")},
		{Key: "kdelay-error", Value: []byte(`target topic "out" missing`)}, {Key: "kdelay-source", Value: []byte("delays/3/9")}}}
	if err := x.cl.ProduceSync(context.Background(), dl).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var dp deadLetterPage
	if code := x.do("GET", "/api/v1/dead-letters?reason=missing&target=out", "", "", &dp); code != 200 || len(dp.DeadLetters) != 1 || dp.DeadLetters[0].Source != "delays/3/9" {
		t.Errorf("dead letters: %d %+v", code, dp)
	}
	if x.do("GET", "/api/v1/dead-letters?reason=acl", "", "", &dp); len(dp.DeadLetters) != 0 {
		t.Errorf("reason=acl: %+v", dp)
	}
	if code := x.do("POST", "/api/v1/dead-letters/replay", "", `{}`, &e); code != 401 {
		t.Errorf("replay without the token: %d", code)
	}
	var ra replayAnswer
	if code := x.do("POST", "/api/v1/dead-letters/replay", token, `{"reason":"missing"}`, &ra); code != 200 || ra.Replayed != 1 {
		t.Fatalf("replay: %d %+v", code, ra)
	}
	if code := x.do("POST", "/api/v1/dead-letters/replay", token, `{"reason":"missing"}`, &ra); code != 200 || ra.Replayed != 0 {
		t.Errorf("second replay: %d %+v, want nothing replayed twice", code, ra)
	}
	eventually(t, "the replayed dead letter indexed", func() bool { return len(x.f.Index().Get("d1", time.Now())) == 1 })
}

func TestWritesDisabledWithoutToken(t *testing.T) {
	x := newFixture(t, "", false)
	x.delayed(3, "a", 2*time.Hour)
	eventually(t, "a indexed", func() bool { return len(x.f.Index().Get("a", time.Now())) == 1 })
	for _, r := range []struct{ method, path, body string }{
		{"DELETE", "/api/v1/schedules/a", ""},
		{"POST", "/api/v1/schedules", `{"target":"out","delay":"1s"}`},
		{"POST", "/api/v1/dead-letters/replay", `{}`},
	} {
		var e apiError
		if code := x.do(r.method, r.path, "anything", r.body, &e); code != 403 || !strings.Contains(e.Error, "KDELAY_CONSOLE_TOKEN") {
			t.Errorf("%s %s: %d %+v, want 403 naming KDELAY_CONSOLE_TOKEN", r.method, r.path, code, e)
		}
	}
	if g := x.f.Index().Get("a", time.Now()); len(g) != 1 || g[0].State != schedules.StateWaiting {
		t.Errorf("a refused cancel changed something: %+v", g)
	}
	var page schedulePage
	if code := x.do("GET", "/api/v1/schedules", "", "", &page); code != 200 || len(page.Schedules) != 1 {
		t.Errorf("reads stay open: %d", code)
	}
}

func TestAuthAll(t *testing.T) {
	x := newFixture(t, token, true)
	var e apiError
	for _, p := range []string{"/api/v1/schedules", "/api/v1/status", "/api/v1/due", "/api/v1/dead-letters", "/api/v1/schedules/x"} {
		if code := x.do("GET", p, "", "", &e); code != 401 {
			t.Errorf("GET %s without the token: %d, want 401", p, code)
		}
	}
	var page schedulePage
	if code := x.do("GET", "/api/v1/schedules", token, "", &page); code != 200 {
		t.Errorf("GET with the token: %d", code)
	}
	if code, _ := getText(t, x.url+"/metrics"); code != 401 {
		t.Errorf("GET /metrics without the token: %d, want 401", code)
	}
	if code, _ := getText(t, x.url+"/readyz"); code != 200 {
		t.Errorf("/readyz with KDELAY_CONSOLE_AUTH=all: %d, want 200 (a probe)", code)
	}
}

func TestBrokersAway(t *testing.T) {
	x := newFixture(t, token, false)
	x.delayed(3, "a", 2*time.Hour)
	eventually(t, "a indexed", func() bool { return len(x.f.Index().Get("a", time.Now())) == 1 })
	x.c.Close()
	eventually(t, "the follower's health", func() bool { return x.f.Health() != nil })
	var e apiError
	if code := x.do("GET", "/api/v1/schedules", "", "", &e); code != 503 || !strings.Contains(e.Error, "unavailable") {
		t.Errorf("GET schedules with the brokers away: %d %+v", code, e)
	}
	if code := x.do("GET", "/readyz", "", "", nil); code != 503 {
		t.Errorf("/readyz with the brokers away: %d, want 503", code)
	}
	var st statusAnswer
	if code := x.do("GET", "/api/v1/status", "", "", &st); code != 503 || st.Index.Error == "" {
		t.Errorf("status with the brokers away: %d %+v", code, st)
	}
	if code := x.do("DELETE", "/api/v1/schedules/a", token, "", &e); code != 503 {
		t.Errorf("cancel with the brokers away: %d %+v, want 503 (never reported done)", code, e)
	}
	if code := x.do("POST", "/api/v1/schedules", token, `{"target":"out","delay":"1s"}`, &e); code != 503 {
		t.Errorf("POST with the brokers away: %d %+v", code, e)
	}
}

// TestDocsNameEveryEndpoint: docs/console.md has a section per route.
func TestDocsNameEveryEndpoint(t *testing.T) {
	b, err := os.ReadFile("../docs/console.md")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Index: nil, Config: config.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.patterns) < 8 {
		t.Fatalf("%d routes", len(s.patterns))
	}
	for _, p := range s.patterns {
		method, path, _ := strings.Cut(p, " ")
		if !strings.Contains(string(b), "### `"+method+" "+path) {
			t.Errorf("docs/console.md has no section \"### `%s`\"", p)
		}
	}
	for _, name := range config.ConsoleNames() {
		if !strings.Contains(string(b), "`"+name+"`") {
			t.Errorf("docs/console.md does not name %s", name)
		}
	}
}

func getText(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
