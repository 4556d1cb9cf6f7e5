package relay

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// skewClock is the relay's clock in these tests: the wall clock moved by
// a skew the test sets (a relay that was down, or a date near a
// daylight-saving change).
type skewClock struct{ skew atomic.Int64 }

func (c *skewClock) now() time.Time             { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *skewClock) set(at time.Time)           { c.skew.Store(int64(time.Until(at))) }
func (c *skewClock) add(d time.Duration)        { c.skew.Add(int64(d)) }
func (c *skewClock) opt() func(*Options)        { return func(o *Options) { o.Now = c.now } }
func (c *skewClock) real(t time.Time) time.Time { return t.Add(-time.Duration(c.skew.Load())) }

// sendSeries produces a series record stamped at the clock's time (as a
// producer on that clock would), to the partition of its first delay's
// level.
func (h *harness) sendSeries(key string, clock func() time.Time, firstDelay time.Duration, kv ...string) time.Time {
	h.t.Helper()
	ts := clock().Truncate(time.Millisecond)
	tab := h.cfg.Table()
	r := &kgo.Record{Topic: h.cfg.Topic, Key: []byte(key), Value: []byte("v-" + key), Timestamp: ts,
		Partition: tab.PartitionFor(tab.LevelFor(firstDelay), []byte(key)),
		Headers:   []kgo.RecordHeader{{Key: "own", Value: []byte(key)}}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	h.produce(r)
	return ts
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// firings checks the forwarded copies of a series: their kdelay-due-at
// are want, in order, their kdelay-occurrence 1, 2, ..., none forwarded
// before its due time (relay clock: the record timestamp the relay set),
// and the series' control headers gone.
func firings(t *testing.T, rs []received, want []time.Time) {
	t.Helper()
	if len(rs) != len(want) {
		var got []string
		for _, rc := range rs {
			got = append(got, rc.due.UTC().Format(time.TimeOnly+".000"))
		}
		t.Fatalf("%d firings at %v, want %d", len(rs), got, len(want))
	}
	for i, rc := range rs {
		if !rc.due.Equal(want[i]) {
			t.Errorf("firing %d: kdelay-due-at %s, want %s", i+1, rc.due.UTC(), want[i].UTC())
		}
		if got := rc.headers[levels.HeaderOccurrence]; got != strconv.Itoa(i+1) {
			t.Errorf("firing %d: kdelay-occurrence %q", i+1, got)
		}
		if rc.ts.Before(rc.due) {
			t.Errorf("firing %d early: produced %s, due %s", i+1, rc.ts.UTC(), rc.due.UTC())
		}
		for _, k := range []string{levels.HeaderEvery, levels.HeaderCron, levels.HeaderCount, levels.HeaderDeliverAt} {
			if _, ok := rc.headers[k]; ok {
				t.Errorf("firing %d keeps %s", i+1, k)
			}
		}
		if rc.headers["own"] == "" || rc.headers[levels.HeaderID] == "" {
			t.Errorf("firing %d lost the producer's header or the id: %v", i+1, rc.headers)
		}
	}
}

func grid(start time.Time, step time.Duration, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = start.Add(time.Duration(i) * step)
	}
	return out
}

// TestSeriesEvery: an every series fires on its grid, each occurrence
// once and never early, until its count; another until its until.
func TestSeriesEvery(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	for _, mode := range []string{AtLeastOnce, ExactlyOnce} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, nil, "orders")
			h.readCommitted = true
			rr := h.start(func(c *config.Config) { c.Delivery = mode })
			rr.waitReady(t)
			start := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
			h.sendSeries("count", time.Now, 1500*time.Millisecond, levels.HeaderID, "s-count", levels.HeaderTarget, "orders",
				levels.HeaderEvery, "1s", levels.HeaderDeliverAt, ms(start), levels.HeaderCount, "4")
			h.sendSeries("until", time.Now, 1500*time.Millisecond, levels.HeaderID, "s-until", levels.HeaderTarget, "orders",
				levels.HeaderEvery, "1s", levels.HeaderDeliverAt, ms(start), levels.HeaderUntil, ms(start.Add(2500*time.Millisecond)))
			end := start.Add(5 * time.Second) // a fifth firing of count would be due at +4s
			got := h.collect(30*time.Second, func(map[string][]received) bool { return time.Now().After(end) }, "orders")
			firings(t, got["count"], grid(start, time.Second, 4))
			firings(t, got["until"], grid(start, time.Second, 3))
		})
	}
}

// TestSeriesCatchUp: a relay down for several periods fires a series
// once for the latest occurrence it missed, then goes on on the grid.
func TestSeriesCatchUp(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	var c skewClock
	rr := h.start(nil, c.opt())
	rr.waitReady(t)
	start := c.now().Add(1200 * time.Millisecond).Truncate(time.Millisecond)
	h.sendSeries("s", c.now, 1200*time.Millisecond, levels.HeaderID, "s-1", levels.HeaderTarget, "orders",
		levels.HeaderEvery, "2s", levels.HeaderDeliverAt, ms(start), levels.HeaderCount, "4")
	got := h.collect(30*time.Second, func(got map[string][]received) bool { return len(got["s"]) >= 1 }, "orders")
	if len(got["s"]) != 1 {
		t.Fatalf("first firing: %d", len(got["s"]))
	}
	rr.stop(t)
	// Down for about 9 s of the relay's clock: the occurrences at +2, +4,
	// +6 and +8 s pass. The next relay fires +8 s once, then +10 and +12.
	c.add(9 * time.Second)
	h.start(nil, c.opt()) // stopped by the harness's cleanup
	end := c.real(start.Add(13 * time.Second))
	got = h.collect(40*time.Second, func(map[string][]received) bool { return time.Now().After(end) }, "orders")
	want := []time.Time{start, start.Add(8 * time.Second), start.Add(10 * time.Second), start.Add(12 * time.Second)}
	firings(t, got["s"], want)
	for _, rc := range got["s"][2:] {
		if late := rc.ts.Sub(rc.due); late > time.Second {
			t.Errorf("firing due %s produced %s late", rc.due.UTC(), late)
		}
	}
}

// TestSeriesCronDST: a six-field cron series in America/New_York across
// the spring-forward change of 2027-03-14 (02:00 EST -> 03:00 EDT): its
// seconds in 01:59 local are 06:59 UTC, those in 03:00 local 07:00 UTC.
func TestSeriesCronDST(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	var c skewClock
	c.set(time.Date(2027, 3, 14, 6, 59, 53, 0, time.UTC))
	rr := h.start(nil, c.opt())
	rr.waitReady(t)
	// Written at 01:59:5x EST, first occurrence the next even second.
	ts := h.sendSeries("dst", c.now, time.Second, levels.HeaderID, "s-dst", levels.HeaderTarget, "orders",
		levels.HeaderCron, "*/2 0,59 1,3 * * *", levels.HeaderTimezone, "America/New_York", levels.HeaderCount, "5")
	first := ts.Truncate(2 * time.Second).Add(2 * time.Second)
	var want []time.Time
	for at := first; len(want) < 5; at = at.Add(2 * time.Second) {
		want = append(want, at) // continuous in UTC: 01:59:58 EST is followed by 03:00:00 EDT
	}
	change := time.Date(2027, 3, 14, 7, 0, 0, 0, time.UTC)
	if !want[0].Before(change) || !want[4].After(change) {
		t.Fatalf("the series does not cross the change (the relay took long to start): %v", want)
	}
	end := c.real(want[4].Add(2500 * time.Millisecond))
	got := h.collect(40*time.Second, func(map[string][]received) bool { return time.Now().After(end) }, "orders")
	firings(t, got["dst"], want)
}

// TestSeriesCancel: a cancel of the id stops the series; a replacement
// (cancel, then a new record with the id) runs instead of it.
func TestSeriesCancel(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	start := time.Now().Add(1200 * time.Millisecond).Truncate(time.Millisecond)
	h.sendSeries("stop", time.Now, 1200*time.Millisecond, levels.HeaderID, "s-stop", levels.HeaderTarget, "orders",
		levels.HeaderEvery, "1s", levels.HeaderDeliverAt, ms(start))
	h.sendSeries("old", time.Now, 1200*time.Millisecond, levels.HeaderID, "s-swap", levels.HeaderTarget, "orders",
		levels.HeaderEvery, "1s", levels.HeaderDeliverAt, ms(start))
	h.collect(30*time.Second, func(got map[string][]received) bool { return len(got["stop"]) >= 2 && len(got["old"]) >= 2 }, "orders")
	h.cancel("s-stop", time.Time{})
	nr := &kgo.Record{Key: []byte("new"), Value: []byte("v-new")}
	cr, err := h.cfg.Table().Replace(nr, h.cfg.Topic, h.cfg.CancelTopic, "s-swap", levels.Delay{Target: "orders", Delay: time.Second}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	nr.Headers = append(nr.Headers, kgo.RecordHeader{Key: levels.HeaderEvery, Value: []byte("1s")}, kgo.RecordHeader{Key: "own", Value: []byte("new")})
	if err := h.prod.ProduceSync(context.Background(), cr).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h.produce(nr)
	cancelledAt := time.Now()
	got := h.collect(30*time.Second, func(got map[string][]received) bool {
		return len(got["new"]) >= 3 && time.Now().After(cancelledAt.Add(3500*time.Millisecond))
	}, "orders")
	// What was in flight or already in the wheel at the cancel may go
	// (best effort inside the margin); nothing after the margin.
	for _, k := range []string{"stop", "old"} {
		for _, rc := range got[k] {
			if rc.ts.After(cancelledAt.Add(h.cfg.CancelMargin + time.Second)) {
				t.Errorf("series %s fired at %s, after its cancel at %s", k, rc.ts.UTC(), cancelledAt.UTC())
			}
		}
	}
	if len(got["new"]) < 3 {
		t.Fatalf("the replacement fired %d times", len(got["new"]))
	}
	if rr.cancelled() < 2 {
		t.Errorf("kdelay_records_cancelled_total = %v, want both series' next occurrences", rr.cancelled())
	}
}

// TestSeriesBadInput: series that break the contract go to the
// dead-letter topic with a reason; the partition goes on.
func TestSeriesBadInput(t *testing.T) {
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	at := ms(time.Now().Add(200 * time.Millisecond))
	cases := map[string][]string{
		"no-id":      {levels.HeaderEvery, "1s"},
		"bad-cron":   {levels.HeaderID, "b1", levels.HeaderCron, "99 * * * *"},
		"bad-zone":   {levels.HeaderID, "b2", levels.HeaderCron, "* * * * *", levels.HeaderTimezone, "Atlantis/Nowhere"},
		"too-often":  {levels.HeaderID, "b3", levels.HeaderEvery, "500ms"},
		"both-kinds": {levels.HeaderID, "b4", levels.HeaderEvery, "1s", levels.HeaderCron, "* * * * *"},
	}
	for k, kv := range cases {
		h.sendRaw(k, 0, append([]string{levels.HeaderTarget, "orders", levels.HeaderDeliverAt, at}, kv...)...)
	}
	h.sendRaw("fine", 0, levels.HeaderTarget, "orders", levels.HeaderDeliverAt, at)
	var keys []string
	for k := range cases {
		keys = append(keys, k)
	}
	got := h.collect(30*time.Second, func(got map[string][]received) bool {
		return allKeys(append(keys, "fine")...)(got)
	}, "orders", h.cfg.DLQTopic)
	for _, k := range keys {
		if len(got[k]) != 1 || got[k][0].topic != h.cfg.DLQTopic || got[k][0].headers[levels.HeaderError] == "" {
			t.Errorf("%s: %+v, want one dead letter with a reason", k, got[k])
			continue
		}
		t.Logf("%s: %s", k, got[k][0].headers[levels.HeaderError])
	}
	if len(got["fine"]) != 1 || got["fine"][0].topic != "orders" {
		t.Errorf("the record after them: %+v", got["fine"])
	}
}

// TestSeriesDuplicateDropped: two copies of one occurrence of a series,
// as a crash between producing the next occurrence and committing the
// firing leaves them (at least once), are fired once, and the series goes
// on as one: copies in one partition (fired in one batch) and in two
// (the second read a level later, after the first's next occurrence
// landed).
func TestSeriesDuplicateDropped(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	orig := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	due := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	copyOf := func(key, id string) []string {
		return []string{levels.HeaderTarget, "orders", levels.HeaderID, id, levels.HeaderEvery, "1s", levels.HeaderCount, "5",
			levels.HeaderDeliverAt, ms(due), levels.HeaderOccurrence, "3", levels.HeaderOriginalTimestamp, ms(orig), "own", key}
	}
	h.sendRaw("same", 0, copyOf("same", "s-same")...)
	h.sendRaw("same", 0, copyOf("same", "s-same")...)
	h.sendRaw("apart", 0, copyOf("apart", "s-apart")...)
	h.sendRaw("apart", 1, copyOf("apart", "s-apart")...) // level 2: read at its level time, half a second after due
	end := due.Add(4 * time.Second)
	got := h.collect(30*time.Second, func(map[string][]received) bool { return time.Now().After(end) }, "orders")
	for _, k := range []string{"same", "apart"} {
		rs := got[k]
		var dues []string
		for _, rc := range rs {
			dues = append(dues, rc.headers[levels.HeaderOccurrence]+"@"+rc.due.UTC().Format("05.000"))
		}
		if len(rs) != 3 {
			t.Errorf("%s: %d firings %v, want occurrences 3, 4, 5 once each", k, len(rs), dues)
			continue
		}
		for i, rc := range rs {
			if want := due.Add(time.Duration(i) * time.Second); !rc.due.Equal(want) || rc.headers[levels.HeaderOccurrence] != strconv.Itoa(3+i) {
				t.Errorf("%s: firing %d is %v, want #%d due %s", k, i, dues[i], 3+i, want.UTC().Format("05.000"))
			}
		}
	}
}
