package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/otelmetrics"
)

// checkExporter checks metrics.exporter and the fields that belong to one
// exporter only: an endpoint the Prometheus exporter would ignore, or a
// path and allow list the OTLP exporter would (it serves nothing), are
// refused rather than silently unused.
func checkExporter(mc MetricsConfig) []error {
	switch mc.Exporter {
	case "", exporterPrometheus:
		if mc.Endpoint != "" {
			return []error{errors.New("metrics.endpoint: only for exporter otlp (the prometheus exporter serves metrics.path)")}
		}
		return nil
	case exporterOTLP:
	default:
		return []error{fmt.Errorf("metrics.exporter: %s is not an exporter; use prometheus (the default: served on metrics.path) or otlp (pushed to metrics.endpoint)", shown(mc.Exporter))}
	}
	var errs []error
	if mc.Path != "" {
		errs = append(errs, errors.New("metrics.path: only for exporter prometheus (the otlp exporter pushes to metrics.endpoint and serves nothing)"))
	}
	if len(mc.Allow) > 0 {
		errs = append(errs, errors.New("metrics.allow: only for exporter prometheus (the otlp exporter pushes to metrics.endpoint and serves nothing)"))
	}
	if _, err := otlpEndpoint(mc.Endpoint); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// otlpEndpoint returns the OTLP/HTTP URL metrics.endpoint names, with
// /v1/metrics when it has no path, or "" when it is empty (the exporter
// then reads OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT, else uses localhost:4318). The exporter
// would silently keep its default for a URL it cannot parse: it is
// refused here instead, and never printed (it may hold a password).
func otlpEndpoint(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" || u.Opaque != "":
		return "", errors.New("metrics.endpoint: want an http:// or https:// URL with a host, such as http://collector:4318/v1/metrics")
	case u.User != nil:
		return "", errors.New("metrics.endpoint: credentials in the URL are refused (they would reach logs); set OTEL_EXPORTER_OTLP_HEADERS instead")
	case u.RawQuery != "" || u.Fragment != "":
		return "", errors.New("metrics.endpoint: a query or fragment is not part of an OTLP endpoint")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/metrics"
	}
	return u.String(), nil
}

// newOTLPMetrics makes ratekey's OpenTelemetry instruments on an SDK
// provider whose periodic reader pushes them to endpoint ("" for the
// exporter's default) over OTLP/HTTP, protobuf-encoded. The SDK honours
// the standard environment: OTEL_EXPORTER_OTLP_* (headers, timeout,
// compression, TLS), OTEL_METRIC_EXPORT_INTERVAL (default 60 s),
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. Shut the provider down
// to push what is left. A failed export is logged on logger, at Warn
// (the SDK's global error handler: the demo has one exporter).
func newOTLPMetrics(endpoint string, logger *slog.Logger) (middleware.Metrics, *sdkmetric.MeterProvider, error) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("ratekey: OpenTelemetry metrics export failed", slog.String("error", err.Error()))
	}))
	var opts []otlpmetrichttp.Option
	if endpoint != "" {
		opts = append(opts, otlpmetrichttp.WithEndpointURL(endpoint))
	}
	exp, err := otlpmetrichttp.New(context.Background(), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: the OTLP exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	m, err := otelmetrics.New(mp)
	if err != nil {
		shutdownOTLP(mp)
		return nil, nil, err
	}
	return m, mp, nil
}

// shutdownOTLP pushes what mp holds and stops its reader, waiting at most
// 5 s for the collector. A nil mp is a no-op.
func shutdownOTLP(mp *sdkmetric.MeterProvider) error {
	if mp == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return mp.Shutdown(ctx)
}

// discardOTLP stops mp (nil: a no-op) without pushing anything: demo
// check built it to validate the config, and no collector hears of that.
func discardOTLP(mp *sdkmetric.MeterProvider) {
	if mp == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = mp.Shutdown(ctx)
}

// metricsNeedRestart reports whether a reload from was to now changes
// what the metrics are made of (the OTLP push turned on or off, or its
// endpoint): they live as long as the process, so only a restart applies
// that, and the reload is refused (as for the limiter store).
func metricsNeedRestart(was, now MetricsConfig) bool {
	otlp := func(mc MetricsConfig) bool { return mc.Exporter == exporterOTLP && mc.Enabled }
	return otlp(was) != otlp(now) || otlp(now) && was.Endpoint != now.Endpoint
}
