package middleware

import (
	"encoding/json"
	"net/http"
)

// Problem type URIs (RFC 9457 §3.1.1). They are stable identifiers that
// clients may compare; they are URNs, so nothing is fetched from them.
const (
	// problemRateLimited: a policy's bucket has no room for the request's cost now.
	problemRateLimited = "urn:ratekey:problem:rate-limited"
	// problemNeverSatisfiable: the request's cost exceeds a policy's burst
	// (or, with max_delay, would wait longer than max_delay even from a full
	// bucket), so no amount of waiting admits it (no Retry-After is sent).
	problemNeverSatisfiable = "urn:ratekey:problem:cost-exceeds-burst"
	// problemDelayAbandoned: the request's context ended (client gone or
	// deadline passed) while it waited out a DELAYED decision, or before
	// the limiter answered.
	problemDelayAbandoned = "urn:ratekey:problem:delay-abandoned"
	// problemStoreUnavailable: the limiter's store failed and the policy fails closed.
	problemStoreUnavailable = "urn:ratekey:problem:store-unavailable"
	// problemInvalidForwarding: the forwarding chain written by a trusted
	// proxy holds a malformed entry; the request is refused rather than keyed
	// by a weaker identity.
	problemInvalidForwarding = "urn:ratekey:problem:invalid-forwarding-chain"
	// problemInvalidToken: the credential failed verification (RFC 6750 §3.1).
	problemInvalidToken = "urn:ratekey:problem:invalid-token"
	// problemInvalidRequest: the credential was presented in a malformed way (RFC 6750 §3.1).
	problemInvalidRequest = "urn:ratekey:problem:invalid-request"
	// problemUnauthenticated: no credential was presented and anonymous access is off.
	problemUnauthenticated = "urn:ratekey:problem:unauthenticated"
	// problemMissingDimension: a policy needs a dimension (account, credential,
	// ...) that the request does not carry and the policy's on_missing is reject.
	problemMissingDimension = "urn:ratekey:problem:missing-dimension"
	// problemKeySourceUnavailable: credentials could not be checked because a
	// key source is unreachable.
	problemKeySourceUnavailable = "urn:ratekey:problem:key-source-unavailable"
	// problemInvalidCost: a policy's cost function (RateLimitConfig.Costs)
	// failed for the request or returned a cost below 1; 400, naming the
	// policy, without Retry-After (the same request fails again).
	problemInvalidCost = "urn:ratekey:problem:invalid-cost"
	// problemConcurrencyLimited: an in-flight policy ([limiter.Limit]
	// MaxInFlight, nginx limit_conn) has as many of the key's requests
	// running as it allows; the problem names the policy. Retry-After is
	// sent only when the policy sets RetryAfter (nobody can tell when a
	// running request ends).
	problemConcurrencyLimited = "urn:ratekey:problem:concurrency-limited"
	// problemOverloaded: an adaptive cap ([limiter.Limit]
	// MaxInFlightCeiling: max_in_flight: auto) has as many requests
	// running as the service's latency says it takes now: the service is
	// saturated, not the client over its budget. 503 by default, with
	// Retry-After (the policy's RetryAfter, 1 s by default); the problem
	// names the policy.
	problemOverloaded = "urn:ratekey:problem:overloaded"
)

// problem is the RFC 9457 body. Detail never contains a key, a token or any
// other secret: only policy names and fixed texts.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Policy names the policy that decided (never its key).
	Policy string `json:"policy,omitempty"`
	// ViolatedPolicies lists every rejecting policy, in configuration order.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// writeProblem writes an application/problem+json response. Responses about
// limits and credentials must not be cached (RFC 9111 §5.2.2.5).
func writeProblem(w http.ResponseWriter, p problem) {
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
