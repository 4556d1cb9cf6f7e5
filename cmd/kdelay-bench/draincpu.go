package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// drainCPU is where the machine's CPU went while a burst drained, from
// its first append at the target to its last, in µs per delivered record
// (--broker-pid, Linux). On a machine the broker, the relay and the bench
// share, a burst drains as fast as all three together allow: this says
// which of them took the CPU, and how much was left idle.
type drainCPU struct {
	WindowMs float64 `json:"window_ms"`
	// Relay is the relay process's CPU; -1 when there is none to measure:
	// the ceiling, or the relay in the bench's process (its CPU is then
	// in Bench).
	Relay float64 `json:"relay_us"`
	// Broker is every thread of the broker's JVM; JIT the part of it its
	// JIT compiler threads took (a broker compiles the code paths a load
	// newly makes hot, long after it started).
	Broker float64 `json:"broker_us"`
	JIT    float64 `json:"broker_jit_us"`
	// Bench is this process: the collector reading the target (and, in
	// the ceiling, the producer).
	Bench float64 `json:"bench_us"`
	// Other is the CPU busy in no process above (the kernel's own
	// threads, other processes); Idle the CPUs' idle time.
	Other float64 `json:"other_us"`
	Idle  float64 `json:"idle_us"`
}

// userHZ is the unit of the CPU times in /proc: Linux reports them to user
// space in ticks of 1/100 s whatever the kernel's own tick rate.
const userHZ = 100

// cpuSampleEvery is how often the sampler reads the CPU times: a tenth of
// the shortest drain it reports on, at about a hundred microseconds of the
// bench's CPU per sample.
const cpuSampleEvery = 20 * time.Millisecond

// minDrainWindow is the shortest drain a drainCPU is computed for: shorter
// ones span too few ticks of the /proc times to say anything.
const minDrainWindow = 10 * cpuSampleEvery

// cpuSample is the cumulative CPU times, in seconds, at one instant.
type cpuSample struct {
	at                time.Time
	relay, broker     float64
	jit               map[int]float64 // per JIT compiler thread of the broker
	self, busy, idle  float64
	relayOK, brokerOK bool
}

// procTicks parses the utime and stime of a /proc/<pid>/stat or
// /proc/<pid>/task/<tid>/stat line, in seconds, and the command name. The
// name is in parentheses and may itself hold spaces and parentheses, so
// the fields are counted from the last ')'.
func procTicks(line string) (comm string, seconds float64, err error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return "", 0, fmt.Errorf("stat line without a command name: %.60q", line)
	}
	f := strings.Fields(line[end+1:])
	// After the name: state(0) ... utime(11) stime(12).
	if len(f) < 13 {
		return "", 0, fmt.Errorf("stat line of %d fields after the name", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return "", 0, fmt.Errorf("stat line: %w", err)
	}
	return line[open+1 : end], float64(u+s) / userHZ, nil
}

// machineTicks parses the "cpu" line of /proc/stat: the time every CPU
// was busy (user, nice, system, irq, softirq) and idle (idle, iowait), in
// seconds. Steal, time the host gave another guest, is in neither.
func machineTicks(line string) (busy, idle float64, err error) {
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("not the cpu line of /proc/stat: %.60q", line)
	}
	var v [7]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	user, nice, system, idl, iowait, irq, softirq := v[0], v[1], v[2], v[3], v[4], v[5], v[6]
	return float64(user+nice+system+irq+softirq) / userHZ, float64(idl+iowait) / userHZ, nil
}

func readProcTicks(path string) (string, float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	return procTicks(string(b))
}

// isJIT reports whether a JVM thread name is one of HotSpot's JIT compiler
// threads ("C2 CompilerThread0", cut to 15 bytes by the kernel).
func isJIT(comm string) bool {
	return strings.HasPrefix(comm, "C1 CompilerThre") || strings.HasPrefix(comm, "C2 CompilerThre")
}

// drainSampler reads the CPU times of the broker (its JIT threads apart),
// the relay, this process and the machine every cpuSampleEvery until
// stopped.
type drainSampler struct {
	broker, relay int // pids; relay 0: in process
	known         map[int]bool
	stopOnce      sync.Once
	stopCh        chan struct{}
	done          chan struct{}
	samples       []cpuSample
}

// startDrainSampler starts sampling; relayPID is 0 when the relay runs in
// this process.
func startDrainSampler(ctx context.Context, brokerPID, relayPID int) *drainSampler {
	s := &drainSampler{broker: brokerPID, relay: relayPID, known: map[int]bool{}, stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(cpuSampleEvery)
		defer t.Stop()
		for {
			s.samples = append(s.samples, s.sample())
			select {
			case <-t.C:
			case <-s.stopCh:
				s.samples = append(s.samples, s.sample())
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the samples, in time order; a nil
// sampler has none. It may be called again.
func (s *drainSampler) stop() []cpuSample {
	if s == nil {
		return nil
	}
	s.stopOnce.Do(func() { close(s.stopCh) })
	<-s.done
	return s.samples
}

func (s *drainSampler) sample() cpuSample {
	c := cpuSample{at: time.Now(), jit: map[int]float64{}}
	if s.relay > 0 {
		_, v, err := readProcTicks(fmt.Sprintf("/proc/%d/stat", s.relay))
		c.relay, c.relayOK = v, err == nil
	}
	if _, v, err := readProcTicks(fmt.Sprintf("/proc/%d/stat", s.broker)); err == nil {
		c.broker, c.brokerOK = v, true
	}
	_, c.self, _ = readProcTicks("/proc/self/stat")
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		c.busy, c.idle, _ = machineTicks(line)
	}
	// The JVM's threads come and go: list them every time, read the name
	// of a new one once and the times of the compiler threads only.
	dir := fmt.Sprintf("/proc/%d/task", s.broker)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return c
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		jit, seen := s.known[tid]
		comm, v, err := readProcTicks(dir + "/" + e.Name() + "/stat")
		if !seen {
			if err != nil {
				continue
			}
			jit = isJIT(comm)
			s.known[tid] = jit
		}
		if jit && err == nil {
			c.jit[tid] = v
		}
	}
	return c
}

// windowCPU is drainCPU of the drain from startMs to endMs (unix ms) of n
// delivered records: the times between the last sample at or before the
// start and the first at or after the end, scaled to the drain's length
// (the CPU is taken as even over the few milliseconds either side). nil
// when the drain is shorter than minDrainWindow or the samples do not
// cover it.
func windowCPU(samples []cpuSample, startMs, endMs int64, n int) *drainCPU {
	span := time.Duration(endMs-startMs) * time.Millisecond
	if n <= 0 || span < minDrainWindow || len(samples) < 2 {
		return nil
	}
	i0, i1 := -1, -1
	for i, c := range samples {
		ms := c.at.UnixMilli()
		if ms <= startMs {
			i0 = i
		}
		if ms >= endMs && i1 < 0 {
			i1 = i
		}
	}
	if i0 < 0 || i1 < 0 {
		return nil
	}
	a, b := samples[i0], samples[i1]
	if !a.brokerOK || !b.brokerOK {
		return nil
	}
	scale := span.Seconds() / b.at.Sub(a.at).Seconds() * 1e6 / float64(n)
	per := func(d float64) float64 { return max(d, 0) * scale }
	var jit float64
	for tid, v := range b.jit {
		jit += v - a.jit[tid] // a thread started in the window counts from 0
	}
	d := &drainCPU{
		WindowMs: float64(endMs - startMs),
		Relay:    -1,
		Broker:   per(b.broker - a.broker),
		JIT:      per(jit),
		Bench:    per(b.self - a.self),
		Idle:     per(b.idle - a.idle),
	}
	busy := b.busy - a.busy - (b.broker - a.broker) - (b.self - a.self)
	if a.relayOK && b.relayOK {
		d.Relay = per(b.relay - a.relay)
		busy -= b.relay - a.relay
	}
	d.Other = per(busy) // the ticks of /proc may leave it a little below 0
	return d
}

// drainWindow is the drain of r: from its first append at the target to
// its last, unix ms; ok is false without both.
func drainWindow(r *result) (startMs, endMs int64, ok bool) {
	if r.FirstLatenessMs == nil || r.CompletionMs <= 0 || r.DueMs == 0 {
		return 0, 0, false
	}
	return r.DueMs + int64(*r.FirstLatenessMs), r.DueMs + int64(r.CompletionMs), true
}

// setDrainCPU fills r.DrainCPU from the samples of its run.
func (r *result) setDrainCPU(samples []cpuSample) {
	if start, end, ok := drainWindow(r); ok {
		r.DrainCPU = windowCPU(samples, start, end, r.Delivered)
	}
}

// drainCPULine is drainCPU for the run's summary line; "" without one.
func (r *result) drainCPULine() string {
	d := r.DrainCPU
	if d == nil {
		return ""
	}
	relay := "-"
	if d.Relay >= 0 {
		relay = fmt.Sprintf("%.2f", d.Relay)
	}
	return fmt.Sprintf("CPU while it drained (%s), µs per record: relay %s, broker %.2f (JIT %.2f), bench %.2f, other %.2f, idle %.2f",
		ms(d.WindowMs), relay, d.Broker, d.JIT, d.Bench, d.Other, d.Idle)
}

// drainCPUMarkdown is the table of every run's drainCPU; "" when no run
// has one.
func drainCPUMarkdown(res *results) string {
	var sb strings.Builder
	for _, r := range res.Results {
		d := r.DrainCPU
		if d == nil {
			continue
		}
		if sb.Len() == 0 {
			sb.WriteString("\n### CPU while a burst drained\n\nFrom the burst's first append at the target to its last, in µs per delivered record, from /proc (--broker-pid): the relay process (a dash: none, the ceiling, or the relay in this process); every thread of the broker's JVM, and of that its JIT compiler threads; this process (the collector, and in the ceiling the producer); CPU busy in none of them; the CPUs' idle time. The row of a run sums to the CPUs × the drain's length, less the time the host took (steal), per record.\n\n")
			sb.WriteString("| run | drain | relay | broker | of which JIT | bench | other | idle |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		}
		relay := "-"
		if d.Relay >= 0 {
			relay = fmt.Sprintf("%.2f", d.Relay)
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r.name(), ms(d.WindowMs), relay, d.Broker, d.JIT, d.Bench, d.Other, d.Idle)
	}
	return sb.String()
}

// startDrainSampler starts a drainSampler for a run whose relay is rp (nil:
// no relay, the ceiling); nil without --broker-pid.
func (b *bench) startDrainSampler(ctx context.Context, rp *relayProc) *drainSampler {
	if b.o.brokerPID <= 0 {
		return nil
	}
	relay := 0
	if rp != nil && rp.cmd != nil && rp.cmd.Process != nil {
		relay = rp.cmd.Process.Pid
	}
	return startDrainSampler(ctx, b.o.brokerPID, relay)
}
