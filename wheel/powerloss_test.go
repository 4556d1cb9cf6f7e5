package wheel

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Power loss, unlike kill -9, loses the page cache: what survives is what
// was fsynced. durableDisk models that for one wheel directory through the
// wheel's syncHook: each file keeps the content it had at its last fsync
// (a file never synced is empty), and the directory keeps the names it had
// at its last fsync (a file created since is gone, one removed since is
// back with its last synced content). Anything kinder than this (some
// unsynced writes surviving) is covered by TestCrash's torn tails.
type durableDisk struct {
	mu    sync.Mutex
	dir   string
	files map[string][]byte // base name -> content at its last fsync
	names map[string]bool   // base names at the directory's last fsync
}

// watchDisk starts modelling dir, whose present content counts as durable.
// It installs syncHook until the test ends; tests using it must not run in
// parallel with other wheel tests.
func watchDisk(t *testing.T, dir string) *durableDisk {
	t.Helper()
	d := &durableDisk{dir: filepath.Clean(dir), files: map[string][]byte{}, names: map[string]bool{}}
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		d.files[e.Name()], d.names[e.Name()] = b, true
	}
	syncHook = d.synced
	t.Cleanup(func() { syncHook = nil })
	return d
}

func (d *durableDisk) synced(path string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	path = filepath.Clean(path)
	switch {
	case path == d.dir:
		ents, err := os.ReadDir(path)
		if err != nil {
			panic(err)
		}
		d.names = map[string]bool{}
		for _, e := range ents {
			d.names[e.Name()] = true
		}
	case filepath.Dir(path) == d.dir:
		b, err := os.ReadFile(path)
		if err != nil {
			panic(err)
		}
		d.files[filepath.Base(path)] = b
	}
}

// powerLoss writes into the new directory to what a power loss would
// leave of the modelled one.
func (d *durableDisk) powerLoss(t *testing.T, to string) (files, bytes int) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for name := range d.names {
		if name == "LOCK" {
			continue
		}
		b := d.files[name]
		if err := os.WriteFile(filepath.Join(to, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		files++
		bytes += len(b)
	}
	return files, bytes
}

type plKey struct {
	p   int32
	off int64
}

// TestPowerLoss runs lives of a wheel (SyncBatch) that add, expire and mark
// entries done in flushed batches, and ends each life with a simulated
// power loss (durableDisk) at a random point, some work left unflushed.
// After each one, every entry of an acknowledged (flushed) batch must be
// pending again unless its Done was acknowledged, no acknowledged Done may
// come back, and every pending entry must be readable with its payload.
// Removing any fsync the wheel relies on fails it.
//
// In the async run the wheel is SyncManual and a batch is acknowledged
// when the Syncer of its SyncStart has returned; each Syncer runs on its
// own goroutine while the next batch is added, handed out and flushed.
func TestPowerLoss(t *testing.T) {
	t.Run("batch", func(t *testing.T) { testPowerLoss(t, false) })
	t.Run("async", func(t *testing.T) { testPowerLoss(t, true) })
}

func testPowerLoss(t *testing.T, async bool) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 18))
	opt := Options{Horizon: 10 * time.Second, Tick: 10 * time.Millisecond, SegmentBytes: 16 << 10, Sync: SyncBatch}
	if async {
		opt.Sync = SyncManual
	}
	base := t.TempDir()
	now := t0
	added := map[plKey]bool{} // acknowledged entries: true pending, false done
	next := map[int32]int64{}
	var checked int
	for life := range 8 {
		dir := filepath.Join(base, fmt.Sprintf("life%d", life))
		if life > 0 {
			w, _ := openT(t, dir, opt, now)
			checked += checkPowerLoss(t, life, w, now, added)
			crash(w)
		}
		d := watchDisk(t, dir)
		w, _ := openT(t, dir, opt, now)
		var syncing chan error      // the outstanding Syncer's result
		var unsynced map[plKey]bool // its batch, acknowledged when it returns
		await := func() {
			if syncing == nil {
				return
			}
			if err := <-syncing; err != nil {
				t.Fatal(err)
			}
			for k, v := range unsynced {
				added[k] = v
			}
			syncing, unsynced = nil, nil
		}
		batches := 5 + r.IntN(60)
		for b := range batches {
			now += r.Int64N(40)
			ev := map[plKey]bool{}
			n := 1 + r.IntN(30)
			if r.IntN(20) == 0 {
				n = 600 // a batch spanning segments
			}
			for range n {
				p := int32(r.IntN(3))
				off := next[p]
				next[p]++
				mustAdd(t, w, now, Entry{Due: now + r.Int64N(800) - 100, Partition: p, Offset: off, Payload: payloadOf(p, off)})
				ev[plKey{p, off}] = true
			}
			var out []Entry
			if _, err := w.Expire(now, 50+r.IntN(200), func(e Entry) { out = append(out, e) }); err != nil {
				t.Fatal(err)
			}
			for _, e := range out {
				if r.IntN(8) == 0 {
					continue // left in flight
				}
				if err := w.Done(e.Partition, e.Offset); err != nil {
					t.Fatal(err)
				}
				ev[plKey{e.Partition, e.Offset}] = false
			}
			for p, o := range next {
				w.SetHandled(p, o-1)
			}
			if b == batches-1 {
				break // the last batch is never flushed: lost or not, it was not acknowledged
			}
			if !async {
				mustFlush(t, w)
				for k, v := range ev {
					added[k] = v
				}
				continue
			}
			await()
			s, err := w.SyncStart()
			if err != nil {
				t.Fatal(err)
			}
			syncing, unsynced = make(chan error, 1), ev
			go func() { syncing <- s.Sync() }()
		}
		await() // the power loss comes after it returned
		files, n := d.powerLoss(t, filepath.Join(base, fmt.Sprintf("life%d", life+1)))
		crash(w)
		t.Logf("life %d: %d batches, power loss leaves %d files, %d bytes", life, batches, files, n)
	}
	t.Logf("%d acknowledged entries checked after power losses", checked)
	if checked == 0 {
		t.Fatal("nothing checked")
	}
}

// checkPowerLoss checks w, just recovered, against the acknowledged state.
func checkPowerLoss(t *testing.T, life int, w *Wheel, now int64, added map[plKey]bool) int {
	t.Helper()
	checked := 0
	for k, pending := range added {
		switch got := w.pendingOff(k.p, k.off); {
		case pending && !got:
			t.Fatalf("life %d: acknowledged entry %d/%d lost in the power loss", life, k.p, k.off)
		case !pending && got:
			t.Fatalf("life %d: entry %d/%d, its Done acknowledged, is pending again", life, k.p, k.off)
		case pending:
			checked++
		}
	}
	var got []Entry
	far := now + 20_000 // past every due time, within reach of the horizon
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
		t.Fatalf("life %d: %d entries readable, %d pending; problems %q", life, len(got), w.Pending(), w.Problems())
	}
	checkOrder(t, got)
	for _, e := range got {
		if !bytes.Equal(e.Payload, payloadOf(e.Partition, e.Offset)) {
			t.Fatalf("life %d: payload of %d/%d: %q", life, e.Partition, e.Offset, e.Payload)
		}
	}
	return checked
}
