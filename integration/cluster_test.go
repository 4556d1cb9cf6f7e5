//go:build cluster

package integration

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/levels"
)

// The cluster tier (build tag cluster): failover of a replicated Kafka
// cluster under a steady load, with the relay running. KDELAY_TEST_BROKERS
// names a cluster of envCluster brokers started by `.ci/kafka.sh start
// --brokers 3` (replication factor 3, min.insync.replicas 2 by default)
// and KDELAY_KAFKA_CTL the script that stops, kills and starts its brokers
// one by one. .ci/cluster.sh runs it:
//
//	go test -tags cluster -race -count=1 -v -run '^TestCluster' ./integration/
//
// Without the variables the tests skip, except under CI=true, where a run
// with the tag is the step meant to run them and must not pass by
// skipping.
const (
	// envCluster is the number of brokers in KDELAY_TEST_BROKERS (3).
	envCluster = "KDELAY_TEST_CLUSTER"
	// envClusterVars adds comma-separated KEY=VALUE settings to the
	// relays of the cluster scenarios (a delivery mode, say).
	envClusterVars = "KDELAY_TEST_CLUSTER_VARS"
	// envClusterLoad scales the steady load: records per second (default 100).
	envClusterLoad = "KDELAY_TEST_CLUSTER_RATE"
)

// requireTier skips, or fails under CI=true, when a tagged tier's
// variables are missing.
func requireTier(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and the %s tier was asked for (-tags cluster), but %s", t.Name(), why)
	}
	t.Skip(why)
}

// clusterCtx is what a cluster scenario needs to know about the cluster.
type clusterCtx struct {
	t       *testing.T
	brokers int
	ctl     string
	cl      *kgo.Client
	adm     *kadm.Client
}

func requireCluster(t *testing.T) *clusterCtx {
	t.Helper()
	n, err := strconv.Atoi(os.Getenv(envCluster))
	switch {
	case os.Getenv(envCluster) == "":
		requireTier(t, envCluster+" is not set (run .ci/cluster.sh cluster, or see docs/dev/ci.md)")
	case err != nil || n < 3:
		t.Fatalf("%s=%q: want the number of brokers, at least 3", envCluster, os.Getenv(envCluster))
	case suite.tier != "real" || os.Getenv(envKafkaCtl) == "":
		requireTier(t, fmt.Sprintf("needs %s (the cluster) and %s (.ci/kafka.sh); tier is %s", envBrokers, envKafkaCtl, suite.tier))
	}
	c := &clusterCtx{t: t, brokers: n, ctl: os.Getenv(envKafkaCtl)}
	t.Cleanup(func() {
		if t.Failed() { // a scenario that failed half-way may leave brokers down
			for id := 1; id <= n; id++ {
				c.ctlRun("start", strconv.Itoa(id))
			}
		}
	})
	c.cl = newClient(t, suite.seeds)
	c.adm = kadm.NewClient(c.cl)
	c.waitHealthy(3 * time.Minute)
	return c
}

// ctlRun runs `kafka.sh args...` (stop N, kill N, start N).
func (c *clusterCtx) ctlRun(args ...string) time.Duration {
	c.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", append([]string{c.ctl}, args...)...).CombinedOutput()
	if err != nil && args[0] == "start" {
		// Under load a starting broker can be taken for dead (its wrapper
		// exits while the JVM comes up); start is idempotent: ask again.
		c.t.Logf("kafka.sh %s failed (%v); asking again:\n%s", strings.Join(args, " "), err, lastLines(out, 5))
		out, err = exec.CommandContext(ctx, "bash", append([]string{c.ctl}, args...)...).CombinedOutput()
	}
	d := time.Since(start)
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", c.ctl, strings.Join(args, " "), err, out)
	}
	c.t.Logf("kafka.sh %s: %s (%s)", strings.Join(args, " "), strings.Join(strings.Fields(string(out)), " "), d.Round(time.Millisecond))
	return d
}

// waitHealthy waits until every broker is in the metadata and every
// partition of every topic, internal ones included, has its full ISR, so
// that a scenario starts, and leaves, a whole cluster.
func (c *clusterCtx) waitHealthy(timeout time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start, last := time.Now(), ""
	for {
		md, err := c.metadata(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case len(md.Brokers) != c.brokers:
			last = fmt.Sprintf("%d of %d brokers in the metadata", len(md.Brokers), c.brokers)
		default:
			short := 0
			for _, t := range md.Topics {
				for _, p := range t.Partitions {
					if len(p.ISR) < len(p.Replicas) || p.Leader < 0 || p.ErrorCode != 0 {
						short++
					}
				}
			}
			if short == 0 {
				if d := time.Since(start); d > time.Second {
					c.t.Logf("cluster healthy (%d brokers, every ISR full) after %s", c.brokers, d.Round(time.Millisecond))
				}
				return
			}
			last = fmt.Sprintf("%d partitions with a short ISR or no leader", short)
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("cluster not healthy within %s: %s", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// metadata asks a broker for the metadata of topics (nil: all, internal
// ones included), bypassing the client's cache: kadm's BrokerMetadata and
// ListTopics answer from it, and it kept a restarted broker out of the
// broker list for minutes.
func (c *clusterCtx) metadata(ctx context.Context, topics ...string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	if len(topics) == 0 {
		req.Topics = nil // all topics
	}
	return req.RequestWith(ctx, c.cl)
}

// leaders returns, per broker, how many partitions of topic it leads.
func (c *clusterCtx) leaders(topic string) map[int32]int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := c.metadata(ctx, topic)
	if err == nil && (len(md.Topics) != 1 || md.Topics[0].ErrorCode != 0) {
		err = fmt.Errorf("topic %s not in the metadata: %+v", topic, md.Topics)
	}
	if err != nil {
		c.t.Fatalf("metadata of %s: %v", topic, err)
	}
	out := make(map[int32]int)
	for _, p := range md.Topics[0].Partitions {
		out[p.Leader]++
	}
	return out
}

// busiest returns the broker that leads the most partitions of topic.
func (c *clusterCtx) busiest(topic string) (int32, map[int32]int) {
	ls := c.leaders(topic)
	best := int32(-1)
	for _, b := range slices.Sorted(maps.Keys(ls)) {
		if best < 0 || ls[b] > ls[best] {
			best = b
		}
	}
	return best, ls
}

// coordinator returns the broker coordinating group.
func (c *clusterCtx) coordinator(group string) int32 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gs, err := c.adm.DescribeGroups(ctx, group)
	if err != nil {
		c.t.Fatalf("describe group %s: %v", group, err)
	}
	g, ok := gs[group]
	if !ok || g.Err != nil {
		c.t.Fatalf("describe group %s: %v", group, g.Err)
	}
	return g.Coordinator.NodeID
}

// load is a steady producer: every tick it sends a burst of records with
// delays spread over [lo, hi], asynchronously (a produce that waits for
// a leader or for the ISR does not stop the clock), registering each one
// with the scenario once it is acknowledged.
type load struct {
	s      *scenario
	prefix string
	cancel context.CancelFunc
	done   chan struct{}
	n      atomic.Int64 // records handed to the producer
	acked  atomic.Int64
	failed atomic.Int64
	// stopped: the test ended before the load did (its records fail
	// with the client's close; nothing to report).
	stopped atomic.Bool
	wg      sync.WaitGroup
}

func clusterRate(t *testing.T) int {
	if v := os.Getenv(envClusterLoad); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("%s=%q: want records per second, at least 10", envClusterLoad, v)
		}
		return n
	}
	return 100
}

func startLoad(s *scenario, prefix, target string, lo, hi time.Duration) *load {
	rate := clusterRate(s.t)
	const tick = 100 * time.Millisecond
	burst := max(1, rate/10)
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{s: s, prefix: prefix, cancel: cancel, done: make(chan struct{})}
	ds := spread(997, lo, hi)
	s.t.Cleanup(func() { // a test that failed before stop
		if ctx.Err() == nil {
			l.stopped.Store(true)
			cancel()
			<-l.done
		}
	})
	go func() {
		defer close(l.done)
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for ctx.Err() == nil {
			for range burst {
				i := l.n.Add(1) - 1
				r := s.stamped(fmt.Sprintf("%s-%05d", prefix, i), levels.Delay{Target: target, Delay: ds[i%int64(len(ds))]})
				l.wg.Add(1)
				s.cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
					defer l.wg.Done()
					if err != nil {
						if l.failed.Add(1) == 1 && !l.stopped.Load() {
							s.t.Errorf("load: produce %s: %v", r.Key, err)
						}
						return
					}
					l.acked.Add(1)
					s.register(r)
				})
			}
			select {
			case <-ctx.Done():
			case <-tk.C:
			}
		}
	}()
	return l
}

// stop ends the load and waits (at most timeout) for every record handed
// to the producer to be acknowledged; it returns their keys.
func (l *load) stop(timeout time.Duration) []string {
	l.s.t.Helper()
	l.cancel()
	<-l.done
	acked := make(chan struct{})
	go func() { l.wg.Wait(); close(acked) }()
	select {
	case <-acked:
	case <-time.After(timeout):
		l.s.t.Fatalf("load: %d of %d records not acknowledged within %s", l.n.Load()-l.acked.Load()-l.failed.Load(), l.n.Load(), timeout)
	}
	l.s.t.Logf("load: %d records sent (%d failed)", l.acked.Load(), l.failed.Load())
	return l.s.sentKeys(l.prefix + "-")
}

// readiness polls a relay's /readyz every 100ms and keeps the intervals
// during which it answered anything but 200.
type readiness struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	notReady []span
	since    time.Time // start of the current not-ready span, zero while ready
	lastBody string
}

type span struct{ from, to time.Time }

func watchReadiness(p *relayProc) *readiness {
	ctx, cancel := context.WithCancel(context.Background())
	rd := &readiness{cancel: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: time.Second}
	go func() {
		defer close(rd.done)
		for ctx.Err() == nil {
			ok, body := false, ""
			if resp, err := client.Get(p.httpURL + "/readyz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				ok, body = resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
			} else {
				body = err.Error()
			}
			now := time.Now()
			rd.mu.Lock()
			switch {
			case !ok && rd.since.IsZero():
				rd.since, rd.lastBody = now, body
			case ok && !rd.since.IsZero():
				rd.notReady = append(rd.notReady, span{rd.since, now})
				rd.since = time.Time{}
			}
			rd.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return rd
}

// ready reports whether the last answer was 200.
func (rd *readiness) ready() bool {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.since.IsZero()
}

func (rd *readiness) stop() []span {
	rd.cancel()
	<-rd.done
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.since.IsZero() {
		rd.notReady = append(rd.notReady, span{rd.since, time.Now()})
	}
	return rd.notReady
}

func fmtSpans(ss []span, t0 time.Time) string {
	if len(ss) == 0 {
		return "never"
	}
	var parts []string
	for _, s := range ss {
		parts = append(parts, fmt.Sprintf("+%s..+%s (%s)", fmtDur(s.from.Sub(t0)), fmtDur(s.to.Sub(t0)), fmtDur(s.to.Sub(s.from))))
	}
	return strings.Join(parts, ", ")
}

// newClusterScenario is a scenario on the cluster: every topic with
// replication factor 3 (min.insync.replicas 2 from the broker default),
// levels "1s 2s 4s 8s" with 3 partitions per level (12 partitions, so
// that every broker leads some), a 3-partition target. mode, when set,
// is the relays' KDELAY_DELIVERY (KDELAY_TEST_CLUSTER_VARS may override
// it); in exactly-once mode the observer reads read_committed.
func newClusterScenario(t *testing.T, name string, mode ...string) *scenario {
	vars := map[string]string{}
	if len(mode) > 0 && mode[0] != "" {
		vars["KDELAY_DELIVERY"] = mode[0]
	}
	if raw := os.Getenv(envClusterVars); raw != "" {
		for _, kv := range strings.Split(raw, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("%s: %q is not KEY=VALUE", envClusterVars, kv)
			}
			vars[k] = v
		}
	}
	return newScenario(t, name, scenarioOpts{
		levels: "1s 2s 4s 8s", perLevel: 3, replication: 3, tier: "cluster",
		targets: map[string]int32{"orders": 3}, vars: vars,
	})
}

// reportOutage logs the lateness against the goal: at most the outage
// plus one second. The goal is reported, not enforced (0 lost and 0 early
// are, by check).
func reportOutage(t *testing.T, label string, f figures, outage time.Duration) {
	t.Helper()
	bound := outage + time.Second
	worst := pct(f.arrive, 1)
	verdict := "within"
	if worst > bound {
		verdict = "EXCEEDS"
	}
	t.Logf("REPORT %s: outage %s; max arrival lateness %s %s the goal of outage + 1s = %s", label, fmtDur(outage), fmtDur(worst), verdict, fmtDur(bound))
}

// TestClusterKillLeader: SIGKILL of the broker that leads most
// delay-topic partitions while the relay forwards a steady load. Its
// partitions get new leaders once the controller fences it (the broker
// session timeout, 9s); the relay's fetches and produces follow them.
// Nothing lost, nothing early; in exactly-once mode also no duplicate for
// a read_committed observer. The broker is started again afterwards.
func TestClusterKillLeader(t *testing.T) {
	for _, mode := range deliveryModes {
		t.Run(mode, func(t *testing.T) { clusterKillLeader(t, mode) })
	}
}

func clusterKillLeader(t *testing.T, mode string) {
	c := requireCluster(t)
	s := newClusterScenario(t, "clkill-"+short(mode), mode)
	r := s.startRelay("", 90*time.Second)
	l := startLoad(s, "k", s.target("orders"), time.Second, 6*time.Second)
	waitFor(t, time.Minute, "some records delivered", func() bool { return s.obs.arrived(s.sentKeys("k-")) >= 100 }, r)

	victim, ls := c.busiest(s.topic)
	t.Logf("delay topic leaders per broker: %v; killing broker %d", ls, victim)
	down := time.Now()
	c.ctlRun("kill", strconv.Itoa(int(victim)))
	waitFor(t, time.Minute, "no delay-topic partition led by the killed broker", func() bool { return c.leaders(s.topic)[victim] == 0 }, r)
	moved := time.Since(down)
	t.Logf("leaders moved %s after the kill: %v", moved.Round(time.Millisecond), c.leaders(s.topic))
	time.Sleep(5 * time.Second) // keep the load running on two brokers
	keys := l.stop(2 * time.Minute)

	s.await(keys, s.lastDue(keys).Add(time.Minute), r)
	maxDup := -1 // at least once: a produce retried across the failover may come twice
	if s.exactlyOnce() {
		maxDup = 0
	}
	f := s.check(t, "cluster ("+s.mode()+"): SIGKILL of the leader of most delay-topic partitions", keys, maxDup)
	reportOutage(t, "cluster: SIGKILL leader", f, moved)
	r.stop()
	c.ctlRun("start", strconv.Itoa(int(victim)))
	c.waitHealthy(3 * time.Minute)
}

// TestClusterControlledShutdown: SIGTERM of the broker that leads most
// partitions of the target topic: a controlled shutdown moves its
// leadership first, so produces to the target see NOT_LEADER at most
// briefly. Nothing lost, nothing early.
func TestClusterControlledShutdown(t *testing.T) {
	c := requireCluster(t)
	s := newClusterScenario(t, "clstop")
	target := s.target("orders")
	r := s.startRelay("", 90*time.Second)
	l := startLoad(s, "c", target, time.Second, 6*time.Second)
	waitFor(t, time.Minute, "some records delivered", func() bool { return s.obs.arrived(s.sentKeys("c-")) >= 100 }, r)

	victim, ls := c.busiest(target)
	t.Logf("target leaders per broker: %v; stopping broker %d (controlled shutdown)", ls, victim)
	outage := c.ctlRun("stop", strconv.Itoa(int(victim)))
	t.Logf("target leaders after the shutdown: %v", c.leaders(target))
	time.Sleep(5 * time.Second) // keep the load running on two brokers
	keys := l.stop(2 * time.Minute)

	s.await(keys, s.lastDue(keys).Add(time.Minute), r)
	f := s.check(t, "cluster: controlled shutdown of the target partitions' leader", keys, -1)
	reportOutage(t, "cluster: controlled shutdown", f, outage)
	r.stop()
	c.ctlRun("start", strconv.Itoa(int(victim)))
	c.waitHealthy(3 * time.Minute)
}

// TestClusterBrokerDownLong: the broker coordinating the relay's group
// is killed and stays down for 20s, longer than the broker session timeout
// (9s: it is fenced, its leaderships move, it leaves every ISR) and the
// relay's group session timeout (10s), then comes back, catches up and
// rejoins the ISRs. The group coordinator moves meanwhile. Nothing lost,
// nothing early.
func TestClusterBrokerDownLong(t *testing.T) {
	c := requireCluster(t)
	s := newClusterScenario(t, "cllong")
	r := s.startRelay("", 90*time.Second)
	l := startLoad(s, "d", s.target("orders"), time.Second, 6*time.Second)
	waitFor(t, time.Minute, "some records delivered", func() bool { return s.obs.arrived(s.sentKeys("d-")) >= 100 }, r)

	victim := c.coordinator(s.group)
	t.Logf("group %s coordinator: broker %d; killing it for 20s", s.group, victim)
	down := time.Now()
	c.ctlRun("kill", strconv.Itoa(int(victim)))
	waitFor(t, time.Minute, "no partition of the delay or target topic led by the killed broker", func() bool {
		return c.leaders(s.topic)[victim] == 0 && c.leaders(s.target("orders"))[victim] == 0
	}, r)
	moved := time.Since(down) // what the relay sees of the outage: no leader for some partitions
	t.Logf("leaders moved %s after the kill", moved.Round(time.Millisecond))
	time.Sleep(20*time.Second - time.Since(down)) // the outage itself: a broker down this long
	c.ctlRun("start", strconv.Itoa(int(victim)))
	c.waitHealthy(3 * time.Minute)
	t.Logf("broker %d back and every ISR full %s after the kill; coordinator now %d", victim, time.Since(down).Round(time.Millisecond), c.coordinator(s.group))
	time.Sleep(3 * time.Second) // the load on the whole cluster again
	keys := l.stop(2 * time.Minute)

	s.await(keys, s.lastDue(keys).Add(time.Minute), r)
	f := s.check(t, "cluster: one broker (the group coordinator) down 20s, then back", keys, -1)
	reportOutage(t, "cluster: broker down 20s", f, moved)
	r.stop()
}

// TestClusterBelowMinISR: two of the three brokers stop, so every
// partition is below min.insync.replicas=2 and no acks=all produce can
// succeed. The relay must stop forwarding (nothing reaches the target
// during the outage), report not ready on /readyz, lose nothing, and
// resume once one broker is back. The steady load keeps producing (its
// records wait in the producer) throughout.
func TestClusterBelowMinISR(t *testing.T) {
	c := requireCluster(t)
	s := newClusterScenario(t, "clminisr")
	r := s.startRelay("", 90*time.Second)
	rd := watchReadiness(r)
	t0 := time.Now()
	l := startLoad(s, "m", s.target("orders"), time.Second, 6*time.Second)
	waitFor(t, time.Minute, "some records delivered", func() bool { return s.obs.arrived(s.sentKeys("m-")) >= 100 }, r)

	// Keep the controller's view simple: stop (controlled shutdown) the
	// two brokers that are not broker 1, one after the other.
	a, b := "2", "3"
	c.ctlRun("stop", a)
	c.ctlRun("stop", b)
	below := time.Now()
	time.Sleep(time.Second) // see forwardedDuring
	fwdBelow := r.metric("kdelay_records_forwarded_total")
	t.Logf("brokers %s and %s stopped at +%s: every partition is below min.insync.replicas", a, b, fmtDur(below.Sub(t0)))
	// The relay retries the failed produces; it must say so on /readyz.
	// (Its produces fail after the producer's delivery timeout, 30s.)
	const notReadyWithin = time.Minute
	for deadline := time.Now().Add(notReadyWithin); rd.ready(); time.Sleep(50 * time.Millisecond) {
		r.checkAlive()
		if time.Now().After(deadline) {
			// Go on: that nothing is lost and the relay resumes is
			// worth knowing too.
			t.Errorf("the relay still reports ready on /readyz %s after every partition fell below min.insync.replicas (/metrics: kdelay_ready %v, kdelay_produce_retries_total %v)",
				notReadyWithin, r.metric("kdelay_ready"), r.metric("kdelay_produce_retries_total"))
			break
		}
	}
	if !rd.ready() {
		t.Logf("relay not ready %s after the ISR fell below the minimum", time.Since(below).Round(time.Millisecond))
	}
	time.Sleep(3 * time.Second) // an outage that lasts a little beyond the relay's reaction
	// Nothing forwarded meanwhile: the relay's count of acknowledged
	// forwards stays put (an acks=all produce below the minimum ISR is
	// refused before it is written). The first read is a second into the
	// outage, past any produce in flight when the second broker stopped.
	// (The target's end offsets cannot tell: a leader elected below the
	// minimum ISR answers OFFSET_NOT_AVAILABLE until it is back.)
	forwardedDuring := r.metric("kdelay_records_forwarded_total") - fwdBelow

	back := time.Now()
	c.ctlRun("start", a)
	outage := time.Since(below)
	waitFor(t, 90*time.Second, "the relay ready again after broker "+a+" returned", rd.ready, r)
	t.Logf("relay ready again %s after broker %s was started", time.Since(back).Round(time.Millisecond), a)
	time.Sleep(3 * time.Second) // load on a healthy ISR again
	keys := l.stop(3 * time.Minute)

	s.await(keys, s.lastDue(keys).Add(2*time.Minute), r)
	f := s.check(t, "cluster: two brokers down (below min.insync.replicas), then one back", keys, -1)
	spans := rd.stop()
	t.Logf("REPORT cluster: below min ISR: relay not ready %s (t0 = load start; ISR below the minimum +%s..+%s); records forwarded during the outage: %v",
		fmtSpans(spans, t0), fmtDur(below.Sub(t0)), fmtDur(below.Add(outage).Sub(t0)), forwardedDuring)
	reportOutage(t, "cluster: below min ISR", f, outage)
	if forwardedDuring != 0 {
		t.Errorf("%v records reached the target while every partition was below min.insync.replicas", forwardedDuring)
	}
	r.stop()
	c.ctlRun("start", b)
	c.waitHealthy(3 * time.Minute)
}

// lastLines returns the last n lines of out.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
