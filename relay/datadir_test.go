package relay

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

func TestDataDirLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	l, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockDataDir(dir)
	var inUse *DataDirInUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("second lock: got %v, want a DataDirInUseError", err)
	}
	if inUse.PID != os.Getpid() || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q: want the directory and the holder's pid %d", err, os.Getpid())
	}
	l.unlock()
	l2, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	l2.unlock()
}

func TestDataDirTxnID(t *testing.T) {
	dir := t.TempDir()
	a, err := dataDirTxnID(dir, "cluster-1", "g", "host")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a, "kdelay-g-host-") {
		t.Errorf("ID %q: want kdelay-<group>-<host>-<random>", a)
	}
	tests := []struct {
		name, cluster, group string
		same                 bool
	}{
		{"restart on the same directory", "cluster-1", "g", true},
		{"another group", "cluster-1", "h", false},
		{"another cluster", "cluster-2", "g", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := t.TempDir()
			first, err := dataDirTxnID(d, "cluster-1", "g", "host")
			if err != nil {
				t.Fatal(err)
			}
			got, err := dataDirTxnID(d, tt.cluster, tt.group, "host")
			if err != nil {
				t.Fatal(err)
			}
			if (got == first) != tt.same {
				t.Errorf("got %q after %q: same = %v, want %v", got, first, got == first, tt.same)
			}
		})
	}
	other, err := dataDirTxnID(t.TempDir(), "cluster-1", "g", "host")
	if err != nil {
		t.Fatal(err)
	}
	if other == a {
		t.Errorf("two data directories on one host got one ID %q", a)
	}
	if err := os.WriteFile(filepath.Join(dir, txnIDFile), []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := dataDirTxnID(dir, "cluster-1", "g", "host"); err != nil || b == "" {
		t.Errorf("damaged ID file: got %q, %v; want a new ID", b, err)
	}
}

// TestSecondRelaySameDataDir: a second relay on a data directory in use
// refuses to start with DataDirInUseError and touches nothing; the first
// keeps delivering.
func TestSecondRelaySameDataDir(t *testing.T) {
	for _, mode := range []string{AtLeastOnce, ExactlyOnce} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, nil, "orders")
			h.readCommitted = true
			setMode := func(c *config.Config) { c.Delivery = mode }
			rr := h.start(setMode)
			rr.waitReady(t)
			h.send("before", levels.Delay{Target: "orders", Delay: 200 * time.Millisecond})
			h.collect(20*time.Second, allKeys("before"), "orders")

			cfg := h.cfg
			setMode(&cfg)
			_, err := New(Options{Config: cfg})
			var inUse *DataDirInUseError
			if !errors.As(err, &inUse) {
				t.Fatalf("second relay on %s: got %v, want DataDirInUseError", cfg.DataDir, err)
			}
			h.send("after", levels.Delay{Target: "orders", Delay: 200 * time.Millisecond})
			got := h.collect(20*time.Second, allKeys("before", "after"), "orders")
			h.report(got, []string{"before", "after"}, 0)
			if !rr.r.Ready() {
				t.Errorf("first relay not ready after the refused start: %s", rr.r.Why())
			}
		})
	}
}

// TestTxnIDFromDataDir: with no KDELAY_TRANSACTIONAL_ID or
// KDELAY_INSTANCE_ID, two exactly-once relays on one host get distinct
// IDs, and a relay restarted on its data directory gets its own back.
func TestTxnIDFromDataDir(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	h.readCommitted = true
	a := h.start(exactlyOnce)
	dirB := t.TempDir()
	b := h.start(func(c *config.Config) { c.Delivery = ExactlyOnce; c.DataDir = dirB })
	a.waitReady(t)
	b.waitReady(t)
	idA, idB := a.r.mode.(*exactlyOnceMode).id, b.r.mode.(*exactlyOnceMode).id
	if idA == "" || idA == idB {
		t.Fatalf("transactional IDs %q and %q: want two distinct ones", idA, idB)
	}
	keys := keysOf("two", 40)
	for i, k := range keys {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(i%8) * 100 * time.Millisecond})
	}
	h.collect(30*time.Second, allKeys(keys...), "orders")
	a.stop(t)
	a = h.start(exactlyOnce)
	if id := a.r.mode.(*exactlyOnceMode).id; id != idA {
		t.Errorf("restarted on its data directory: ID %q, want %q", id, idA)
	}
	more := keysOf("more", 40)
	for i, k := range more {
		h.send(k, levels.Delay{Target: "orders", Delay: time.Duration(i%8) * 100 * time.Millisecond})
	}
	got := h.collect(30*time.Second, allKeys(append(keys, more...)...), "orders")
	h.report(got, append(keys, more...), 0)
}

// TestFencedLimit: one fence (a relay that stood still past its
// transaction timeout) is survived; fenceLimit within fenceWindow (another
// live producer with the ID) stop the relay with ErrFenced.
func TestFencedLimit(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		at    []time.Duration // fences, from t0
		fatal bool
	}{
		{"one fence", []time.Duration{0}, false},
		{"two in a minute", []time.Duration{0, 30 * time.Second}, false},
		{"three in a minute", []time.Duration{0, 20 * time.Second, 40 * time.Second}, true},
		{"three spread over two minutes", []time.Duration{0, time.Minute + time.Second, 2*time.Minute + 2*time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now time.Time
			r := &Relay{now: func() time.Time { return now }, log: slog.New(slog.DiscardHandler)}
			e := &exactlyOnceMode{r: r, id: "id"}
			for _, d := range tt.at {
				now = t0.Add(d)
				e.fenced(errors.New("PRODUCER_FENCED"))
			}
			if got := r.fatal != nil; got != tt.fatal {
				t.Fatalf("fatal = %v (%v), want %v", got, r.fatal, tt.fatal)
			}
			if tt.fatal && !errors.Is(r.fatal, ErrFenced) {
				t.Errorf("fatal %v does not wrap ErrFenced", r.fatal)
			}
		})
	}
}
