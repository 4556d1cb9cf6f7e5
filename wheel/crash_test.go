//go:build unix

package wheel

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The crash test runs a child process (this test binary, re-executed with
// -test.run=TestCrashChild) that adds, expires and marks entries done in
// batches and is killed with SIGKILL at a random moment. Before each Flush
// the child appends the batch to an ack file ("B n ..."), after it "K n".
// The parent reopens the wheel after every kill and checks that every
// entry of a batch acknowledged with K is there (or done, if its Done was
// acknowledged), that every pending entry can be read back, and that an
// entry of the unacknowledged batch that is missing lies above the
// partition's Handled watermark, so the relay would read it again.
//
// KDELAY_WHEEL_CRASH_ITERS sets the number of kills (default 8).

const (
	crashChildEnv = "KDELAY_WHEEL_CRASH_CHILD"
	crashParts    = 4
)

func crashOptions(policy SyncPolicy) Options {
	return Options{Horizon: 10 * time.Second, Tick: 10 * time.Millisecond, SegmentBytes: 16 << 10, Sync: policy}
}

func TestCrash(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	iters := 8
	if s := os.Getenv("KDELAY_WHEEL_CRASH_ITERS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("KDELAY_WHEEL_CRASH_ITERS: %v", err)
		}
		iters = n
	}
	dir := t.TempDir()
	wdir := filepath.Join(dir, "wheel")
	ack := filepath.Join(dir, "ack")
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var totalLost, totalTrunc, checked int64
	for i := range iters {
		policy := SyncBatch
		if i%3 == 2 {
			policy = SyncNone // kill -9 keeps the page cache: acked batches survive too
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			crashChildEnv+"="+wdir,
			"KDELAY_WHEEL_CRASH_ACK="+ack,
			"KDELAY_WHEEL_CRASH_SEED="+strconv.Itoa(int(r.Int32())),
			"KDELAY_WHEEL_CRASH_POLICY="+strconv.Itoa(int(policy)))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			t.Fatalf("iteration %d: child exited by itself: %v\n%s", i, err, out.String())
		case <-time.After(time.Duration(30+r.IntN(300)) * time.Millisecond):
		}
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		if r.IntN(2) == 0 {
			tearTail(t, r, wdir, ack)
		}

		w, rep, err := Open(wdir, crashOptions(policy), time.Now().UnixMilli())
		if err != nil {
			t.Fatalf("iteration %d: Open after kill: %v", i, err)
		}
		start := time.Now()
		c := checkCrash(t, i, w, rep, ack)
		checked += c
		t.Logf("iteration %d (%v): %d pending, %d acknowledged live, lost %d, cut %d bytes, checked in %v",
			i, policy, w.Pending(), c, rep.Lost, rep.Truncated, time.Since(start).Round(time.Millisecond))
		totalLost += rep.Lost
		totalTrunc += rep.Truncated
		if err := w.Close(); err != nil {
			t.Fatalf("iteration %d: Close: %v", i, err)
		}
	}
	t.Logf("%d kills: %d acknowledged entries checked, %d unacknowledged reported lost, %d bytes cut", iters, checked, totalLost, totalTrunc)
}

// tearTail simulates a torn write: it cuts or corrupts the log after both
// the last acknowledged flush and the newest checkpoint, where a real
// crash can leave garbage.
func tearTail(t *testing.T, r *rand.Rand, wdir, ack string) {
	t.Helper()
	data, _ := os.ReadFile(ack)
	var seg uint32
	var pos int64
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[0] == "K" {
			id, _ := strconv.ParseUint(f[2], 10, 32)
			seg = uint32(id)
			pos, _ = strconv.ParseInt(f[3], 10, 64)
		}
	}
	for i := range uint64(2) {
		b, err := os.ReadFile(ckptPath(wdir, i))
		if err != nil {
			continue
		}
		if c, err := decodeCheckpoint(b); err == nil && (c.seg > seg || (c.seg == seg && int64(c.off) > pos)) {
			seg, pos = c.seg, int64(c.off)
		}
	}
	if seg == 0 {
		return
	}
	segs, _ := filepath.Glob(filepath.Join(wdir, "*.seg"))
	for _, path := range segs {
		id, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".seg"), 16, 32)
		if err != nil || uint32(id) < seg {
			continue
		}
		from := int64(0)
		if uint32(id) == seg {
			from = pos
		}
		b, err := os.ReadFile(path)
		if err != nil || int64(len(b)) <= from {
			continue
		}
		at := from + r.Int64N(int64(len(b))-from)
		if r.IntN(2) == 0 {
			b = b[:at]
		} else {
			b[at] ^= byte(1 + r.IntN(255))
		}
		os.WriteFile(path, b, 0o644)
	}
}

type crashKey struct {
	p   int32
	off int64
}

type crashState struct {
	added bool // last event: added (else done)
	acked bool // the batch of the last event was acknowledged
	batch int
}

// checkCrash verifies the reopened wheel against the ack file.
func checkCrash(t *testing.T, iter int, w *Wheel, rep Report, ack string) int64 {
	t.Helper()
	data, err := os.ReadFile(ack)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	state := map[crashKey]*crashState{}
	okBatch := map[int]bool{}
	type event struct {
		add bool
		k   crashKey
	}
	var batches [][]event
	var ids []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	complete := bytes.LastIndexByte(data, '\n') + 1
	read := 0
	for sc.Scan() {
		line := sc.Text()
		read += len(line) + 1
		if read > complete {
			break // torn line
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "K":
			okBatch[n] = true
		case "B":
			var ev []event
			for _, x := range f[2:] {
				parts := strings.Split(x, ":")
				if len(parts) != 3 {
					t.Fatalf("ack event %q", x)
				}
				p, err1 := strconv.Atoi(parts[1])
				off, err2 := strconv.ParseInt(parts[2], 10, 64)
				if err1 != nil || err2 != nil {
					t.Fatalf("ack event %q", x)
				}
				ev = append(ev, event{parts[0] == "a", crashKey{int32(p), off}})
			}
			batches = append(batches, ev)
			ids = append(ids, n)
		}
	}
	for i, ev := range batches {
		for _, e := range ev {
			s := state[e.k]
			if s == nil {
				s = &crashState{}
				state[e.k] = s
			}
			s.added, s.acked, s.batch = e.add, okBatch[ids[i]], ids[i]
		}
	}
	var checked int64
	for k, s := range state {
		pending := w.pendingOff(k.p, k.off)
		switch {
		case s.acked && s.added:
			checked++
			if !pending {
				t.Fatalf("iteration %d: acknowledged entry %d/%d (batch %d) not recovered; report %+v", iter, k.p, k.off, s.batch, rep)
			}
		case s.acked && !s.added:
			if pending {
				t.Fatalf("iteration %d: entry %d/%d done in acknowledged batch %d is pending again", iter, k.p, k.off, s.batch)
			}
		case s.added && !pending:
			if h := w.Handled(k.p); h >= k.off {
				t.Fatalf("iteration %d: unacknowledged entry %d/%d missing but Handled(%d) = %d", iter, k.p, k.off, k.p, h)
			}
		}
	}
	for _, lr := range rep.LostRanges {
		for off := lr.From; off <= lr.To; off++ {
			if s := state[crashKey{lr.Partition, off}]; s != nil && s.acked && s.added {
				t.Fatalf("iteration %d: acknowledged entry %d/%d reported lost", iter, lr.Partition, off)
			}
		}
	}
	// every pending entry must be readable, in order, with its payload
	var got []Entry
	far := time.Now().UnixMilli() + 3_600_000
	for {
		n, err := w.Expire(far, 1000, func(e Entry) { got = append(got, e) })
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if int64(len(got)) != w.Pending() {
		t.Fatalf("iteration %d: %d entries readable, %d pending; problems %q", iter, len(got), w.Pending(), w.Problems())
	}
	checkOrder(t, got)
	for _, e := range got {
		if !bytes.Equal(e.Payload, payloadOf(e.Partition, e.Offset)) {
			t.Fatalf("iteration %d: payload of %d/%d: %q", iter, e.Partition, e.Offset, e.Payload)
		}
	}
	if p := w.Problems(); len(p) > 0 {
		t.Fatalf("iteration %d: problems %q", iter, p)
	}
	return checked
}

// TestCrashChild is the child of TestCrash; it runs until killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	seed, _ := strconv.Atoi(os.Getenv("KDELAY_WHEEL_CRASH_SEED"))
	policy, _ := strconv.Atoi(os.Getenv("KDELAY_WHEEL_CRASH_POLICY"))
	r := rand.New(rand.NewPCG(uint64(seed), 2))
	w, _, err := Open(dir, crashOptions(SyncPolicy(policy)), time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	af, err := os.OpenFile(os.Getenv("KDELAY_WHEEL_CRASH_ACK"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	next := map[int32]int64{}
	for p := range int32(crashParts) {
		if h, ok := w.Highest(p); ok {
			next[p] = h + 1
		}
	}
	batch := seed * 1_000_000 // distinct across lives
	deadline := time.Now().Add(30 * time.Second)
	var line bytes.Buffer
	for time.Now().Before(deadline) {
		batch++
		now := time.Now().UnixMilli()
		line.Reset()
		fmt.Fprintf(&line, "B %d", batch)
		n := 1 + r.IntN(40)
		if r.IntN(100) == 0 {
			n = 1000 // a batch spanning segments and several writes
		}
		for range n {
			p := int32(r.IntN(crashParts))
			off := next[p]
			next[p]++
			e := Entry{Due: now + r.Int64N(1000) - 100, Partition: p, Offset: off, Payload: payloadOf(p, off)}
			if err := w.Add(now, e); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&line, " a:%d:%d", p, off)
		}
		var out []Entry
		if _, err := w.Expire(now, 100+r.IntN(200), func(e Entry) { out = append(out, e) }); err != nil {
			t.Fatal(err)
		}
		for _, e := range out {
			if r.IntN(10) == 0 {
				continue // left in flight
			}
			w.Done(e.Partition, e.Offset)
			fmt.Fprintf(&line, " d:%d:%d", e.Partition, e.Offset)
		}
		for p := range int32(crashParts) {
			w.SetHandled(p, next[p]-1)
		}
		line.WriteByte('\n')
		if _, err := af.Write(line.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(af, "K %d %d %d\n", batch, w.active.id, w.active.size); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("not killed in time")
}
