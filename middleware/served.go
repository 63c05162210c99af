package middleware

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"
)

// ServesOperation reports whether a route of router serves op: whether
// [RouteOperation] (router a chi router) or [MuxOperation] (router an
// *http.ServeMux) names some request op, so that a policy restricted to op
// (Policy.Operations) can apply. [UnmatchedOperation] is always served. A
// router of another type serves nothing.
//
// For chi, router must be the root the requests are routed through, with
// every route registered: op is served when chi.Walk lists its method and
// full template ("GET /v1/reports/{id}", "GET /files/*" for a handler
// mounted with Mount("/files", h)), as RouteOperation names them. For a
// ServeMux, the mux itself is asked: op is served when mux.Handler routes a
// request made from op (its method, host and path, the wildcards' names as
// the segments, "{$}" dropped) to the pattern MuxOperation names op. So
// "HEAD /x" is not served by a "GET /x" pattern (such requests are named
// "GET /x"), nor "GET /x" by "GET /x/" alone (redirected, and named
// "GET /x/"). Not seen: a literal segment registered escaped as a
// wildcard's text ("/%7Bid%7D"), which no program writes.
//
// It reads the routes registered when it is called. Safe for concurrent
// use.
func ServesOperation(router http.Handler, op string) bool {
	if op == UnmatchedOperation {
		return true
	}
	switch r := router.(type) {
	case *http.ServeMux:
		return muxServes(r, op)
	case chi.Routes:
		method, pattern, ok := strings.Cut(op, " ")
		if !ok {
			return false
		}
		_, served := walkRoutes(r)[route{method, pattern}]
		return served
	}
	return false
}

// muxServes reports whether MuxOperation(mux) names a request made from
// op op.
func muxServes(mux *http.ServeMux, op string) bool {
	method, target, ok := strings.Cut(op, " ")
	if !ok || method == "" {
		return false
	}
	slash := strings.IndexByte(target, '/')
	if slash < 0 {
		return false
	}
	host, path := target[:slash], target[slash:]
	path = strings.TrimSuffix(path, "{$}") // "/v1/{$}" serves "/v1/" only
	unescaped, err := url.PathUnescape(path)
	if err != nil {
		return false
	}
	r := &http.Request{
		Method: method,
		Host:   host,
		URL:    &url.URL{Host: host, Path: unescaped, RawPath: path},
		Header: http.Header{},
	}
	return MuxOperation(mux)(r) == op
}
