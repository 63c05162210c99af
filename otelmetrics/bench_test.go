package otelmetrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratekey/ratekey/metrics"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/otelmetrics"
)

// implementations returns the OpenTelemetry instruments (on an SDK
// provider with a manual reader: the aggregation a periodic exporter
// reads) and the Prometheus collectors, for the same calls.
func implementations(b *testing.B) map[string]middleware.Metrics {
	b.Helper()
	o, err := otelmetrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	if err != nil {
		b.Fatal(err)
	}
	p, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	return map[string]middleware.Metrics{"otel": o, "prometheus": p}
}

// benchParallel runs call on each implementation, from GOMAXPROCS
// goroutines, reporting allocations.
func benchParallel(b *testing.B, call func(m middleware.Metrics)) {
	for _, name := range []string{"otel", "prometheus"} {
		m := implementations(b)[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					call(m)
				}
			})
		})
	}
}

// BenchmarkDecision: one policy's decision counted, attributes known
// (the steady state: every request after a policy's first), from
// GOMAXPROCS goroutines.
func BenchmarkDecision(b *testing.B) {
	benchParallel(b, func(m middleware.Metrics) { m.Decision("per-account", "PASSED") })
}

// BenchmarkInFlight: a slot taken and released (two calls), from
// GOMAXPROCS goroutines.
func BenchmarkInFlight(b *testing.B) {
	benchParallel(b, func(m middleware.Metrics) {
		m.InFlight("per-account-concurrency", +1)
		m.InFlight("per-account-concurrency", -1)
	})
}
