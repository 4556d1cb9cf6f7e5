package tracing

import (
	"context"
	"errors"
	"testing"
)

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
		err  string
	}{
		{"unset", map[string]string{}, false, ""},
		{"endpoint only", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true, ""},
		{"traces endpoint only", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true, ""},
		{"otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false, ""},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"http/protobuf", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, true, ""},
		{"grpc refused", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": kdelay exports http/protobuf only`},
		{"traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, true, ""},
		{"console refused", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, false, `OTEL_TRACES_EXPORTER="console": kdelay exports otlp or none`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Enabled(tc.env)
			if tc.err != "" {
				if !errors.Is(err, ErrConfig) || err.Error() != "tracing: "+tc.err {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Enabled = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	tp, err := FromEnv(context.Background(), map[string]string{}, "test")
	if err != nil || tp != nil {
		t.Fatalf("unset: %v, %v; want no provider", tp, err)
	}
	_, err = FromEnv(context.Background(), map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "test")
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("endpoint without scheme: %v, want ErrConfig", err)
	}
	tp, err = FromEnv(context.Background(), map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, "test")
	if err != nil || tp == nil {
		t.Fatalf("endpoint set: %v, %v; want a provider", tp, err)
	}
	_ = tp.Shutdown(context.Background())
}
