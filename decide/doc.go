// Package decide holds what ratekey decides for a request, whatever
// serves it: each policy's [PolicyResult] (its key, cost, limit and
// [Decision], in nginx limit_req's vocabulary plus SKIPPED and ERROR),
// the request's [Evaluation] summing them up, and their renderings shared
// by every transport: the debug JSON ([PolicyResult.MarshalJSON]), the
// decision log's attributes, the Retry-After and fail mode of a refusal.
//
// It imports neither net/http nor authentication: package middleware
// renders these results as HTTP (headers, problem bodies, the debug
// page), package grpclimit as gRPC status codes. The decision core that
// produces them (from a request's derived client, principal and
// operation, through the limiter stores, to these results) is
// ratekey's internal engine; middleware.RateLimiter and the front door
// (package ratekey) drive it.
//
// Values of these types are plain data: safe to read concurrently, and
// never holding a credential (a key is encoded from verified identity and
// never from a secret: see package limitkey).
package decide
