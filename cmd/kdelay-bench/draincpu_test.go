package main

import (
	"context"
	"math"
	"os"
	"runtime"
	"testing"
	"time"
)

func TestProcTicks(t *testing.T) {
	// A name with a space and a parenthesis, as a JVM thread may have.
	line := "4242 (C2 Compi) r) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 2 0 100 0 0"
	comm, secs, err := procTicks(line)
	if err != nil {
		t.Fatal(err)
	}
	if comm != "C2 Compi) r" || math.Abs(secs-3.80) > 1e-9 {
		t.Fatalf("comm %q, seconds %v; want %q, 3.80", comm, secs, "C2 Compi) r")
	}
	for _, bad := range []string{"", "4242 no name S 1", "4242 (x) S 1 2 3"} {
		if _, _, err := procTicks(bad); err == nil {
			t.Errorf("procTicks(%q): no error", bad)
		}
	}
}

func TestMachineTicks(t *testing.T) {
	busy, idle, err := machineTicks("cpu  1000 50 300 9000 100 20 30 400 0 0")
	if err != nil {
		t.Fatal(err)
	}
	// busy: user, nice, system, irq, softirq; idle: idle, iowait; steal
	// (400) in neither.
	if busy != 14 || idle != 91 {
		t.Fatalf("busy %v idle %v; want 14, 91", busy, idle)
	}
	if _, _, err := machineTicks("cpu0 1 2 3 4 5 6 7"); err == nil {
		t.Error("a per-CPU line was taken for the total")
	}
}

func TestIsJIT(t *testing.T) {
	for comm, want := range map[string]bool{"C2 CompilerThre": true, "C1 CompilerThre": true, "data-plane-kafk": false, "GC Thread#0": false} {
		if isJIT(comm) != want {
			t.Errorf("isJIT(%q) = %v", comm, !want)
		}
	}
}

// samplesAt builds samples every 20 ms from t0 where each figure grows at a
// constant rate (CPU seconds per second).
func samplesAt(t0 time.Time, count int, relay, broker, jit, self, busy, idle float64) []cpuSample {
	var out []cpuSample
	for i := range count {
		s := float64(i) * cpuSampleEvery.Seconds()
		c := cpuSample{
			at: t0.Add(time.Duration(i) * cpuSampleEvery), relay: relay * s, broker: broker * s,
			self: self * s, busy: busy * s, idle: idle * s, relayOK: true, brokerOK: true,
			jit: map[int]float64{7: jit * s},
		}
		out = append(out, c)
	}
	return out
}

func TestWindowCPU(t *testing.T) {
	t0 := time.UnixMilli(1_800_000_000_000)
	// 2 CPUs: relay 0.8, broker 0.5 (JIT 0.1), bench 0.4, other 0.1,
	// idle 0.2 CPUs, for 2 s; 100,000 records drained in the second
	// from t0+500ms to t0+1500ms.
	samples := samplesAt(t0, 101, 0.8, 0.5, 0.1, 0.4, 1.8, 0.2)
	d := windowCPU(samples, t0.UnixMilli()+500, t0.UnixMilli()+1500, 100_000)
	if d == nil {
		t.Fatal("no figure")
	}
	// CPUs × 1 s / 100,000 records = 10 µs per CPU.
	want := drainCPU{WindowMs: 1000, Relay: 8, Broker: 5, JIT: 1, Bench: 4, Other: 1, Idle: 2}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"window", d.WindowMs, want.WindowMs}, {"relay", d.Relay, want.Relay}, {"broker", d.Broker, want.Broker}, {"jit", d.JIT, want.JIT}, {"bench", d.Bench, want.Bench}, {"other", d.Other, want.Other}, {"idle", d.Idle, want.Idle}} {
		if math.Abs(c.got-c.want) > 1e-6 {
			t.Errorf("%s: %v µs per record, want %v", c.name, c.got, c.want)
		}
	}

	// A window between samples is scaled to its own length.
	d = windowCPU(samples, t0.UnixMilli()+510, t0.UnixMilli()+1010, 50_000)
	if d == nil || math.Abs(d.Relay-8) > 1e-6 {
		t.Errorf("window between samples: %+v, want relay 8", d)
	}

	// A JIT thread started within the window (at 1.2 s, 0.1 CPU) counts
	// from zero: 0.03 s over 100,000 records.
	late := samplesAt(t0, 101, 0.8, 0.5, 0, 0.4, 1.8, 0.2)
	for i := 60; i < len(late); i++ {
		late[i].jit = map[int]float64{9: float64(i-60) * cpuSampleEvery.Seconds() * 0.1}
	}
	if d := windowCPU(late, t0.UnixMilli()+500, t0.UnixMilli()+1500, 100_000); d == nil || math.Abs(d.JIT-0.3) > 1e-6 {
		t.Errorf("JIT thread started in the window: %+v, want JIT 0.3", d)
	}

	// Without the relay's times: no relay figure, its CPU in other.
	norelay := samplesAt(t0, 101, 0.8, 0.5, 0.1, 0.4, 1.8, 0.2)
	for i := range norelay {
		norelay[i].relayOK = false
	}
	if d := windowCPU(norelay, t0.UnixMilli()+500, t0.UnixMilli()+1500, 100_000); d == nil || d.Relay != -1 || math.Abs(d.Other-9) > 1e-6 {
		t.Errorf("no relay: %+v, want relay -1, other 9", d)
	}

	for name, d := range map[string]*drainCPU{
		"too short":           windowCPU(samples, t0.UnixMilli()+500, t0.UnixMilli()+600, 1000),
		"before the samples":  windowCPU(samples, t0.UnixMilli()-1000, t0.UnixMilli()+500, 1000),
		"after the samples":   windowCPU(samples, t0.UnixMilli()+1500, t0.UnixMilli()+2500, 1000),
		"no records":          windowCPU(samples, t0.UnixMilli()+500, t0.UnixMilli()+1500, 0),
		"broker not readable": windowCPU(samplesAt(t0, 2, 0, 0, 0, 0, 0, 0), t0.UnixMilli(), t0.UnixMilli()+10, 1),
	} {
		if d != nil {
			t.Errorf("%s: %+v, want none", name, d)
		}
	}
}

// TestDrainSamplerReadsProc samples this process as the broker and the
// relay while it burns 0.3 s of CPU: the real /proc files, read as a run
// reads them.
func TestDrainSamplerReadsProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("no /proc here (%s): --broker-pid is Linux only", runtime.GOOS)
	}
	c0, ok := processCPU()
	if !ok {
		t.Skip("no CPU time of this process")
	}
	s := startDrainSampler(context.Background(), os.Getpid(), os.Getpid())
	x := 1.0
	for c, _ := processCPU(); c-c0 < 0.3; c, _ = processCPU() {
		for range 10_000 {
			x = math.Sqrt(x + 1)
		}
	}
	samples := s.stop()
	if len(samples) < 10 || x == 0 {
		t.Fatalf("%d samples over 0.3 s of CPU", len(samples))
	}
	first, last := samples[0], samples[len(samples)-1]
	for name, d := range map[string]float64{"broker": last.broker - first.broker, "relay": last.relay - first.relay, "self": last.self - first.self, "machine busy": last.busy - first.busy} {
		if d < 0.2 {
			t.Errorf("burned 0.3 s of CPU, sampled %s %.2f s", name, d)
		}
	}
	if !last.brokerOK || !last.relayOK {
		t.Error("the times of a live process were not read")
	}
	if len(s.stop()) != len(samples) {
		t.Fatal("a second stop changed the samples")
	}
}
