package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// TestDeadLetter: records that break the contract or the policy go to the
// dead-letter topic intact, with a readable kdelay-error and their
// kdelay-source, without holding back the good records written around
// them; `kdelay status` counts them.
func TestDeadLetter(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "dlq", scenarioOpts{
		levels:  "1s 2s 4s 8s",
		targets: map[string]int32{"orders": 3, "small": 1},
		configs: map[string]map[string]*string{"small": {"max.message.bytes": kadm.StringPtr("2048")}},
		vars: map[string]string{
			"KDELAY_MAX_DELAY":              "1h",
			"KDELAY_TARGET_MISSING_TIMEOUT": "3s",
		},
	})
	small := s.target("small")
	relay := s.startRelay("", 90*time.Second)
	target := s.target("orders")
	const tgt, dly, at, lvl, tp = levels.HeaderTarget, levels.HeaderDelay, levels.HeaderDeliverAt, levels.HeaderLevel, levels.HeaderTargetPartition

	bad := []struct {
		key       string
		partition int32
		reason    string // expected in kdelay-error
		kv        []string
	}{
		{"bad-no-target", 0, "missing target", []string{dly, "1s"}},
		{"bad-empty-target", 0, "missing target", []string{tgt, "", dly, "1s"}},
		{"bad-target-name", 0, "invalid target topic: header kdelay-target=\"no such/topic\"", []string{tgt, "no such/topic", dly, "1s"}},
		{"bad-delay", 0, "invalid delay: header kdelay-delay=\"soon\"", []string{tgt, target, dly, "soon"}},
		{"bad-negative-delay", 0, "negative delay", []string{tgt, target, dly, "-5s"}},
		{"bad-level-99", 0, "level out of range: header kdelay-level=\"99\"", []string{tgt, target, lvl, "99"}},
		{"bad-level-0", 0, "level out of range", []string{tgt, target, lvl, "0"}},
		{"bad-deliver-at", 0, "invalid deliver-at: header kdelay-deliver-at=\"tomorrow\"", []string{tgt, target, at, "tomorrow"}},
		{"bad-no-schedule", 0, "none of kdelay-delay, kdelay-deliver-at, kdelay-level given", []string{tgt, target}},
		{"bad-target-partition", 0, "invalid target partition", []string{tgt, target, dly, "1s", tp, "x"}},
		{"bad-missing-partition", 0, "target partition 7 does not exist", []string{tgt, target, dly, "1s", tp, "7"}},
		{"bad-internal-topic", 0, "internal topic", []string{tgt, "__consumer_offsets", dly, "1s"}},
		{"bad-self", 0, "the delay topic itself", []string{tgt, s.topic, dly, "1s"}},
		{"bad-dlq-target", 0, "the dead-letter topic", []string{tgt, s.dlq, dly, "1s"}},
		{"bad-too-long", 0, "delay 2h0m0s exceeds KDELAY_MAX_DELAY 1h0m0s", []string{tgt, target, dly, "2h"}},
		// Last: the relay retries these before it gives up, and its batch
		// (with its commit) waits meanwhile.
		{"bad-missing-topic", 2, fmt.Sprintf("target topic %q missing for 3s", s.target("nosuch")), []string{tgt, s.target("nosuch"), dly, "6s"}},
		{"bad-too-large", 2, fmt.Sprintf("record too large for topic %q", small), []string{tgt, small, dly, "5s"}},
	}
	var good []*kgo.Record
	for i, d := range spread(60, time.Second, 3*time.Second) {
		good = append(good, s.stamped(fmt.Sprintf("good-%03d", i), levels.Delay{Target: target, Delay: d}))
	}
	var recs []*kgo.Record
	for _, b := range bad {
		s.expectDeadLetter(b.key, b.reason)
		r := s.raw(b.key, b.partition, append([]string{"x-why", b.key}, b.kv...)...)
		if b.key == "bad-too-large" {
			// Incompressible: the broker checks the (compressed) batch.
			r.Value = make([]byte, 8<<10)
			for i := range r.Value {
				r.Value[i] = byte(rand.Uint32())
			}
		}
		recs = append(recs, r)
	}
	// Good records before, between and after the bad ones.
	sendAt := time.Now()
	s.send(good[:20]...)
	s.send(recs...)
	s.send(good[20:]...)

	keys := s.sentKeys("")
	s.await(keys, time.Now().Add(90*time.Second), relay)
	checkP99(t, "bad input to the dead-letter topic", s.check(t, "bad input to the dead-letter topic", keys, 0), noFaultP99)

	// Contract breaches go at once, without waiting for any level time
	// but that of a good record ahead of them in their partition (1s).
	for _, b := range bad[:len(bad)-2] {
		if a := s.obs.arrivals(b.key); len(a) > 0 && a[0].at.Sub(sendAt) > 10*time.Second {
			t.Errorf("%s: dead-lettered %s after it was sent; bad input must not wait", b.key, a[0].at.Sub(sendAt).Round(time.Millisecond))
		}
	}
	for _, b := range bad {
		if a := s.obs.arrivals(b.key); len(a) > 0 {
			t.Logf("dead letter %-22s kdelay-error: %s", b.key, a[0].errText)
		}
	}

	if st := kdelayStatus(t, s.vars); st.DeadLetters != int64(len(bad)) || st.Lag != 0 {
		t.Errorf("kdelay status: dead_letters=%d lag=%d, want %d and 0", st.DeadLetters, st.Lag, len(bad))
	}
	relay.stop()
}

// TestTargetPatterns: KDELAY_TARGET_ALLOW and KDELAY_TARGET_DENY. Allowed
// targets get their records; a target matching a deny pattern (deny wins
// over allow) and one matching no allow pattern get none: those records
// are dead-lettered with the reason. `kdelay send` warns about a refused
// target.
func TestTargetPatterns(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "patterns", scenarioOpts{
		levels:  "1s 2s 4s 8s",
		targets: map[string]int32{"orders": 1, "orders-eu": 1, "orders-secret": 1, "billing": 1, "audit": 1},
		vars: map[string]string{
			"KDELAY_TARGET_ALLOW": "kd-patterns-*-orders*,kd-patterns-*-billing",
			"KDELAY_TARGET_DENY":  "*-secret",
		},
	})
	relay := s.startRelay("", 90*time.Second)
	reasons := map[string]string{
		"orders-secret": "denied by KDELAY_TARGET_DENY pattern *-secret",
		"audit":         "not allowed by KDELAY_TARGET_ALLOW",
	}
	var recs []*kgo.Record
	for _, suffix := range []string{"orders", "orders-eu", "orders-secret", "billing", "audit"} {
		for i, d := range spread(30, time.Second, 2*time.Second) {
			key := fmt.Sprintf("%s-%03d", suffix, i)
			if why, ok := reasons[suffix]; ok {
				s.expectDeadLetter(key, fmt.Sprintf("target %q refused: %s", s.target(suffix), why))
			}
			recs = append(recs, s.stamped(key, levels.Delay{Target: s.target(suffix), Delay: d}))
		}
	}
	s.send(recs...)

	// The CLI producer refuses (exit 2) a target the relay would refuse,
	// and sends it anyway with --force, warning.
	for _, c := range []struct{ suffix, key string }{{"audit", "send-audit"}, {"billing", "send-billing"}} {
		args := []string{"send", "--target", s.target(c.suffix), "--delay", "1s", "--key", c.key, "--value", "value-" + c.key}
		if c.suffix == "audit" {
			res := kdelayCLI(t, s.vars, nil, args...)
			if res.code != 2 || !strings.Contains(res.stderr, "refused: "+reasons["audit"]) {
				t.Fatalf("kdelay send --target %s: exit %d, want 2 naming the refusal\n%s", s.target(c.suffix), res.code, res.stderr)
			}
			args = append(args, "--force")
		}
		res := kdelayCLI(t, s.vars, nil, args...)
		if res.code != 0 {
			t.Fatalf("kdelay send: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
		}
		warned := strings.Contains(res.stderr, "--force: sending anyway")
		if warned != (c.suffix == "audit") {
			t.Errorf("kdelay send --target %s: warning %v, want %v; stderr:\n%s", s.target(c.suffix), warned, c.suffix == "audit", res.stderr)
		}
	}
	s.expectDeadLetter("send-audit", reasons["audit"])
	s.learn([]string{"send-audit", "send-billing"})

	keys := s.sentKeys("")
	s.await(keys, s.lastDue(keys).Add(60*time.Second), relay)
	checkP99(t, "target allow/deny patterns", s.check(t, "target allow/deny patterns", keys, 0), noFaultP99)
	relay.stop()
}
