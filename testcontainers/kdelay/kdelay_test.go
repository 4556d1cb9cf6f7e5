package kdelay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/testcontainers/kdelay"
)

// The images under test; `make test-containers` (.ci/containers.sh) builds
// both and sets these.
const (
	// envImage names the kdelay image.
	envImage = "KDELAY_TC_IMAGE"
	// envKafkaImage names a Kafka image with the interface of the
	// repository's .ci/kafka-image/kafka-run.sh (KAFKA_PORT,
	// KAFKA_CONTROLLER_PORT; advertises 127.0.0.1).
	envKafkaImage = "KDELAY_TC_KAFKA_IMAGE"
)

// requireEngine returns the images, or skips when they are not named or no
// container engine answers; under CI=true it fails instead of skipping.
func requireEngine(t *testing.T) (img, kafkaImg string) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") == "true" {
		skip = t.Fatalf
	}
	img, kafkaImg = os.Getenv(envImage), os.Getenv(envKafkaImage)
	if img == "" || kafkaImg == "" {
		skip("%s and %s name the images under test (make test-containers builds and sets them)", envImage, envKafkaImage)
	}
	if err := engineHealth(); err != nil {
		skip("no container engine (DOCKER_HOST=%q): %v", os.Getenv("DOCKER_HOST"), err)
	}
	return img, kafkaImg
}

// engineHealth is nil when testcontainers reaches a container engine
// (it panics when it finds no Docker host at all).
func engineHealth() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	p, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return err
	}
	return p.Health(context.Background())
}

// hostNetwork puts a container in the host's network namespace.
var hostNetwork = kdelay.HostNetwork

// runKafka starts one KRaft node from kafkaImg on the host's network and
// returns its address.
func runKafka(ctx context.Context, t *testing.T, kafkaImg string) string {
	t.Helper()
	port, cport := freePort(t), freePort(t)
	c, err := testcontainers.Run(ctx, kafkaImg, hostNetwork,
		testcontainers.WithEnv(map[string]string{
			"KAFKA_PORT":            strconv.Itoa(port),
			"KAFKA_CONTROLLER_PORT": strconv.Itoa(cport),
			"KAFKA_LISTEN_HOST":     "127.0.0.1",
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("Kafka Server started").WithStartupTimeout(2*time.Minute)))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start %s: %v", kafkaImg, err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	t.Logf("kafka: %s on %s", kafkaImg, addr)
	return addr
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestOptionErrors: bad options fail Run before any container exists.
func TestOptionErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []testcontainers.ContainerCustomizer
		want string
	}{
		{"no brokers", nil, kdelay.ErrNoBrokers.Error()},
		{"empty broker", []testcontainers.ContainerCustomizer{kdelay.WithBrokers("")}, "empty broker"},
		{"empty topic", []testcontainers.ContainerCustomizer{kdelay.WithBrokers("b:9092"), kdelay.WithTopic("")}, "empty topic"},
		{"no levels", []testcontainers.ContainerCustomizer{kdelay.WithBrokers("b:9092"), kdelay.WithLevels(" ")}, "no levels"},
		{"k=0", []testcontainers.ContainerCustomizer{kdelay.WithBrokers("b:9092"), kdelay.WithPartitionsPerLevel(0)}, "at least 1"},
		{"mode", []testcontainers.ContainerCustomizer{kdelay.WithBrokers("b:9092"), kdelay.WithDeliveryMode("twice")}, `"twice"`},
		{"timeout", []testcontainers.ContainerCustomizer{kdelay.WithBrokers("b:9092"), kdelay.WithStartupTimeout(0)}, "positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kdelay.Run(ctx, "kdelay:never-started", tc.opts...)
			if c != nil {
				t.Errorf("Run returned a container")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := kdelay.Run(ctx, "x"); !errors.Is(err, kdelay.ErrNoBrokers) {
		t.Errorf("Run without brokers: %v, want ErrNoBrokers", err)
	}
}

// TestRelay starts Kafka and, per delivery mode, a relay with its own
// levels and topic; records with delays on three levels are forwarded,
// none early and each within a bound; /readyz and /metrics answer; a stop
// (SIGTERM) ends the relay with exit code 0.
func TestRelay(t *testing.T) {
	img, kafkaImg := requireEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel) // after the parallel subtests
	broker := runKafka(ctx, t, kafkaImg)

	// A relay that exits fails Run at once with its output, without
	// waiting out the startup timeout.
	t.Run("missing topics", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		c, err := kdelay.Run(ctx, img,
			kdelay.WithBrokers(broker),
			kdelay.WithTopic("tc-missing"),
			kdelay.WithoutTopicCreation(),
			kdelay.WithHostNetwork(),
			testcontainers.WithEnv(map[string]string{"KDELAY_MISSING_TOPIC_GRACE": "1s"}))
		testcontainers.CleanupContainer(t, c)
		const want = "the relay exited"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "tc-missing") {
			t.Fatalf("Run: %v, want an error containing %q and the relay's log", err, want)
		}
		if d := time.Since(start); d > time.Minute {
			t.Errorf("Run took %s to fail", d)
		}
		t.Logf("Run failed as it should after %s: %s", time.Since(start).Round(time.Millisecond), firstLine(err.Error()))
	})

	for _, mode := range []kdelay.DeliveryMode{kdelay.AtLeastOnce, kdelay.ExactlyOnce} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			topic := "tc-" + string(mode)
			relay, err := kdelay.Run(ctx, img,
				kdelay.WithBrokers(broker),
				kdelay.WithTopic(topic),
				kdelay.WithGroup(topic+"-relays"),
				kdelay.WithLevels("1s 2s 4s"),
				kdelay.WithDeliveryMode(mode),
				kdelay.WithHostNetwork(),
				testcontainers.WithEnv(map[string]string{"KDELAY_LOG_FORMAT": "json"}),
			)
			testcontainers.CleanupContainer(t, relay)
			if err != nil {
				t.Fatal(err)
			}
			if relay.Topic() != topic {
				t.Errorf("Topic() = %q, want %q", relay.Topic(), topic)
			}
			checkRelay(ctx, t, relay, broker, topic+"-out")
		})
	}
}

func checkRelay(ctx context.Context, t *testing.T, relay *kdelay.Container, broker, target string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, target); err != nil {
		t.Fatalf("create %s: %v", target, err)
	}

	// Levels 1s 2s 4s own partitions 0, 1, 2; a record goes to the largest
	// level not above its delay.
	delays := []struct {
		d         time.Duration
		partition int32
	}{{1500 * time.Millisecond, 0}, {2 * time.Second, 1}, {3 * time.Second, 1}, {4 * time.Second, 2}}
	const each = 5
	var recs []*kgo.Record
	for i := range each {
		for _, d := range delays {
			recs = append(recs, &kgo.Record{
				Topic:     relay.Topic(),
				Partition: d.partition,
				Key:       fmt.Appendf(nil, "k-%s-%d", d.d, i),
				Value:     []byte("v"),
				Headers: []kgo.RecordHeader{
					{Key: "kdelay-target", Value: []byte(target)},
					{Key: "kdelay-delay", Value: []byte(d.d.String())},
				},
			})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	due := map[string]time.Time{}
	for _, r := range recs {
		d, _ := time.ParseDuration(string(r.Headers[1].Value))
		due[string(r.Key)] = r.Timestamp.Add(d)
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(target),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	const late = 3 * time.Second
	seen := map[string]bool{}
	var maxLate time.Duration
	for len(seen) < len(recs) {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume %s after %d of %d records: %v", target, len(seen), len(recs), err)
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			k := string(r.Key)
			want, ok := due[k]
			switch {
			case !ok:
				t.Errorf("unexpected record %q", k)
			case seen[k]:
				t.Errorf("record %q forwarded twice", k)
			case now.Before(want) || r.Timestamp.Before(want):
				t.Errorf("record %q forwarded early: at %s, due %s", k, r.Timestamp.Format(time.StampMilli), want.Format(time.StampMilli))
			case r.Timestamp.Sub(want) > late:
				t.Errorf("record %q forwarded %s late (> %s)", k, r.Timestamp.Sub(want), late)
			}
			if d := r.Timestamp.Sub(want); d > maxLate {
				maxLate = d
			}
			seen[k] = true
		})
	}
	t.Logf("%d records forwarded, none early, max lateness %s", len(seen), maxLate)

	for _, path := range []string{"/readyz", "/metrics"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, relay.HTTPEndpoint()+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}

	stop := 30 * time.Second
	start := time.Now()
	if err := relay.Stop(ctx, &stop); err != nil {
		t.Fatalf("stop: %v", err)
	}
	st, err := relay.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 0 {
		t.Errorf("the relay exited %d on SIGTERM, want 0", st.ExitCode)
	}
	t.Logf("SIGTERM: exit code %d after %s", st.ExitCode, time.Since(start).Round(time.Millisecond))
}

// TestRunBadLevels: a relay that cannot start fails Run with its output,
// here from "kdelay topic create", which refuses the level table before it
// connects.
func TestRunBadLevels(t *testing.T) {
	img, _ := requireEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := kdelay.Run(ctx, img,
		kdelay.WithBrokers(net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))),
		kdelay.WithHostNetwork(),
		kdelay.WithLevels("5s 1s"))
	testcontainers.CleanupContainer(t, c)
	const want = "topic create exited 2"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "not greater than the previous entry") {
		t.Fatalf("Run: %v, want an error containing %q and the relay's message", err, want)
	}
	t.Logf("Run failed as it should: %s", firstLine(err.Error()))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
