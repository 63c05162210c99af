// Package metrics exposes ratekey's decisions and anomalies to Prometheus
// (github.com/prometheus/client_golang).
//
// Every metric name starts with "ratekey_". Labels carry only values from
// bounded, operator-controlled sets: policy names, decisions, store names,
// fixed reason strings, issuer identifiers from the configuration. They
// never carry a key, an address, a subject, a tenant or a token, so neither
// cardinality nor secrets depend on client input.
//
// The middleware package reaches these collectors through its
// [middleware.Metrics] interface, so only a program that imports this
// package depends on client_golang.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekey/ratekey/middleware"
)

// collectors implements middleware.Metrics with Prometheus collectors.
type collectors struct {
	decisions      *prometheus.CounterVec
	storeErrors    *prometheus.CounterVec
	storeLatency   *prometheus.HistogramVec
	failOpen       *prometheus.CounterVec
	fallback       *prometheus.CounterVec
	cached         *prometheus.CounterVec
	inFlight       *prometheus.GaugeVec
	settledCost    *prometheus.CounterVec
	settleDebts    *prometheus.CounterVec
	adaptiveLimit  *prometheus.GaugeVec
	adaptiveLat    *prometheus.GaugeVec
	queued         *prometheus.GaugeVec
	timeInQueue    *prometheus.HistogramVec
	proxyAnomalies *prometheus.CounterVec
	authFailures   *prometheus.CounterVec
	jwksRefreshes  *prometheus.CounterVec
}

// New creates ratekey's collectors and registers them with reg
// (prometheus.DefaultRegisterer, or a prometheus.NewRegistry() of your
// own). It returns the registration error (for instance when another
// Metrics was already registered with reg) and nil then. Give the result
// to middleware.RateLimitConfig.Metrics, middleware.AuthOptions.Metrics and
// middleware.ClientAddressOptions.Metrics, and its JWKSFetch method to
// identity.JWKSOptions.OnFetch.
//
// The collectors:
//
//	ratekey_decisions_total{policy,decision}           counter: one per policy per request (a policy's
//	                                                   own decision: PASSED on a request another policy
//	                                                   rejected still counts as PASSED)
//	ratekey_store_errors_total{store}                  counter: limiter calls that failed
//	ratekey_store_duration_seconds{store,operation}    histogram: limiter call latency (take, peek, release, settle)
//	ratekey_fail_open_total{policy}                    counter: store errors let through (on_store_error: allow)
//	ratekey_store_fallback_total{policy}               counter: decisions on the local fallback (on_store_error: local)
//	ratekey_cached_rejections_total{policy}            counter: rejections a store's local deny cache
//	                                                   answered without a round trip (limiter/redis)
//	ratekey_in_flight{policy}                          gauge: requests holding a slot of an in-flight
//	                                                   policy (max_in_flight) in this process now
//	ratekey_settled_cost_total{policy}                 counter: tokens settling policies (settle) finally
//	                                                   charged, once each handler returned
//	ratekey_settle_debts_total{policy}                 counter: settles above the reservation (the
//	                                                   difference charged unconditionally: a debt)
//	ratekey_adaptive_limit{policy,operation}           gauge: an adaptive cap's limit (max_in_flight: auto);
//	                                                   operation is "" unless the policy is keyed on it
//	ratekey_adaptive_latency_seconds{policy,operation,estimate}
//	                                                   gauge: its latency estimates, estimate "baseline"
//	                                                   (without a queue) or "recent" (the last window's median)
//	ratekey_queued_requests{policy}                    gauge: DELAYED requests waiting out their delay
//	                                                   in this process now (once per policy that delayed them)
//	ratekey_time_in_queue_seconds{policy,outcome}      histogram: how long DELAYED requests waited, outcome
//	                                                   "proceeded" (the delay ran out) or "abandoned" (the
//	                                                   request's context ended first)
//	ratekey_trusted_proxy_anomalies_total{reason}      counter: malformed chains, trusted peers
//	                                                   without a header, all hops trusted, ...
//	ratekey_authentication_failures_total{reason}      counter: refused credentials by RFC 6750 code or cause
//	ratekey_jwks_refreshes_total{issuer,outcome}       counter: key set fetches (ok, error)
func New(reg prometheus.Registerer) (middleware.Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: a nil Registerer (prometheus.DefaultRegisterer registers globally)")
	}
	m := &collectors{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_decisions_total",
			Help: "Each policy's own decision per request, by policy and decision (PASSED, DELAYED, REJECTED, DELAYED_DRY_RUN, REJECTED_DRY_RUN, SKIPPED, ERROR); a request is admitted only when none of its policies rejects it, so PASSED counts policies that would admit, not admitted requests.",
		}, []string{"policy", "decision"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_store_errors_total",
			Help: "Limiter store calls that returned an error (the outcome is unknown; on_store_error applies).",
		}, []string{"store"}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratekey_store_duration_seconds",
			Help:    "Latency of limiter store calls, in seconds.",
			Buckets: []float64{.00001, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"store", "operation"}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_store_fallback_total",
			Help: "Policy decisions taken on the local fallback store while the shared store could not decide (on_store_error: local).",
		}, []string{"policy"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_fail_open_total",
			Help: "Requests let through despite a store error because the policy's on_store_error is allow.",
		}, []string{"policy"}),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_cached_rejections_total",
			Help: "Rejections the store answered from its local deny cache, without a round trip (limiter/redis), by policy; ratekey_decisions_total counts them too.",
		}, []string{"policy"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratekey_in_flight",
			Help: "Requests holding a slot of an in-flight policy (max_in_flight) in this process now, by policy; dry-run policies' slots count too.",
		}, []string{"policy"}),
		settledCost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_settled_cost_total",
			Help: "Tokens that settling policies (settle: true) charged once each request's handler returned: the cost the handler reported (at most max_cost), or the reservation when it reported none, by policy.",
		}, []string{"policy"}),
		settleDebts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_settle_debts_total",
			Help: "Requests whose settled cost exceeded their reservation (the difference charged unconditionally, so the bucket may be in debt), by policy.",
		}, []string{"policy"}),
		adaptiveLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratekey_adaptive_limit",
			Help: "The limit of an adaptive cap (max_in_flight: auto) in this process: the requests it lets run at once, by policy, and by operation when the policy is keyed on it (empty otherwise).",
		}, []string{"policy", "operation"}),
		adaptiveLat: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratekey_adaptive_latency_seconds",
			Help: "The latency estimates of an adaptive cap, in seconds: estimate baseline (without a queue) and recent (the median of its last window), by policy and operation (empty unless the policy is keyed on it).",
		}, []string{"policy", "operation", "estimate"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratekey_queued_requests",
			Help: "DELAYED requests waiting out their delay in this process now, by policy (a request two policies delayed waits in both queues).",
		}, []string{"policy"}),
		timeInQueue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratekey_time_in_queue_seconds",
			Help:    "How long DELAYED requests waited out their delay, in seconds, by policy and outcome (proceeded: the delay ran out; abandoned: the request's context ended first).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"policy", "outcome"}),
		proxyAnomalies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_trusted_proxy_anomalies_total",
			Help: "Client-address derivations that failed or that a trusted proxy should not produce, by reason.",
		}, []string{"reason"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_authentication_failures_total",
			Help: "Refused credentials, by reason (invalid_request, invalid_token, missing, unsupported_scheme, unavailable).",
		}, []string{"reason"}),
		jwksRefreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekey_jwks_refreshes_total",
			Help: "JWKS fetches by issuer and outcome (ok, error).",
		}, []string{"issuer", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.storeErrors, m.storeLatency, m.failOpen, m.fallback, m.cached, m.inFlight, m.settledCost, m.settleDebts, m.adaptiveLimit, m.adaptiveLat, m.queued, m.timeInQueue, m.proxyAnomalies, m.authFailures, m.jwksRefreshes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Decision implements [middleware.Metrics].
func (m *collectors) Decision(policy, decision string) {
	m.decisions.WithLabelValues(policy, decision).Inc()
}

// StoreCall implements [middleware.Metrics].
func (m *collectors) StoreCall(store, operation string, d time.Duration, err error) {
	m.storeLatency.WithLabelValues(store, operation).Observe(d.Seconds())
	if err != nil {
		m.storeErrors.WithLabelValues(store).Inc()
	}
}

// Fallback implements [middleware.Metrics].
func (m *collectors) Fallback(policy string) {
	m.fallback.WithLabelValues(policy).Inc()
}

// FailOpen implements [middleware.Metrics].
func (m *collectors) FailOpen(policy string) {
	m.failOpen.WithLabelValues(policy).Inc()
}

// CachedRejection implements [middleware.Metrics].
func (m *collectors) CachedRejection(policy string) {
	m.cached.WithLabelValues(policy).Inc()
}

// InFlight implements [middleware.Metrics].
func (m *collectors) InFlight(policy string, delta int) {
	m.inFlight.WithLabelValues(policy).Add(float64(delta))
}

// Settled implements [middleware.Metrics].
func (m *collectors) Settled(policy string, cost int64, debt bool) {
	m.settledCost.WithLabelValues(policy).Add(float64(cost))
	if debt {
		m.settleDebts.WithLabelValues(policy).Inc()
	}
}

// Adaptive implements [middleware.Metrics].
func (m *collectors) Adaptive(policy, operation string, limit int64, baseline, latency time.Duration) {
	m.adaptiveLimit.WithLabelValues(policy, operation).Set(float64(limit))
	m.adaptiveLat.WithLabelValues(policy, operation, "baseline").Set(baseline.Seconds())
	m.adaptiveLat.WithLabelValues(policy, operation, "recent").Set(latency.Seconds())
}

// Queued implements [middleware.Metrics].
func (m *collectors) Queued(policy string) {
	m.queued.WithLabelValues(policy).Inc()
}

// Dequeued implements [middleware.Metrics].
func (m *collectors) Dequeued(policy string, waited time.Duration, abandoned bool) {
	m.queued.WithLabelValues(policy).Dec()
	outcome := "proceeded"
	if abandoned {
		outcome = "abandoned"
	}
	m.timeInQueue.WithLabelValues(policy, outcome).Observe(waited.Seconds())
}

// ProxyAnomaly implements [middleware.Metrics].
func (m *collectors) ProxyAnomaly(reason string) {
	m.proxyAnomalies.WithLabelValues(reason).Inc()
}

// AuthFailure implements [middleware.Metrics].
func (m *collectors) AuthFailure(reason string) {
	m.authFailures.WithLabelValues(reason).Inc()
}

// JWKSFetch implements middleware.Metrics: outcome "ok" when err is nil,
// "error" otherwise.
func (m *collectors) JWKSFetch(issuer string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.jwksRefreshes.WithLabelValues(issuer, outcome).Inc()
}
