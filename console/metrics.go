package console

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// windows are the due windows of kdelay_console_pending: label and bound.
var windows = []struct {
	label string
	bound time.Duration
}{{"1m", time.Minute}, {"10m", 10 * time.Minute}, {"1h", time.Hour}, {"1d", 24 * time.Hour}}

// collector exposes what the index holds, computed at each scrape.
type collector struct {
	s                      *Server
	pending, records, read *prometheus.Desc
}

func newCollector(s *Server) *collector {
	return &collector{
		s: s,
		pending: prometheus.NewDesc("kdelay_console_pending",
			"Pending schedules by level of their partition and by when they come due: window=due (already), 1m, 10m, 1h, 1d (within, and not an earlier window), later. Read from Kafka by the console's index.",
			[]string{"level", "window"}, nil),
		records: prometheus.NewDesc("kdelay_console_index_records", "Delay-topic records the console's index holds (above the commits, every state).", nil, nil),
		read:    prometheus.NewDesc("kdelay_console_ready", "1 once the index is complete and while the brokers answer, else 0.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.records
	ch <- c.read
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	x := c.s.o.Index.Index()
	bounds := make([]time.Duration, len(windows))
	for i, w := range windows {
		bounds[i] = w.bound
	}
	for level, counts := range x.Windows(c.s.o.Now(), bounds) {
		l := strconv.Itoa(level)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(counts[0]), l, "due")
		for i, w := range windows {
			ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(counts[i+1]), l, w.label)
		}
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(counts[len(counts)-1]), l, "later")
	}
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.GaugeValue, float64(x.Len()))
	ready := 0.0
	if c.s.unavailable() == nil {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(c.read, prometheus.GaugeValue, ready)
}
