package main

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/deadletter"
	"github.com/kdelay/kdelay/levels"
)

// The first-minute usage errors: each exits 2 and names what
// to fix.
func TestUsageErrorsOfTheFirstMinute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"topic unknown subcommand", nil, []string{"topic", "frob"}, []string{`unknown command "frob" for "kdelay topic"`, "Run 'kdelay topic --help' for usage."}},
		{"dlq unknown subcommand", nil, []string{"dlq", "frob"}, []string{`unknown command "frob" for "kdelay dlq"`}},
		{"http addr", map[string]string{"KDELAY_HTTP_ADDR": "nonsense"}, []string{"run"}, []string{`KDELAY_HTTP_ADDR="nonsense": want [host]:port`}},
		{"brokers env empty", map[string]string{"KDELAY_BROKERS": ""}, []string{"status"}, []string{`KDELAY_BROKERS="": set but empty`}},
		{"brokers flag empty", nil, []string{"status", "--brokers", ""}, []string{`--brokers="": set but empty`}},
		{"replay bad reason", nil, []string{"dlq", "replay", "--reason", "("}, []string{`invalid --reason "("`}},
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
	// A group alone prints its help.
	r := kdelay(t, t.Context(), map[string]string{}, nil, "topic")
	mustCode(t, r, exitOK)
	mustContain(t, "kdelay topic", r.stdout, "Available Commands:", "create", "describe")
}

func TestUnknownVariableWarns(t *testing.T) {
	t.Parallel()
	r := kdelay(t, t.Context(), map[string]string{"KDELAY_TOPCI": "orders", "KDELAY_LOG_FORMAT": "json"}, nil, "levels")
	mustCode(t, r, exitOK)
	mustContain(t, "stderr", r.stderr, `"msg":"unknown variable ignored; did you mean KDELAY_TOPIC?"`, `"variable":"KDELAY_TOPCI"`)
	if n := strings.Count(r.stderr, "\n"); n != 1 {
		t.Errorf("%d lines on stderr, want one warning:\n%s", n, r.stderr)
	}
}

func TestVersionFlagMatchesCommand(t *testing.T) {
	t.Parallel()
	a := kdelay(t, t.Context(), map[string]string{}, nil, "--version")
	b := kdelay(t, t.Context(), map[string]string{}, nil, "version")
	mustCode(t, a, exitOK)
	mustCode(t, b, exitOK)
	if a.stdout != b.stdout || !strings.HasPrefix(a.stdout, "kdelay dev\ngo     go") {
		t.Errorf("--version printed %q, version %q", a.stdout, b.stdout)
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"bash":       "__start_kdelay",
		"zsh":        "#compdef kdelay",
		"fish":       "complete -c kdelay",
		"powershell": "Register-ArgumentCompleter",
	} {
		r := kdelay(t, t.Context(), map[string]string{}, nil, "completion", shell)
		mustCode(t, r, exitOK)
		mustContain(t, shell+" completion", r.stdout, want)
	}
	// Completion of subcommands and flags works through cobra's __complete.
	r := kdelay(t, t.Context(), map[string]string{}, nil, "__complete", "dlq", "")
	mustCode(t, r, exitOK)
	mustContain(t, "__complete dlq", r.stdout, "list\t", "replay\t")
}

// Client commands log at warn: kgo's connection chatter stays out of the
// output unless --log-level asks for it.
func TestClientCommandsAreQuiet(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr)
	delete(env, "KDELAY_LOG_LEVEL")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--topic", "demo"), exitOK)
	for _, args := range [][]string{
		{"send", "--target", "demo", "--delay", "1s", "--value", "x"},
		{"status"},
		{"topic", "describe"},
		{"dlq", "list"},
	} {
		r := kdelay(t, t.Context(), env, nil, args...)
		mustCode(t, r, exitOK)
		if r.stderr != "" {
			t.Errorf("%s: stderr not empty:\n%s", strings.Join(args, " "), r.stderr)
		}
	}
	r := kdelay(t, t.Context(), env, nil, "status", "--log-level", "debug")
	mustCode(t, r, exitOK)
	mustContain(t, "status --log-level debug", r.stderr, `"component":"kgo"`)
}

func TestUnreachableBrokersNamed(t *testing.T) {
	t.Parallel()
	r := kdelay(t, t.Context(), map[string]string{"KDELAY_LOG_LEVEL": "error"}, nil, "status", "--brokers", "127.0.0.1:1")
	mustCode(t, r, exitFailure)
	mustContain(t, "stderr", r.stderr, "cannot connect to the brokers (check --brokers / KDELAY_BROKERS)", "127.0.0.1:1")
}

func TestSendRefusesWhatTheRelayDeadLetters(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_MAX_DELAY", "24h", "KDELAY_TARGET_DENY", "secret.*")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	_, adm := admin(t, addr)
	for _, topic := range []string{"demo", "secret.x"} {
		if _, err := adm.CreateTopic(t.Context(), 3, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"over max delay", []string{"--target", "demo", "--delay", "1000h"}, "delay 1000h exceeds KDELAY_MAX_DELAY 24h"},
		{"missing target", []string{"--target", "nosuchtopic", "--delay", "1s"}, "target topic nosuchtopic does not exist"},
		{"bad partition", []string{"--target", "demo", "--delay", "1s", "--partition", "99"}, "invalid --partition 99: target topic demo has 3 partitions (0..2)"},
		{"past at", []string{"--target", "demo", "--at", "2020-01-01T00:00:00Z"}, `--at 2020-01-01T00:00:00Z is `},
		{"denied target", []string{"--target", "secret.x", "--delay", "1s"}, "target secret.x refused: denied by KDELAY_TARGET_DENY pattern secret.*"},
		{"delay topic as target", []string{"--target", "delay-topic", "--delay", "1s"}, "refused: the delay topic itself"},
	} {
		args := append([]string{"send", "--value", "x"}, tc.args...)
		r := kdelay(t, t.Context(), env, nil, args...)
		mustCode(t, r, exitUsage)
		mustContain(t, tc.name, r.stderr, tc.want, "(--force sends anyway)")
		// --force sends it anyway (the relay then dead-letters it).
		r = kdelay(t, t.Context(), env, nil, append(args, "--force")...)
		mustCode(t, r, exitOK)
		mustContain(t, tc.name+" --force", r.stdout, "sent 1 record")
		mustContain(t, tc.name+" --force", r.stderr, `"msg":"--force: sending anyway"`, tc.want)
	}
	// Nothing was sent without --force: 6 records, one per --force.
	ends, err := adm.ListEndOffsets(t.Context(), "delay-topic")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	if n != 6 {
		t.Errorf("%d records in the delay topic, want 6 (the --force ones)", n)
	}

	// A bare number is milliseconds: sent, with a warning.
	r := kdelay(t, t.Context(), env, nil, "send", "--target", "demo", "--delay", "5", "--value", "x")
	mustCode(t, r, exitOK)
	mustContain(t, "--delay 5", r.stderr, "--delay 5 is 5ms: a bare number is milliseconds; write 5s for seconds")
}

func TestSendJSON(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 5s 10s 30s")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--topic", "demo"), exitOK)
	r := kdelay(t, t.Context(), env, nil, "send", "--target", "demo", "--delay", "12s", "--value", "v{i}", "--count", "5", "--json")
	mustCode(t, r, exitOK)
	var sum sendSummary
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
		t.Fatalf("send --json: %v\n%s", err, r.stdout)
	}
	if sum.Acked != 5 || sum.Failed != 0 || sum.Interrupted || sum.Partitions[2] != 5 || sum.DueFirst == nil || sum.Target != "demo" {
		t.Errorf("send --json = %+v", sum)
	}
}

func TestLevelsAndDescribeJSON(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "1s 5s 10s", "KDELAY_PARTITIONS_PER_LEVEL", "2")

	r := kdelay(t, t.Context(), env, nil, "levels", "--json")
	mustCode(t, r, exitOK)
	var lv levelsJSON
	if err := json.Unmarshal([]byte(r.stdout), &lv); err != nil {
		t.Fatalf("levels --json: %v\n%s", err, r.stdout)
	}
	if lv.Partitions != 6 || len(lv.Levels) != 3 || lv.Levels[2].DelayMs != 10000 || len(lv.Levels[2].Partitions) != 2 || lv.Levels[2].Partitions[1] != 5 {
		t.Errorf("levels --json = %+v", lv)
	}

	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--config", "retention.ms=86400000"), exitOK)
	r = kdelay(t, t.Context(), env, nil, "topic", "describe", "--json")
	mustCode(t, r, exitOK)
	var d topicsReport
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("topic describe --json: %v\n%s", err, r.stdout)
	}
	if len(d.Partitions) != 6 || d.Mismatch || d.PartitionsNeed != 6 || d.Partitions[5].Level != 3 || d.Partitions[5].Leader < 0 ||
		d.Configs["retention.ms"] != "86400000" || !d.DLQ.Exists || d.DLQ.Partitions != 1 {
		t.Errorf("topic describe --json = %+v", d)
	}
}

func TestTopicCreateUpdatesConfigs(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--config", "retention.ms=604800000"), exitOK)
	r := kdelay(t, t.Context(), env, nil, "topic", "create", "--config", "retention.ms=604800000")
	mustCode(t, r, exitOK)
	mustContain(t, "same config", r.stdout, "exists  delay topic delay-topic: 18 partitions (18 levels x 1) (configs as given)")
	r = kdelay(t, t.Context(), env, nil, "topic", "create", "--config", "retention.ms=1209600000")
	mustCode(t, r, exitOK)
	mustContain(t, "changed config", r.stdout,
		"exists  delay topic delay-topic: 18 partitions (18 levels x 1) (updated retention.ms=1209600000)",
		"exists  dead-letter topic delay-topic.dlq: 1 partition (updated retention.ms=1209600000)")
	r = kdelay(t, t.Context(), env, nil, "topic", "describe", "--json")
	var d topicsReport
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.Configs["retention.ms"] != "1209600000" {
		t.Errorf("after the update: retention.ms = %q (%v)", d.Configs["retention.ms"], err)
	}
}

// Ctrl-C of send --count: it stops within 2s and says how many records
// the brokers acknowledged.
func TestSendInterrupted(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--topic", "demo"), exitOK)
	_, adm := admin(t, addr)
	var sentBefore int64 // records in the delay topic
	countRecords := func() int64 {
		ends, err := adm.ListEndOffsets(t.Context(), "delay-topic")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	for _, count := range []string{"3000000", "2000000000"} {
		ctx, cancel := context.WithCancel(t.Context())
		var r result
		done := make(chan struct{})
		go func() {
			defer close(done)
			r = kdelay(t, ctx, env, nil, "send", "--target", "demo", "--delay", "1h", "--value", "v", "--count", count, "--json")
		}()
		// Interrupt once records flow: the delay topic has new ones.
		base := sentBefore
		deadline := time.Now().Add(20 * time.Second)
		for sentBefore = countRecords(); sentBefore == base; sentBefore = countRecords() {
			if time.Now().After(deadline) {
				t.Fatalf("--count %s: no record written within 20s", count)
			}
			time.Sleep(20 * time.Millisecond) // polling the broker: there is nothing to wait on
		}
		begin := time.Now()
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("--count %s: still running 5s after the interrupt", count)
		}
		took := time.Since(begin)
		t.Logf("--count %s: exit %d %s after the interrupt", count, r.code, took.Round(time.Millisecond))
		if took > 2*time.Second {
			t.Errorf("--count %s: took %s to exit after the interrupt, want < 2s", count, took)
		}
		mustCode(t, r, exitFailure)
		var sum sendSummary
		if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
			t.Fatalf("summary: %v\n%s", err, r.stdout)
		}
		if !sum.Interrupted || int64(sum.Acked) < sentBefore-base {
			t.Errorf("--count %s: summary %+v, want interrupted with at least %d acked", count, sum, sentBefore-base)
		}
		// What it reports as acknowledged is what the topic gained.
		sentBefore = countRecords()
		if int64(sum.Acked) != sentBefore-base {
			t.Errorf("--count %s: %d acked, but the delay topic gained %d records", count, sum.Acked, sentBefore-base)
		}
		mustContain(t, "stderr", r.stderr, "interrupted: ", " of "+count+" records acknowledged")
	}
}

func TestRunWaitsForATopicJustCreated(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr, "KDELAY_MISSING_TOPIC_GRACE", "20s", "KDELAY_LOG_LEVEL", "info")
	s := start(t, env, "run")
	s.stderr.waitFor(t, 20*time.Second, "the missing-topic log line", func(out string) bool {
		return strings.Contains(out, "topic not found; looking again in case it was just created")
	})
	mustCode(t, kdelay(t, t.Context(), testEnv(t, addr), nil, "topic", "create"), exitOK)
	s.stderr.waitFor(t, 20*time.Second, "a partition assigned", func(out string) bool {
		return strings.Contains(out, `"msg":"partition assigned"`)
	})
	if code, _ := s.stop(t, 15*time.Second); code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, s.stderr)
	}

	// Past the grace it exits with the message.
	_, addr2 := newCluster(t)
	begin := time.Now()
	r := kdelay(t, t.Context(), testEnv(t, addr2, "KDELAY_MISSING_TOPIC_GRACE", "1s"), nil, "run")
	mustCode(t, r, exitFailure)
	mustContain(t, "stderr", r.stderr, "delay topic delay-topic does not exist; create it with `kdelay topic create`")
	if took := time.Since(begin); took < time.Second || took > 10*time.Second {
		t.Errorf("exited %s after the start, want after the 1s grace", took)
	}
}

// deadLetterFixture writes dead letters as the relay does: the stamped
// delay-topic record plus kdelay-error and kdelay-source.
func deadLetterFixture(t *testing.T, addr string, tab *levels.Table, errs map[string]string) {
	t.Helper()
	cl, _ := admin(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var rs []*kgo.Record
	for i, key := range sortedKeys(errs) {
		r := &kgo.Record{Key: []byte(key), Value: []byte("v-" + key)}
		if key != "invalid" {
			if err := tab.Stamp(r, "delay-topic", levels.Delay{Target: "demo", Delay: time.Second}, time.Now().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		dl := &kgo.Record{Topic: "delay-topic.dlq", Partition: 0, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
			Headers: levels.DeadLetterHeaders(r.Headers, errs[key], levels.Source("delay-topic", 0, int64(i)))}
		rs = append(rs, dl)
	}
	if err := cl.ProduceSync(t.Context(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func TestDLQListAndReplay(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	tab := levels.Default()
	deadLetterFixture(t, addr, tab, map[string]string{
		"a":       `target topic "demo" missing for 30s`,
		"b":       `target topic "demo" missing for 30s`,
		"c":       `target topic "demo" missing for 30s`,
		"big":     `record too large for topic "demo"`,
		"invalid": "levels: missing target",
	})

	r := kdelay(t, t.Context(), env, nil, "dlq", "list", "--json")
	mustCode(t, r, exitOK)
	var ds []deadletter.Letter
	if err := json.Unmarshal([]byte(r.stdout), &ds); err != nil {
		t.Fatalf("dlq list --json: %v\n%s", err, r.stdout)
	}
	if len(ds) != 5 || ds[0].Key != "a" || ds[0].Target != "demo" || ds[0].Source != "delay-topic/0/0" || !strings.Contains(ds[0].Error, "missing") {
		t.Errorf("dlq list --json = %+v", ds)
	}
	r = kdelay(t, t.Context(), env, nil, "dlq", "list", "--reason", "TOO LARGE")
	mustCode(t, r, exitOK)
	mustContain(t, "dlq list --reason", r.stdout, "PARTITION  OFFSET", `record too large for topic "demo"`, "1 dead letter\n")

	r = kdelay(t, t.Context(), env, nil, "dlq", "replay", "--reason", "missing", "--dry-run")
	mustCode(t, r, exitOK)
	mustContain(t, "dry run", r.stdout, "would replay 3 dead letters", "1 not matching --reason, 1 still invalid")

	r = kdelay(t, t.Context(), env, nil, "dlq", "replay", "--reason", "missing")
	mustCode(t, r, exitOK)
	mustContain(t, "replay", r.stdout, "replayed 3 dead letters from delay-topic.dlq to delay-topic (group kdelay.dlq-replay.missing); 1 not matching --reason, 1 still invalid")

	recs := consume(t, addr, "delay-topic", 3)
	for _, rec := range recs {
		h := headerMap(rec)
		if h[levels.HeaderError] != "" || h[levels.HeaderSource] != "" || h[levels.HeaderDelay] != "" || h[levels.HeaderDeliverAt] == "" || h[levels.HeaderTarget] != "demo" {
			t.Errorf("replayed record %s: headers %v", rec.Key, h)
		}
		if rec.Partition != 0 {
			t.Errorf("replayed record %s (due in the past) on partition %d, want 0 (level 1)", rec.Key, rec.Partition)
		}
	}

	// Again: nothing left to replay under that --reason.
	r = kdelay(t, t.Context(), env, nil, "dlq", "replay", "--reason", "missing")
	mustCode(t, r, exitOK)
	mustContain(t, "second replay", r.stdout, "replayed 0 dead letters")
	// A new dead letter is replayed by the next run, alone.
	deadLetterFixture(t, addr, tab, map[string]string{"d": `target topic "demo" missing for 30s`})
	r = kdelay(t, t.Context(), env, nil, "dlq", "replay", "--reason", "missing")
	mustCode(t, r, exitOK)
	mustContain(t, "third replay", r.stdout, "replayed 1 dead letter ")
	ends, _ := func() (int64, error) {
		_, adm := admin(t, addr)
		e, err := adm.ListEndOffsets(t.Context(), "delay-topic")
		var n int64
		e.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n, err
	}()
	if ends != 4 {
		t.Errorf("%d records in the delay topic after three replays, want 4", ends)
	}
}

// hideTopics makes the cluster answer the first n metadata requests that
// name topic as if topic did not exist yet (a broker whose metadata lags
// behind the controller's); n < 0 hides it for good. It returns how many
// requests it hid.
func hideTopics(c *kfake.Cluster, topic string, n int) *atomic.Int32 {
	var hidden atomic.Int32
	c.ControlKey(kmsg.Metadata.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mreq := req.(*kmsg.MetadataRequest)
		if !slices.ContainsFunc(mreq.Topics, func(t kmsg.MetadataRequestTopic) bool { return t.Topic != nil && *t.Topic == topic }) {
			return nil, nil, false
		}
		if n >= 0 && int(hidden.Load()) >= n {
			return nil, nil, false
		}
		hidden.Add(1)
		resp := mreq.ResponseKind().(*kmsg.MetadataResponse)
		for _, rt := range mreq.Topics {
			t := kmsg.NewMetadataResponseTopic()
			t.Topic = rt.Topic
			t.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	return &hidden
}

func TestTopicCreateWaitsForLeaders(t *testing.T) {
	t.Parallel()
	c, addr := newCluster(t)
	env := testEnv(t, addr)
	// The partition count check before creating asks once; then topic
	// create must poll until the topic shows up.
	hidden := hideTopics(c, "delay-topic", 5)
	r := kdelay(t, t.Context(), env, nil, "topic", "create")
	mustCode(t, r, exitOK)
	if got := hidden.Load(); got != 5 {
		t.Errorf("%d metadata requests hidden, want 5: topic create returned before the topic was visible", got)
	}

	// A topic that never shows up: a bounded wait and an error saying what is missing.
	c2, addr2 := newCluster(t)
	hideTopics(c2, "delay-topic", -1)
	begin := time.Now()
	r = kdelay(t, t.Context(), testEnv(t, addr2), nil, "topic", "create", "--wait", "500ms")
	mustCode(t, r, exitFailure)
	mustContain(t, "stderr", r.stderr, "created topics not ready within --wait 500ms: delay-topic not in the metadata yet")
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("took %s with --wait 500ms", took)
	}
}

func TestStatusPending(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	env := testEnv(t, addr)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create", "--topic", "demo"), exitOK)
	for _, args := range [][]string{
		{"--delay", "30s", "--count", "3"},
		{"--delay", "2h", "--count", "2"},
		{"--at", "2020-01-01T00:00:00Z", "--force"},
	} {
		mustCode(t, kdelay(t, t.Context(), env, nil, append([]string{"send", "--target", "demo", "--value", "x"}, args...)...), exitOK)
	}
	cl, _ := admin(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: "delay-topic", Partition: 1, Value: []byte("no headers")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := kdelay(t, t.Context(), env, nil, "status", "--pending", "--json")
	mustCode(t, r, exitOK)
	var rep statusReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Pending == nil {
		t.Fatalf("status --pending --json: %v\n%s", err, r.stdout)
	}
	pr := rep.Pending
	if pr.Total != 7 || pr.Truncated || len(pr.Levels) != 18 || !slices.Equal(pr.Buckets, []string{"due", "<1m", "<10m", "<1h", "<1d", "later"}) {
		t.Fatalf("pending = %+v", pr)
	}
	for _, tc := range []struct {
		level, bucket int
		want          int64
	}{{1, 0, 1}, {4, 1, 3}, {18, 4, 2}} {
		if got := pr.Levels[tc.level-1].Counts[tc.bucket]; got != tc.want {
			t.Errorf("level %d bucket %s: %d, want %d (%+v)", tc.level, pr.Buckets[tc.bucket], got, tc.want, pr.Levels[tc.level-1])
		}
	}
	if pr.Levels[1].Invalid != 1 {
		t.Errorf("level 2 invalid = %d, want 1", pr.Levels[1].Invalid)
	}

	r = kdelay(t, t.Context(), env, nil, "status", "--pending", "--pending-max", "2")
	mustCode(t, r, exitOK)
	mustContain(t, "status --pending --pending-max 2", r.stdout, "pending records by due time (2 read, TRUNCATED", "LEVEL  DUE  <1M  <10M  <1H  <1D  LATER  INVALID")
}
