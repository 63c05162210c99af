// Package middleware is ratekey's net/http glue for chi: it resolves the
// client address ([ClientAddress]), verifies the credential
// ([Authenticate]), names the operation from the chi route template
// ([RouteOperation]), charges every applicable [policy.Policy] all-or-nothing
// ([RateLimiter]), answers rejections with RFC 9457 problems, Retry-After
// and the IETF RateLimit fields, and explains each derivation on a
// protected debug endpoint ([Debug]).
//
// Each stage is a plain func(http.Handler) http.Handler usable with chi's
// r.Use or r.With; later stages read what earlier ones stored in the
// request context ([ClientFrom], [PrincipalFrom]). The decision
// ([RateLimiter.Check]) is separate from the wrapper ([RateLimiter.Handler]).
//
// The decision itself is made by ratekey's decision core (internal/engine,
// which knows nothing of HTTP) and returned as package decide's results
// ([decide.Evaluation], [decide.PolicyResult]); the rate limiter here is its
// HTTP rendering: the RateLimit and Retry-After fields, problem bodies
// (or [RateLimitConfig].Deny), the [Record] and the debug page.
//
// This package depends on trustedproxy, identity, limiter, policy and
// decide; they never depend on it.
package middleware
