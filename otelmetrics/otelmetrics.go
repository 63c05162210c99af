// Package otelmetrics exposes ratekey's decisions and anomalies as
// OpenTelemetry metrics (go.opentelemetry.io/otel/metric), beside the
// Prometheus collectors of package github.com/ratekey/ratekey/metrics.
// Neither is linked into a program that does not import it: the
// middlewares reach both through their [middleware.Metrics] interface, and
// this package imports the OpenTelemetry API only (the program brings the
// SDK and its exporter).
//
// Instrument names follow the OpenTelemetry semantic conventions' naming
// rules (lower case, dots between namespaces, underscores within a
// word, units in UCUM and never in the name, no _total suffix; counts of
// things in curly-brace annotations such as {request}), and are modelled
// on the only stable rate-limiting conventions, ASP.NET Core's
// aspnetcore.rate_limiting.* instruments (requests by result, active
// request leases, queued requests, time in queue), under the namespace
// "ratekey". Every attribute value comes from a bounded,
// operator-controlled set (policy names, decisions, store names,
// operations, fixed reasons, issuer identifiers from the configuration):
// never a key, an address, a principal or a credential.
//
// The instruments, with the Prometheus metric of package metrics each
// corresponds to:
//
//	ratekey.requests                 counter {request}          ratekey.policy, ratekey.decision
//	                                                            (ratekey_decisions_total)
//	ratekey.store.call.duration      histogram s                ratekey.store, ratekey.store.operation,
//	                                                            error.type on failure (ratekey_store_duration_seconds;
//	                                                            its failed calls: ratekey_store_errors_total)
//	ratekey.fail_open.requests       counter {request}          ratekey.policy (ratekey_fail_open_total)
//	ratekey.store.fallback.decisions counter {decision}         ratekey.policy (ratekey_store_fallback_total)
//	ratekey.cached_rejections        counter {request}          ratekey.policy (ratekey_cached_rejections_total)
//	ratekey.active_request_leases    updowncounter {request}    ratekey.policy (ratekey_in_flight)
//	ratekey.queued_requests          updowncounter {request}    ratekey.policy (ratekey_queued_requests)
//	ratekey.request.time_in_queue    histogram s                ratekey.policy, ratekey.queue.outcome
//	                                                            (ratekey_time_in_queue_seconds)
//	ratekey.settle.cost              counter {token}            ratekey.policy (ratekey_settled_cost_total)
//	ratekey.settle.debts             counter {request}          ratekey.policy (ratekey_settle_debts_total)
//	ratekey.adaptive.limit           gauge {request}            ratekey.policy, ratekey.operation
//	                                                            (ratekey_adaptive_limit)
//	ratekey.adaptive.latency         gauge s                    ratekey.policy, ratekey.operation,
//	                                                            ratekey.adaptive.estimate (ratekey_adaptive_latency_seconds)
//	ratekey.trusted_proxy.anomalies  counter {request}          ratekey.trusted_proxy.reason
//	                                                            (ratekey_trusted_proxy_anomalies_total)
//	ratekey.authentication.failures  counter {request}          ratekey.authentication.reason
//	                                                            (ratekey_authentication_failures_total)
//	ratekey.jwks.fetches             counter {fetch}            ratekey.jwks.issuer, error.type on failure
//	                                                            (ratekey_jwks_refreshes_total)
//
// ratekey.operation is present only when the adaptive policy is keyed on
// the operation (Prometheus has an empty label then). error.type follows
// the semantic conventions: absent on success, "timeout" for a deadline
// that passed, "_OTHER" for any other failure.
package otelmetrics

import (
	"context"
	"errors"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratekey/ratekey/middleware"
)

// scopeName is the instrumentation scope (the meter name) of every
// instrument [New] creates: this package's import path, as the
// OpenTelemetry specification recommends for instrumentation libraries. A
// public contract (docs/compatibility.md).
const scopeName = "github.com/ratekey/ratekey/otelmetrics"

// The attribute keys, in the "ratekey" namespace (error.type is the
// semantic conventions' own).
const (
	// attrPolicy is the policy's name (Policy.Name): ASP.NET Core's
	// aspnetcore.rate_limiting.policy.
	attrPolicy = attribute.Key("ratekey.policy")
	// attrDecision is a policy's decision: PASSED, DELAYED, REJECTED,
	// DELAYED_DRY_RUN, REJECTED_DRY_RUN, SKIPPED or ERROR (nginx's
	// vocabulary; ASP.NET Core's aspnetcore.rate_limiting.result).
	attrDecision = attribute.Key("ratekey.decision")
	// attrStore is the limiter store's implementation: "memory", "redis".
	attrStore = attribute.Key("ratekey.store")
	// attrStoreOperation is the limiter call: "take", "peek", "release"
	// or "settle".
	attrStoreOperation = attribute.Key("ratekey.store.operation")
	// attrQueueOutcome is how a DELAYED request left its queue:
	// "proceeded" (its delay ran out) or "abandoned" (its context ended
	// first: ASP.NET Core's request_canceled).
	attrQueueOutcome = attribute.Key("ratekey.queue.outcome")
	// attrOperation is the operation an adaptive cap keyed on it caps (a
	// route template such as "GET /v1/reports/{id}", a bounded set).
	attrOperation = attribute.Key("ratekey.operation")
	// attrAdaptiveEstimate names an adaptive cap's latency estimate:
	// "baseline" (without a queue) or "recent" (its last window's median).
	attrAdaptiveEstimate = attribute.Key("ratekey.adaptive.estimate")
	// attrProxyReason is a trusted-proxy anomaly's reason
	// (trustedproxy.Derivation.Reason).
	attrProxyReason = attribute.Key("ratekey.trusted_proxy.reason")
	// attrAuthReason is why a credential was refused: the RFC 6750 error
	// code ("invalid_request", "invalid_token"), "missing",
	// "unsupported_scheme" or "unavailable".
	attrAuthReason = attribute.Key("ratekey.authentication.reason")
	// attrJWKSIssuer is the configured identifier of the issuer whose
	// JWK Set was fetched.
	attrJWKSIssuer = attribute.Key("ratekey.jwks.issuer")
	// attrErrorType is the semantic conventions' error.type: "timeout"
	// or "_OTHER", and absent on success.
	attrErrorType = attribute.Key("error.type")
)

// instruments implements middleware.Metrics with OpenTelemetry
// instruments. Its methods never wait for I/O (the SDK's reader and
// exporter run apart); after the first call with given attribute values,
// they allocate nothing of their own (their attribute sets are built once
// and kept, one per value combination, all from bounded sets).
type instruments struct {
	requests     metric.Int64Counter
	storeCalls   metric.Float64Histogram
	failOpen     metric.Int64Counter
	fallback     metric.Int64Counter
	cached       metric.Int64Counter
	leases       metric.Int64UpDownCounter
	queued       metric.Int64UpDownCounter
	timeInQueue  metric.Float64Histogram
	settledCost  metric.Int64Counter
	settleDebts  metric.Int64Counter
	adaptiveLim  metric.Int64Gauge
	adaptiveLat  metric.Float64Gauge
	anomalies    metric.Int64Counter
	authFailures metric.Int64Counter
	jwksFetches  metric.Int64Counter

	byPolicy   sets[string]
	byDecision sets[[2]string] // policy, decision
	byStore    sets[[3]string] // store, operation, error type
	byQueue    sets[[2]string] // policy, outcome
	byAdaptive sets[[3]string] // policy, operation, estimate ("" for the limit)
	byReason   sets[[2]string] // attribute key, reason
	byIssuer   sets[[2]string] // issuer, error type
}

var _ middleware.Metrics = (*instruments)(nil)

// New creates ratekey's instruments with the meter (instrumentation scope)
// "github.com/ratekey/ratekey/otelmetrics" of mp (an SDK's
// *sdkmetric.MeterProvider, or otel.GetMeterProvider() for the global one). It returns the instrument-creation errors, joined (an
// invalid name or unit, which would be a bug here), and nil then. Give
// the result to ratekey.Config.Metrics (the front door hands it to every
// stage), or, composing by hand, to middleware.RateLimitConfig.Metrics,
// middleware.AuthOptions.Metrics and middleware.ClientAddressOptions.Metrics;
// and its JWKSFetch method to identity.JWKSOptions.OnFetch (the
// authenticator is built before the front door, which cannot). Each New
// creates instruments of the same identity: two on one provider add up
// into the same streams.
func New(mp metric.MeterProvider) (middleware.Metrics, error) {
	if mp == nil {
		return nil, errors.New("otelmetrics: a nil MeterProvider (otel.GetMeterProvider() is the global one)")
	}
	meter := mp.Meter(scopeName)
	m := &instruments{}
	var errs []error
	ctr := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	updown := func(name, desc string) metric.Int64UpDownCounter {
		c, err := meter.Int64UpDownCounter(name, metric.WithUnit("{request}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc string, bounds ...float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	m.requests = ctr("ratekey.requests", "{request}", "Each policy's own decision per request, by policy and decision; a request is admitted only when none of its policies rejects it.")
	m.storeCalls = hist("ratekey.store.call.duration", "Latency of limiter store calls, by store and operation; failed calls carry error.type.",
		.00001, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25)
	m.failOpen = ctr("ratekey.fail_open.requests", "{request}", "Requests let through despite a store error because the policy's on_store_error is allow.")
	m.fallback = ctr("ratekey.store.fallback.decisions", "{decision}", "Policy decisions taken on the local fallback store while the shared store could not decide (on_store_error: local).")
	m.cached = ctr("ratekey.cached_rejections", "{request}", "Rejections the store answered from its local deny cache, without a round trip; ratekey.requests counts them too.")
	m.leases = updown("ratekey.active_request_leases", "Requests holding a slot of an in-flight policy (max_in_flight) in this process now; dry-run policies' slots count too.")
	m.queued = updown("ratekey.queued_requests", "DELAYED requests waiting out their delay in this process now, by policy.")
	m.timeInQueue = hist("ratekey.request.time_in_queue", "How long DELAYED requests waited out their delay, by policy and outcome (proceeded, abandoned).",
		.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)
	m.settledCost = ctr("ratekey.settle.cost", "{token}", "Tokens settling policies charged once each request's handler returned.")
	m.settleDebts = ctr("ratekey.settle.debts", "{request}", "Settles above the reservation (the difference charged unconditionally: a debt).")
	lim, err := meter.Int64Gauge("ratekey.adaptive.limit", metric.WithUnit("{request}"), metric.WithDescription("The limit of an adaptive cap (max_in_flight: auto): the requests it lets run at once."))
	m.adaptiveLim, errs = lim, append(errs, err)
	lat, err := meter.Float64Gauge("ratekey.adaptive.latency", metric.WithUnit("s"), metric.WithDescription("An adaptive cap's latency estimates: baseline (without a queue) and recent (its last window's median)."))
	m.adaptiveLat, errs = lat, append(errs, err)
	m.anomalies = ctr("ratekey.trusted_proxy.anomalies", "{request}", "Client-address derivations that failed or that a trusted proxy should not produce, by reason.")
	m.authFailures = ctr("ratekey.authentication.failures", "{request}", "Refused credentials, by reason.")
	m.jwksFetches = ctr("ratekey.jwks.fetches", "{fetch}", "JWK Set fetches by issuer; failed ones carry error.type.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m.initSets()
	return m, nil
}

// initSets says how each cache builds its attribute sets.
func (m *instruments) initSets() {
	m.byPolicy.attrs = func(p string) attribute.Set { return attribute.NewSet(attrPolicy.String(p)) }
	m.byDecision.attrs = func(k [2]string) attribute.Set {
		return attribute.NewSet(attrPolicy.String(k[0]), attrDecision.String(k[1]))
	}
	m.byStore.attrs = func(k [3]string) attribute.Set {
		kv := []attribute.KeyValue{attrStore.String(k[0]), attrStoreOperation.String(k[1])}
		if k[2] != "" {
			kv = append(kv, attrErrorType.String(k[2]))
		}
		return attribute.NewSet(kv...)
	}
	m.byQueue.attrs = func(k [2]string) attribute.Set {
		return attribute.NewSet(attrPolicy.String(k[0]), attrQueueOutcome.String(k[1]))
	}
	m.byAdaptive.attrs = func(k [3]string) attribute.Set {
		kv := []attribute.KeyValue{attrPolicy.String(k[0])}
		if k[1] != "" {
			kv = append(kv, attrOperation.String(k[1]))
		}
		if k[2] != "" {
			kv = append(kv, attrAdaptiveEstimate.String(k[2]))
		}
		return attribute.NewSet(kv...)
	}
	m.byReason.attrs = func(k [2]string) attribute.Set { return attribute.NewSet(attribute.Key(k[0]).String(k[1])) }
	m.byIssuer.attrs = func(k [2]string) attribute.Set {
		kv := []attribute.KeyValue{attrJWKSIssuer.String(k[0])}
		if k[1] != "" {
			kv = append(kv, attrErrorType.String(k[1]))
		}
		return attribute.NewSet(kv...)
	}
}

// errorType is the semantic conventions' error.type of err: "" for nil
// (the attribute is then absent), "timeout" for a deadline that passed,
// "_OTHER" otherwise. A fixed set: an error's text may hold anything.
func errorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	default:
		return "_OTHER"
	}
}

// Decision implements [middleware.Metrics]: ratekey.requests.
func (m *instruments) Decision(policy, decision string) {
	m.requests.Add(context.Background(), 1, m.byDecision.get([2]string{policy, decision}).add...)
}

// StoreCall implements [middleware.Metrics]: ratekey.store.call.duration.
func (m *instruments) StoreCall(store, operation string, d time.Duration, err error) {
	m.storeCalls.Record(context.Background(), d.Seconds(), m.byStore.get([3]string{store, operation, errorType(err)}).rec...)
}

// FailOpen implements [middleware.Metrics]: ratekey.fail_open.requests.
func (m *instruments) FailOpen(policy string) {
	m.failOpen.Add(context.Background(), 1, m.byPolicy.get(policy).add...)
}

// Fallback implements [middleware.Metrics]: ratekey.store.fallback.decisions.
func (m *instruments) Fallback(policy string) {
	m.fallback.Add(context.Background(), 1, m.byPolicy.get(policy).add...)
}

// CachedRejection implements [middleware.Metrics]: ratekey.cached_rejections.
func (m *instruments) CachedRejection(policy string) {
	m.cached.Add(context.Background(), 1, m.byPolicy.get(policy).add...)
}

// InFlight implements [middleware.Metrics]: ratekey.active_request_leases.
func (m *instruments) InFlight(policy string, delta int) {
	m.leases.Add(context.Background(), int64(delta), m.byPolicy.get(policy).add...)
}

// Queued implements [middleware.Metrics]: ratekey.queued_requests, +1.
func (m *instruments) Queued(policy string) {
	m.queued.Add(context.Background(), 1, m.byPolicy.get(policy).add...)
}

// Dequeued implements [middleware.Metrics]: ratekey.queued_requests, -1,
// and ratekey.request.time_in_queue.
func (m *instruments) Dequeued(policy string, waited time.Duration, abandoned bool) {
	ctx := context.Background()
	m.queued.Add(ctx, -1, m.byPolicy.get(policy).add...)
	outcome := "proceeded"
	if abandoned {
		outcome = "abandoned"
	}
	m.timeInQueue.Record(ctx, waited.Seconds(), m.byQueue.get([2]string{policy, outcome}).rec...)
}

// Settled implements [middleware.Metrics]: ratekey.settle.cost, and
// ratekey.settle.debts when debt is true.
func (m *instruments) Settled(policy string, cost int64, debt bool) {
	ctx := context.Background()
	o := m.byPolicy.get(policy)
	m.settledCost.Add(ctx, cost, o.add...)
	if debt {
		m.settleDebts.Add(ctx, 1, o.add...)
	}
}

// Adaptive implements [middleware.Metrics]: ratekey.adaptive.limit and
// ratekey.adaptive.latency (estimates baseline and recent).
func (m *instruments) Adaptive(policy, operation string, limit int64, baseline, latency time.Duration) {
	ctx := context.Background()
	m.adaptiveLim.Record(ctx, limit, m.byAdaptive.get([3]string{policy, operation, ""}).rec...)
	m.adaptiveLat.Record(ctx, baseline.Seconds(), m.byAdaptive.get([3]string{policy, operation, "baseline"}).rec...)
	m.adaptiveLat.Record(ctx, latency.Seconds(), m.byAdaptive.get([3]string{policy, operation, "recent"}).rec...)
}

// ProxyAnomaly implements [middleware.Metrics]: ratekey.trusted_proxy.anomalies.
func (m *instruments) ProxyAnomaly(reason string) {
	m.anomalies.Add(context.Background(), 1, m.byReason.get([2]string{string(attrProxyReason), reason}).add...)
}

// AuthFailure implements [middleware.Metrics]: ratekey.authentication.failures.
func (m *instruments) AuthFailure(reason string) {
	m.authFailures.Add(context.Background(), 1, m.byReason.get([2]string{string(attrAuthReason), reason}).add...)
}

// JWKSFetch counts one JWK Set fetch for issuer (its configured
// identifier) in ratekey.jwks.fetches, with error.type when err is not
// nil. Its signature is that of identity.JWKSOptions.OnFetch, which takes
// it as it is. Safe for concurrent use.
func (m *instruments) JWKSFetch(issuer string, err error) {
	m.jwksFetches.Add(context.Background(), 1, m.byIssuer.get([2]string{issuer, errorType(err)}).add...)
}
