package otelmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/otelmetrics"
)

// newReader returns instruments on a fresh SDK provider and the manual
// reader that collects them.
func newReader(t testing.TB) (middleware.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	m, err := otelmetrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

// points collects reader and returns one line per data point, sorted:
// "name unit kind {attributes} value", kind "counter" (a monotonic sum),
// "updowncounter" (a non-monotonic sum), "gauge" or "histogram" (value:
// "count N sum S"), attributes sorted by key. It fails on a scope other
// than the package's import path (the scope name, a contract) or a temporality other than cumulative.
func points(t *testing.T, reader *sdkmetric.ManualReader) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/ratekey/ratekey/otelmetrics" {
			t.Errorf("scope %q; want %q", sm.Scope.Name, "github.com/ratekey/ratekey/otelmetrics")
		}
		for _, md := range sm.Metrics {
			prefix := md.Name + " " + md.Unit + " "
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				kind := "updowncounter"
				if d.IsMonotonic {
					kind = "counter"
				}
				if d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: temporality %v", md.Name, d.Temporality)
				}
				for _, p := range d.DataPoints {
					out = append(out, prefix+kind+" "+attrs(p.Attributes)+" "+strconv.FormatInt(p.Value, 10))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out = append(out, prefix+"gauge "+attrs(p.Attributes)+" "+strconv.FormatInt(p.Value, 10))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out = append(out, prefix+"gauge "+attrs(p.Attributes)+" "+strconv.FormatFloat(p.Value, 'g', -1, 64))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out = append(out, prefix+"histogram "+attrs(p.Attributes)+" count "+strconv.FormatUint(p.Count, 10)+" sum "+strconv.FormatFloat(p.Sum, 'g', -1, 64))
				}
			default:
				t.Errorf("%s: unexpected data %T", md.Name, md.Data)
			}
		}
	}
	slices.Sort(out)
	return out
}

// attrs prints an attribute set as {k=v,...}, sorted by key (attribute.Set
// keeps them sorted).
func attrs(s attribute.Set) string {
	var kv []string
	for _, a := range s.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	return "{" + strings.Join(kv, ",") + "}"
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n%s\nwant:\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDecisionKinds: each decision kind is one ratekey.requests data point
// (counter, unit {request}) with exactly the attributes ratekey.policy and
// ratekey.decision, and nothing else is recorded.
// TestNewNil: a nil MeterProvider is an error, not a panic.
func TestNewNil(t *testing.T) {
	if m, err := otelmetrics.New(nil); m != nil || err == nil || err.Error() != "otelmetrics: a nil MeterProvider (otel.GetMeterProvider() is the global one)" {
		t.Errorf("New(nil) = %v, %v", m, err)
	}
}

func TestDecisionKinds(t *testing.T) {
	for _, tc := range []struct {
		decision string
		want     string
	}{
		{"PASSED", "ratekey.requests {request} counter {ratekey.decision=PASSED,ratekey.policy=per-account} 1"},
		{"DELAYED", "ratekey.requests {request} counter {ratekey.decision=DELAYED,ratekey.policy=per-account} 1"},
		{"REJECTED", "ratekey.requests {request} counter {ratekey.decision=REJECTED,ratekey.policy=per-account} 1"},
		{"DELAYED_DRY_RUN", "ratekey.requests {request} counter {ratekey.decision=DELAYED_DRY_RUN,ratekey.policy=per-account} 1"},
		{"REJECTED_DRY_RUN", "ratekey.requests {request} counter {ratekey.decision=REJECTED_DRY_RUN,ratekey.policy=per-account} 1"},
		{"SKIPPED", "ratekey.requests {request} counter {ratekey.decision=SKIPPED,ratekey.policy=per-account} 1"},
		{"ERROR", "ratekey.requests {request} counter {ratekey.decision=ERROR,ratekey.policy=per-account} 1"},
	} {
		t.Run(tc.decision, func(t *testing.T) {
			m, reader := newReader(t)
			m.Decision("per-account", tc.decision)
			equal(t, tc.decision, points(t, reader), []string{tc.want})
		})
	}
}

// TestInstruments: every method records under its instrument's name, unit,
// kind and attributes, with the values the calls add up to (gauges: the
// last value; histograms: count and sum).
func TestInstruments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls func(m middleware.Metrics)
		want  []string
	}{
		{"Decision, twice", func(m middleware.Metrics) {
			m.Decision("p", "PASSED")
			m.Decision("p", "PASSED")
			m.Decision("q", "REJECTED")
		}, []string{
			"ratekey.requests {request} counter {ratekey.decision=PASSED,ratekey.policy=p} 2",
			"ratekey.requests {request} counter {ratekey.decision=REJECTED,ratekey.policy=q} 1",
		}},
		{"StoreCall: ok, timeout, other", func(m middleware.Metrics) {
			m.StoreCall("redis", "take", 2*time.Millisecond, nil)
			m.StoreCall("redis", "take", 4*time.Millisecond, nil)
			m.StoreCall("redis", "take", 100*time.Millisecond, fmt.Errorf("redis: %w", context.DeadlineExceeded))
			m.StoreCall("redis", "release", time.Millisecond, os.ErrDeadlineExceeded)
			m.StoreCall("memory", "settle", 0, errors.New("state table full"))
		}, []string{
			"ratekey.store.call.duration s histogram {error.type=_OTHER,ratekey.store=memory,ratekey.store.operation=settle} count 1 sum 0",
			"ratekey.store.call.duration s histogram {error.type=timeout,ratekey.store=redis,ratekey.store.operation=release} count 1 sum 0.001",
			"ratekey.store.call.duration s histogram {error.type=timeout,ratekey.store=redis,ratekey.store.operation=take} count 1 sum 0.1",
			"ratekey.store.call.duration s histogram {ratekey.store=redis,ratekey.store.operation=take} count 2 sum 0.006",
		}},
		{"FailOpen", func(m middleware.Metrics) { m.FailOpen("open") }, []string{
			"ratekey.fail_open.requests {request} counter {ratekey.policy=open} 1",
		}},
		{"Fallback", func(m middleware.Metrics) { m.Fallback("shared"); m.Fallback("shared") }, []string{
			"ratekey.store.fallback.decisions {decision} counter {ratekey.policy=shared} 2",
		}},
		{"CachedRejection", func(m middleware.Metrics) { m.CachedRejection("p") }, []string{
			"ratekey.cached_rejections {request} counter {ratekey.policy=p} 1",
		}},
		{"InFlight: two taken, one released", func(m middleware.Metrics) {
			m.InFlight("conc", +1)
			m.InFlight("conc", +1)
			m.InFlight("conc", -1)
		}, []string{
			"ratekey.active_request_leases {request} updowncounter {ratekey.policy=conc} 1",
		}},
		{"Queued and Dequeued: one proceeded, one abandoned, one waiting", func(m middleware.Metrics) {
			m.Queued("slow")
			m.Queued("slow")
			m.Queued("slow")
			m.Dequeued("slow", 1500*time.Millisecond, false)
			m.Dequeued("slow", 250*time.Millisecond, true)
		}, []string{
			"ratekey.queued_requests {request} updowncounter {ratekey.policy=slow} 1",
			"ratekey.request.time_in_queue s histogram {ratekey.policy=slow,ratekey.queue.outcome=abandoned} count 1 sum 0.25",
			"ratekey.request.time_in_queue s histogram {ratekey.policy=slow,ratekey.queue.outcome=proceeded} count 1 sum 1.5",
		}},
		{"Settled: one within, one in debt", func(m middleware.Metrics) {
			m.Settled("llm", 100, false)
			m.Settled("llm", 1500, true)
		}, []string{
			"ratekey.settle.cost {token} counter {ratekey.policy=llm} 1600",
			"ratekey.settle.debts {request} counter {ratekey.policy=llm} 1",
		}},
		{"Adaptive: keyed on nothing (the last report), on operation", func(m middleware.Metrics) {
			m.Adaptive("protect", "", 12, 20*time.Millisecond, 25*time.Millisecond)
			m.Adaptive("protect", "", 9, 20*time.Millisecond, 30*time.Millisecond)
			m.Adaptive("per-route", "GET /v1/work", 4, time.Second, 2*time.Second)
		}, []string{
			"ratekey.adaptive.latency s gauge {ratekey.adaptive.estimate=baseline,ratekey.operation=GET /v1/work,ratekey.policy=per-route} 1",
			"ratekey.adaptive.latency s gauge {ratekey.adaptive.estimate=baseline,ratekey.policy=protect} 0.02",
			"ratekey.adaptive.latency s gauge {ratekey.adaptive.estimate=recent,ratekey.operation=GET /v1/work,ratekey.policy=per-route} 2",
			"ratekey.adaptive.latency s gauge {ratekey.adaptive.estimate=recent,ratekey.policy=protect} 0.03",
			"ratekey.adaptive.limit {request} gauge {ratekey.operation=GET /v1/work,ratekey.policy=per-route} 4",
			"ratekey.adaptive.limit {request} gauge {ratekey.policy=protect} 9",
		}},
		{"ProxyAnomaly", func(m middleware.Metrics) { m.ProxyAnomaly("malformed_entry") }, []string{
			"ratekey.trusted_proxy.anomalies {request} counter {ratekey.trusted_proxy.reason=malformed_entry} 1",
		}},
		{"AuthFailure", func(m middleware.Metrics) { m.AuthFailure("invalid_token"); m.AuthFailure("missing") }, []string{
			"ratekey.authentication.failures {request} counter {ratekey.authentication.reason=invalid_token} 1",
			"ratekey.authentication.failures {request} counter {ratekey.authentication.reason=missing} 1",
		}},
		{"JWKSFetch: ok, failed twice", func(m middleware.Metrics) {
			m.JWKSFetch("https://issuer.test", nil)
			m.JWKSFetch("https://issuer.test", errors.New("404"))
			m.JWKSFetch("https://issuer.test", errors.New("500"))
		}, []string{
			"ratekey.jwks.fetches {fetch} counter {error.type=_OTHER,ratekey.jwks.issuer=https://issuer.test} 2",
			"ratekey.jwks.fetches {fetch} counter {ratekey.jwks.issuer=https://issuer.test} 1",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, reader := newReader(t)
			tc.calls(m)
			equal(t, tc.name, points(t, reader), tc.want)
		})
	}
}

// TestConcurrent: many goroutines recording new and known attribute
// combinations at once lose no measurement (run with -race: the cache of
// attribute sets is written while it is read).
func TestConcurrent(t *testing.T) {
	m, reader := newReader(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				m.Decision("p"+strconv.Itoa(i%4), "PASSED")
				m.InFlight("c"+strconv.Itoa(g%2), +1)
				m.InFlight("c"+strconv.Itoa(g%2), -1)
			}
		})
	}
	wg.Wait()
	equal(t, "8 goroutines × 100", points(t, reader), []string{
		"ratekey.active_request_leases {request} updowncounter {ratekey.policy=c0} 0",
		"ratekey.active_request_leases {request} updowncounter {ratekey.policy=c1} 0",
		"ratekey.requests {request} counter {ratekey.decision=PASSED,ratekey.policy=p0} 200",
		"ratekey.requests {request} counter {ratekey.decision=PASSED,ratekey.policy=p1} 200",
		"ratekey.requests {request} counter {ratekey.decision=PASSED,ratekey.policy=p2} 200",
		"ratekey.requests {request} counter {ratekey.decision=PASSED,ratekey.policy=p3} 200",
	})
}

// TestTwoOnOneProvider: a second New on the same provider makes the same
// instruments: their measurements add up in one stream (no error, unlike
// a second Prometheus registration).
func TestTwoOnOneProvider(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	a, err := otelmetrics.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := otelmetrics.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	a.Decision("p", "PASSED")
	b.Decision("p", "PASSED")
	equal(t, "two New", points(t, reader), []string{"ratekey.requests {request} counter {ratekey.decision=PASSED,ratekey.policy=p} 2"})
}
