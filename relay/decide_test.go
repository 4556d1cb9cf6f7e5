package relay

import (
	"bytes"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/wheel"
)

func testPolicy(t *testing.T, env map[string]string) *policy {
	t.Helper()
	base := map[string]string{"KDELAY_LEVELS": "1s 2s 4s 8s", "KDELAY_TOPIC": "delays", "KDELAY_MAX_DELAY": "1h"}
	for k, v := range env {
		base[k] = v
	}
	cfg, err := config.Load(base)
	if err != nil {
		t.Fatal(err)
	}
	return &policy{table: cfg.Table(), cfg: cfg, horizon: cfg.WheelHorizon}
}

// TestDecide walks the relay's rule with the time passed in: wait until the
// level time, then forward, wheel or cascade by the remaining wait.
func TestDecide(t *testing.T) {
	p := testPolicy(t, nil) // horizon = max gap = 4s
	ts := time.UnixMilli(1_000_000)
	rec := func(kv ...string) *kgo.Record {
		r := &kgo.Record{Timestamp: ts}
		for i := 0; i+1 < len(kv); i += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return r
	}
	at := func(d time.Duration) time.Time { return ts.Add(d) }
	for _, tc := range []struct {
		name     string
		r        *kgo.Record
		level    int
		now      time.Time
		want     action
		mismatch bool
		reason   string
	}{
		{"level 2 before its time", rec("kdelay-target", "t", "kdelay-delay", "2s"), 2, at(1999 * time.Millisecond), actWait, false, ""},
		{"level 2 at its time", rec("kdelay-target", "t", "kdelay-delay", "2s"), 2, at(2 * time.Second), actForward, false, ""},
		{"3s in level 2: wheel", rec("kdelay-target", "t", "kdelay-delay", "3s"), 2, at(2 * time.Second), actWheel, false, ""},
		{"3s in level 2 at 3s: forward", rec("kdelay-target", "t", "kdelay-delay", "3s"), 2, at(3 * time.Second), actForward, false, ""},
		{"20s in level 4: cascade", rec("kdelay-target", "t", "kdelay-delay", "20s"), 4, at(8 * time.Second), actCascade, false, ""},
		{"12s in level 4: wheel at horizon", rec("kdelay-target", "t", "kdelay-delay", "12s"), 4, at(8 * time.Second), actWheel, false, ""},
		{"9s in level 1: cascade", rec("kdelay-target", "t", "kdelay-delay", "9s"), 1, at(time.Second), actCascade, true, ""},
		{"1s in level 4 waits for the level", rec("kdelay-target", "t", "kdelay-delay", "1s"), 4, at(5 * time.Second), actWait, true, ""},
		{"1s in level 4 at level time", rec("kdelay-target", "t", "kdelay-delay", "1s"), 4, at(8 * time.Second), actForward, true, ""},
		{"300ms in level 1 goes at 300ms", rec("kdelay-target", "t", "kdelay-delay", "300ms"), 1, at(300 * time.Millisecond), actForward, false, ""},
		{"300ms in level 1 not before", rec("kdelay-target", "t", "kdelay-delay", "300ms"), 1, at(299 * time.Millisecond), actWait, false, ""},
		{"bad headers dead-letter at once", rec("kdelay-delay", "1s"), 1, at(0), actDeadLetter, false, "missing_target"},
		{"internal topic", rec("kdelay-target", "__consumer_offsets", "kdelay-delay", "1s"), 1, at(0), actDeadLetter, false, "target_refused"},
		{"the delay topic", rec("kdelay-target", "delays", "kdelay-delay", "1s"), 1, at(0), actDeadLetter, false, "target_refused"},
		{"beyond max delay", rec("kdelay-target", "t", "kdelay-delay", "2h"), 4, at(0), actDeadLetter, false, "delay_too_long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.decide(tc.r, tc.level, tc.now, 0)
			if d.act != tc.want || d.mismatch != tc.mismatch || d.reason != tc.reason {
				t.Fatalf("decide = %s mismatch=%v reason=%q, want %s mismatch=%v reason=%q (%s)", d.act, d.mismatch, d.reason, tc.want, tc.mismatch, tc.reason, d.detail)
			}
			if d.act == actForward && tc.now.Before(d.sched.Due) {
				t.Fatalf("forward before due %s", d.sched.Due)
			}
		})
	}
}

// TestDecideReadAhead: with ahead > 0, a record whose level time is at
// most ahead away is read ahead: one due at its level time waits for it
// held (its partition read on into memory), one due later goes into the
// wheel at once, due at its own due time; one farther away waits until
// ahead before its level time. A record in the wrong level, or due
// beyond the horizon, waits for its level time as without read-ahead.
func TestDecideReadAhead(t *testing.T) {
	p := testPolicy(t, nil) // horizon = max gap = 4s
	ts := time.UnixMilli(1_000_000)
	at := func(d time.Duration) time.Time { return ts.Add(d) }
	rec := func(delay string) *kgo.Record {
		return &kgo.Record{Timestamp: ts, Headers: []kgo.RecordHeader{
			{Key: "kdelay-target", Value: []byte("t")}, {Key: "kdelay-delay", Value: []byte(delay)}}}
	}
	const ahead = 2 * time.Second // any window: readAhead is 5s
	for _, tc := range []struct {
		name   string
		delay  string
		level  int
		now    time.Duration
		want   action
		hold   bool          // actWait: read ahead into memory
		wakeAt time.Duration // actWait
	}{
		{"8s in level 4, 2.001s before: wait", "8s", 4, 5999 * time.Millisecond, actWait, false, 6 * time.Second},
		{"8s in level 4, 2s before: held until its level time", "8s", 4, 6 * time.Second, actWait, true, 8 * time.Second},
		{"9s in level 4, 2s before: wheel", "9s", 4, 6 * time.Second, actWheel, false, 0},
		{"1s in level 1 at once: held until its level time", "1s", 1, 0, actWait, true, 1 * time.Second},
		{"1500ms in level 1 at once: wheel", "1500ms", 1, 0, actWheel, false, 0},
		{"300ms in level 1 (due before the level) held until its due time", "300ms", 1, 0, actWait, true, 300 * time.Millisecond},
		{"1s in level 4 (wrong level) waits for the level", "1s", 4, 7 * time.Second, actWait, false, 8 * time.Second},
		{"20s in level 4 (beyond the horizon) waits for the level", "20s", 4, 6 * time.Second, actWait, false, 8 * time.Second},
		{"8s in level 4 at its time: forward", "8s", 4, 8 * time.Second, actForward, false, 0},
		{"9s in level 4 at its level time: wheel", "9s", 4, 8 * time.Second, actWheel, false, 0},
		{"13s in level 4, 3s before: waits until 2s before (due within the horizon then)", "13s", 4, 5 * time.Second, actWait, false, 6 * time.Second},
		{"13s in level 4, 2s before: beyond the horizon (7s): waits for the level", "13s", 4, 6 * time.Second, actWait, false, 8 * time.Second},
		{"10s in level 4, 2s before: due within the horizon (4s): wheel", "10s", 4, 6 * time.Second, actWheel, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := at(tc.now)
			d := p.decide(rec(tc.delay), tc.level, now, ahead)
			if d.act != tc.want || d.hold != tc.hold {
				t.Fatalf("decide = %s (hold %v), want %s (hold %v)", d.act, d.hold, tc.want, tc.hold)
			}
			if d.act == actWait && !d.wakeAt.Equal(at(tc.wakeAt)) {
				t.Fatalf("wake at %s, want %s", d.wakeAt.Sub(ts), tc.wakeAt)
			}
			if d.act == actWheel && d.sched.Due.Before(d.levelTime) {
				t.Fatalf("read ahead into the wheel due %s, before its level time %s", d.sched.Due.Sub(ts), d.levelTime.Sub(ts))
			}
			if without := p.decide(rec(tc.delay), tc.level, now, 0); without.hold || now.Before(without.levelTime) && (without.act != actWait || !without.wakeAt.Equal(without.levelTime)) {
				t.Fatalf("without read-ahead: %s, wake at %s, want a wait until the level time", without.act, without.wakeAt.Sub(ts))
			}
		})
	}
	// Exactly once reads a record due at its level time ahead into the
	// wheel, not into memory.
	eo := testPolicy(t, map[string]string{"KDELAY_DELIVERY": ExactlyOnce})
	for _, due := range []time.Duration{8 * time.Second, 9 * time.Second} {
		if d := eo.decide(rec(due.String()), 4, at(6*time.Second), ahead); d.act != actWheel || d.hold || !d.sched.Due.Equal(at(due)) {
			t.Errorf("exactly once, %s in level 4, 2s before: %s (hold %v) due %s, want the wheel at its due time", due, d.act, d.hold, d.sched.Due.Sub(ts))
		}
	}
	// Within a longer read-ahead but due beyond the horizon (4s): not read
	// ahead, its partition paused until its level time.
	if d := p.decide(rec("8s"), 4, at(3500*time.Millisecond), 5*time.Second); d.act != actWait || d.hold || !d.wakeAt.Equal(at(8*time.Second)) {
		t.Errorf("8s in level 4, 4.5s before, horizon 4s: %s (hold %v) until %s, want a wait until its level time", d.act, d.hold, d.wakeAt.Sub(ts))
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	for _, r := range []*kgo.Record{
		{Timestamp: time.UnixMilli(123), Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: levels.HeaderTarget, Value: []byte("t")}}},
		{Timestamp: time.UnixMilli(-5)},
		{Timestamp: time.UnixMilli(1), Key: []byte{}, Value: nil, Headers: []kgo.RecordHeader{{Key: "", Value: nil}}},
	} {
		got, err := decodePayload(encodePayload(nil, r))
		if err != nil {
			t.Fatal(err)
		}
		if !got.Timestamp.Equal(r.Timestamp) || !bytes.Equal(got.Key, r.Key) || (got.Key == nil) != (r.Key == nil) ||
			!bytes.Equal(got.Value, r.Value) || (got.Value == nil) != (r.Value == nil) || len(got.Headers) != len(r.Headers) {
			t.Fatalf("round trip %+v -> %+v", r, got)
		}
		for i := range r.Headers {
			if got.Headers[i].Key != r.Headers[i].Key || !bytes.Equal(got.Headers[i].Value, r.Headers[i].Value) {
				t.Fatalf("header %d: %+v -> %+v", i, r.Headers[i], got.Headers[i])
			}
		}
	}
}

func FuzzDecodePayload(f *testing.F) {
	f.Add(encodePayload(nil, &kgo.Record{Timestamp: time.UnixMilli(9), Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}))
	f.Add([]byte{})
	f.Add([]byte{3, 0, 255, 255, 255, 255, 15})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := decodePayload(p)
		if err != nil {
			return
		}
		if again := encodePayload(nil, r); !bytes.Equal(again, p) {
			// Varints have one canonical form on encode; decode may accept
			// non-canonical input, so compare by decoding again.
			r2, err := decodePayload(again)
			if err != nil || !r2.Timestamp.Equal(r.Timestamp) || !bytes.Equal(r2.Key, r.Key) || !bytes.Equal(r2.Value, r.Value) || len(r2.Headers) != len(r.Headers) {
				t.Fatalf("re-encode of %x differs: %v", p, err)
			}
		}
	})
}

// BenchmarkLevelRecord is the relay's CPU per record on the level path
// before the produce: decide on a due level-1 record, then build the
// forward in its item, taken from the relay's pool and given back as a
// settled one is.
// Run: go test -run '^$' -bench BenchmarkLevelRecord -benchmem ./relay/
func BenchmarkLevelRecord(b *testing.B) {
	cfg, err := config.Load(map[string]string{"KDELAY_LEVELS": "1s 2s 4s 8s", "KDELAY_TOPIC": "delays"})
	if err != nil {
		b.Fatal(err)
	}
	r := &Relay{cfg: cfg, pol: policy{table: cfg.Table(), cfg: cfg, horizon: cfg.WheelHorizon}}
	ts := time.UnixMilli(1_000_000)
	rec := &kgo.Record{
		Topic: "delays", Key: []byte("key-000123"), Value: bytes.Repeat([]byte("v"), 100), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: levels.HeaderTarget, Value: []byte("orders")}, {Key: levels.HeaderLevel, Value: []byte("1")}},
	}
	now := ts.Add(2 * time.Second)
	b.ReportAllocs()
	for i := range b.N {
		d := r.pol.decide(rec, 1, now, 0)
		if d.act != actForward {
			b.Fatalf("decided %s", d.act)
		}
		it := r.newItem()
		*it = item{pooled: true, offset: int64(i), level: 1, fromQueue: true, orig: rec, due: d.sched.Due}
		r.forward(it, rec, d.sched.Target, d.sched.TargetPartition, d.sched.Due, 0, int64(i))
		if it.out.Topic != "orders" {
			b.Fatal(it.out.Topic)
		}
		r.giveBack(it)
	}
}

// BenchmarkWheelRecord is the relay's CPU per record on the wheel path when
// the entry fires: decode the wheel payload (a record with a target and a
// deliver-at header), parse its schedule and build the forward. Run:
// go test -run '^$' -bench BenchmarkWheelRecord -benchmem ./relay/
func BenchmarkWheelRecord(b *testing.B) {
	cfg, err := config.Load(map[string]string{"KDELAY_LEVELS": "1s 2s 4s 8s", "KDELAY_TOPIC": "delays"})
	if err != nil {
		b.Fatal(err)
	}
	r := &Relay{cfg: cfg, pol: policy{table: cfg.Table(), cfg: cfg, horizon: cfg.WheelHorizon},
		parts: map[int32]*partState{0: {p: 0, level: 1}}}
	ts := time.UnixMilli(1_000_000)
	rec := &kgo.Record{
		Topic: "delays", Key: []byte("key-000123"), Value: bytes.Repeat([]byte("v"), 100), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: levels.HeaderTarget, Value: []byte("orders")}, {Key: levels.HeaderDeliverAt, Value: []byte("1003500")}},
	}
	e := wheel.Entry{Due: 1_003_500, Partition: 0, Payload: encodePayload(nil, rec)}
	// The relay holds up to two batches of 4096 fired items until they
	// settle, then gives them back: so does the benchmark, for the GC to
	// see as much live.
	flight := make([]*item, 2*4096)
	b.ReportAllocs()
	for i := range b.N {
		e.Offset = int64(i)
		it, ok := r.fromWheel(e)
		if !ok || it.out == nil || it.out.Topic != "orders" {
			b.Fatalf("fromWheel: %+v, %v", it, ok)
		}
		if old := flight[i%len(flight)]; old != nil {
			r.giveBack(old)
		}
		flight[i%len(flight)] = it
	}
}

// TestIdle: OnIdle once per busy spell, IdleAfter after its last busy
// iteration.
func TestIdle(t *testing.T) {
	calls := 0
	r := &Relay{idleAfter: 2 * time.Second, onIdle: func() { calls++ }}
	t0 := time.UnixMilli(1_000_000)
	for _, step := range []struct {
		at    time.Duration
		busy  bool
		calls int
	}{
		{0, false, 0},                    // idle from the start: nothing to report
		{time.Second, true, 0},           // busy
		{2 * time.Second, false, 0},      // 1s quiet
		{3 * time.Second, false, 1},      // 2s quiet: reported
		{10 * time.Second, false, 1},     // once
		{11 * time.Second, true, 1},      // busy again
		{12 * time.Second, true, 1},      //
		{13*time.Second + 999, false, 1}, // not yet 2s
		{14 * time.Second, false, 2},     // reported again
	} {
		r.idle(t0.Add(step.at), step.busy)
		if calls != step.calls {
			t.Fatalf("at +%s (busy %v): OnIdle called %d times, want %d", step.at, step.busy, calls, step.calls)
		}
	}
}

// BenchmarkAddToWheel is the relay's CPU per record on the wheel path when
// the record goes in: encode it (1 KB value) and add it to a wheel, one
// Flush per 1000. Run: go test -run '^$' -bench BenchmarkAddToWheel ./relay/
func BenchmarkAddToWheel(b *testing.B) {
	cfg, err := config.Load(map[string]string{"KDELAY_LEVELS": "1s 2s 4s 8s", "KDELAY_TOPIC": "delays"})
	if err != nil {
		b.Fatal(err)
	}
	now := time.UnixMilli(1_000_000)
	w, _, err := wheel.Open(b.TempDir(), wheel.Options{Sync: wheel.SyncNone}, now.UnixMilli())
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	r := &Relay{cfg: cfg, pol: policy{table: cfg.Table(), cfg: cfg, horizon: cfg.WheelHorizon}, m: m, wheel: WheelStore(w)}
	ps := &partState{p: 0, level: 1}
	rec := &kgo.Record{
		Topic: "delays", Key: []byte("key-000123"), Value: bytes.Repeat([]byte("v"), 1024), Timestamp: now,
		Headers: []kgo.RecordHeader{{Key: levels.HeaderTarget, Value: []byte("orders")}, {Key: levels.HeaderDeliverAt, Value: []byte("1003500")}},
	}
	b.ReportAllocs()
	for i := range b.N {
		rec.Offset = int64(i)
		if !r.addToWheel(now, ps, rec, now.Add(2500*time.Millisecond)) {
			b.Fatal("not added")
		}
		if i%1000 == 999 {
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
