package wheel

import (
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// Benchmarks run against a wheel holding KDELAY_WHEEL_BENCH_PENDING entries
// (default 1,000,000; the documented figures use 10,000,000), 64-byte
// payloads, 18 source partitions, due times spread over the 1h horizon, the
// default 100ms tick and 64 MiB segments. ns/op and allocs/op are per entry;
// cpu-ns/op is the process's CPU time per entry (every goroutine: GC and
// background compaction included), steadier than ns/op on a shared machine;
// faults/op the page faults per entry (Expire); compact-cpu-ns/entry the
// CPU time of the background compaction per entry compacted (Add).
// heap-B/pending is the Go heap held by the wheel divided by its pending
// entries, measured after the fill. KDELAY_WHEEL_BENCH_PAYLOAD sets the
// payload size (default 64). BenchmarkWheelExpire also reports the
// process's resident memory after its run (Linux: rss-MB, rss-file-MB for
// mapped segment pages, rss-anon-MB).
//
//	KDELAY_WHEEL_BENCH_PENDING=10000000 go test -run '^$' \
//	  -bench 'BenchmarkWheel(Add|Expire)$' -benchtime=2000000x ./wheel/
//	KDELAY_WHEEL_BENCH_PENDING=1000000 KDELAY_WHEEL_BENCH_PAYLOAD=1024 \
//	  go test -run '^$' -bench 'BenchmarkWheelExpire/sync=none' \
//	  -benchtime=200000x ./wheel/

const (
	benchPayload = 64
	benchParts   = 18
	benchHour    = 3_600_000
)

type benchWheel struct {
	w       *Wheel
	dir     string
	now     int64
	next    [benchParts]int64
	r       *rand.Rand
	heapPer float64
	payload []byte
}

func benchPending(b *testing.B) int {
	if s := os.Getenv("KDELAY_WHEEL_BENCH_PENDING"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("KDELAY_WHEEL_BENCH_PENDING: %v", err)
		}
		return n
	}
	return 1_000_000
}

// benchPayloadSize is KDELAY_WHEEL_BENCH_PAYLOAD, default 64 bytes.
func benchPayloadSize(b *testing.B) int {
	if s := os.Getenv("KDELAY_WHEEL_BENCH_PAYLOAD"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("KDELAY_WHEEL_BENCH_PAYLOAD: %v", err)
		}
		return n
	}
	return benchPayload
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// newBenchWheel fills a wheel with n entries due over the next hour.
func newBenchWheel(b *testing.B, n int, policy SyncPolicy) *benchWheel {
	b.Helper()
	dir, err := os.MkdirTemp("", "wheel-bench-")
	if err != nil {
		b.Fatal(err)
	}
	before := heapInUse()
	w, _, err := Open(dir, Options{Sync: SyncNone}, t0)
	if err != nil {
		b.Fatal(err)
	}
	bw := &benchWheel{w: w, dir: dir, now: t0, r: rand.New(rand.NewPCG(1, 2)), payload: make([]byte, benchPayloadSize(b))}
	for i := range n {
		bw.add(b, bw.now+bw.r.Int64N(benchHour))
		if i%10_000 == 9_999 {
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	flushSettled(b, w)
	bw.heapPer = float64(heapInUse()-before) / float64(max(n, 1))
	w.opt.Sync = policy
	return bw
}

func (bw *benchWheel) add(b *testing.B, due int64) {
	p := bw.r.IntN(benchParts)
	e := Entry{Due: due, Partition: int32(p), Offset: bw.next[p], Payload: bw.payload}
	bw.next[p]++
	if err := bw.w.Add(bw.now, e); err != nil {
		b.Fatal(err)
	}
}

func (bw *benchWheel) close() {
	bw.w.Close()
	os.RemoveAll(bw.dir)
}

var benchPolicies = []struct {
	name   string
	policy SyncPolicy
}{{"sync=none", SyncNone}, {"sync=batch", SyncBatch}}

// BenchmarkWheelAdd adds entries to a full wheel, one Flush per 1000 adds.
func BenchmarkWheelAdd(b *testing.B) {
	outer := b
	for _, pc := range benchPolicies {
		var bw *benchWheel
		b.Run(pc.name, func(b *testing.B) {
			if bw == nil {
				bw = newBenchWheel(b, benchPending(b), pc.policy)
				outer.Cleanup(bw.close)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := range b.N {
				bw.add(b, bw.now+bw.r.Int64N(benchHour))
				if i%1000 == 999 {
					if err := bw.w.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := bw.w.Flush(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			reportCompaction(b, bw.w)
			b.ReportMetric(bw.heapPer, "heap-B/pending")
		})
	}
}

// BenchmarkWheelExpire hands out due entries of a full wheel in batches of
// 1000, marks each done and flushes after each batch, as the relay does.
func BenchmarkWheelExpire(b *testing.B) {
	outer := b
	for _, pc := range benchPolicies {
		var bw *benchWheel
		b.Run(pc.name, func(b *testing.B) {
			if bw == nil || bw.w.Pending() < int64(b.N) {
				if bw != nil {
					bw.close()
				}
				bw = newBenchWheel(b, max(benchPending(b), b.N), pc.policy)
				outer.Cleanup(bw.close)
			}
			w := bw.w
			now := bw.now + benchHour
			done := func(e Entry) { w.Done(e.Partition, e.Offset) }
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, faults0 := cpuTime(), pageFaults()
			for got := 0; got < b.N; {
				n, err := w.Expire(now, min(1000, b.N-got), done)
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					b.Fatalf("wheel ran dry after %d entries", got)
				}
				got += n
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(pageFaults()-faults0)/float64(b.N), "faults/op")
			b.ReportMetric(bw.heapPer, "heap-B/pending")
			reportRSS(b, "")
		})
	}
}

// BenchmarkWheelExpireInOrder hands out entries that were added in due
// order (a preload, or a partition read ahead in order: 10,000 per second
// of due time over 20 s), so that one tick's entries lie together in the
// active segment; batches of 1000, each marked done, one Flush per batch.
func BenchmarkWheelExpireInOrder(b *testing.B) {
	const n, perSecond = 200_000, 10_000
	payload := make([]byte, benchPayloadSize(b))
	b.ReportAllocs()
	var ns, entries int64
	for b.Loop() {
		b.StopTimer()
		w, dir := openRound(b, "wheel-inorder-")
		for i := range n {
			p := i % benchParts
			e := Entry{Due: t0 + 1000 + int64(i)*1000/perSecond, Partition: int32(p), Offset: int64(i / benchParts), Payload: payload}
			if err := w.Add(t0, e); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		done := func(e Entry) { w.Done(e.Partition, e.Offset) }
		b.StartTimer()
		start := time.Now()
		for now, got := t0+1000, 0; got < n; now += 100 {
			for {
				k, err := w.Expire(now, 1000, done)
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
				got += k
				if k < 1000 {
					break
				}
			}
		}
		ns += time.Since(start).Nanoseconds()
		entries += n
		endRound(b, w, dir)
	}
	b.ReportMetric(float64(ns)/float64(entries), "ns/entry")
}

// BenchmarkTickSort sorts the entries of one tick as a scan of the wheel
// above finds them: 278 entries (10M pending over 36,000 ticks) of 18
// partitions, due times spread over the 100 ms tick, from 256 different
// ticks in turn so that the branch predictor cannot learn one.
func BenchmarkTickSort(b *testing.B) {
	const n, tick = 278, 7
	r := rand.New(rand.NewPCG(1, 2))
	ticks := make([][]cand, 256)
	for k := range ticks {
		ticks[k] = make([]cand, n)
		for i := range ticks[k] {
			ticks[k][i] = cand{due: tick*100 + r.Int64N(100), off: r.Int64N(1 << 20), part: int32(r.IntN(benchParts))}
		}
	}
	q := &tickQueue{width: 100, tick: tick}
	c := make([]cand, n)
	k := 0
	for b.Loop() {
		k++
		copy(c, ticks[k%len(ticks)])
		q.sort(c)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
}

// BenchmarkWheelExpireBurst hands out a burst: 200,000 entries of 1 KiB
// (KDELAY_WHEEL_BENCH_PAYLOAD sets the size) all due in the same
// millisecond, added as the relay adds what it reads of 4 partitions (runs
// of 100 entries of one partition, as a fetch of 128 KiB returns them),
// handed out in batches of 4096 (the relay's MaxBatch), each marked done,
// one Flush per batch. This is kdelay-bench's wheel scenario without the
// broker: ns/entry is the whole hand-out, the tick's scan included;
// first-ms the time to the first entry (the scan of the tick). Two ways
// to take the payloads, each ending with the caller holding a copy of the
// last 8192 (the relay's two batches in flight): keep, Expire's own copy
// of each; view, ExpireView's payload copied into one of 8192 buffers
// reused round the ring, as the relay copies into its reused wheelFires.
func BenchmarkWheelExpireBurst(b *testing.B) {
	size := 1024
	if os.Getenv("KDELAY_WHEEL_BENCH_PAYLOAD") != "" {
		size = benchPayloadSize(b)
	}
	b.Run("keep", func(b *testing.B) {
		held := make([][]byte, 8192)
		i := 0
		expireBurst(b, size, func(w *Wheel, now int64, max int, fn func(Entry)) (int, error) {
			return w.Expire(now, max, func(e Entry) {
				held[i%len(held)] = e.Payload
				i++
				fn(e)
			})
		})
	})
	b.Run("view", func(b *testing.B) {
		held := make([][]byte, 8192)
		i := 0
		expireBurst(b, size, func(w *Wheel, now int64, max int, fn func(Entry)) (int, error) {
			return w.ExpireView(now, max, func(e Entry) {
				k := i % len(held)
				held[k] = append(held[k][:0], e.Payload...)
				i++
				fn(e)
			})
		})
	})
}

// expireBurst is BenchmarkWheelExpireBurst with payloads of size bytes,
// handed out by expire.
func expireBurst(b *testing.B, size int, expire func(w *Wheel, now int64, max int, fn func(Entry)) (int, error)) {
	const n, parts, run = 200_000, 4, 100
	payload := make([]byte, size)
	due := t0 + 5000
	b.ReportAllocs()
	var ns, first, entries int64
	for b.Loop() {
		b.StopTimer()
		w, dir := openRound(b, "wheel-burst-")
		var next [parts]int64
		for i := range n {
			p := (i / run) % parts
			if err := w.Add(t0, Entry{Due: due, Partition: int32(p), Offset: next[p], Payload: payload}); err != nil {
				b.Fatal(err)
			}
			next[p]++
			if i%4096 == 4095 {
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		flushSettled(b, w)
		done := func(e Entry) { w.Done(e.Partition, e.Offset) }
		b.StartTimer()
		start := time.Now()
		for got := 0; got < n; {
			k, err := expire(w, due, 4096, done)
			if err != nil {
				b.Fatal(err)
			}
			if got == 0 {
				first += time.Since(start).Nanoseconds()
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
			if k == 0 {
				b.Fatalf("wheel ran dry after %d entries", got)
			}
			got += k
		}
		ns += time.Since(start).Nanoseconds()
		entries += n
		endRound(b, w, dir)
	}
	b.ReportMetric(float64(ns)/float64(entries), "ns/entry")
	b.ReportMetric(float64(first)/1e6/float64(b.N), "first-ms")
}

// openRound opens a wheel in a directory of its own for one benchmark
// round, to be removed at the round's end: b.TempDir would keep one 64 MiB
// segment per round until the benchmark ends.
func openRound(b *testing.B, prefix string) (*Wheel, string) {
	b.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		b.Fatal(err)
	}
	w, _, err := Open(dir, Options{Sync: SyncNone}, t0)
	if err != nil {
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	return w, dir
}

// endRound closes the wheel of openRound and removes its directory,
// outside the benchmark's timer.
func endRound(b *testing.B, w *Wheel, dir string) {
	b.StopTimer()
	w.Close()
	os.RemoveAll(dir)
	b.StartTimer()
}

// flushSettled flushes w and waits for its background compactions.
func flushSettled(b *testing.B, w *Wheel) {
	b.Helper()
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := settle(w); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWheelScale measures the wheel's independence of scale in one
// run: Add and Expire per entry on a wheel of 100,000 pending entries and
// on one of KDELAY_WHEEL_BENCH_PENDING (default 1,000,000; the documented
// figure uses 10,000,000), each in its steady state: every round moves
// time on by the span in which about 1000 entries come due, adds 1000
// entries due within the hour after it (one Flush) and expires what is
// due (batches of 1000, each marked done, one Flush per batch), so that
// the pending count stays where it was. The two wheels alternate round by
// round, so that a drift of the machine weighs on both alike. Reported:
// add-ns and expire-ns per entry at each size (wall clock), and their
// ratios large/small (add-x, expire-x): 1.0 is a wheel whose cost does
// not grow with what it holds.
//
//	KDELAY_WHEEL_BENCH_PENDING=10000000 go test -run '^$' \
//	  -bench 'BenchmarkWheelScale$' -benchtime=400x ./wheel/
func BenchmarkWheelScale(b *testing.B) {
	const small, perRound = 100_000, 1000
	large := benchPending(b)
	type side struct {
		bw             *benchWheel
		step           int64 // ms of due time in which perRound entries come due
		addNs, expNs   int64
		added, expired int64
	}
	sides := []*side{{bw: newBenchWheel(b, small, SyncNone)}, {bw: newBenchWheel(b, large, SyncNone)}}
	for _, s := range sides {
		defer s.bw.close()
		s.step = max(int64(perRound)*benchHour/s.bw.w.Pending(), 1)
	}
	for b.Loop() {
		for _, s := range sides {
			bw, w := s.bw, s.bw.w
			bw.now += s.step
			start := time.Now()
			for range perRound {
				bw.add(b, bw.now+1+bw.r.Int64N(benchHour-1))
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
			mid := time.Now()
			done := func(e Entry) { w.Done(e.Partition, e.Offset) }
			for {
				n, err := w.Expire(bw.now, perRound, done)
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
				s.expired += int64(n)
				if n < perRound {
					break
				}
			}
			s.addNs += mid.Sub(start).Nanoseconds()
			s.expNs += time.Since(mid).Nanoseconds()
			s.added += perRound
		}
	}
	per := func(ns, n int64) float64 { return float64(ns) / float64(max(n, 1)) }
	sm, lg := sides[0], sides[1]
	b.ReportMetric(per(sm.addNs, sm.added), "add-ns/entry@100k")
	b.ReportMetric(per(lg.addNs, lg.added), "add-ns/entry@large")
	b.ReportMetric(per(sm.expNs, sm.expired), "expire-ns/entry@100k")
	b.ReportMetric(per(lg.expNs, lg.expired), "expire-ns/entry@large")
	b.ReportMetric(per(lg.addNs, lg.added)/per(sm.addNs, sm.added), "add-x")
	if sm.expired > 0 && lg.expired > 0 {
		b.ReportMetric(per(lg.expNs, lg.expired)/per(sm.expNs, sm.expired), "expire-x")
	}
	b.ReportMetric(float64(lg.bw.w.Pending()), "pending@large")
}
