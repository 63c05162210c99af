package middleware

import (
	"net/http"
	"sync"

	"github.com/go-chi/chi/v5"
)

// UnmatchedOperation is the single operation given to every request that no
// route serves. Keying unmatched requests by their raw path would hand a
// scanner one fresh bucket per path (and unbounded key cardinality), so they
// all share this one.
const UnmatchedOperation = "UNMATCHED"

// RouteOperation returns a function that names the operation of a request:
// its method, a space, and the full chi route template of the route that
// will serve it, e.g. "GET /v1/reports/{id}". root must be the router that
// receives the requests (the top-level chi.Mux), so that the answer is the
// same whether the rate limiter is mounted at the root, on a sub-router, or
// inline with r.With.
//
// The lookup routes the request's path exactly as chi will (the escaped path
// when the URL has one, so "/v1/reports/1%2F2" still matches
// "/v1/reports/{id}"); a request that matches no route, or whose method the
// route does not serve, gets [UnmatchedOperation], never its raw path. So
// does a path that only reaches a sub-router's mount point ("/v1" or "/v1/"
// when nothing is routed there): chi's Find names the mount pattern for
// those, so the answer is checked against the routes chi.Walk lists.
//
// The route list is read on first use: register every route before serving.
// The returned function is safe for concurrent use; it allocates a chi
// routing context per call.
func RouteOperation(root chi.Routes) func(*http.Request) string {
	var (
		once   sync.Once
		routes map[string]bool // "METHOD pattern", "* pattern" for every method
	)
	return func(r *http.Request) string {
		once.Do(func() {
			routes = map[string]bool{}
			_ = chi.Walk(root, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
				routes[method+" "+route] = true
				return nil
			})
		})
		path := r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		if path == "" {
			path = "/"
		}
		pattern := root.Find(chi.NewRouteContext(), r.Method, path)
		if pattern == "" {
			return UnmatchedOperation
		}
		op := r.Method + " " + pattern
		if !routes[op] && !routes["* "+pattern] {
			return UnmatchedOperation
		}
		return op
	}
}
