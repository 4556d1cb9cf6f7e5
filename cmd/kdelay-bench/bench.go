package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kdelay/kdelay/levels"
)

// Level tables of the scenarios. The throughput and recovery runs use two
// levels, 1s and 1h: every record is read from a level-1 partition, so the
// level path (kdelay-level 1) and the wheel path (kdelay-deliver-at less
// than 1h ahead; it waits in the wheel after level 1) read the same number
// of partitions as the serial pipe. The due-rate and §8 shape runs use the
// default 18 RocketMQ levels, as deployed.
const (
	burstLevels = "1s 1h"
	prodLevels  = levels.DefaultSpec
)

type bench struct {
	o       *options
	brokers string
	seeds   []string
	fake    *kfake.Cluster
	adm     *kadm.Client
	admCl   *kgo.Client
	prod    *kgo.Client
	tmp     string
	runID   string

	kdelayBin string
	results   *results
	// produce rates of the bench's last load of each size (records/s):
	// the lead of the loads produced ahead of their due times.
	prodRate map[int]float64
}

func newBench(ctx context.Context, o *options) (*bench, error) {
	b := &bench{o: o, prodRate: make(map[int]float64)}
	b.runID = strconv.FormatInt(time.Now().Unix()%1_000_000, 36)
	if o.brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			return nil, fmt.Errorf("start kfake: %w", err)
		}
		b.fake = c
		b.seeds = c.ListenAddrs()
	} else {
		b.seeds = strings.Split(o.brokers, ",")
	}
	b.brokers = strings.Join(b.seeds, ",")
	var err error
	b.tmp, err = os.MkdirTemp("", "kdelay-bench-")
	if err != nil {
		b.close()
		return nil, err
	}
	b.admCl, err = kgo.NewClient(kgo.SeedBrokers(b.seeds...))
	if err != nil {
		b.close()
		return nil, err
	}
	b.adm = kadm.NewClient(b.admCl)
	b.prod, err = kgo.NewClient(kgo.SeedBrokers(b.seeds...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(50_000),
		kgo.MetadataMinAge(500*time.Millisecond),
	)
	if err != nil {
		b.close()
		return nil, err
	}
	if o.relayMode == "exec" {
		if o.kdelayBin != "" {
			b.kdelayBin = o.kdelayBin
		} else {
			fmt.Fprintln(o.stderr, "building ./cmd/kdelay ...")
			b.kdelayBin, err = buildKdelay(ctx, b.tmp)
			if err != nil {
				b.close()
				return nil, err
			}
		}
	}
	b.results = &results{Started: time.Now().UTC(), Machine: machineInfo(), Broker: "kfake (in-process)", Relay: o.relayMode}
	if b.fake == nil {
		b.results.Broker = b.brokers
	}
	if o.relayMode == "exec" {
		b.results.RelayGoEnv = relayGoEnv()
	}
	b.results.Warmup = o.warmup
	b.results.Command = "go run ./cmd/kdelay-bench " + strings.Join(os.Args[1:], " ")
	b.results.Revision = revision(ctx)
	return b, nil
}

func (b *bench) close() {
	if b.prod != nil {
		b.prod.Close()
	}
	if b.admCl != nil {
		b.admCl.Close()
	}
	if b.fake != nil {
		b.fake.Close()
	}
	if b.tmp != "" {
		os.RemoveAll(b.tmp)
	}
}

// runAll runs the scenarios. Each --repeat round runs, per size, the
// ceiling, the serial and pipelined pipes, then level and wheel in every
// delivery mode, then duerate at
// every rate in every mode; the mode order alternates from round to round
// so that a drift within a round does not always favour the same mode.
// Shape and recovery run once, after the rounds, in the first mode.
func (b *bench) runAll(ctx context.Context) (*results, error) {
	res := b.results
	res.LoadBefore = loadAvg()
	var errs []error
	step := func(name string, fn func() (*result, error)) *result {
		if !b.o.scenarios[name] || ctx.Err() != nil {
			return nil
		}
		t0 := time.Now()
		r, err := fn()
		if err != nil {
			err = fmt.Errorf("%s: %w", name, err)
			errs = append(errs, err)
		}
		if r != nil {
			r.WallSeconds = time.Since(t0).Seconds()
			if b.o.brokerGCLog != "" {
				if pauses, err := readBrokerPauses(b.o.brokerGCLog); err != nil {
					fmt.Fprintln(b.o.stderr, "warning:", err)
				} else {
					r.attributePauses(pauses)
				}
			}
			if err != nil {
				r.Err = err.Error()
			}
			res.Results = append(res.Results, r)
			pairRatios(res.Results)
			fmt.Fprintf(b.o.stderr, "%s\n", r.summary())
		} else if err != nil {
			fmt.Fprintln(b.o.stderr, "error:", err)
		}
		if err != nil {
			return nil
		}
		return r
	}
	b.warmUp(ctx)
	for rep := range b.o.repeat {
		modes := roundModes(b.o.deliveries, rep)
		for _, size := range b.o.sizes {
			for _, sc := range []string{"ceiling", "serial", "pipelined"} {
				step(sc, func() (*result, error) { return b.throughput(ctx, sc, atLeastOnce, size, rep) })
			}
			for _, mode := range modes {
				for _, sc := range []string{"direct", "level", "wheel"} {
					step(sc, func() (*result, error) { return b.throughput(ctx, sc, mode, size, rep) })
				}
			}
		}
		for _, rate := range b.o.dueRates {
			for _, mode := range modes {
				step("duerate", func() (*result, error) { return b.dueRate(ctx, rate, mode, rep) })
			}
		}
	}
	if b.o.scenarios["sustained"] {
		for _, relays := range b.o.sustainedRelays {
			searchSustained(b.o.sustainedRates, b.o.sustainedRefine, func(rate int) *result {
				return step("sustained", func() (*result, error) { return b.sustainedStep(ctx, rate, relays) })
			})
		}
	}
	first := b.o.deliveries[0]
	for _, size := range b.o.sizes {
		step("shape", func() (*result, error) { return b.shape(ctx, size, first) })
	}
	step("recovery", func() (*result, error) { return b.recovery(ctx, first) })
	res.LoadAfter = loadAvg()
	res.Finished = time.Now().UTC()
	if len(errs) > 0 {
		return res, fmt.Errorf("%d scenario(s) failed: %v", len(errs), errs)
	}
	return res, nil
}

// roundModes is the order of the delivery modes in round rep (from 0):
// as given in even rounds, reversed in odd ones.
func roundModes(modes []string, rep int) []string {
	out := slices.Clone(modes)
	if rep%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// runTag names one run: scenario, size or rate, mode (eos), round (from 2).
func runTag(base, mode string, rep int) string {
	if mode == exactlyOnce {
		base += "-eos"
	}
	if rep > 0 {
		base += fmt.Sprintf("-r%d", rep+1)
	}
	return base
}

// names are the topics and group of one scenario run.
type names struct{ delay, dlq, target, group, data string }

func (b *bench) names(tag string) names {
	p := "kdb-" + b.runID + "-" + tag
	return names{delay: p + "-delay", dlq: p + "-delay.dlq", target: p + "-target", group: p, data: filepath.Join(b.tmp, tag)}
}

// env is the relay's configuration for a run in delivery mode mode; in
// exactly-once mode its transactional ID is derived from the group, so it
// is unique per run and stable across the recovery scenario's restart.
func (b *bench) env(n names, spec, mode string) relayEnv {
	e := relayEnv{
		"KDELAY_TOPIC":                n.delay,
		"KDELAY_DLQ_TOPIC":            n.dlq,
		"KDELAY_GROUP":                n.group,
		"KDELAY_LEVELS":               spec,
		"KDELAY_PARTITIONS_PER_LEVEL": strconv.Itoa(b.o.partitions),
		"KDELAY_DATA_DIR":             n.data,
		"KDELAY_CLIENT_ID":            "kdelay-bench-" + n.group,
		"KDELAY_DELIVERY":             mode,
	}
	if mode == exactlyOnce {
		e["KDELAY_TRANSACTIONAL_ID"] = "kdelay-bench-" + n.group
	}
	return e
}

func (b *bench) table(spec string) *levels.Table {
	t, err := levels.Parse(spec, b.o.partitions)
	if err != nil {
		panic(err)
	}
	return t
}

// lead is how long producing n records of size takes, with a margin: at
// the last measured produce rate of a load of that size (plus half), else
// at a conservative guess. The relay idles through the lead and its idle
// CPU counts in a burst's CPU per record, so the bursts measure the rate
// first (calibrate) rather than charge their records for seconds of
// waiting at a guessed one.
func (b *bench) lead(n, size int) time.Duration {
	if rate, ok := b.prodRate[size]; ok && rate > 0 {
		return time.Duration(float64(n)/rate*1.5*float64(time.Second)) + time.Second
	}
	rate := 25_000.0
	if size > 512 {
		rate = 12_000
	}
	return time.Duration(float64(n)/rate*float64(time.Second)) + b.o.margin
}

// calibrate measures the load's produce rate for size when no load of
// that size ran yet: a quarter of a run's records, plain, to a scratch
// topic, so that the first burst's lead follows the broker too.
func (b *bench) calibrate(ctx context.Context, nm names, size int) error {
	if b.prodRate[size] > 0 {
		return nil
	}
	n, k, topic := max(b.o.records/4, 1000), b.o.partitions, nm.target+"-calibrate"
	if err := b.createTopics(ctx, map[string]int{topic: k}); err != nil {
		return err
	}
	ps, err := b.produceLoad(ctx, "calibrate", n, size, nil, "", func(i int, _ time.Time) recSpec {
		return recSpec{plain: true, topic: topic, partition: int32(i % k)}
	})
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	if ps.took > 0 {
		b.prodRate[size] = float64(n) / ps.took.Seconds()
	}
	return nil
}

// relayReadAhead is how long before their level time the relay reads
// records into its wheel when they are due within the wheel's horizon (the
// relay's read-ahead, docs/architecture.md): the level scenario's burst is
// read that way.
const relayReadAhead = 5 * time.Second

// directHorizon is the relay's KDELAY_WHEEL_HORIZON in the direct scenario:
// the smallest the wheel takes (its 100 ms tick). A record is read ahead
// into the wheel only when its due time is within the horizon of the
// decision, so with the burst due relayReadAhead after the produce ends,
// the relay decides its heads at the read-ahead time (5 s before they are
// due: beyond the horizon), pauses their partitions and reads them at
// their level time.
const directHorizon = 100 * time.Millisecond

// throughput runs one of ceiling, serial, pipelined, direct, level and
// wheel with records of size, the relay in delivery mode mode, in round
// rep (from 0).
func (b *bench) throughput(ctx context.Context, scenario, mode string, size, rep int) (*result, error) {
	n := b.o.records
	tag := runTag(fmt.Sprintf("%s-%d", scenario, size), mode, rep)
	nm := b.names(tag)
	r := &result{Scenario: scenario, Size: size, Records: n, Partitions: b.o.partitions, Rep: rep + 1}
	switch scenario {
	case "ceiling":
		return b.ceiling(ctx, r, nm, tag)
	case "serial", "pipelined":
		return b.reference(ctx, r, nm, tag)
	}
	r.Delivery = mode
	r.Levels = burstLevels
	tab := b.table(burstLevels)
	if err := b.createTopics(ctx, map[string]int{nm.delay: int(tab.Partitions()), nm.dlq: 1, nm.delay + ".cancel": 1, nm.target: b.o.partitions}, nm.target); err != nil {
		return r, err
	}
	env := b.env(nm, burstLevels, mode)
	if scenario == "direct" {
		env["KDELAY_WHEEL_HORIZON"] = directHorizon.String()
	}
	rp, err := b.startRelay(ctx, tag, env)
	if err != nil {
		return r, err
	}
	defer rp.stop()
	col, err := b.newCollector(ctx, nm.target, n, "deliver "+tag)
	if err != nil {
		return r, err
	}
	if err := b.calibrate(ctx, nm, size); err != nil {
		return r, err
	}
	if err := b.prime(ctx, r, tab, nm, col, rp); err != nil {
		return r, err
	}
	samp := b.startDrainSampler(ctx, rp)
	defer samp.stop()
	cpu0, cpuOK := rp.cpuSeconds()
	start := time.Now()
	lead := b.lead(n, size)
	var due time.Time
	var gen func(i int, now time.Time) recSpec
	switch scenario {
	case "direct":
		// As level, but due relayReadAhead after the produce is expected
		// to end, with a wheel horizon of directHorizon: the relay's
		// read-ahead finds the burst due beyond its horizon, so the burst
		// waits in its paused partitions and is read at its level time.
		t0 := start.Add(lead + relayReadAhead).Truncate(time.Millisecond)
		due = t0.Add(time.Second)
		gen = func(i int, _ time.Time) recSpec {
			return recSpec{ts: t0, delay: levels.Delay{Target: nm.target, Level: 1}}
		}
		r.Notes = append(r.Notes, fmt.Sprintf("records timestamped T0 (future while producing), kdelay-level 1: all due at T0+1s; KDELAY_WHEEL_HORIZON=%s, due %s after the expected end of the produce: no read-ahead, read at the level time (partitions paused until then)", directHorizon, relayReadAhead))
	case "level":
		// Every record has the same timestamp T0 (in the future while
		// producing) and kdelay-level 1: all come due at T0 + 1s, together.
		t0 := start.Add(lead).Truncate(time.Millisecond)
		due = t0.Add(time.Second)
		gen = func(i int, _ time.Time) recSpec {
			return recSpec{ts: t0, delay: levels.Delay{Target: nm.target, Level: 1}}
		}
		r.Notes = append(r.Notes, "records timestamped T0 (future while producing), kdelay-level 1: all due at T0+1s; read ahead into memory (up to the relay's read-ahead bound, the rest as the held records go)")
	default:
		// Timestamps are the produce time; every record is due at the same
		// absolute time (kdelay-deliver-at), lead after the end of the
		// produce: its level time (timestamp + 1s) passes long before, so it
		// waits in the wheel and all come due together.
		due = start.Add(2*lead + b.o.margin).Truncate(time.Millisecond)
		gen = func(i int, _ time.Time) recSpec {
			return recSpec{delay: levels.Delay{Target: nm.target, At: due}}
		}
		r.Notes = append(r.Notes, "records timestamped at produce time, kdelay-deliver-at = one common due time: read at level 1, they wait in the wheel")
	}
	ps, err := b.produceLoad(ctx, tag, n, size, tab, nm.delay, gen)
	if err != nil {
		return r, err
	}
	took := ps.took
	r.ProduceSeconds = took.Seconds()
	if took > 0 {
		b.prodRate[size] = float64(n) / took.Seconds()
	}
	if produced := start.Add(took); !produced.Before(due) {
		r.Notes = append(r.Notes, fmt.Sprintf("WARNING: producing ended %s after the due time: not a clean burst", produced.Sub(due).Round(time.Millisecond)))
	} else if readAt := due.Add(-relayReadAhead); scenario == "direct" && !produced.Before(readAt) {
		r.Notes = append(r.Notes, fmt.Sprintf("WARNING: producing ended %s after the read-ahead time: records read then may take the wheel", produced.Sub(readAt).Round(time.Millisecond)))
	}
	if scenario == "wheel" {
		// Did the wheel hold them all before the due time?
		go func() {
			select {
			case <-time.After(time.Until(due.Add(-50 * time.Millisecond))):
				if m, err := rp.metrics(); err == nil {
					r.PendingAtDue = int(m["kdelay_wheel_pending_entries"])
				}
			case <-ctx.Done():
			}
		}()
	}
	r.DueMs = due.UnixMilli()
	werr := col.wait(ctx, due.Add(2*time.Minute), 15*time.Second)
	if cpu1, ok := rp.cpuSeconds(); ok && cpuOK {
		r.RelayCPUSeconds = cpu1 - cpu0
	}
	b.relayStats(r, rp)
	recs, dups, bad := col.finish(500 * time.Millisecond)
	r.fill(recs, dups, bad)
	r.setDrainCPU(samp.stop())
	if scenario == "direct" && r.ViaWheel > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("WARNING: %d records were read ahead into the wheel: not a clean level-path burst", r.ViaWheel))
	}
	return r, werr
}

// warmUp runs --warmup rounds of the requested bursts, as a measured
// round runs them, and keeps none of their figures: the rounds that count
// then meet a broker whose JIT has compiled the paths a burst makes hot.
// Its topics are apart from the measured rounds' (rounds after the last).
func (b *bench) warmUp(ctx context.Context) {
	for w := range b.o.warmup {
		rep := b.o.repeat + w
		for _, size := range b.o.sizes {
			for _, sc := range []string{"ceiling", "serial", "pipelined", "direct", "level", "wheel"} {
				modes := b.o.deliveries
				if sc == "ceiling" || sc == "serial" || sc == "pipelined" {
					modes = []string{atLeastOnce}
				}
				for _, mode := range modes {
					if !b.o.scenarios[sc] || ctx.Err() != nil {
						continue
					}
					r, err := b.throughput(ctx, sc, mode, size, rep)
					switch {
					case err != nil:
						fmt.Fprintf(b.o.stderr, "warm-up, not kept: %s %dB: %v\n", sc, size, err)
					case r != nil:
						fmt.Fprintf(b.o.stderr, "warm-up, not kept: %s\n", r.summary())
					}
				}
			}
		}
	}
}

// primerKey is the key of the record a burst's relay forwards before the
// burst (bench.prime); the collector tells it apart from the burst's.
const primerKey = "primer"

// primeWait bounds how long the primer may take to arrive.
const primeWait = 30 * time.Second

// prime has the relay forward one record, due at once, to the burst's
// target before the burst, and waits for it: the burst then measures a
// relay that has forwarded to its target, as one in service has. The
// first record a process produces to a topic waits for franz-go to load
// the topic's metadata, which would otherwise fall on the burst's first
// record. The relay's forward counters after the primer are kept in r, so
// that the run's path counts are net of it.
func (b *bench) prime(ctx context.Context, r *result, tab *levels.Table, nm names, col *collector, rp *relayProc) error {
	rec := &kgo.Record{Key: []byte(primerKey), Value: []byte("primer")}
	now := time.Now()
	if err := tab.Stamp(rec, nm.delay, levels.Delay{Target: nm.target, At: now}, now); err != nil {
		return fmt.Errorf("primer: %w", err)
	}
	if err := b.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("primer: %w", err)
	}
	t := time.NewTimer(primeWait)
	defer t.Stop()
	select {
	case <-col.primed:
	case <-t.C:
		return fmt.Errorf("primer: not forwarded to %s within %s", nm.target, primeWait)
	case <-ctx.Done():
		return ctx.Err()
	}
	// The relay counts a forward once it is acked, which may be after the
	// collector read it.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m, err := rp.metrics()
		if err != nil {
			return fmt.Errorf("primer: %w", err)
		}
		r.primedWheel = int(sumWhere(m, "kdelay_records_forwarded_total", `path="wheel"`))
		r.primedDirect = int(sumWhere(m, "kdelay_records_forwarded_total", `path="direct"`))
		if r.primedWheel+r.primedDirect > 0 || time.Now().After(deadline) {
			r.Notes = append(r.Notes, "primed: the relay forwarded one record to the target before the burst, so the burst's first record does not wait for the target's metadata")
			return nil
		}
	}
}

// relayStats reads the relay's path counters and its peak RSS.
func (b *bench) relayStats(r *result, rp *relayProc) { b.groupStats(r, []*relayProc{rp}) }

// groupMetrics scrapes every relay of rps and sums their samples.
func groupMetrics(rps []*relayProc) (map[string]float64, error) {
	sum := make(map[string]float64)
	for _, rp := range rps {
		m, err := rp.metrics()
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			sum[k] += v
		}
	}
	return sum, nil
}

// groupCPU is the sum of the relays' process_cpu_seconds_total; ok is
// false when one has none (in process).
func groupCPU(rps []*relayProc) (float64, bool) {
	var sum float64
	for _, rp := range rps {
		v, ok := rp.cpuSeconds()
		if !ok {
			return 0, false
		}
		sum += v
	}
	return sum, true
}

// groupStats reads the path counters of the relays of one group (summed)
// and their largest peak RSS.
func (b *bench) groupStats(r *result, rps []*relayProc) {
	// The relay counts a forward after its acks, so the collector can see a
	// record before the counter moves: wait (briefly) for the counters.
	deadline := time.Now().Add(3 * time.Second)
	for {
		m, err := groupMetrics(rps)
		if err != nil {
			break
		}
		fw := int(m["kdelay_records_forwarded_total"])
		if fw < r.Records+r.primedWheel+r.primedDirect && r.Scenario != "recovery" && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		r.ViaWheel = int(sumWhere(m, "kdelay_records_forwarded_total", `path="wheel"`)) - r.primedWheel
		r.Direct = int(sumWhere(m, "kdelay_records_forwarded_total", `path="direct"`)) - r.primedDirect
		r.DeadLettered = int(m["kdelay_records_dead_lettered_total"])
		r.Cascaded = int(m["kdelay_records_cascaded_total"])
		r.RelayHeapInuse = int64(m["go_memstats_heap_inuse_bytes"])
		r.RelayCPUTotalSeconds = m["process_cpu_seconds_total"]
		r.RelaySendLateShare = lateShare(m, "kdelay_send_lateness_seconds")
		r.RelayAckLateShare = lateShare(m, "kdelay_lateness_seconds")
		r.Breakdown = relayBreakdown(m)
		r.TxnCommitted = int(m[`kdelay_transactions_total{outcome="committed"}`])
		r.TxnAborted = int(m[`kdelay_transactions_total{outcome="aborted"}`])
		if r.mode() == exactlyOnce && r.TxnCommitted == 0 {
			r.Notes = append(r.Notes, "WARNING: exactly-once mode, but the relay committed no transaction")
		}
		break
	}
	for _, rp := range rps {
		r.RelayPeakRSS = max(r.RelayPeakRSS, rp.peakRSS())
		r.RelayPeakAnon = max(r.RelayPeakAnon, rp.peakAnon.Load())
		r.RelayPeakFile = max(r.RelayPeakFile, rp.peakFile.Load())
	}
}

// lateShare is the fraction of the samples of the relay's histogram name
// (summed over its levels) above lateWindowMs, one of its bucket bounds; 0
// without samples.
func lateShare(m map[string]float64, name string) float64 {
	n := m[name+"_count"]
	if n == 0 {
		return 0
	}
	le := sumWhere(m, name+"_bucket", `le="`+strconv.FormatFloat(lateWindowMs/1000.0, 'g', -1, 64)+`"`)
	return (n - le) / n
}

// reference pre-produces n records to a source topic, then pipes them to
// the target with the relay's client settings but no scheduling: serial
// (PollRecords(4096), produce all, wait for the acks, CommitOffsetsSync)
// or pipelined (produces overlapping the next poll, commits of what is
// acked every 100 ms).
func (b *bench) reference(ctx context.Context, r *result, nm names, tag string) (*result, error) {
	k := b.o.partitions
	src := nm.delay // the source topic
	spare := nm.target + "-cpu"
	if err := b.createTopics(ctx, map[string]int{src: k, nm.target: k, spare: k}, nm.target); err != nil {
		return r, err
	}
	ps, err := b.produceLoad(ctx, tag, r.Records, r.Size, nil, "", func(i int, _ time.Time) recSpec {
		return recSpec{plain: true, topic: src, partition: int32(i % k)}
	})
	if err != nil {
		return r, err
	}
	r.ProduceSeconds = ps.took.Seconds()
	r.ProduceRate = float64(r.Records) / ps.took.Seconds()
	b.prodRate[r.Size] = r.ProduceRate
	pipe := b.pipe
	if r.Scenario == "pipelined" {
		pipe = b.pipelined
		r.Notes = append(r.Notes, "plain franz-go pipe: PollRecords(4096) -> produce (linger 0, acks=all, idempotent) without waiting; what is acked committed every 100ms")
	} else {
		r.Notes = append(r.Notes, "plain franz-go pipe: PollRecords(4096) -> produce (linger 0, acks=all, idempotent) -> wait -> CommitOffsetsSync")
	}
	col, err := b.newCollector(ctx, nm.target, r.Records, "deliver "+tag)
	if err != nil {
		return r, err
	}
	pctx, cancel := context.WithCancel(ctx)
	var perr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		perr = pipe(pctx, src, nm.target, nm.group, r.Records)
	}()
	werr := col.wait(ctx, time.Now().Add(2*time.Minute), 15*time.Second)
	cancel()
	wg.Wait()
	recs, dups, bad := col.finish(200 * time.Millisecond)
	r.fill(recs, dups, bad)
	// The pipe's context ends once the collector saw every record: what
	// the pipe was doing then (a flush, a commit) is not a failure.
	if werr == nil && perr != nil && ctx.Err() == nil && !errors.Is(perr, context.Canceled) {
		werr = perr
	}
	// The pipe once more over the same source, a fresh group to a spare
	// topic, the collector done: franz-go's consume and produce paths with
	// the relay's settings and no scheduling, the floor under the relay's
	// CPU per record (the group's join, a few milliseconds, is in it).
	if werr == nil {
		werr = ownCPU(r, "pipe", func() error { return pipe(ctx, src, spare, nm.group+"-cpu", r.Records) })
	}
	return r, werr
}

// producerOpts are the relay's producer settings: acks=all, idempotent
// (franz-go's default), no linger, keys hashed to partitions, a 500ms
// metadata floor.
func (b *bench) producerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(b.seeds...),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(30 * time.Second),
		kgo.ProducerLinger(0),
		kgo.MetadataMinAge(500 * time.Millisecond),
	}
}

// pipe is the serial pipe: poll, produce, wait, commit.
func (b *bench) pipe(ctx context.Context, src, dst, group string, n int) error {
	cl, err := kgo.NewClient(append(b.producerOpts(),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(src),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(100*time.Millisecond),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	done := 0
	for done < n && ctx.Err() == nil {
		fs := cl.PollRecords(ctx, b.o.maxBatch)
		if fs.IsClientClosed() {
			return nil
		}
		var (
			wg       sync.WaitGroup
			firstErr atomic.Value
		)
		offsets := make(map[int32]kgo.EpochOffset)
		fs.EachRecord(func(rec *kgo.Record) {
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Topic: dst, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}, func(_ *kgo.Record, err error) {
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
				wg.Done()
			})
			offsets[rec.Partition] = kgo.EpochOffset{Epoch: -1, Offset: rec.Offset + 1}
			done++
		})
		wg.Wait()
		if err, _ := firstErr.Load().(error); err != nil {
			cl.AllowRebalance()
			return err
		}
		if len(offsets) > 0 {
			var cerr error
			cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{src: offsets}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) { cerr = err })
			if cerr != nil && ctx.Err() == nil {
				cl.AllowRebalance()
				return cerr
			}
		}
		cl.AllowRebalance()
	}
	return nil
}

// machineInfo describes where the bench ran.
func machineInfo() map[string]string {
	m := map[string]string{
		"nproc":   strconv.Itoa(runtime.NumCPU()),
		"go":      runtime.Version(),
		"os/arch": runtime.GOOS + "/" + runtime.GOARCH,
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				m["memory"] = strings.TrimSpace(rest)
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
				m["cpu"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
				break
			}
		}
		f.Close()
	}
	return m
}

// revision is the git commit of the working tree, "+dirty" with local
// changes (the relay is built from the working tree).
func revision(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		rev += "+dirty"
	}
	return rev
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
