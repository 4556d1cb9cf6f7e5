package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// envFirstMinuteRuns overrides the number of create-then-run rounds of
// TestFirstMinute (default 20).
const envFirstMinuteRuns = "KDELAY_TEST_FIRST_MINUTE_RUNS"

// TestFirstMinute is a new user's first minute: `kdelay topic
// create` on fresh topic names, then at once `kdelay run`, many times. The
// relay must start and become ready every time. Odd rounds run with
// KDELAY_MISSING_TOPIC_GRACE=0, so they hold only if `topic create` itself
// returned after the topics were visible with leaders; even rounds use the
// default grace, as a user would.
//
// It runs on whichever broker the suite has (the real one in CI's
// real-broker step, kfake in the hermetic step); it never skips. Under
// CI=true on the real tier, a broker that does not answer fails it.
func TestFirstMinute(t *testing.T) {
	t.Parallel()
	runs := 20
	if v := os.Getenv(envFirstMinuteRuns); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", envFirstMinuteRuns, v)
		}
		runs = n
	}
	adm := kadm.NewClient(newClient(t, suite.seeds))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	if _, err := adm.BrokerMetadata(ctx); err != nil {
		cancel()
		// Fatal, not skip: a missing broker must not pass as a skipped test.
		t.Fatalf("tier %s: brokers %s do not answer: %v", suite.tier, strings.Join(suite.seeds, ","), err)
	}
	cancel()

	var creates, readies []time.Duration
	graceUsed := 0
	for i := range runs {
		topic := randomTopic(fmt.Sprintf("first-minute-%02d", i))
		vars := map[string]string{
			"KDELAY_BROKERS":   strings.Join(suite.seeds, ","),
			"KDELAY_TOPIC":     topic,
			"KDELAY_GROUP":     topic + "-g",
			"KDELAY_LOG_LEVEL": "info",
		}
		strict := i%2 == 0
		if strict {
			vars["KDELAY_MISSING_TOPIC_GRACE"] = "0"
		}
		begin := time.Now()
		res := kdelayCLI(t, vars, nil, "topic", "create")
		created := time.Since(begin)
		if res.code != 0 || !strings.Contains(res.stdout, "created delay topic "+topic+": 18 partitions") ||
			!strings.Contains(res.stdout, "created dead-letter topic "+topic+".dlq") {
			t.Fatalf("round %d: topic create: exit %d\nstdout:\n%s\nstderr:\n%s", i, res.code, res.stdout, res.stderr)
		}
		p := startRelay(t, fmt.Sprintf("first-minute-%02d", i), vars, "", 90*time.Second)
		ready := time.Since(begin) - created
		if len(p.logLines("topic not found; looking again")) > 0 {
			graceUsed++
			if strict {
				t.Errorf("round %d: the relay looked again for a topic with the grace off", i)
			}
		}
		p.stop()
		creates, readies = append(creates, created), append(readies, ready)
		t.Logf("round %d (grace %s): topic create %s, run ready %s later",
			i, map[bool]string{true: "0", false: "30s"}[strict], created.Round(time.Millisecond), ready.Round(time.Millisecond))
		dctx, dcancel := context.WithTimeout(t.Context(), time.Minute)
		deleteTopic(dctx, t, adm, topic)
		deleteTopic(dctx, t, adm, topic+".dlq")
		dcancel()
	}
	q := func(ds []time.Duration, f float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(f*float64(len(s))))].Round(time.Millisecond)
	}
	t.Logf("first minute, tier %s, %d rounds: topic create p50 %s max %s; run ready after p50 %s max %s; the grace was needed in %d rounds",
		suite.tier, runs, q(creates, 0.5), q(creates, 1), q(readies, 0.5), q(readies, 1), graceUsed)
}
