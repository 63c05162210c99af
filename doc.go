// Package ratekey decides whose budget an HTTP request spends, and whether
// it may spend it now: the front door of the ratekey module.
//
// A rate limit is only as good as its key. ratekey derives the key from
// what can be trusted: the client address from the TCP peer plus the
// forwarding headers of proxies you listed (package trustedproxy), the
// tenant and account from a verified credential (package identity), the
// operation from the route template that serves the request, never its raw
// path (chi or a Go 1.22+ http.ServeMux). It then charges every applicable
// policy all-or-nothing in a token bucket (package limiter: in memory or in
// Redis), and answers a refused request with 429, Retry-After, the IETF
// RateLimit fields and an RFC 9457 problem body.
//
// [New] takes the router, the trusted proxies, the authenticator and the
// policies, validates all of it, and returns a [Middleware] whose Handler
// runs the whole chain: client address → pre-auth policies → credential →
// policies. [PerClient] and [PerAccount] build the two commonest setups in
// one call. The lower packages (trustedproxy, identity, limiter, middleware)
// stay usable on their own for those who compose by hand.
package ratekey
