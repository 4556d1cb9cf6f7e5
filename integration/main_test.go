package integration

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Environment variables of the suite (see docs/dev/testing.md).
const (
	// envDocker=1 opts into tier 4: a Kafka container started by
	// testcontainers-go from the nested module integration/containers.
	envDocker = "KDELAY_TEST_DOCKER"
	// envTier names the tier in the report when a wrapper (the container
	// module) points KDELAY_TEST_BROKERS at its own broker.
	envTier = "KDELAY_TEST_TIER"
	// envReport names a markdown file every scenario appends its row to.
	envReport = "KDELAY_TEST_REPORT"
	// envAllLevels=1 runs all 18 default levels (level 18 is 2h).
	envAllLevels = "KDELAY_TEST_ALL_LEVELS"
	// envRun passes -run on to the suite run by the container module.
	envRun = "KDELAY_TEST_RUN"
	// envLogs names a directory that keeps the relay children's logs
	// (default: the test's temporary directory, removed at its end).
	envLogs = "KDELAY_TEST_LOGS"
)

// suite is what every scenario of the package shares: one broker and one
// kdelay binary.
var suite struct {
	tier  string         // kfake, real or testcontainers
	seeds []string       // broker seeds the relays and the test clients use
	ctl   string         // KDELAY_KAFKA_CTL: restarts the broker (real tier only)
	bin   string         // the kdelay binary under test
	race  bool           // the binary was built with -race
	kfake *kfake.Cluster // the in-process broker (kfake tier only), for fault injection
}

// TestMain picks the broker, builds the kdelay binary once, and runs the
// tests. Broker, in this order:
//
//  1. KDELAY_TEST_BROKERS: a real cluster (CI: Apache Kafka from Maven jars).
//  2. KDELAY_TEST_DOCKER=1: the container tier. The nested module
//     integration/containers (which keeps Docker dependencies out of the
//     main module) starts a pinned Kafka image with testcontainers-go and
//     runs this package against it; without a reachable Docker engine it
//     skips and the suite falls back to 3.
//  3. An in-process kfake cluster started here; the relays, which are
//     child processes, connect to its address.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// The scenarios spend their time waiting for due times, in child
	// processes and timers, not on the CPU: run them all at once rather
	// than GOMAXPROCS at a time (unless -parallel says otherwise).
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", "16")
	}

	var stopBroker func()
	switch raw := strings.TrimSpace(os.Getenv(envBrokers)); {
	case raw != "":
		for _, s := range strings.Split(raw, ",") {
			if s = strings.TrimSpace(s); s != "" {
				suite.seeds = append(suite.seeds, s)
			}
		}
		suite.tier = "real"
		if tier := os.Getenv(envTier); tier != "" {
			suite.tier = tier
		} else {
			suite.ctl = os.Getenv(envKafkaCtl)
		}
	case os.Getenv(envDocker) == "1":
		if code, ran := runContainerTier(); ran {
			return code
		}
		fmt.Println("integration: no Docker engine reachable (the container tier skipped); falling back to kfake")
		fallthrough
	default:
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			fmt.Fprintln(os.Stderr, "integration: kfake:", err)
			return 1
		}
		stopBroker = c.Close
		suite.kfake = c
		suite.seeds = c.ListenAddrs()
		suite.tier = "kfake"
	}
	if stopBroker != nil {
		defer stopBroker()
	}

	dir, err := os.MkdirTemp("", "kdelay-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := buildBinary(dir); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	fmt.Printf("integration: tier %s, brokers %s, binary %s (race %v)\n", suite.tier, strings.Join(suite.seeds, ","), suite.bin, suite.race)
	code := m.Run()
	printSummary(os.Stdout)
	return code
}

// moduleRoot is the directory of the main module (the tests run in
// integration/).
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root := filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("no go.mod above %s: %w", wd, err)
	}
	return root, nil
}

// goTool is the go command: go test puts its own GOROOT/bin first on the
// test's PATH.
func goTool() string { return "go" }

// buildBinary builds ./cmd/kdelay into dir, with -race when this test
// binary has it, so that a data race in a relay child fails the run too.
func buildBinary(dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	suite.bin = filepath.Join(dir, "kdelay")
	args := []string{"build", "-o", suite.bin}
	if raceEnabled {
		args = append(args, "-race")
		suite.race = true
	}
	args = append(args, "./cmd/kdelay")
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	fmt.Printf("integration: built kdelay in %s\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// runContainerTier runs the nested module's container test, which starts
// Kafka in Docker and runs this package against it. ran is false when it
// skipped because no Docker engine is reachable.
func runContainerTier() (code int, ran bool) {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1, true
	}
	args := []string{"test", "-count=1", "-v", "-timeout", "60m", "-run", "^TestSuiteOnKafkaContainer$", "."}
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = filepath.Join(root, "integration", "containers")
	cmd.Env = os.Environ()
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		cmd.Env = append(cmd.Env, envRun+"="+f.Value.String())
	}
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(os.Stdout, &out)
	cmd.Stderr = io.MultiWriter(os.Stderr, &out)
	fmt.Printf("integration: %s=1: running the container tier (cd integration/containers && go %s)\n", envDocker, strings.Join(args, " "))
	err = cmd.Run()
	if strings.Contains(out.String(), "--- SKIP: TestSuiteOnKafkaContainer") {
		return 0, false
	}
	if err != nil {
		return 1, true
	}
	return 0, true
}

// requireCtl skips a test that restarts the broker unless the real-broker
// tier can do it. On the real tier without KDELAY_KAFKA_CTL it fails under
// CI=true (.ci/run sets it).
func requireCtl(t *testing.T) {
	t.Helper()
	if suite.tier != "real" {
		t.Skipf("needs the real-broker tier with %s (set by .ci/run to .ci/kafka.sh); tier is %s", envKafkaCtl, suite.tier)
	}
	if suite.ctl == "" {
		skipOrFailInCI(t, "%s is not set: no way to restart the broker (.ci/run sets it to .ci/kafka.sh)", envKafkaCtl)
	}
}

// testContext is a context for a scenario, cancelled when the test ends.
func testContext(t *testing.T, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}
