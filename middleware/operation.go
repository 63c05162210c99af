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
// The returned function is safe for concurrent use. It reuses chi routing
// contexts from a pool and the operation strings of the walked routes, so
// it allocates only what chi's own lookup does.
func RouteOperation(root chi.Routes) func(*http.Request) string {
	type route struct{ method, pattern string }
	var (
		once sync.Once
		// ops maps a walked route to its operation string, computed once;
		// {"*", pattern} marks a route that serves every method.
		ops  map[route]string
		pool = sync.Pool{New: func() any { return chi.NewRouteContext() }}
	)
	return func(r *http.Request) string {
		once.Do(func() {
			ops = map[route]string{}
			_ = chi.Walk(root, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
				ops[route{method, pattern}] = method + " " + pattern
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
		rctx := pool.Get().(*chi.Context)
		rctx.Reset()
		pattern := root.Find(rctx, r.Method, path)
		pool.Put(rctx)
		if pattern == "" {
			return UnmatchedOperation
		}
		if op, ok := ops[route{r.Method, pattern}]; ok {
			return op
		}
		if _, ok := ops[route{"*", pattern}]; ok {
			return r.Method + " " + pattern
		}
		return UnmatchedOperation
	}
}
