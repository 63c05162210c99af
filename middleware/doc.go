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
// This package depends on trustedproxy, identity and limiter; they never
// depend on it.
package middleware
