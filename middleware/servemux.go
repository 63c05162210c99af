package middleware

import (
	"net/http"
	"strings"
)

// MuxOperation returns a function that names the operation of a request
// served by mux, a Go 1.22+ [http.ServeMux]: its method, a space, and the
// pattern of the route that will serve it, e.g. "GET /v1/reports/{id}",
// with the same rules as [RouteOperation] for chi. mux must be the mux the
// request is about to enter, with the path it will see: the mux a rate
// limiter wraps, or whose route it sits on inline.
//
// The pattern comes from mux.Handler, which routes the request exactly as
// mux will (host, method, cleaned path, wildcards, {$}), without serving
// it. A pattern that names no method ("/static/") serves every method: a
// request with one of the nine methods of RFC 9110 §9 and RFC 5789
// (PATCH) gets its method in front ("POST /static/"), as chi names a route
// registered with Handle; any other method (a client can send X1, X2, ...
// to mint operations) is [UnmatchedOperation]. A pattern with a host keeps
// it ("GET example.com/v1/x"). A request that no pattern serves, or whose
// method no pattern allows (405), gets UnmatchedOperation, never its raw
// path; one that mux redirects (a missing trailing slash, an unclean path)
// is named by the pattern it is redirected to, when it has one. A mux
// mounted under another (outer.Handle("/api/", http.StripPrefix("/api",
// inner))) names its own routes when the limiter wraps inner with
// MuxOperation(inner); wrapping outer, MuxOperation(outer) names them all
// "GET /api/". Request.Pattern is not read: an outer mux may have set it.
//
// mux.Handler takes mux's read lock; routes may be registered at any time.
// The returned function is safe for concurrent use.
func MuxOperation(mux *http.ServeMux) func(*http.Request) string {
	return func(r *http.Request) string {
		_, pattern := mux.Handler(r)
		if pattern == "" {
			return UnmatchedOperation
		}
		if method, rest, ok := strings.Cut(pattern, " "); ok && method != "" && !strings.Contains(method, "/") {
			return method + " " + strings.TrimLeft(rest, " \t")
		}
		if !standardMethod(r.Method) {
			return UnmatchedOperation
		}
		return r.Method + " " + pattern
	}
}

// standardMethod reports whether m is one of the methods of RFC 9110 §9
// or PATCH (RFC 5789), the set chi routes.
func standardMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}
