package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Defaults and bounds of the OTLP export (docs/GATEWAY.md, "Metrics and
// traces").
const (
	// defaultOTLPInterval is how often the metrics are pushed: the
	// OpenTelemetry SDK's default.
	defaultOTLPInterval = time.Minute
	// otlpFlushTimeout bounds the last export at shutdown, after the
	// requests in flight have finished.
	otlpFlushTimeout = 10 * time.Second
	// serviceName is the service.name resource attribute of what the
	// gateway exports, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
	// names another.
	serviceName = "idemgateway"
)

// checkOTLPEndpoint checks -otlp-endpoint: the collector's base URL, to
// which /v1/traces and /v1/metrics are appended, as for
// OTEL_EXPORTER_OTLP_ENDPOINT.
func checkOTLPEndpoint(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http:// or https:// URL with a host (OTLP/HTTP, e.g. http://127.0.0.1:4318)", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("%q: the collector's base URL takes no user, query or fragment (headers: OTEL_EXPORTER_OTLP_HEADERS)", s)
	}
	if strings.HasSuffix(u.Path, "/v1/traces") || strings.HasSuffix(u.Path, "/v1/metrics") {
		return nil, fmt.Errorf("%q: give the collector's base URL; the gateway appends /v1/traces and /v1/metrics", s)
	}
	return u, nil
}

// telemetry is the OTLP export: the providers the executor reports to,
// and their shutdown, which exports what is left.
type telemetry struct {
	tracers  *sdktrace.TracerProvider
	meters   *sdkmetric.MeterProvider
	shutdown func(ctx context.Context) error
}

// newTelemetry builds the OTLP/HTTP exporters of c.otlpEndpoint: a batch
// span processor, and a periodic reader every c.otlpInterval beside the
// readers given (the Prometheus text's). Nothing connects until the first
// export.
func newTelemetry(ctx context.Context, c *config, readers ...sdkmetric.Reader) (*telemetry, error) {
	base := strings.TrimSuffix(c.otlpEndpoint.String(), "/")
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, fmt.Errorf("-otlp-endpoint (%s): resource: %w", envName("otlp-endpoint"), err)
	}
	spans, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(base+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("-otlp-endpoint (%s): trace exporter: %w", envName("otlp-endpoint"), err)
	}
	metrics, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(base+"/v1/metrics"))
	if err != nil {
		_ = spans.Shutdown(ctx)
		return nil, fmt.Errorf("-otlp-endpoint (%s): metric exporter: %w", envName("otlp-endpoint"), err)
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithInterval(c.otlpInterval)))}
	for _, r := range readers {
		mopts = append(mopts, sdkmetric.WithReader(r))
	}
	t := &telemetry{
		tracers: sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(spans)),
		meters:  sdkmetric.NewMeterProvider(mopts...),
	}
	t.shutdown = func(ctx context.Context) error {
		// The spans first, then the metrics: each Shutdown exports what
		// it holds.
		return errors.Join(t.tracers.Shutdown(ctx), t.meters.Shutdown(ctx))
	}
	return t, nil
}
