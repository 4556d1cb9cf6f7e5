package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// envBrokers names the broker seeds of a real Kafka cluster; envKafkaCtl
// names the control script (.ci/kafka.sh) that can restart that broker.
const (
	envBrokers  = "KDELAY_TEST_BROKERS"
	envKafkaCtl = "KDELAY_KAFKA_CTL"
)

// realBrokers returns the seed brokers from KDELAY_TEST_BROKERS, or skips the
// test when the variable is unset.
func realBrokers(t *testing.T) []string {
	t.Helper()
	raw := strings.TrimSpace(os.Getenv(envBrokers))
	if raw == "" {
		t.Skipf("%s is not set: no real Kafka broker to test against (start one with `.ci/kafka.sh start`, see docs/dev/ci.md)", envBrokers)
	}
	var seeds []string
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		t.Fatalf("%s=%q names no broker", envBrokers, raw)
	}
	return seeds
}

func newClient(t *testing.T, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("kdelay-integration"),
	}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func randomTopic(prefix string) string {
	return fmt.Sprintf("%s-%d-%08x", prefix, time.Now().Unix(), rand.Uint32())
}

// logClusterInfo logs the cluster id, controller, brokers and the API
// versions the first broker advertises.
func logClusterInfo(ctx context.Context, t *testing.T, adm *kadm.Client) {
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("BrokerMetadata: %v", err)
	}
	t.Logf("cluster id %q, controller %d, %d broker(s)", md.Cluster, md.Controller, len(md.Brokers))
	for _, b := range md.Brokers {
		rack := "<none>"
		if b.Rack != nil {
			rack = *b.Rack
		}
		t.Logf("  broker %d at %s:%d rack %s", b.NodeID, b.Host, b.Port, rack)
	}
	if len(md.Brokers) == 0 {
		t.Fatalf("metadata lists no brokers")
	}

	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		t.Fatalf("ApiVersions: %v", err)
	}
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			t.Fatalf("ApiVersions from broker %d: %v", v.NodeID, v.Err)
		}
		n := 0
		v.EachKeySorted(func(int16, int16, int16) { n++ })
		t.Logf("broker %d: %d API keys, franz-go version guess %q", v.NodeID, n, v.VersionGuess())
		var parts []string
		for _, key := range []int16{0, 1, 3, 18, 19, 20, 22, 68} {
			if lo, hi, ok := v.KeyVersions(key); ok {
				parts = append(parts, fmt.Sprintf("%s v%d-%d", kmsg.NameForKey(key), lo, hi))
			}
		}
		t.Logf("broker %d: %s", v.NodeID, strings.Join(parts, ", "))
	}
}

// createTopic creates topic and waits until metadata shows every partition
// with a leader. The topic is deleted when the test ends.
func createTopic(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, partitions int32) kadm.TopicDetail {
	t.Helper()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil {
		t.Fatalf("CreateTopic %s: %v", topic, err)
	}
	t.Logf("created topic %s (id %s, %d partitions, rf %d)", resp.Topic, resp.ID, resp.NumPartitions, resp.ReplicationFactor)
	t.Cleanup(func() {
		// Best effort if the test failed before its own delete.
		dctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(dctx, topic)
	})

	var last string
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			d, ok := td[topic]
			switch {
			case !ok:
				last = "topic missing from metadata"
			case d.Err != nil:
				last = d.Err.Error()
			case int32(len(d.Partitions)) != partitions:
				last = fmt.Sprintf("%d partitions in metadata, want %d", len(d.Partitions), partitions)
			default:
				leaderless := 0
				for _, p := range d.Partitions {
					if p.Leader < 0 || p.Err != nil {
						leaderless++
					}
				}
				if leaderless == 0 {
					return d
				}
				last = fmt.Sprintf("%d partitions without a leader", leaderless)
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s not ready: %s (%v)", topic, last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// consumeRecords reads topic from the start until it has seen want records.
func consumeRecords(ctx context.Context, t *testing.T, seeds []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, seeds,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	var got []*kgo.Record
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records from %s before timeout: %v", len(got), want, topic, ctx.Err())
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.Canceled) && !errors.Is(fe.Err, context.DeadlineExceeded) {
				t.Logf("fetch error %s[%d]: %v", fe.Topic, fe.Partition, fe.Err)
			}
		}
		got = append(got, fs.Records()...)
	}
	return got
}

func deleteTopic(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	resps, err := adm.DeleteTopics(ctx, topic)
	if err != nil {
		t.Fatalf("DeleteTopics %s: %v", topic, err)
	}
	if r, ok := resps[topic]; !ok || r.Err != nil {
		t.Fatalf("DeleteTopics %s: response %+v", topic, r)
	}
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil && !td.Has(topic) {
			t.Logf("deleted topic %s", topic)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s still listed after delete: %v", topic, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestRealBrokerTopicRoundTrip checks the basics kdelay relies on against a
// real broker: cluster metadata and API versions, creating an 18-partition
// topic whose partitions all get a leader, a produce/consume round trip that
// keeps the record's key, value and headers, and deleting the topic.
func TestRealBrokerTopicRoundTrip(t *testing.T) {
	seeds := realBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cl := newClient(t, seeds)
	adm := kadm.NewClient(cl)
	logClusterInfo(ctx, t, adm)

	const partitions = 18
	topic := randomTopic("kdelay-it-roundtrip")
	d := createTopic(ctx, t, adm, topic, partitions)
	if got := len(d.Partitions); got != partitions {
		t.Fatalf("topic %s has %d partitions, want %d", topic, got, partitions)
	}
	for _, p := range d.Partitions.Sorted() {
		if p.Leader < 0 {
			t.Fatalf("partition %d has no leader", p.Partition)
		}
	}
	t.Logf("metadata: %s has %d partitions, all with a leader (partition 0 leader %d, replicas %v, isr %v)",
		topic, len(d.Partitions), d.Partitions[0].Leader, d.Partitions[0].Replicas, d.Partitions[0].ISR)

	want := &kgo.Record{
		Topic: topic,
		Key:   []byte("order-42"),
		Value: []byte(`{"hello":"kdelay"}`),
		Headers: []kgo.RecordHeader{
			{Key: "kdelay-deliver-at", Value: []byte("2026-01-02T03:04:05Z")},
			{Key: "kdelay-target", Value: []byte("orders")},
			{Key: "binary", Value: []byte{0x00, 0xff, 0x10}},
			{Key: "empty", Value: []byte{}},
			{Key: "kdelay-target", Value: []byte("duplicate-key-kept")},
		},
	}
	res := cl.ProduceSync(ctx, want)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	prod := res[0].Record
	t.Logf("produced to %s[%d]@%d", prod.Topic, prod.Partition, prod.Offset)

	got := consumeRecords(ctx, t, seeds, topic, 1)
	if len(got) != 1 {
		t.Fatalf("consumed %d records, want 1", len(got))
	}
	r := got[0]
	t.Logf("consumed from %s[%d]@%d with %d headers", r.Topic, r.Partition, r.Offset, len(r.Headers))
	if r.Partition != prod.Partition || r.Offset != prod.Offset {
		t.Errorf("consumed %d@%d, produced %d@%d", r.Partition, r.Offset, prod.Partition, prod.Offset)
	}
	if !bytes.Equal(r.Key, want.Key) || !bytes.Equal(r.Value, want.Value) {
		t.Errorf("consumed key/value %q/%q, want %q/%q", r.Key, r.Value, want.Key, want.Value)
	}
	if len(r.Headers) != len(want.Headers) {
		t.Fatalf("consumed %d headers, want %d: %v", len(r.Headers), len(want.Headers), r.Headers)
	}
	for i, h := range r.Headers {
		w := want.Headers[i]
		if h.Key != w.Key || !bytes.Equal(h.Value, w.Value) {
			t.Errorf("header %d = %q:%q, want %q:%q", i, h.Key, h.Value, w.Key, w.Value)
		}
	}

	deleteTopic(ctx, t, adm, topic)
}

// TestRealBrokerRestart restarts the broker mid-test through the control
// script named by KDELAY_KAFKA_CTL (.ci/kafka.sh) and checks that data
// written before the restart survives and that an existing client carries on.
func TestRealBrokerRestart(t *testing.T) {
	seeds := realBrokers(t)
	ctl := os.Getenv(envKafkaCtl)
	if ctl == "" {
		skipOrFailInCI(t, "%s is not set: no way to restart the broker (CI sets it to .ci/kafka.sh)", envKafkaCtl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	cl := newClient(t, seeds)
	adm := kadm.NewClient(cl)
	topic := randomTopic("kdelay-it-restart")
	createTopic(ctx, t, adm, topic, 3)

	produce := func(val string) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, time.Minute)
		defer pcancel()
		if err := cl.ProduceSync(pctx, &kgo.Record{Topic: topic, Value: []byte(val)}).FirstErr(); err != nil {
			t.Fatalf("produce %q: %v", val, err)
		}
	}
	produce("before-restart")

	if addr := restartBroker(ctx, t, ctl); !slices.Contains(seeds, addr) {
		t.Fatalf("broker came back on %q, not on one of %v", addr, seeds)
	}

	produce("after-restart") // the same client reconnects by itself
	got := consumeRecords(ctx, t, seeds, topic, 2)
	var vals []string
	for _, r := range got {
		vals = append(vals, string(r.Value))
	}
	if strings.Join(vals, ",") != "before-restart,after-restart" && strings.Join(vals, ",") != "after-restart,before-restart" {
		t.Fatalf("consumed %q, want before-restart and after-restart", vals)
	}
	t.Logf("consumed %q after the restart", vals)
	deleteTopic(ctx, t, adm, topic)
}

// restartBroker runs `<ctl> restart`: the broker stops (SIGTERM) and starts
// again on the same ports with the same data. It returns the address the
// script printed.
func restartBroker(ctx context.Context, t *testing.T, ctl string) string {
	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", ctl, "restart")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s restart: %v\n%s%s", ctl, err, stdout.String(), stderr.String())
	}
	t.Logf("broker restarted in %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stdout.String()))
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		t.Logf("  %s", line)
	}
	return strings.TrimSpace(stdout.String())
}
