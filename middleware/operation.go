package middleware

import (
	"net/http"
	"strings"
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
		method, path := routeTarget(r)
		rctx := pool.Get().(*chi.Context)
		rctx.Reset()
		pattern := root.Find(rctx, method, path)
		pool.Put(rctx)
		if pattern == "" {
			return UnmatchedOperation
		}
		if op, ok := ops[route{method, pattern}]; ok {
			return op
		}
		if _, ok := ops[route{"*", pattern}]; ok {
			return method + " " + pattern
		}
		return UnmatchedOperation
	}
}

// routeTarget returns the method and path chi routes r by. Middlewares may
// have rewritten them in chi's routing context (GetHead routes HEAD as GET;
// StripSlashes and CleanPath set the path), so the route context wins over
// the request line: otherwise such a request would be named UNMATCHED and
// escape its operation's policies. Inside a mounted sub-router the context
// holds only the sub-router's part of the path; the mount patterns matched
// so far (with their parameters filled in) give back the part before it.
func routeTarget(r *http.Request) (method, path string) {
	method, path = r.Method, r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return method, nonEmpty(path)
	}
	if rc.RouteMethod != "" {
		method = rc.RouteMethod
	}
	if rc.RoutePath == "" {
		return method, nonEmpty(path)
	}
	var buf [256]byte
	b := buf[:0]
	k := 0 // next URL parameter to use
	for _, pat := range rc.RoutePatterns {
		if !strings.HasSuffix(pat, "/*") {
			// A complete route: the request was already routed (r.With
			// after routing); its path is the routed one.
			return method, nonEmpty(path)
		}
		b, k = appendFilled(b, strings.TrimSuffix(pat, "/*"), &rc.URLParams, k)
	}
	b = append(b, rc.RoutePath...)
	if string(b) == path { // the common case: nothing was rewritten
		return method, nonEmpty(path)
	}
	return method, nonEmpty(string(b))
}

// appendFilled appends pattern with each {param} replaced by the next
// captured value (mount wildcards "*" are skipped), and returns the index of
// the next unused parameter.
func appendFilled(b []byte, pattern string, params *chi.RouteParams, k int) ([]byte, int) {
	for {
		i := strings.IndexByte(pattern, '{')
		if i < 0 {
			return append(b, pattern...), k
		}
		b = append(b, pattern[:i]...)
		depth, j := 0, i
		for ; j < len(pattern); j++ { // a regexp may hold braces: {n:\d{3}}
			if pattern[j] == '{' {
				depth++
			} else if pattern[j] == '}' {
				if depth--; depth == 0 {
					break
				}
			}
		}
		for k < len(params.Keys) && params.Keys[k] == "*" {
			k++
		}
		if k < len(params.Values) {
			b = append(b, params.Values[k]...)
			k++
		}
		if j >= len(pattern) {
			return b, k
		}
		pattern = pattern[j+1:]
	}
}

func nonEmpty(path string) string {
	if path == "" {
		return "/"
	}
	return path
}
