package middleware

import (
	"net/http"
	"strings"
)

// MuxOperation returns a function that names the operation of a request
// served by mux, a Go 1.22+ [http.ServeMux]: its method, a space, and the
// pattern of the route that will serve it, e.g. "GET /v1/reports/{id}",
// with the same rules as [RouteOperation] for chi. mux must be the mux that
// receives the requests (the rate limiter wraps it, or sits inline on one
// of its routes).
//
// The pattern comes from mux.Handler, which routes the request exactly as
// mux will (host, method, cleaned path, wildcards, {$}), without serving
// it. A pattern that names no method ("/static/") serves every method: the
// request's method is put in front ("POST /static/"), as chi does for a
// route registered with Handle. A pattern with a host keeps it
// ("GET example.com/v1/x"). A request that no pattern serves, or whose
// method no pattern allows (405), gets [UnmatchedOperation], never its
// raw path; one that mux redirects (a missing trailing slash, an unclean
// path) is named by the pattern it is redirected to, when it has one. When
// mux has already routed the request (the limiter inline on a route), the
// pattern it matched (Request.Pattern) is the answer. A handler mounted
// under a pattern (mux.Handle("/api/", http.StripPrefix("/api", sub))) is
// named by that pattern: put the rate limiter on the inner mux, with its
// own MuxOperation, to name its routes.
//
// mux.Handler takes mux's read lock; routes may be registered at any time.
// The returned function is safe for concurrent use.
func MuxOperation(mux *http.ServeMux) func(*http.Request) string {
	return func(r *http.Request) string {
		pattern := r.Pattern
		if pattern == "" {
			_, pattern = mux.Handler(r)
		}
		if pattern == "" {
			return UnmatchedOperation
		}
		if method, rest, ok := strings.Cut(pattern, " "); ok && method != "" && !strings.Contains(method, "/") {
			return method + " " + strings.TrimLeft(rest, " \t")
		}
		return r.Method + " " + pattern
	}
}
