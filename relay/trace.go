package relay

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// recordSpan is the span of one produce attempt of a forward; nil when
// tracing is off.
type recordSpan = trace.Span

// tracer makes a span per forward attempt (a record produced to its
// target, from the delay topic or the wheel) that continues the
// producer's trace: its parent is the W3C traceparent (and tracestate)
// header of the delayed record as produced, or none (a new trace). The
// forwarded record's traceparent is replaced by, or gains, the span's
// own, so a consumer of the target continues the trace from kdelay's
// span. Cascades and dead letters get no span: they keep the producer's
// headers as they are, and so does a record whose span the sampler drops
// (by default, one whose producer did not sample it). A nil *tracer is off (Options.TracerProvider
// unset): the relay then does nothing but the nil check.
type tracer struct {
	t     trace.Tracer
	prop  propagation.TraceContext
	topic string
}

func newTracer(tp trace.TracerProvider, topic string) *tracer {
	if tp == nil {
		return nil
	}
	return &tracer{t: tp.Tracer("github.com/kdelay/kdelay/relay"), topic: topic}
}

// start opens the span of one produce attempt of it as rec (handed over
// at now) and writes its traceparent into rec's headers; nil for an
// attempt that is not a forward or a span the sampler does not record.
func (tr *tracer) start(it *item, rec *kgo.Record, now time.Time) recordSpan {
	if it.kind != kForward && it.kind != kFire {
		return nil
	}
	parent := context.Background()
	if it.orig != nil {
		parent = tr.prop.Extract(parent, headerCarrier{hs: &it.orig.Headers})
	}
	ctx, span := tr.t.Start(parent, "send "+rec.Topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(now))
	if !span.IsRecording() {
		// Not sampled (by default: the producer did not sample its
		// trace): the record keeps the producer's traceparent.
		return nil
	}
	span.SetAttributes(
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationTypeSend,
		semconv.MessagingDestinationName(rec.Topic),
		attribute.String("kdelay.source", tr.topic+"/"+strconv.Itoa(int(it.part))+"/"+strconv.FormatInt(it.offset, 10)),
		attribute.Int64("kdelay.due_at", it.due.UnixMilli()),
		attribute.Bool("kdelay.from_wheel", it.kind == kFire),
	)
	tr.prop.Inject(ctx, headerCarrier{hs: &rec.Headers, own: true})
	return span
}

// end closes span when its attempt's outcome err is known (at). The
// target partition and offset are left out: setting attributes after the
// start costs the SDK a map per span.
func (tr *tracer) end(span recordSpan, err error, at time.Time) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(at))
}

// headerCarrier is a propagation.TextMapCarrier over record headers. Set
// replaces the header in place, or appends it to a copy of the slice (the
// slice may share its array with another record's headers).
type headerCarrier struct {
	hs  *[]kgo.RecordHeader
	own bool // Set may write: the slice is the forwarded record's
}

func (c headerCarrier) Get(key string) string {
	for _, h := range *c.hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	if !c.own {
		return
	}
	hs := *c.hs
	for i := range hs {
		if hs[i].Key == key {
			hs[i].Value = []byte(value)
			return
		}
	}
	*c.hs = append(hs[:len(hs):len(hs)], kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.hs))
	for _, h := range *c.hs {
		keys = append(keys, h.Key)
	}
	return keys
}
