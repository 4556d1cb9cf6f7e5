package relay

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the relay's own series, registered on the registry given to
// [New]; franz-go's client series come from the kprom plugin with the
// prefix kdelay_kafka_.
type metrics struct {
	consumed         *prometheus.CounterVec // level
	forwarded        *prometheus.CounterVec // level, path (direct|wheel)
	cascaded         *prometheus.CounterVec // level
	deadLettered     *prometheus.CounterVec // level, reason
	mismatched       *prometheus.CounterVec // level
	wheelAdded       *prometheus.CounterVec // level
	retries          *prometheus.CounterVec // reason
	lateness         *batchHistogram        // level
	sendLateness     *batchHistogram        // level
	commitTime       prometheus.Histogram
	commitSyncTime   prometheus.Histogram
	wheelPending     prometheus.Gauge
	paused           prometheus.Gauge
	assigned         prometheus.Gauge
	nextDue          *prometheus.GaugeVec // level
	lag              *prometheus.GaugeVec // level
	pending          *prometheus.GaugeVec // level, window (pending.go)
	wheelNext        prometheus.Gauge
	ready            prometheus.Gauge
	retrying         prometheus.Gauge
	stalled          *prometheus.GaugeVec // reason
	stalledBy        []prometheus.Gauge   // stalled's series, in the order of stallReasons
	wheelResets      prometheus.Counter
	compactions      prometheus.Counter
	compactedEntries prometheus.Counter
	metaOverflow     prometheus.Counter
	txns             *prometheus.CounterVec // outcome
	txnUnconfirmed   *prometheus.CounterVec // outcome, as the group's offsets tell
	txnTime          prometheus.Histogram

	// byLevel caches the per-record series of each level, so the hot
	// path does not hash label values per record. Touched under the
	// relay's mutex only.
	byLevel map[int]*levelSeries
}

// levelSeries are the series a record of one level touches on its way,
// and the level's gauges, set after every iteration of the loop.
type levelSeries struct {
	consumed, forwardedDirect, forwardedWheel prometheus.Counter
	lateness, sendLateness                    *histBatch
	nextDue, lag                              prometheus.Gauge

	// Created on first use (lazySeries), so that a level's series of
	// these appears once it counts, as without the cache.
	wheeled, cascaded, mismatched prometheus.Counter

	// The loop counts records here in plain integers and adds them to
	// their series once per iteration (flushCounts), because an atomic
	// add per record on a shared series costs more than the counting;
	// lateness and sendLateness are published then too.
	nConsumed, nDirect, nWheel, nWheeled int
}

// flushCounts adds the records counted and the lateness observed since
// the last call to their series; the loop calls it once per iteration,
// under the relay's mutex, so a scrape lags the loop by at most one
// iteration.
func (m *metrics) flushCounts() {
	for level, ls := range m.byLevel {
		addCount(ls.consumed, &ls.nConsumed)
		addCount(ls.forwardedDirect, &ls.nDirect)
		addCount(ls.forwardedWheel, &ls.nWheel)
		if ls.nWheeled > 0 {
			addCount(m.wheeledAt(level), &ls.nWheeled)
		}
		ls.lateness.flush()
		ls.sendLateness.flush()
	}
}

// addCount adds *n to c and zeroes it.
func addCount(c prometheus.Counter, n *int) {
	if *n > 0 {
		c.Add(float64(*n))
		*n = 0
	}
}

// lazySeries returns *c, first set to vec's series of level.
func lazySeries(c *prometheus.Counter, vec *prometheus.CounterVec, level int) prometheus.Counter {
	if *c == nil {
		*c = vec.WithLabelValues(levelLabel(level))
	}
	return *c
}

// wheeledAt, cascadedAt and mismatchedAt are the cached series of level of
// kdelay_records_wheeled_total, _cascaded_total and _level_mismatch_total.
func (m *metrics) wheeledAt(level int) prometheus.Counter {
	return lazySeries(&m.level(level).wheeled, m.wheelAdded, level)
}

func (m *metrics) cascadedAt(level int) prometheus.Counter {
	return lazySeries(&m.level(level).cascaded, m.cascaded, level)
}

func (m *metrics) mismatchedAt(level int) prometheus.Counter {
	return lazySeries(&m.level(level).mismatched, m.mismatched, level)
}

// level returns the cached series of level, creating them on first use.
func (m *metrics) level(level int) *levelSeries {
	if ls := m.byLevel[level]; ls != nil {
		return ls
	}
	l := levelLabel(level)
	ls := &levelSeries{
		consumed:        m.consumed.WithLabelValues(l),
		forwardedDirect: m.forwarded.WithLabelValues(l, "direct"),
		forwardedWheel:  m.forwarded.WithLabelValues(l, "wheel"),
		lateness:        m.lateness.series(l),
		sendLateness:    m.sendLateness.series(l),
		nextDue:         m.nextDue.WithLabelValues(l),
		lag:             m.lag.WithLabelValues(l),
	}
	if m.byLevel == nil {
		m.byLevel = make(map[int]*levelSeries)
	}
	m.byLevel[level] = ls
	return ls
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_records_consumed_total", Help: "Delay-topic records read, by level of their partition.",
		}, []string{"level"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_records_forwarded_total", Help: "Records delivered to their target (acked), by level and path (direct or wheel).",
		}, []string{"level", "path"}),
		cascaded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_records_cascaded_total", Help: "Records re-produced to the delay topic because their due time lies beyond the wheel horizon.",
		}, []string{"level"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_records_dead_lettered_total", Help: "Records sent to the dead-letter topic, by level and reason.",
		}, []string{"level", "reason"}),
		mismatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_records_level_mismatch_total", Help: "Records whose delay does not belong to the level of the partition they were written to (delivered at their own due time, never early).",
		}, []string{"level"}),
		wheelAdded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_records_wheeled_total", Help: "Records handed to the local timer wheel.",
		}, []string{"level"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_produce_retries_total", Help: "Produce attempts retried after a retriable error.",
		}, []string{"reason"}),
		lateness: newBatchHistogram("kdelay_lateness_seconds",
			"Target ack time minus due time of forwarded records.",
			[]float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}),
		sendLateness: newBatchHistogram("kdelay_send_lateness_seconds",
			"Time from the due time of forwarded records to the relay's produce call of their last attempt: the relay's own part of kdelay_lateness_seconds (the produce round trip is the rest).",
			[]float64{0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kdelay_commit_latency_seconds", Help: "Duration of synchronous offset commits.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		commitSyncTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kdelay_commit_fsync_seconds", Help: "Duration of the wheel's fsync before each offset commit (at least once, KDELAY_WHEEL_SYNC=batch), on the committer goroutine.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		wheelPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kdelay_wheel_pending_entries", Help: "Records resting in the local timer wheel."}),
		paused:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "kdelay_paused_partitions", Help: "Delay-topic partitions paused until their head record's level time."}),
		assigned:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "kdelay_assigned_partitions", Help: "Delay-topic partitions owned by this relay."}),
		nextDue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kdelay_next_due_timestamp_seconds", Help: "Unix time at which the head record of the level's partitions may go, or be read ahead (0: none waiting).",
		}, []string{"level"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kdelay_consumer_lag", Help: "Records of the level's owned partitions not yet committed: high watermark (as of the last fetch) minus committed offset.",
		}, []string{"level"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kdelay_pending_records", Help: "Records of the level's owned partitions not yet delivered, by the window their level time (record timestamp plus the level's delay: the earliest they can go) falls in: window=due (already), 1m, 10m, 1h, 1d (within, and not an earlier window), later. Counted from Kafka every 15s.",
		}, []string{"level", "window"}),
		wheelNext: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kdelay_wheel_next_expiry_timestamp_seconds", Help: "Unix time of the wheel's next expiry (0: empty)."}),
		ready:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "kdelay_ready", Help: "1 while the relay is in the group and making progress."}),
		retrying:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "kdelay_records_retrying", Help: "Records set aside after a failed produce, waiting for their next attempt (each holds back its partition's commit)."}),
		stalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kdelay_stalled", Help: "1 while the reason holds: retrying (records set aside after failed produces), dead_letter_failing (the dead-letter topic refuses records), wheel_unavailable (the wheel failed; waits cascade through Kafka), no_progress (due work and nothing delivered for KDELAY_STALL_TIMEOUT: /healthz fails).",
		}, []string{"reason"}),
		txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_transactions_total", Help: "Transactions ended in exactly-once mode, by outcome (committed or aborted).",
		}, []string{"outcome"}),
		txnUnconfirmed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kdelay_transactions_unconfirmed_total", Help: "Transactions in exactly-once mode whose end got no answer (a coordinator that went away), by what the group's committed offsets then said: committed, aborted or unknown (its records are forwarded again: duplicates possible).",
		}, []string{"outcome"}),
		txnTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kdelay_transaction_commit_seconds", Help: "Duration of committing a transaction (offsets and end) in exactly-once mode.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		metaOverflow:     prometheus.NewCounter(prometheus.CounterOpts{Name: "kdelay_commit_metadata_overflow_total", Help: "Commits whose done set (offsets above the commit already delivered) did not fit the metadata limit and was left out: a next owner delivers those records again."}),
		wheelResets:      prometheus.NewCounter(prometheus.CounterOpts{Name: "kdelay_wheel_resets_total", Help: "Times the wheel failed (disk full or failing, damaged record) and was discarded; its partitions were re-read from their committed offsets."}),
		compactions:      prometheus.NewCounter(prometheus.CounterOpts{Name: "kdelay_wheel_compactions_total", Help: "Sealed wheel segments rewritten with their live entries grouped by slot (entries added out of due order); each reads and writes its segment once more."}),
		compactedEntries: prometheus.NewCounter(prometheus.CounterOpts{Name: "kdelay_wheel_compacted_entries_total", Help: "Live entries copied by the wheel's compactions."}),
	}
	for _, c := range []prometheus.Collector{
		m.consumed, m.forwarded, m.cascaded, m.deadLettered, m.mismatched, m.wheelAdded, m.retries,
		m.lateness, m.sendLateness, m.commitTime, m.commitSyncTime, m.wheelPending, m.paused, m.assigned, m.nextDue, m.lag, m.pending, m.wheelNext, m.ready,
		m.retrying, m.stalled, m.wheelResets, m.compactions, m.compactedEntries, m.metaOverflow, m.txns, m.txnUnconfirmed, m.txnTime,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, why := range stallReasons {
		m.stalledBy = append(m.stalledBy, m.stalled.WithLabelValues(why))
	}
	return m, nil
}

func levelLabel(level int) string { return strconv.Itoa(level) }
