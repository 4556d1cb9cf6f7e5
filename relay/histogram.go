package relay

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// batchHistogram is a histogram with one label, level, that the loop
// observes into with plain arithmetic and publishes once per iteration
// (flushCounts), as it does its record counters: client_golang's Observe
// costs several atomic operations per sample, and a burst takes two
// samples per record. A scrape sees what the last flush published, so it
// lags the loop by at most one iteration. It is a prometheus.Collector.
type batchHistogram struct {
	desc    *prometheus.Desc
	buckets []float64 // upper bounds, ascending; +Inf is implied

	mu  sync.Mutex // guards pub: the loop's flush and a scrape
	pub map[string]*histCounts
}

// histCounts are a histogram's samples: counts per bucket (the last one:
// above every bound), their count and sum.
type histCounts struct {
	counts []uint64
	n      uint64
	sum    float64
}

func newBatchHistogram(name, help string, buckets []float64) *batchHistogram {
	return &batchHistogram{
		desc:    prometheus.NewDesc(name, help, []string{"level"}, nil),
		buckets: buckets,
		pub:     make(map[string]*histCounts),
	}
}

// series returns the samples the loop observes into for level (not safe
// for concurrent use; the loop's goroutine under the relay's mutex) and
// publishes the level's series, empty until its first flush.
func (h *batchHistogram) series(level string) *histBatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pub[level] == nil {
		h.pub[level] = &histCounts{counts: make([]uint64, len(h.buckets)+1)}
	}
	return &histBatch{h: h, level: level, histCounts: histCounts{counts: make([]uint64, len(h.buckets)+1)}}
}

// histBatch is one level's samples since its last flush.
type histBatch struct {
	histCounts
	h     *batchHistogram
	level string
}

// Observe adds one sample; it is a prometheus.Observer.
func (b *histBatch) Observe(v float64) {
	b.counts[sort.SearchFloat64s(b.h.buckets, v)]++ // the first bound >= v: buckets are "le"
	b.n++
	b.sum += v
}

// flush publishes the samples observed since the last flush.
func (b *histBatch) flush() {
	if b.n == 0 {
		return
	}
	b.h.mu.Lock()
	p := b.h.pub[b.level]
	for i, c := range b.counts {
		p.counts[i] += c
	}
	p.n += b.n
	p.sum += b.sum
	b.h.mu.Unlock()
	clear(b.counts)
	b.n, b.sum = 0, 0
}

// Describe implements prometheus.Collector.
func (h *batchHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector.
func (h *batchHistogram) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for level, p := range h.pub {
		cum := make(map[float64]uint64, len(h.buckets))
		var c uint64
		for i, bound := range h.buckets {
			c += p.counts[i]
			cum[bound] = c
		}
		ch <- prometheus.MustNewConstHistogram(h.desc, p.n, p.sum, cum, level)
	}
}
