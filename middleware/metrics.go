package middleware

import "time"

// Metrics receives the middlewares' decisions and anomalies, for a metrics
// system of the caller's choice: package github.com/ratekey/ratekey/metrics
// implements it for Prometheus, github.com/ratekey/ratekey/otelmetrics for
// OpenTelemetry, and this package never imports either. A nil
// Metrics (the default in every config) records nothing.
//
// Every method is called on the request path, from many goroutines at once:
// it must be safe for concurrent use, fast, and never block. Every argument
// comes from a bounded, operator-controlled set (policy names, decisions,
// store names, fixed reason strings), never from a key, an address, a
// principal or a credential, so it can be used as a label as it is.
type Metrics interface {
	// Decision counts one policy's decision for one request: policy is its
	// name, decision a [decide.Decision] (PASSED, DELAYED, REJECTED,
	// DELAYED_DRY_RUN, REJECTED_DRY_RUN, SKIPPED or ERROR). A request
	// counts once per policy that applies to it, with that policy's own
	// decision.
	Decision(policy, decision string)
	// StoreCall records one limiter call: store names the limiter's
	// implementation ("memory", "redis"), operation is "take" (charging),
	// "peek" (the debug endpoint), "release" (in-flight slots) or
	// "settle" (reservations, [policy.Policy].Settle), d its latency, and err its error, nil
	// on success. A call the request abandoned (its context ended) is
	// reported with a nil err: the store did not fail.
	StoreCall(store, operation string, d time.Duration, err error)
	// FailOpen counts a request let through by policy despite a store
	// error, because the policy's OnStoreError is [policy.OnStoreErrorAllow].
	FailOpen(policy string)
	// Fallback counts a policy's decision taken on the local fallback
	// store while the store could not decide ([policy.OnStoreErrorLocal]);
	// Decision counts it too.
	Fallback(policy string)
	// CachedRejection counts a rejection the store answered from its local
	// deny cache ([limiter.Decision].Cached: limiter/redis), without a
	// round trip; Decision counts it too.
	CachedRejection(policy string)
	// InFlight adds delta (+1 or -1) to the requests of an in-flight
	// policy ([limiter.Limit].MaxInFlight, or an adaptive cap's
	// MaxInFlightCeiling) that hold a slot in this
	// process: +1 when [RateLimiter.Handler] takes a request's slot, -1
	// when it releases it (when the handler returns or panics), so the
	// sum is the slots held now, per policy (a gauge; a dry-run policy's
	// slots count too). Token-bucket policies never call it.
	InFlight(policy string, delta int)
	// Settled counts one request's settled cost under a settling policy
	// ([policy.Policy].Settle), when its handler has returned: cost is the
	// tokens it finally spent (the cost reported, at most MaxCost, or the
	// reservation when nothing was reported), and debt reports that it
	// exceeded the reservation (the difference was charged
	// unconditionally: a debt the bucket may go into).
	Settled(policy string, cost int64, debt bool)
	// Adaptive reports an adaptive cap's limit and latency estimates each
	// time a window of its closes (a few times a second per cap under
	// load; see [policy.Policy], "Adaptive caps"): policy is its name, operation
	// the operation it caps when the policy is keyed on operation ("" when
	// it is keyed on nothing; operations are route templates, a bounded
	// set), limit the requests it lets run at once from now on, baseline
	// its latency without a queue and latency the window's median. Gauges.
	Adaptive(policy, operation string, limit int64, baseline, latency time.Duration)
	// Queued counts a DELAYED request joining policy's queue: the
	// [RateLimiter.Handler] calls it just before the request waits out its
	// delay, once per policy whose decision is DELAYED (a request two
	// policies delayed waits once, for the longer delay, in both queues),
	// and calls Dequeued for the same policies when the wait ends. So
	// Queued minus Dequeued is the requests waiting now, per policy (a
	// gauge: ASP.NET Core's aspnetcore.rate_limiting.queued_requests).
	// DELAYED_DRY_RUN requests never wait, and are never queued.
	Queued(policy string)
	// Dequeued counts a DELAYED request leaving policy's queue (see
	// Queued): waited is how long it waited, on the monotonic clock, and
	// abandoned reports that its context ended first (the client went
	// away or its deadline passed: the request is not served) rather than
	// its delay running out (it goes on). ASP.NET Core's
	// aspnetcore.rate_limiting.request.time_in_queue, by result.
	Dequeued(policy string, waited time.Duration, abandoned bool)
	// ProxyAnomaly counts a trusted-proxy anomaly seen by
	// [ClientAddress]: reason is the [trustedproxy.Derivation] Reason of a failed
	// derivation, of a trusted peer that sent no forwarding header, or of
	// a chain whose every hop is trusted.
	ProxyAnomaly(reason string)
	// AuthFailure counts a credential refused by [Authenticate]: reason is
	// the RFC 6750 error code ("invalid_request", "invalid_token"),
	// "missing", "unsupported_scheme" or "unavailable".
	AuthFailure(reason string)
	// JWKSFetch counts one JWK Set fetch attempt for issuer (its
	// configured identifier), failed when err is not nil. The middlewares
	// never call it: its signature is that of identity.JWKSOptions.OnFetch,
	// which takes it as it is, so that one Metrics counts everything
	// ratekey does (the authenticator is built before the chain).
	JWKSFetch(issuer string, err error)
}
