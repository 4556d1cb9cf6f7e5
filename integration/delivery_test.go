package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// TestDefaultLevels: the 18 RocketMQ levels. By default the fast subset,
// levels 1-4 (1s 5s 10s 30s), by kdelay-level and by a kdelay-delay equal
// to the level, plus arbitrary delays between them (the wheel path); all
// 18 levels (up to 2h) with KDELAY_TEST_ALL_LEVELS=1. Every record once,
// none early.
func TestDefaultLevels(t *testing.T) {
	t.Parallel()
	all := os.Getenv(envAllLevels) == "1"
	s := newScenario(t, "levels18", scenarioOpts{targets: map[string]int32{"orders": 3}})
	relay := s.startRelay("", 90*time.Second)
	target := s.target("orders")

	upTo, per := 4, 25
	arbitrary := []time.Duration{2 * time.Second, 7 * time.Second, 15 * time.Second, 25 * time.Second}
	label := "default levels 1-4 (1s 5s 10s 30s) + arbitrary"
	if all {
		upTo, per = s.tab.Levels(), 10
		for l := 4; l < s.tab.Levels(); l++ {
			arbitrary = append(arbitrary, (s.tab.Duration(l)+s.tab.Duration(l+1))/2)
		}
		label = "all 18 default levels (1s..2h) + arbitrary"
	}
	var recs []*kgo.Record
	for l := 1; l <= upTo; l++ {
		for i := range per {
			recs = append(recs,
				s.stamped(fmt.Sprintf("L%02d-level-%03d", l, i), levels.Delay{Target: target, Level: l}),
				s.stamped(fmt.Sprintf("L%02d-delay-%03d", l, i), levels.Delay{Target: target, Delay: s.tab.Duration(l)}))
		}
	}
	for _, d := range arbitrary {
		for i := range per / 2 {
			recs = append(recs, s.stamped(fmt.Sprintf("arb-%s-%03d", levels.FormatDuration(d), i), levels.Delay{Target: target, Delay: d}))
		}
	}
	s.send(recs...)
	keys := s.sentKeys("")
	t.Logf("sent %d records, last due %s", len(keys), fmtTime(s.lastDue(keys)))
	s.await(keys, s.lastDue(keys).Add(60*time.Second), relay)
	checkP99(t, label, s.check(t, label, keys, 0), noFaultP99)
	s.checkFIFO(t, label, keys, upTo*per)
	relay.stop()
}

// TestScaledLevels: levels "1s 2s 4s 8s": delays below the first level,
// on each level, between levels (the wheel), beyond the last level (the
// wheel again: 12s = 8s + 4s), absolute due times, kdelay-level and a
// requested target partition. Every record once, none early; afterwards
// `kdelay status` shows no lag.
func TestScaledLevels(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "scaled", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 3}})
	relay := s.startRelay("", 90*time.Second)
	target := s.target("orders")
	p2 := int32(2)

	// Shorter delays first: a level partition is FIFO (as in RocketMQ), so a
	// 300ms record behind a 1s record of level 1 would wait for it.
	kinds := []struct {
		name string
		d    func() levels.Delay
	}{
		{"now", func() levels.Delay { return levels.Delay{Target: target, At: time.Now()} }},
		{"300ms", func() levels.Delay { return levels.Delay{Target: target, Delay: 300 * time.Millisecond} }},
		{"1s", func() levels.Delay { return levels.Delay{Target: target, Delay: time.Second} }},
		{"1.5s", func() levels.Delay { return levels.Delay{Target: target, Delay: 1500 * time.Millisecond} }},
		{"level2", func() levels.Delay { return levels.Delay{Target: target, Level: 2} }},
		{"3s-p2", func() levels.Delay { return levels.Delay{Target: target, Delay: 3 * time.Second, Partition: &p2} }},
		{"4s", func() levels.Delay { return levels.Delay{Target: target, Delay: 4 * time.Second} }},
		{"5.5s", func() levels.Delay { return levels.Delay{Target: target, Delay: 5500 * time.Millisecond} }},
		{"at+6s", func() levels.Delay { return levels.Delay{Target: target, At: time.Now().Add(6 * time.Second)} }},
		{"7s", func() levels.Delay { return levels.Delay{Target: target, Delay: 7 * time.Second} }},
		{"level4", func() levels.Delay { return levels.Delay{Target: target, Level: 4} }},
		{"9s", func() levels.Delay { return levels.Delay{Target: target, Delay: 9 * time.Second} }},
		{"12s", func() levels.Delay { return levels.Delay{Target: target, Delay: 12 * time.Second} }},
	}
	var recs []*kgo.Record
	for _, k := range kinds {
		for i := range 45 {
			recs = append(recs, s.stamped(fmt.Sprintf("%s-%03d", k.name, i), k.d()))
		}
	}
	s.send(recs...)
	keys := s.sentKeys("")
	s.await(keys, s.lastDue(keys).Add(60*time.Second), relay)
	label := `scaled levels "1s 2s 4s 8s", arbitrary delays`
	checkP99(t, label, s.check(t, label, keys, 0), noFaultP99)
	s.checkFIFO(t, label, keys, 45)

	// The binary's own view: nothing left to do.
	if st := kdelayStatus(t, s.vars); st.Lag != 0 || st.DeadLetters != 0 {
		t.Errorf("kdelay status: lag %d, dead letters %d; want 0 and 0", st.Lag, st.DeadLetters)
	}
	if n := relay.metric("kdelay_records_wheeled_total"); n <= 0 {
		t.Errorf("kdelay_records_wheeled_total = %v, want > 0 (arbitrary delays take the wheel)", n)
	}
	relay.stop()
}

// TestCascade: levels "1s 2s 4s" (wheel horizon 2s, the largest gap): a
// 20s delay cannot wait in the wheel, so it cascades through the delay
// topic with an absolute kdelay-deliver-at, several times, and still
// arrives at 20s, not earlier, with its original due time.
func TestCascade(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "cascade", scenarioOpts{levels: "1s 2s 4s", targets: map[string]int32{"orders": 3}})
	relay := s.startRelay("", 90*time.Second)
	target := s.target("orders")
	var recs []*kgo.Record
	for _, d := range []time.Duration{6 * time.Second, 9 * time.Second, 13 * time.Second, 20 * time.Second} {
		for i := range 40 {
			recs = append(recs, s.stamped(fmt.Sprintf("c%s-%03d", d, i), levels.Delay{Target: target, Delay: d}))
		}
	}
	s.send(recs...)
	keys := s.sentKeys("")
	s.await(keys, s.lastDue(keys).Add(60*time.Second), relay)
	checkP99(t, `cascade: levels "1s 2s 4s", delays 6s 9s 13s 20s`, s.check(t, `cascade: levels "1s 2s 4s", delays 6s 9s 13s 20s`, keys, 0), noFaultP99)

	cascaded := relay.metric("kdelay_records_cascaded_total")
	if cascaded < 40 {
		t.Errorf("kdelay_records_cascaded_total = %v, want >= 40 (every 20s record cascades)", cascaded)
	}
	ends, err := s.adm.ListEndOffsets(testContext(t, time.Minute), s.topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	t.Logf("cascades: %v; the delay topic holds %d records for %d sent", cascaded, total, len(keys))
	if total <= int64(len(keys)) {
		t.Errorf("delay topic holds %d records, want more than the %d sent (the cascaded copies)", total, len(keys))
	}
	relay.stop()
}

// TestForeignProducer: producers that are not the Go helper. Raw franz-go
// records with only headers and an explicit partition (Go durations,
// milliseconds, epoch-ms and RFC 3339 due times, kdelay-level with a target
// partition, a repeated header where the last one counts); records written
// to the "wrong" level partition (the header is the truth: never early);
// and kcat when it is on PATH (Debian package kcat).
func TestForeignProducer(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "foreign", scenarioOpts{levels: "1s 2s 4s 8s", targets: map[string]int32{"orders": 3}})
	relay := s.startRelay("", 90*time.Second)
	target := s.target("orders")
	now := time.Now()
	atMs := strconv.FormatInt(now.Add(1500*time.Millisecond).UnixMilli(), 10)
	atRFC := now.Add(3250 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	const tgt, dly, at, lvl, tp = levels.HeaderTarget, levels.HeaderDelay, levels.HeaderDeliverAt, levels.HeaderLevel, levels.HeaderTargetPartition

	var recs []*kgo.Record
	add := func(prefix string, n int, partition int32, kv ...string) {
		for i := range n {
			recs = append(recs, s.raw(fmt.Sprintf("%s-%03d", prefix, i), partition, append([]string{"x-producer", "raw-kgo"}, kv...)...))
		}
	}
	add("raw-at-ms", 40, 0, tgt, target, at, atMs)
	add("raw-delay-go", 40, 1, tgt, target, dly, "2s")
	add("raw-at-rfc3339", 40, 1, tgt, target, at, atRFC)
	add("raw-repeated", 20, 1, tgt, target, dly, "9s", dly, "3s") // the last header counts: 3s
	add("raw-delay-ms", 40, 2, tgt, target, dly, "4000")
	add("raw-level3-p2", 40, 2, tgt, target, lvl, "3", tp, "2")
	// The wrong partition: a 6s record in level 1 (1s) cascades and arrives
	// at 6s; a 1s record in level 4 (8s) waits for that level: 7s late.
	add("wrong-6s-in-1s", 20, 0, tgt, target, dly, "6s")
	add("wrong-1s-in-8s", 20, 3, tgt, target, dly, "1s")
	s.send(recs...)

	kcat, kcatErr := exec.LookPath("kcat")
	if kcatErr == nil {
		var kk []string
		for _, c := range []struct {
			prefix    string
			n         int
			partition int
			headers   []string
		}{
			{"kcat-at-ms", 40, 0, []string{at + "=" + strconv.FormatInt(time.Now().Add(3*time.Second).UnixMilli(), 10)}},
			{"kcat-delay", 40, 1, []string{dly + "=2s"}},
			{"kcat-level2-p1", 30, 1, []string{lvl + "=2", tp + "=1"}},
		} {
			var in strings.Builder
			for i := range c.n {
				k := fmt.Sprintf("%s-%03d", c.prefix, i)
				kk = append(kk, k)
				fmt.Fprintf(&in, "%s\tvalue-%s\n", k, k)
			}
			args := []string{"-P", "-b", strings.Join(suite.seeds, ","), "-t", s.topic, "-p", strconv.Itoa(c.partition), "-K", "\t",
				"-H", tgt + "=" + target, "-H", "x-producer=kcat"}
			for _, h := range c.headers {
				args = append(args, "-H", h)
			}
			cmd := exec.Command(kcat, args...)
			cmd.Stdin = strings.NewReader(in.String())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		s.learn(kk) // their timestamps, hence due times, are in the log only
	}

	keys := s.sentKeys("")
	s.await(keys, s.lastDue(keys).Add(60*time.Second), relay)
	t.Run("kgo-raw", func(t *testing.T) {
		checkP99(t, "foreign producer: raw franz-go records, headers only", s.check(t, "foreign producer: raw franz-go records, headers only", s.sentKeys("raw-"), 0), noFaultP99)
	})
	t.Run("wrong-partition", func(t *testing.T) {
		keys := s.sentKeys("wrong-")
		s.check(t, "foreign producer: records in the wrong level partition", keys, 0)
		for _, k := range s.sentKeys("wrong-1s-in-8s") {
			s.mu.Lock()
			sr := s.sent[k]
			s.mu.Unlock()
			if a := s.obs.arrivals(k); len(a) > 0 && a[0].ts.Before(sr.due.Add(7*time.Second)) {
				t.Errorf("%s: 1s record in the 8s partition forwarded %s after its due time, before the level time", k, a[0].ts.Sub(sr.due))
			}
		}
	})
	t.Run("kcat", func(t *testing.T) {
		if kcatErr != nil {
			skipOrFailInCI(t, "kcat not on PATH: this sub-case needs it (Debian: apt-get install -y kcat)")
		}
		keys := s.sentKeys("kcat-")
		s.mu.Lock()
		for _, k := range keys {
			if sr := s.sent[k]; (strings.HasPrefix(k, "kcat-at-ms") && sr.partition != 0) || (strings.HasPrefix(k, "kcat-delay") && sr.partition != 1) {
				t.Errorf("%s: written to partition %d by kcat -p", k, sr.partition)
			}
		}
		s.mu.Unlock()
		checkP99(t, "foreign producer: kcat "+kcatVersion(kcat), s.check(t, "foreign producer: kcat "+kcatVersion(kcat), keys, 0), noFaultP99)
	})
	if n := relay.metric("kdelay_records_level_mismatch_total"); n < 40 {
		t.Errorf("kdelay_records_level_mismatch_total = %v, want >= 40 (the wrong-partition records)", n)
	}
	relay.stop()
}

func kcatVersion(kcat string) string {
	out, _ := exec.Command(kcat, "-V").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Version" {
			return f[1]
		}
	}
	return "(version unknown)"
}
