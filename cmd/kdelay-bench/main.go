// Command kdelay-bench is kdelay's end-to-end benchmark. Against one broker
// and in one run it measures:
//
//   - ceiling: what the broker takes, the reference of every burst: one
//     client with the relay's producer settings (linger 0, acks=all,
//     idempotent, keys hashed to partitions) producing pre-built records
//     shaped like forwarded ones (key, value, the kdelay-due-at and
//     kdelay-source headers) to a target topic like the bursts', after a
//     warm-up to a scratch topic;
//   - serial: a plain franz-go consume -> produce -> commit pipe between two
//     topics with the relay's producer settings and batching, one batch at
//     a time (poll up to 4096 records, produce them, wait for the acks,
//     CommitOffsetsSync);
//   - pipelined: the same pipe as the relay runs it, without the
//     scheduling: produces overlap the next poll, what is acked is
//     committed every 100 ms;
//   - direct: kdelay's level path as designed, a burst of records that
//     all come due together at a level's own delay (kdelay-level 1), read
//     at their level time: their partitions paused until then, no
//     read-ahead (the relay's wheel horizon at its smallest, 100 ms, and
//     the burst due 5 s, the relay's read-ahead, after its produce);
//   - level: the same burst due soon after its produce, so that the relay
//     reads it ahead, into memory, before it is due;
//   - wheel: kdelay's wheel path, a burst of records with arbitrary delays
//     (kdelay-deliver-at) that wait in the wheel and come due together;
//   - duerate: lateness while records come due at a steady rate (10k/s
//     and 50k/s by default, --due-rate), all produced before the first is
//     due (--due-load preload, the default), or each produced --due-delay
//     before its due time, at that rate (--due-load paced);
//   - shape: the mixed load shape (half the records spread over
//     20 s, half due within one second);
//   - recovery: restart of the relay with 1M records pending in the wheel:
//     time from the restart to the first delivery, RSS with 1M pending;
//   - sustained (only when named): the highest due rate one relay, and a
//     group of 2 and 4 relays on the same broker, hold for
//     --sustained-seconds with the arrival lateness p99 at most 100 ms,
//     searched over --sustained-rates (a paced load).
//
// The relay runs as a child process (`kdelay run`, built from this module)
// so that its peak RSS (VmHWM) is its own, or in-process with --relay
// inproc (tests, CPU profiles with --cpuprofile).
//
// Lateness is the target record's timestamp minus its kdelay-due-at header.
// Target topics are created with message.timestamp.type=LogAppendTime, so
// the timestamp is the broker's append time: the moment the record was
// delivered, not when the bench happened to read it.
//
// --delivery takes a list of the relay's delivery modes (at-least-once,
// exactly-once): the level, wheel and duerate scenarios then run in each
// mode, interleaved in every --repeat round (the mode order alternates
// from round to round), and every exactly-once run is compared with the
// at-least-once run of the same path, size and round. Shape and recovery
// run in the first mode only. The collectors always read read_committed.
//
// Every figure that has a goal (the goals table in goals.go, each with the
// issue that set it) is printed next to it, missed ones marked MISSED, at
// the head of the summary on stdout and of results.md. With --repeat N a
// goal is checked on the median of the N runs, and each run's value and
// their range are printed too; throughput ratios are taken per round (each
// burst against the ceiling, or the at-least-once run, of its own round).
// The relay's CPU per record is its process's CPU time from just before
// the run's first produce to its last delivery (process_cpu_seconds_total
// scraped then), over the run's records: the end-to-end cost, without the
// process's start and group join (--relay exec only: in process its CPU is
// not its own). The first record of a burst: its lateness after the
// burst's common due time.
//
// Results go to --out (default bench-out/): results.json, results.md and
// lateness-cdf.svg. See docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/kdelay/kdelay/relay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "kdelay-bench:", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	brokers          string
	records          int
	sizes            []int
	scenarios        map[string]bool
	quick            bool
	out              string
	relayMode        string // exec | inproc
	kdelayBin        string
	partitions       int // k: partitions per level, of the baseline source and of the targets
	maxBatch         int
	recoveryRecords  int
	repeat           int
	recoveryLead     time.Duration
	dueRates         []int
	dueSeconds       int
	dueLoad          string        // paced | preload
	dueDelay         time.Duration // paced: each record's delay
	sustainedRelays  []int
	sustainedRates   []int
	sustainedSeconds int
	sustainedRefine  int
	sustainedDrain   time.Duration // how long after the last due time a step's records may still arrive
	shapeRecords     map[int]int   // size -> records of the §8 shape
	shapeSpread      time.Duration
	margin           time.Duration // extra lead before the first due time
	watch            time.Duration // how long deliveries are watched after the restart
	cpuProfile       string
	traceFile        string
	brokerGCLog      string
	brokerPID        int
	warmup           int
	memProfile       string
	progress         bool
	wheelSync        string
	deliveries       []string // relay delivery modes, in the order of the first round
	replot           string
	stderr           io.Writer
	stdout           io.Writer
}

var allScenarios = []string{"ceiling", "serial", "pipelined", "direct", "level", "wheel", "duerate", "shape", "recovery", "sustained"}

// defaultScenarios are what runs without --scenarios: all but sustained
// (a search of many steps, minutes per relay count).
var defaultScenarios = allScenarios[:len(allScenarios)-1]

func parseOptions(args []string, stdout, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("kdelay-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{stdout: stdout, stderr: stderr}
	var sizes, scen, dueRates, deliveries, susRelays, susRates string
	fs.StringVar(&o.brokers, "brokers", "", "seed brokers (comma list); default: an in-process kfake cluster (quick runs only: publish real-broker figures)")
	fs.IntVar(&o.records, "records", 200_000, "records per throughput run (ceiling, serial, pipelined, level, wheel)")
	fs.StringVar(&sizes, "size", "100,1024", "record value sizes in bytes, comma list")
	fs.StringVar(&scen, "scenarios", strings.Join(defaultScenarios, ","), "scenarios to run, comma list of "+strings.Join(allScenarios, ", ")+" (sustained only when named)")
	fs.BoolVar(&o.quick, "quick", false, "smoke test: small counts, finishes in under a minute")
	fs.StringVar(&o.out, "out", "bench-out", "output directory (results.json, results.md, lateness-cdf.svg, relay logs)")
	fs.StringVar(&o.relayMode, "relay", "exec", "exec: the relay as a child process (`kdelay run`, RSS measured); inproc: in this process (tests, --cpuprofile)")
	fs.StringVar(&o.kdelayBin, "kdelay", "", "prebuilt kdelay binary for --relay exec; default: go build ./cmd/kdelay into a temporary directory")
	fs.IntVar(&o.partitions, "partitions", 4, "partitions per level (KDELAY_PARTITIONS_PER_LEVEL), of the pipes' source topic and of the target topics")
	fs.IntVar(&o.maxBatch, "batch", 4096, "records per poll of the serial and pipelined pipes (the relay's MaxBatch is 4096)")
	fs.IntVar(&o.repeat, "repeat", 1, "run ceiling, serial, pipelined, level, wheel and duerate this many times, interleaved; goals are checked on medians, each run's value and the range are printed")
	fs.IntVar(&o.warmup, "warmup", 1, "rounds of the requested bursts (ceiling, serial, pipelined, direct, level, wheel) run before the measured ones and not kept: a broker's JIT compiles the code paths a load makes hot for minutes after it starts, so a first round meets a colder broker than the next (quick: 0)")
	fs.IntVar(&o.recoveryRecords, "recovery-records", 1_000_000, "records pending in the wheel at the restart")
	fs.DurationVar(&o.recoveryLead, "recovery-lead", 0, "time from the start of the recovery pre-load to the first due time; default 30s + records/8000 s")
	fs.StringVar(&dueRates, "due-rate", "10000,50000", "records coming due per second in the duerate scenario, comma list: one run per rate (quick: 1000)")
	fs.IntVar(&o.dueSeconds, "due-seconds", 20, "seconds of the duerate scenario")
	fs.StringVar(&o.dueLoad, "due-load", "preload", "duerate load: preload (every record produced before the first due time, as fast as the broker takes them; the figures of docs/benchmarks.md) or paced (each record produced --due-delay before its due time, at the due rate: a steady state)")
	fs.DurationVar(&o.dueDelay, "due-delay", 12*time.Second, "paced duerate load: each record's delay (12s: read at level 10s, then 2s in the wheel)")
	fs.StringVar(&susRelays, "sustained-relays", "1,2,4", "sustained: relay counts, comma list; each searches the highest due rate its group of relays holds")
	fs.StringVar(&susRates, "sustained-rates", "20000,40000,80000,160000,320000,640000", "sustained: due rates tried in order until one is not held (arrival p99 > 100ms, records missing, or the load fell short); then --sustained-refine halvings (quick: 300,600)")
	fs.IntVar(&o.sustainedSeconds, "sustained-seconds", 12, "sustained: seconds each due rate is held (quick: 2)")
	fs.IntVar(&o.sustainedRefine, "sustained-refine", 2, "sustained: halvings between the last rate held and the first not held")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (with --relay inproc: the relay's)")
	fs.StringVar(&o.brokerGCLog, "broker-gc-log", "", "the broker's JVM GC log (-Xlog:gc with time stamps; .ci/kafka.sh writes gc.log in its state directory): each run reports the broker's GC pauses while records came due, and which late windows one of them ends in")
	fs.IntVar(&o.brokerPID, "broker-pid", 0, "the broker's process ID on this machine (.ci/kafka.sh writes KAFKA_PID to state.env in its state directory; Linux): every burst and ceiling run reports the CPU the relay, the broker (its JIT compiler threads apart), this process and the idle CPUs took per record while it drained")
	fs.StringVar(&o.traceFile, "trace", "", "write a runtime execution trace of this process (with --relay inproc: the relay's loop, for `go tool trace`: where a late record waited)")
	isTerm := false
	if f, ok := stderr.(*os.File); ok {
		isTerm = term.IsTerminal(int(f.Fd()))
	}
	fs.StringVar(&o.memProfile, "memprofile", "", "with --relay inproc: heap profiles of this process when the recovery pre-load is all pending (FILE) and after the restart (FILE.restart)")
	fs.BoolVar(&o.progress, "progress", isTerm, "progress bars on stderr (default: when stderr is a terminal)")
	fs.StringVar(&o.replot, "replot", "", "run nothing: merge these results.json files (comma list) into --out (results.json, results.md, lateness-cdf.svg)")
	fs.StringVar(&o.wheelSync, "wheel-sync", "", "KDELAY_WHEEL_SYNC for the relay; default the relay's (batch)")
	fs.StringVar(&deliveries, "delivery", atLeastOnce, "KDELAY_DELIVERY of the relay, comma list of at-least-once, exactly-once: level, wheel and duerate run in each mode, interleaved per round")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.sizes, err = parseInts("size", sizes); err != nil {
		return nil, err
	}
	if o.dueRates, err = parseInts("due-rate", dueRates); err != nil {
		return nil, err
	}
	if o.deliveries, err = parseModes(deliveries); err != nil {
		return nil, err
	}
	if o.sustainedRelays, err = parseInts("sustained-relays", susRelays); err != nil {
		return nil, err
	}
	if o.sustainedRates, err = parseInts("sustained-rates", susRates); err != nil {
		return nil, err
	}
	if !slices.IsSorted(o.sustainedRates) {
		return nil, fmt.Errorf("invalid --sustained-rates %q: ascending", susRates)
	}
	if o.sustainedSeconds < 1 || o.sustainedRefine < 0 {
		return nil, fmt.Errorf("invalid --sustained-seconds %d or --sustained-refine %d", o.sustainedSeconds, o.sustainedRefine)
	}
	o.sustainedDrain = 30 * time.Second
	o.scenarios = make(map[string]bool)
	for _, s := range strings.Split(scen, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		ok := false
		for _, a := range allScenarios {
			ok = ok || a == s
		}
		if !ok {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(allScenarios, ", "))
		}
		o.scenarios[s] = true
	}
	if o.dueLoad != "paced" && o.dueLoad != "preload" {
		return nil, fmt.Errorf("invalid --due-load %q: paced or preload", o.dueLoad)
	}
	if o.dueDelay <= 0 {
		return nil, fmt.Errorf("invalid --due-delay %s", o.dueDelay)
	}
	if o.relayMode != "exec" && o.relayMode != "inproc" {
		return nil, fmt.Errorf("invalid --relay %q: exec or inproc", o.relayMode)
	}
	if o.repeat < 1 {
		return nil, fmt.Errorf("invalid --repeat %d", o.repeat)
	}
	if o.warmup < 0 {
		return nil, fmt.Errorf("invalid --warmup %d", o.warmup)
	}
	if o.partitions < 1 {
		return nil, fmt.Errorf("invalid --partitions %d", o.partitions)
	}
	o.shapeRecords = map[int]int{100: 200_000, 1024: 100_000}
	o.shapeSpread = 20 * time.Second
	o.margin = 2 * time.Second
	o.watch = 5 * time.Second
	if o.quick {
		set := func(name string) bool {
			seen := false
			fs.Visit(func(f *flag.Flag) { seen = seen || f.Name == name })
			return seen
		}
		if !set("records") {
			o.records = 3000
		}
		if !set("warmup") {
			o.warmup = 0
		}
		if !set("recovery-records") {
			o.recoveryRecords = 20_000
		}
		if !set("recovery-lead") {
			o.recoveryLead = 6 * time.Second
		}
		if !set("due-rate") {
			o.dueRates = []int{1000}
		}
		if !set("due-seconds") {
			o.dueSeconds = 3
		}
		if !set("due-delay") {
			o.dueDelay = 2 * time.Second
		}
		if !set("size") {
			o.sizes = []int{100}
		}
		if !set("sustained-rates") {
			o.sustainedRates = []int{300, 600}
		}
		if !set("sustained-seconds") {
			o.sustainedSeconds = 2
		}
		o.sustainedDrain = 10 * time.Second
		o.shapeRecords = map[int]int{100: 4000, 1024: 2000}
		o.shapeSpread = 4 * time.Second
		o.margin = 500 * time.Millisecond
		o.watch = time.Second
	}
	if o.recoveryLead == 0 {
		o.recoveryLead = 30*time.Second + time.Duration(o.recoveryRecords)*time.Second/8000
	}
	return o, nil
}

// parseInts parses a comma list of positive integers (flag name for the
// error).
func parseInts(name, list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("invalid --%s %q: a comma list of positive integers", name, list)
		}
		out = append(out, n)
	}
	return out, nil
}

// Delivery modes of the relay (KDELAY_DELIVERY).
const (
	atLeastOnce = relay.AtLeastOnce
	exactlyOnce = relay.ExactlyOnce
)

// parseModes parses --delivery: a comma list of distinct delivery modes.
func parseModes(list string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s != atLeastOnce && s != exactlyOnce {
			return nil, fmt.Errorf("invalid --delivery %q: a comma list of %s, %s", list, atLeastOnce, exactlyOnce)
		}
		if slices.Contains(out, s) {
			return nil, fmt.Errorf("invalid --delivery %q: %s twice", list, s)
		}
		out = append(out, s)
	}
	return out, nil
}

// recordTo creates path and starts a recording into it (a CPU profile, an
// execution trace); the returned func stops it and closes the file.
func recordTo(path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { stop(); f.Close() }, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stdout, stderr)
	if err != nil {
		return err
	}
	for _, rec := range []struct {
		path  string
		start func(io.Writer) error
		stop  func()
	}{
		{o.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{o.traceFile, trace.Start, trace.Stop},
	} {
		if rec.path == "" {
			continue
		}
		stop, err := recordTo(rec.path, rec.start, rec.stop)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if o.replot != "" {
		res, err := mergeResults(strings.Split(o.replot, ","))
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, markdown(res))
		return writeResults(o.out, res)
	}
	b, err := newBench(ctx, o)
	if err != nil {
		return err
	}
	defer b.close()
	res, err := b.runAll(ctx)
	if res != nil {
		if werr := writeResults(o.out, res); werr != nil && err == nil {
			err = werr
		}
		fmt.Fprint(stdout, markdown(res))
		fmt.Fprintf(stdout, "\nwritten: %s/results.json, %s/results.md, %s/lateness-cdf.svg\n", o.out, o.out, o.out)
		vs := evaluate(res)
		fmt.Fprintf(stdout, "\ngoals: %s\n", tally(vs))
		if lines := missedLines(vs); len(lines) > 0 {
			fmt.Fprintln(stdout, strings.Join(lines, "\n"))
		}
	}
	return err
}
