package main

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver: it decodes each
// export request's protobuf and keeps the spans.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP request %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil {
			t.Errorf("OTLP request: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					rc.services = append(rc.services, a.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *otlpReceiver) got() ([]*tracepb.Span, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...), append([]string(nil), rc.services...)
}

// TestRunExportsSpansOverOTLP: kdelay run with OTEL_TRACES_EXPORTER=otlp
// and OTEL_EXPORTER_OTLP_ENDPOINT exports, over OTLP/HTTP, one span per
// forwarded record in the producer's trace, and the forwarded record's
// traceparent names that span.
func TestRunExportsSpansOverOTLP(t *testing.T) {
	t.Parallel()
	_, addr := newCluster(t)
	rc := newOTLPReceiver(t)
	env := testEnv(t, addr, "KDELAY_LEVELS", "100ms 200ms 400ms", "KDELAY_HTTP_ADDR", "off",
		"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL, "OTEL_SERVICE_NAME", "kdelay-test")
	mustCode(t, kdelay(t, t.Context(), env, nil, "topic", "create"), exitOK)
	_, adm := admin(t, addr)
	if _, err := adm.CreateTopic(t.Context(), 1, -1, nil, "target"); err != nil {
		t.Fatal(err)
	}
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		spanID  = "b7ad6b7169203331"
	)
	s := start(t, env, "run")
	mustCode(t, kdelay(t, t.Context(), env, nil, "send", "--target", "target", "--delay", "150ms", "--key", "k",
		"--header", "traceparent=00-"+traceID+"-"+spanID+"-01"), exitOK)

	cl, _ := admin(t, addr, kgo.ConsumeTopics("target"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var fwd string
	eventually(t, 30*time.Second, "the record on the target", func() bool {
		fs := cl.PollFetches(t.Context())
		fs.EachRecord(func(r *kgo.Record) { fwd = header(r, "traceparent") })
		return fwd != ""
	})
	// Stopping flushes the batch span processor.
	if code, _ := s.stop(t, 20*time.Second); code != exitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, s.stderr)
	}
	spans, services := rc.got()
	if len(spans) != 1 {
		t.Fatalf("%d spans received over OTLP, want 1", len(spans))
	}
	sp := spans[0]
	if got := hex.EncodeToString(sp.TraceId); got != traceID {
		t.Errorf("span trace %s, want the producer's %s", got, traceID)
	}
	if got := hex.EncodeToString(sp.ParentSpanId); got != spanID {
		t.Errorf("span parent %s, want the producer's span %s", got, spanID)
	}
	if sp.Kind != tracepb.Span_SPAN_KIND_PRODUCER || sp.Name != "send target" {
		t.Errorf("span %q kind %v, want \"send target\", producer", sp.Name, sp.Kind)
	}
	if want := "00-" + traceID + "-" + hex.EncodeToString(sp.SpanId) + "-01"; fwd != want {
		t.Errorf("forwarded traceparent %q, want %q (kdelay's span as parent)", fwd, want)
	}
	if len(services) == 0 || services[0] != "kdelay-test" {
		t.Errorf("service.name %v, want kdelay-test (OTEL_SERVICE_NAME)", services)
	}
}
