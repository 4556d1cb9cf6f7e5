package relay

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kdelay/kdelay/config"
	"github.com/kdelay/kdelay/levels"
)

// sendTraced stamps a record for target with delay d and, when parent is
// valid, the producer's W3C traceparent header for it.
func (h *harness) sendTraced(key string, d levels.Delay, parent trace.SpanContext) {
	h.t.Helper()
	r := &kgo.Record{Key: []byte(key), Value: []byte("v-" + key)}
	if parent.IsValid() {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte(traceparent(parent))})
	}
	if err := h.cfg.Table().Stamp(r, h.cfg.Topic, d, time.Now()); err != nil {
		h.t.Fatal(err)
	}
	h.produce(r)
}

func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

func producerSpan(t *testing.T, trace1, span1 string) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex(trace1)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex(span1)
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// TestTraceContinuesProducerTrace: with a tracer provider, each forwarded
// record (direct and from the wheel) gets one producer span whose parent
// is the record's traceparent as produced, and arrives with a traceparent
// naming that span; a record without one starts a new trace.
func TestTraceContinuesProducerTrace(t *testing.T) {
	t.Parallel() // waits on real time with a few records: runs beside the other waiting tests
	h := newHarness(t, nil, "orders")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rr := h.start(nil, func(o *Options) { o.TracerProvider = tp })
	rr.waitReady(t)

	direct := producerSpan(t, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
	wheeled := producerSpan(t, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
	h.sendTraced("direct", levels.Delay{Target: "orders", At: time.Now()}, direct)
	h.sendTraced("wheeled", levels.Delay{Target: "orders", Delay: 1500 * time.Millisecond}, wheeled)
	h.sendTraced("untraced", levels.Delay{Target: "orders", At: time.Now()}, trace.SpanContext{})
	keys := []string{"direct", "wheeled", "untraced"}
	got := h.collectAll(30*time.Second, keys, "orders")
	h.report(got, keys, 0)

	spans := func() tracetest.SpanStubs { return exp.GetSpans() }
	deadline := time.Now().Add(10 * time.Second)
	for len(spans()) < len(keys) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the span ends in the produce promise, after the record is readable
	}
	all := spans()
	if len(all) != len(keys) {
		t.Fatalf("%d spans exported, want %d (one per forwarded record)", len(all), len(keys))
	}
	bySpan := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range all {
		bySpan[s.SpanContext.SpanID()] = s
	}
	for _, k := range keys {
		rec := got[k][0]
		tpHeader := rec.headers["traceparent"]
		var tid, sid string
		if _, err := fmt.Sscanf(tpHeader, "00-%32s-%16s-01", &tid, &sid); err != nil {
			t.Fatalf("%s: forwarded traceparent %q: %v", k, tpHeader, err)
		}
		spanID, _ := trace.SpanIDFromHex(sid)
		s, ok := bySpan[spanID]
		if !ok {
			t.Fatalf("%s: forwarded traceparent %q names no exported span", k, tpHeader)
		}
		if s.SpanKind != trace.SpanKindProducer || s.Name != "send orders" {
			t.Errorf("%s: span %q kind %v, want \"send orders\", producer", k, s.Name, s.SpanKind)
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["messaging.system"] != "kafka" || attrs["messaging.destination.name"] != "orders" || attrs["kdelay.source"] != rec.source {
			t.Errorf("%s: span attributes %v, want kafka, orders and source %s", k, attrs, rec.source)
		}
		// The 1.5s record is decided at its level's 1s and waits in the
		// wheel.
		if k == "wheeled" && attrs["kdelay.from_wheel"] != "true" {
			t.Errorf("%s: span attribute kdelay.from_wheel %q, want true", k, attrs["kdelay.from_wheel"])
		}
		want := map[string]trace.SpanContext{"direct": direct, "wheeled": wheeled}[k]
		switch {
		case want.IsValid():
			if s.Parent.SpanID() != want.SpanID() || s.SpanContext.TraceID() != want.TraceID() || tid != want.TraceID().String() {
				t.Errorf("%s: span trace %s parent %s, header trace %s; want the producer's trace %s and span %s",
					k, s.SpanContext.TraceID(), s.Parent.SpanID(), tid, want.TraceID(), want.SpanID())
			}
		case s.Parent.IsValid():
			t.Errorf("%s: a record without traceparent got a span with parent %s, want a new trace", k, s.Parent.SpanID())
		}
	}
}

// TestNoTracerLeavesTraceparent: without a tracer provider the producer's
// traceparent arrives unchanged.
func TestNoTracerLeavesTraceparent(t *testing.T) {
	h := newHarness(t, nil, "orders")
	rr := h.start(nil)
	rr.waitReady(t)
	p := producerSpan(t, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
	h.sendTraced("k", levels.Delay{Target: "orders", At: time.Now()}, p)
	got := h.collectAll(30*time.Second, []string{"k"}, "orders")
	if tp := got["k"][0].headers["traceparent"]; tp != traceparent(p) {
		t.Errorf("traceparent %q, want the producer's %q", tp, traceparent(p))
	}
}

// discardExporter drops spans after the batch processor has built them.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkForwardTracing is the relay's CPU per forwarded record on the
// level path (decide, build the forward, as BenchmarkLevelRecord) plus
// what tracing adds around the produce: off (the nil check), a span per
// record (the shipped way: extract the producer's traceparent, start,
// inject, end, batch-export to a discarding exporter), and, for
// comparison, one span per batch of 512 with a link per record (not
// shipped: the forwarded records could not carry a span of their own
// trace). The source record carries a sampled traceparent, or in
// span-per-record-unsampled one its producer did not sample (the default
// parent-based sampler then records nothing). Run:
//
//	go test -run '^$' -bench BenchmarkForwardTracing -benchmem -count 6 ./relay/
func BenchmarkForwardTracing(b *testing.B) {
	cfg, err := config.Load(map[string]string{"KDELAY_LEVELS": "1s 2s 4s 8s", "KDELAY_TOPIC": "delays"})
	if err != nil {
		b.Fatal(err)
	}
	ts := time.UnixMilli(1_000_000)
	rec := &kgo.Record{
		Topic: "delays", Key: []byte("key-000123"), Value: bytes.Repeat([]byte("v"), 100), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: levels.HeaderTarget, Value: []byte("orders")}, {Key: levels.HeaderLevel, Value: []byte("1")},
			{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}},
	}
	now := ts.Add(2 * time.Second)
	const batch = 512
	unsampled := *rec
	unsampled.Headers = slices.Clone(rec.Headers)
	unsampled.Headers[2].Value = []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	for _, mode := range []string{"off", "span-per-record", "span-per-record-unsampled", "span-per-batch-with-links"} {
		b.Run(mode, func(b *testing.B) {
			rec := rec
			if mode == "span-per-record-unsampled" {
				rec = &unsampled
			}
			r := &Relay{cfg: cfg, pol: policy{table: cfg.Table(), cfg: cfg, horizon: cfg.WheelHorizon}}
			var tp *sdktrace.TracerProvider
			if mode != "off" {
				tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				r.tracer = newTracer(tp, cfg.Topic)
			}
			var links []trace.Link
			var batchStart time.Time
			b.ReportAllocs()
			for i := range b.N {
				d := r.pol.decide(rec, 1, now, 0)
				if d.act != actForward {
					b.Fatalf("decided %s", d.act)
				}
				it := r.newItem()
				*it = item{kind: kForward, part: 0, offset: int64(i), orig: rec, due: d.sched.Due, pooled: true}
				r.forward(it, rec, d.sched.Target, d.sched.TargetPartition, d.sched.Due, 0, int64(i))
				out := it.out
				switch mode {
				case "span-per-record", "span-per-record-unsampled":
					var span recordSpan
					if r.tracer != nil {
						span = r.tracer.start(it, out, now)
					}
					if span != nil {
						r.tracer.end(span, nil, now)
					}
				case "span-per-batch-with-links":
					if len(links) == 0 {
						batchStart = now
					}
					sc := trace.SpanContextFromContext(r.tracer.prop.Extract(context.Background(), headerCarrier{hs: &rec.Headers}))
					links = append(links, trace.Link{SpanContext: sc})
					if len(links) == batch {
						_, span := r.tracer.t.Start(context.Background(), "send batch", trace.WithLinks(links...), trace.WithTimestamp(batchStart))
						span.End()
						links = links[:0]
					}
				}
				r.giveBack(it)
			}
		})
	}
}
