package metrics

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekey/ratekey/middleware"
)

// What New returns is what the middlewares take.
var _ middleware.Metrics = (*collectors)(nil)

// TestNew: every method counts under its metric's name and labels,
// JWKSFetch by outcome; a second New on the same registry fails.
// TestNewNil: a nil Registerer is an error, not a panic at the first
// registration.
func TestNewNil(t *testing.T) {
	if m, err := New(nil); m != nil || err == nil || err.Error() != "metrics: a nil Registerer (prometheus.DefaultRegisterer registers globally)" {
		t.Errorf("New(nil) = %v, %v", m, err)
	}
}

func TestNew(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var mm middleware.Metrics = m
	mm.Decision("p", "PASSED")
	mm.StoreCall("memory", "take", 0, nil)
	mm.StoreCall("memory", "take", 0, errors.New("down"))
	mm.FailOpen("p")
	mm.CachedRejection("p")
	mm.CachedRejection("p")
	mm.ProxyAnomaly("malformed_entry")
	mm.AuthFailure("invalid_token")
	mm.Settled("llm", 100, false)
	mm.Settled("llm", 1500, true)
	mm.Adaptive("protect", "", 12, 20*time.Millisecond, 25*time.Millisecond)
	mm.Adaptive("protect", "", 9, 20*time.Millisecond, 30*time.Millisecond) // gauges: the last report
	mm.Adaptive("per-route", "GET /v1/work", 4, time.Second, 2*time.Second)
	mm.Queued("slow")
	mm.Queued("slow")
	mm.Dequeued("slow", 2*time.Second, false)
	mm.Queued("slow")
	mm.Dequeued("slow", time.Second, true) // one request still waits
	m.JWKSFetch("https://issuer.test", nil)
	m.JWKSFetch("https://issuer.test", errors.New("timeout"))
	m.JWKSFetch("https://issuer.test", errors.New("timeout"))

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := s.GetCounter().GetValue()
			if g := s.GetGauge(); g != nil {
				v = g.GetValue()
			}
			if h := s.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			got = append(got, f.GetName()+"{"+strings.Join(labels, ",")+"} "+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	want := []string{
		"ratekey_adaptive_latency_seconds{estimate=baseline,operation=,policy=protect} 0.02",
		"ratekey_adaptive_latency_seconds{estimate=baseline,operation=GET /v1/work,policy=per-route} 1",
		"ratekey_adaptive_latency_seconds{estimate=recent,operation=,policy=protect} 0.03",
		"ratekey_adaptive_latency_seconds{estimate=recent,operation=GET /v1/work,policy=per-route} 2",
		"ratekey_adaptive_limit{operation=,policy=protect} 9",
		"ratekey_adaptive_limit{operation=GET /v1/work,policy=per-route} 4",
		"ratekey_authentication_failures_total{reason=invalid_token} 1",
		"ratekey_cached_rejections_total{policy=p} 2",
		"ratekey_decisions_total{decision=PASSED,policy=p} 1",
		"ratekey_fail_open_total{policy=p} 1",
		"ratekey_jwks_refreshes_total{issuer=https://issuer.test,outcome=error} 2",
		"ratekey_jwks_refreshes_total{issuer=https://issuer.test,outcome=ok} 1",
		"ratekey_queued_requests{policy=slow} 1",
		"ratekey_settle_debts_total{policy=llm} 1",
		"ratekey_settled_cost_total{policy=llm} 1600",
		"ratekey_store_duration_seconds{operation=take,store=memory} 2",
		"ratekey_store_errors_total{store=memory} 1",
		"ratekey_time_in_queue_seconds{outcome=abandoned,policy=slow} 1",
		"ratekey_time_in_queue_seconds{outcome=proceeded,policy=slow} 1",
		"ratekey_trusted_proxy_anomalies_total{reason=malformed_entry} 1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if m2, err := New(reg); err == nil || m2 != nil {
		t.Errorf("second New on one registry: %v, %v; want nil and an error", m2, err)
	}
}
