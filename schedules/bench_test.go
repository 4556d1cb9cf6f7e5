package schedules

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/cancel"
	"github.com/kdelay/kdelay/levels"
)

// benchIndex builds an index of n records like the console benchmark's:
// default levels, delays of 1 minute to 2 hours, an id and a key each.
func benchIndex(b *testing.B, n int) (*Index, time.Time) {
	b.Helper()
	tab := levels.Default()
	x := NewIndex(tab, 0, cancel.NewSet(time.Hour))
	now := time.Now()
	value := make([]byte, 100)
	offsets := make(map[int32]int64)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		r := &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: value}
		d := time.Minute + time.Duration(rnd.Int64N(int64(2*time.Hour-time.Minute)))
		if err := tab.Stamp(r, "delays", levels.Delay{Target: "orders", Delay: d, ID: "id-" + strconv.Itoa(i)}, now); err != nil {
			b.Fatal(err)
		}
		r.Timestamp = now
		r.Offset = offsets[r.Partition]
		offsets[r.Partition]++
		x.Add(r)
	}
	return x, now
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkIndex reports the heap per record of an index of 1M records
// and times the first page of what comes due next and a lookup by id.
func BenchmarkIndex(b *testing.B) {
	const n = 1_000_000
	before := heapInUse()
	x, now := benchIndex(b, n)
	perRecord := float64(heapInUse()-before) / n
	b.Run("heap", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(perRecord, "heap-B/record")
	})
	b.Run("first-page", func(b *testing.B) {
		for b.Loop() {
			if ss, _ := x.Query(Filter{Limit: 100}, now); len(ss) != 100 {
				b.Fatal(len(ss))
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if ss := x.Get("id-"+strconv.Itoa(i*7919%n), now); len(ss) != 1 {
				b.Fatal(len(ss))
			}
		}
	})
	b.Run("due", func(b *testing.B) {
		for b.Loop() {
			x.Due(now, time.Minute, 2*time.Hour)
		}
	})
	runtime.KeepAlive(x)
}
