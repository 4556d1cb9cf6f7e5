package containers

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/levels"
)

// kafkaImage is pinned: never a floating tag.
const kafkaImage = "apache/kafka:4.1.0"

const (
	publicPort    = "9093/tcp" // PLAINTEXT, mapped to a host port
	starterScript = "/tmp/kdelay_kafka_start.sh"
)

// runKafka starts one KRaft node (broker and controller) from kafkaImage.
// The advertised listener must name the host port Docker mapped, known only
// once the container runs: the container waits for a starter script that a
// post-start hook copies in with that address, as testcontainers-go's own
// Kafka module does for its images. (That module's releases on the module
// proxy here stop at v0.40.0, which supports only the confluent-local
// image; see docs/dev/testing.md.)
func runKafka(ctx context.Context) (*testcontainers.DockerContainer, error) {
	return testcontainers.Run(ctx, kafkaImage,
		testcontainers.WithExposedPorts(publicPort),
		testcontainers.WithEnv(map[string]string{
			"CLUSTER_ID":                                             "kdelay-integration-0001",
			"KAFKA_NODE_ID":                                          "1",
			"KAFKA_PROCESS_ROLES":                                    "broker,controller",
			"KAFKA_LISTENERS":                                        "PLAINTEXT://0.0.0.0:9093,BROKER://0.0.0.0:9092,CONTROLLER://0.0.0.0:9094",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":                   "BROKER:PLAINTEXT,PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_INTER_BROKER_LISTENER_NAME":                       "BROKER",
			"KAFKA_CONTROLLER_LISTENER_NAMES":                        "CONTROLLER",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                         "1@localhost:9094",
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                        "false", // the dead-letter scenario needs a missing topic to stay missing
			"KAFKA_NUM_PARTITIONS":                                   "1",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                 "1",
			"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":                     "4",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                    "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                 "0",
		}),
		testcontainers.WithEntrypoint("sh"),
		testcontainers.WithCmd("-c", "while [ ! -f "+starterScript+" ]; do sleep 0.1; done; exec bash "+starterScript),
		testcontainers.WithLifecycleHooks(testcontainers.ContainerLifecycleHooks{
			PostStarts: []testcontainers.ContainerHook{
				func(ctx context.Context, c testcontainers.Container) error {
					if err := wait.ForMappedPort(publicPort).WaitUntilReady(ctx, c); err != nil {
						return fmt.Errorf("wait for mapped port: %w", err)
					}
					endpoint, err := c.PortEndpoint(ctx, publicPort, "PLAINTEXT")
					if err != nil {
						return fmt.Errorf("port endpoint: %w", err)
					}
					inspect, err := c.Inspect(ctx)
					if err != nil {
						return fmt.Errorf("inspect: %w", err)
					}
					script := fmt.Sprintf("#!/bin/bash\nexport KAFKA_ADVERTISED_LISTENERS=%s,BROKER://%s:9092\nexec /etc/kafka/docker/run\n",
						endpoint, inspect.Config.Hostname)
					if err := c.CopyToContainer(ctx, []byte(script), starterScript, 0o755); err != nil {
						return fmt.Errorf("copy starter script: %w", err)
					}
					return wait.ForLog("Kafka Server started").WithStartupTimeout(2*time.Minute).WaitUntilReady(ctx, c)
				},
			},
		}),
	)
}

// envLocalKafka names a Kafka image built on this machine by the
// repository's .ci/kafka-image.sh (no registry needed); when set, the suite
// runs against it instead of kafkaImage.
const envLocalKafka = "KDELAY_TC_KAFKA_IMAGE"

// runLocalKafka starts one KRaft node from img (.ci/kafka-image.sh's
// image) on the host's network, its client listener on 127.0.0.1:port.
func runLocalKafka(ctx context.Context, img string, port, cport int) (*testcontainers.DockerContainer, error) {
	return testcontainers.Run(ctx, img,
		testcontainers.CustomizeRequestOption(func(req *testcontainers.GenericContainerRequest) error {
			req.NetworkMode = "host"
			// testcontainers attaches its default network to every
			// request (under podman a bridge network of its own); an
			// engine refuses it with the host network.
			req.EndpointSettingsModifier = func(m map[string]*network.EndpointSettings) { clear(m) }
			return nil
		}),
		testcontainers.WithEnv(map[string]string{
			"KAFKA_PORT":            strconv.Itoa(port),
			"KAFKA_CONTROLLER_PORT": strconv.Itoa(cport),
			"KAFKA_LISTEN_HOST":     "127.0.0.1",
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("Kafka Server started").WithStartupTimeout(2*time.Minute)),
	)
}

// freePort is a TCP port on 127.0.0.1 that nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// TestSuiteOnKafkaContainer starts Kafka in Docker, checks that kdelay's
// producer contract round-trips through it, and runs the integration
// package against it.
func TestSuiteOnKafkaContainer(t *testing.T) {
	if os.Getenv("KDELAY_TEST_DOCKER") != "1" {
		t.Skip("opt-in: set KDELAY_TEST_DOCKER=1 to run the suite against " + kafkaImage + " in Docker")
	}
	testcontainers.SkipIfProviderIsNotHealthy(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, broker := kafkaImage, ""
	if local := os.Getenv(envLocalKafka); local != "" {
		img = local
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		cport, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		c, err := runLocalKafka(ctx, local, port, cport)
		testcontainers.CleanupContainer(t, c)
		if err != nil {
			t.Fatalf("start %s: %v", local, err)
		}
		broker = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	} else {
		c, err := runKafka(ctx)
		testcontainers.CleanupContainer(t, c)
		if err != nil {
			t.Fatalf("start %s: %v", kafkaImage, err)
		}
		if broker, err = c.PortEndpoint(ctx, publicPort, ""); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s listening on %s", img, broker)
	smoke(ctx, t, broker)

	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"test", "-race", "-count=1", "-v", "-timeout", "30m"}
	if run := os.Getenv("KDELAY_TEST_RUN"); run != "" {
		args = append(args, "-run", run)
	}
	args = append(args, "./integration/")
	cmd := exec.CommandContext(context.Background(), "go", args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KDELAY_TEST_DOCKER=") && !strings.HasPrefix(kv, "KDELAY_TEST_BROKERS=") &&
			!strings.HasPrefix(kv, "KDELAY_KAFKA_CTL=") && !strings.HasPrefix(kv, "KDELAY_TEST_TIER=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "KDELAY_TEST_BROKERS="+broker, "KDELAY_TEST_TIER=testcontainers "+img)
	t.Logf("running: (cd %s && KDELAY_TEST_BROKERS=%s go %s)", root, broker, strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		t.Fatalf("integration suite against %s: %v", kafkaImage, err)
	}
}

// smoke creates a topic, produces a record stamped by kdelay's Go helper
// and reads it back with its headers.
func smoke(ctx context.Context, t *testing.T, broker string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tab := levels.Default()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, tab.Partitions(), 1, nil, "smoke-delay"); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	r := &kgo.Record{Key: []byte("k"), Value: []byte("v")}
	if err := tab.Stamp(r, "smoke-delay", levels.Delay{Target: "smoke-target", Delay: 90 * time.Second}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"smoke-delay": {r.Partition: kgo.NewOffset().AtStart()},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	fs := cons.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatalf("fetch: %v", err)
	}
	recs := fs.Records()
	if len(recs) != 1 {
		t.Fatalf("read %d records back, want 1", len(recs))
	}
	sch, err := tab.Parse(recs[0].Headers, recs[0].Timestamp)
	if err != nil || sch.Target != "smoke-target" {
		t.Fatalf("read back schedule %+v, %v", sch, err)
	}
	t.Logf("smoke: record stamped for level %d (partition %d) read back, due %s", tab.LevelFor(90*time.Second), r.Partition, sch.Due.Format(time.RFC3339))
}
