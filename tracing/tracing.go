// Package tracing turns the standard OpenTelemetry environment variables
// into a tracer provider that exports spans over OTLP/HTTP, or into
// nothing at all.
//
// Tracing is on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset
// and OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set; it is off when OTEL_TRACES_EXPORTER is "none" or unset with no
// endpoint, or when OTEL_SDK_DISABLED is "true". Off, [FromEnv] returns a
// nil provider and the relay creates no span and no header: nothing
// changes. On, the exporter reads the other OTLP variables itself
// (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _CERTIFICATE, ...); the sampler
// is OTEL_TRACES_SAMPLER (default parentbased_always_on), the batch
// processor OTEL_BSP_*, the resource OTEL_SERVICE_NAME (default kdelay)
// and OTEL_RESOURCE_ATTRIBUTES. Only the http/protobuf protocol is built
// in: OTEL_EXPORTER_OTLP_PROTOCOL=grpc is an error.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// ErrConfig is wrapped by every error about the OTEL_* variables.
var ErrConfig = errors.New("tracing")

// Enabled reports whether environ asks for traces (see the package doc).
func Enabled(environ map[string]string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(environ["OTEL_SDK_DISABLED"]), "true") {
		return false, nil
	}
	exp := strings.TrimSpace(environ["OTEL_TRACES_EXPORTER"])
	switch {
	case exp == "":
		return environ["OTEL_EXPORTER_OTLP_ENDPOINT"] != "" || environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != "", nil
	case exp == "none":
		return false, nil
	case exp == "otlp":
	default:
		return false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: kdelay exports otlp or none", ErrConfig, exp)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(environ[k]); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%w: %s=%q: kdelay exports http/protobuf only", ErrConfig, k, p)
			}
			break
		}
	}
	return true, nil
}

// FromEnv returns the tracer provider environ asks for, or nil when
// tracing is off. The caller shuts it down (flushing the last spans)
// with Shutdown. version is the service.version attribute.
func FromEnv(ctx context.Context, environ map[string]string, version string) (*sdktrace.TracerProvider, error) {
	on, err := Enabled(environ)
	if err != nil || !on {
		return nil, err
	}
	var opts []otlptracehttp.Option
	// The endpoint from environ (the process environment in production);
	// the exporter reads the other OTLP variables itself.
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		v := strings.TrimSpace(environ[k])
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: %s=%q: want an http or https URL (http://collector:4318)", ErrConfig, k, v)
		}
		if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
			v = strings.TrimSuffix(v, "/") + "/v1/traces" // the signal's path, as the spec says
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(v))
		break
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: OTLP exporter: %w", ErrConfig, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("kdelay"), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
		resource.WithHost(),
	)
	if name := strings.TrimSpace(environ["OTEL_SERVICE_NAME"]); name != "" && err == nil {
		res, err = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(name)))
	}
	if err != nil && res == nil {
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
