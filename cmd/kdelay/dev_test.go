package main

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

var deliveryRE = regexp.MustCompile(`(?m)^\S+  delivered  key=(\S+)\s+planned=(\S+)\s+due=(\S+)  late=([+-]\d+)ms`)

func TestDev(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	s := start(t, map[string]string{"KDELAY_LOG_FORMAT": "json"}, "dev", "--port", "0", "--levels", "100ms 200ms 400ms 800ms")

	out := s.stdout.waitFor(t, 20*time.Second, "3 deliveries", func(out string) bool {
		return len(deliveryRE.FindAllString(out, -1)) >= 3
	})
	t.Logf("3 deliveries %s after the start", time.Since(begin).Round(time.Millisecond))
	first, _, _ := strings.Cut(out, "\n")
	if !regexp.MustCompile(`^kdelay dev: in-process Kafka \(kfake\) listening on 127\.0\.0\.1:\d+$`).MatchString(first) {
		t.Errorf("first line %q does not give the broker address", first)
	}
	mustContain(t, "dev output", out,
		"delay topic        delay-topic (4 partitions: 4 levels x 1)",
		"kcat -P -b 127.0.0.1:", "-H kdelay-target=demo -H kdelay-delay=400ms",
		"sent 9 demo records",
	)
	for _, m := range deliveryRE.FindAllStringSubmatch(out, -1) {
		if late, _ := strconv.Atoi(m[4]); late < 0 {
			t.Errorf("early delivery: %s", m[0])
		}
		if !strings.HasPrefix(m[1], "demo-") || m[2] == "?" {
			t.Errorf("delivery line %q: want a demo key and its planned delay", m[0])
		}
	}

	code, took := s.stop(t, 15*time.Second)
	if code != exitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, s.stderr)
	}
	t.Logf("exit 0 %s after the signal", took.Round(time.Millisecond))
	mustContain(t, "dev output", s.stdout.String(), "stopping (at most 5s; Ctrl-C again quits at once)\n", "\nstopped\n")
}

func TestDevPortBusy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	r := kdelay(t, t.Context(), map[string]string{}, nil, "dev", "--port", port)
	mustCode(t, r, exitFailure)
	mustContain(t, "stderr", r.stderr, "port "+port+" is busy", "--port 0")
}

func TestDeliveryLine(t *testing.T) {
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	arrived := start.Add(time.Minute)
	rec := func(due time.Time, demo string) *kgo.Record {
		r := &kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: levels.HeaderDueAt, Value: []byte(strconv.FormatInt(due.UnixMilli(), 10))}}}
		if demo != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: demoHeader, Value: []byte(demo)})
		}
		return r
	}
	for _, tc := range []struct {
		name      string
		r         *kgo.Record
		want, not []string
	}{
		{"demo record", rec(arrived.Add(-15*time.Millisecond), "1s"), []string{"planned=1s", "late=+15ms"}, []string{"EARLY"}},
		{"own record", rec(arrived.Add(-15*time.Millisecond), ""), []string{"late=+15ms"}, []string{"planned"}},
		{"past --at", rec(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), ""), []string{"due=2020-01-01T00:00:00Z", "late=-", "sent at once"}, []string{"late=+", "planned"}},
	} {
		got := deliveryLine(tc.r, arrived, start)
		mustContain(t, tc.name, got, tc.want...)
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("%s: %q contains %q", tc.name, got, n)
			}
		}
	}
}
