package relay

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

// TestBatchHistogram: what a batchHistogram publishes at each flush is
// what client_golang's histogram shows for the same samples (buckets,
// count, sum), and nothing of a batch is published before its flush or
// twice.
func TestBatchHistogram(t *testing.T) {
	buckets := []float64{0.001, 0.005, 0.01, 1}
	ref := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "x_seconds", Help: "h", Buckets: buckets}, []string{"level"})
	bh := newBatchHistogram("x_seconds", "h", buckets)
	b1, b2 := bh.series("1"), bh.series("2")
	ref.WithLabelValues("1")
	ref.WithLabelValues("2") // a level's series exists, empty, from its first use

	same := func(when string) {
		t.Helper()
		want, err := testutil.CollectAndFormat(ref, expfmt.TypeTextPlain)
		if err != nil {
			t.Fatal(err)
		}
		got, err := testutil.CollectAndFormat(bh, expfmt.TypeTextPlain)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s:\ngot:\n%s\nwant:\n%s", when, got, want)
		}
	}
	same("before any sample")

	// Below, on and above each bound, and beyond the last.
	samples := []float64{-0.5, 0, 0.001, 0.0010001, 0.005, 0.3, 1, 7}
	for _, v := range samples {
		b1.Observe(v)
	}
	same("observed, not flushed")

	for _, v := range samples {
		ref.WithLabelValues("1").Observe(v)
	}
	b1.flush()
	b2.flush() // nothing observed: nothing published
	same("after the flush")
	b1.flush()
	same("after a second flush with nothing new")

	b2.Observe(0.007)
	ref.WithLabelValues("2").Observe(0.007)
	b2.flush()
	same("a second level")
}
