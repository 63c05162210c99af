package otelmetrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/otelmetrics"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// A rate limiter recording into an OpenTelemetry SDK: two requests on a
// burst of 1, one PASSED and one REJECTED, read back with a manual reader
// (a program would use a periodic reader and an exporter, OTLP for one).
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	m, err := otelmetrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		panic(err)
	}
	rate, _ := limiter.ParseRate("1/m")
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter: memory.New(memory.Options{}),
		Policies: []policy.Policy{{
			Name:  "per-network",
			Key:   []limitkey.Dimension{limitkey.DimNetwork},
			Limit: limiter.Limit{Rate: rate, Burst: 1},
		}},
		Operation: middleware.RouteOperation(r),
		Metrics:   m,
		Logger:    slog.New(slog.DiscardHandler), // the decision log aside
	})
	if err != nil {
		panic(err)
	}
	resolver, _ := trustedproxy.New(trustedproxy.Config{})
	r.Use(middleware.ClientAddress(resolver, middleware.ClientAddressOptions{Metrics: m}), rl.Handler)
	r.Get("/v1/reports/{id}", func(http.ResponseWriter, *http.Request) {})
	for range 2 {
		req := httptest.NewRequest(http.MethodGet, "/v1/reports/7", nil)
		req.RemoteAddr = "198.51.100.7:4000"
		r.ServeHTTP(httptest.NewRecorder(), req)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					fmt.Println(md.Name, md.Unit, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					fmt.Println(md.Name, md.Unit, p.Attributes.Encoded(attribute.DefaultEncoder()), "count", p.Count)
				}
			}
		}
	}
	// Unordered output:
	// ratekey.requests {request} ratekey.decision=PASSED,ratekey.policy=per-network 1
	// ratekey.requests {request} ratekey.decision=REJECTED,ratekey.policy=per-network 1
	// ratekey.store.call.duration s ratekey.store=memory,ratekey.store.operation=take count 2
}
