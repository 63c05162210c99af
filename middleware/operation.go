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
// those, so the answer is checked against the routes chi.Walk lists. When
// the sub-router has a "/" route, chi serves the mount point with it, and
// so does the answer ("GET /articles" is "GET /articles/"). A handler that
// is not a chi router, mounted with Mount("/files", h), serves "/files",
// "/files/" and everything below: all of them are "GET /files/*". Inline
// with r.With on a route, the request is routed already: the answer is the
// route chi matched, whatever path rewriting (StripSlashes, CleanPath) ran
// before. A rewrite inside a sub-router, after a rate limiter on a router
// above it, is not seen by the lookup (the path is named as it arrives):
// put such middleware on the root router, before the limiter. Known gap: a
// mount pattern that ends in a slash (Route("/a/", ...)), with the limiter
// inline on that mount or inside the mounted router, may misname the mount
// point's own requests ("/a/"); mount without the trailing slash.
//
// The route list is read on first use: register every route before serving.
// The returned function is safe for concurrent use. It reuses chi routing
// contexts from a pool and the operation strings of the walked routes; on a
// mounted sub-router it looks the path up in that sub-router only, as chi
// is about to, so a request routed to a leaf of the router it is in costs
// no allocation.
func RouteOperation(root chi.Routes) func(*http.Request) string {
	var (
		once sync.Once
		top  *routerOps
		pool = sync.Pool{New: func() any { return chi.NewRouteContext() }}
	)
	return func(r *http.Request) string {
		once.Do(func() { top = walkOperations(root) })
		if op, ok := routedOperation(top, r); ok {
			return op
		}
		ro, method, path := routeTarget(top, r)
		rctx := pool.Get().(*chi.Context)
		defer pool.Put(rctx)
		for {
			rctx.Reset()
			pattern := ro.routes.Find(rctx, method, path)
			if pattern == "" {
				return UnmatchedOperation
			}
			if len(rctx.RoutePatterns) == 1 {
				// Matched in ro itself (Find went into no mounted
				// router): one of its routes, or a mount's stub.
				if op, ok := ro.served[route{method, pattern}]; ok {
					return op
				}
			}
			// A mount point, at any depth ("/v1/articles" or
			// "/v1/articles/" for "/v1/articles/*"): chi's Find names the
			// mount's stub, in the router that mounted it. chi serves it
			// with the mounted handler: a plain handler under its mount
			// route, a router with its "/" route.
			if leaf, last := ro.leaf(rctx.RoutePatterns); leaf != nil && leaf.stub(method, last) {
				mount := strings.TrimSuffix(last, "/") + "/*"
				if m := leaf.mounts[mount]; m != nil {
					ro, path = m, "/"
					continue
				}
				if op, ok := leaf.ops[route{method, mount}]; ok {
					return op
				}
				return UnmatchedOperation
			}
			if op, ok := ro.ops[route{method, pattern}]; ok {
				return op
			}
			return UnmatchedOperation
		}
	}
}

// routedOperation returns the operation of a request chi has already
// routed to its route (a rate limiter inline with r.With on that route):
// the method and the route's full pattern, if chi.Walk lists them. Then
// the pattern chi matched is the answer, whatever rewriting (StripSlashes,
// CleanPath) made the request's path differ from it.
func routedOperation(top *routerOps, r *http.Request) (string, bool) {
	rc := chi.RouteContext(r.Context())
	if rc == nil || len(rc.RoutePatterns) == 0 {
		return "", false
	}
	if last := rc.RoutePatterns[len(rc.RoutePatterns)-1]; strings.HasSuffix(last, "/*") {
		return "", false // a mount: routing goes on below it
	}
	method := r.Method
	if rc.RouteMethod != "" {
		method = rc.RouteMethod
	}
	if leaf, last := top.leaf(rc.RoutePatterns); leaf == nil || leaf.stub(method, last) {
		return "", false // a mount point: the mounted handler serves it
	}
	// chi's RoutePattern drops a trailing slash, which would name the
	// route "/x/" as "/x": join the patterns as chi.Walk does instead.
	op, ok := top.ops[route{method, joinPatterns(rc.RoutePatterns)}]
	return op, ok
}

// joinPatterns returns the full template of a route from the patterns of
// the routers it was matched through ("/v1/*", "/reports/{id}"), as
// chi.Walk names it once every "/*/" is dropped (see walkOperations).
func joinPatterns(patterns []string) string {
	p := strings.Join(patterns, "")
	for strings.Contains(p, "/*/") {
		p = strings.ReplaceAll(p, "/*/", "/")
	}
	return p
}

// route is a method and a route pattern.
type route struct{ method, pattern string }

// routerOps is one chi router of the tree RouteOperation names operations
// in: the root, or a router mounted below it.
type routerOps struct {
	routes chi.Routes
	// ops maps a method and a pattern as routes.Find returns it (relative
	// to this router) to the operation, for every route chi.Walk lists at
	// or below this router.
	ops map[route]string
	// mounts maps a mount pattern of this router ("/v1/*") to the router
	// mounted there.
	mounts map[string]*routerOps
	// own holds the routes registered on this router itself (method "*"
	// for all methods), without Mount's hidden stubs.
	own map[route]bool
	// served maps a route registered on this router itself, with a
	// method, to its operation (ops of the own routes that have one):
	// the answer when Find matched that route here.
	served map[route]string
}

// leaf returns the router below ro that matched the last of patterns (the
// patterns a Find appended, one per router it went through), and that
// pattern; nil when the path leaves the walked routers.
func (ro *routerOps) leaf(patterns []string) (*routerOps, string) {
	if len(patterns) == 0 {
		return nil, ""
	}
	for _, p := range patterns[:len(patterns)-1] {
		if ro = ro.mounts[p]; ro == nil {
			return nil, ""
		}
	}
	return ro, patterns[len(patterns)-1]
}

// stub reports whether pattern, matched in ro for method, is a mount
// point's hidden stub ("/files" or "/files/" of Mount("/files", h)) rather
// than a route registered there.
func (ro *routerOps) stub(method, pattern string) bool {
	if ro.own[route{method, pattern}] || ro.own[route{"*", pattern}] {
		return false
	}
	mount := strings.TrimSuffix(pattern, "/") + "/*"
	return ro.mounts[mount] != nil || ro.own[route{"*", mount}] || ro.own[route{method, mount}]
}

// walkOperations lists root's routes with chi.Walk, computes each one's
// operation string once, and indexes them per router.
func walkOperations(root chi.Routes) *routerOps {
	return newRouterOps(root, "", walkRoutes(root))
}

// walkRoutes maps every route chi.Walk lists under root, by method and
// full template, to its operation: every operation RouteOperation(root)
// names but UnmatchedOperation.
func walkRoutes(root chi.Routes) map[route]string {
	all := map[route]string{}
	_ = chi.Walk(root, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		// chi.Walk joins the patterns of routers mounted at "/" in one
		// pass ("/*/*/x" becomes "/*/x"); Find and RoutePattern drop every
		// "/*/".
		pattern = joinPatterns([]string{pattern})
		all[route{method, pattern}] = method + " " + pattern
		return nil
	})
	return all
}

// newRouterOps indexes the operations of routes, mounted at prefix (the
// full template of its mount point, without the trailing "/*"), and of the
// routers mounted below it. all holds every walked route by full pattern.
func newRouterOps(routes chi.Routes, prefix string, all map[route]string) *routerOps {
	ro := &routerOps{routes: routes, ops: map[route]string{}, mounts: map[string]*routerOps{}, own: map[route]bool{}, served: map[route]string{}}
	for rt, op := range all {
		// chi patterns start with "/": a route below the mount point
		// "/v1" is "/v1/...", never "/v1x".
		if rel, ok := strings.CutPrefix(rt.pattern, prefix); ok && strings.HasPrefix(rel, "/") {
			ro.ops[route{rt.method, rel}] = op
		}
	}
	for _, rt := range routes.Routes() {
		for m := range rt.Handlers {
			ro.own[route{m, rt.Pattern}] = true
		}
		if rt.SubRoutes != nil {
			ro.mounts[rt.Pattern] = newRouterOps(rt.SubRoutes, prefix+strings.TrimSuffix(rt.Pattern, "/*"), all)
		}
	}
	for rt := range ro.own {
		if op, ok := ro.ops[rt]; ok && rt.method != "*" {
			ro.served[rt] = op
		}
	}
	return ro
}

// routeTarget returns the router, method and path chi routes r by next.
// Middlewares may have rewritten the method and path in chi's routing
// context (GetHead routes HEAD as GET; StripSlashes and CleanPath set the
// path), so the route context wins over the request line: otherwise such a
// request would be named UNMATCHED and escape its operation's policies.
// Inside a mounted sub-router, the mount patterns matched so far lead from
// top to that sub-router, and the context's path is the part of the path
// it routes.
func routeTarget(top *routerOps, r *http.Request) (ro *routerOps, method, path string) {
	method, path = r.Method, r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return top, method, nonEmpty(path)
	}
	if rc.RouteMethod != "" {
		method = rc.RouteMethod
	}
	if rc.RoutePath == "" {
		return top, method, nonEmpty(path)
	}
	ro = top
	for _, pat := range rc.RoutePatterns {
		if ro = ro.mounts[pat]; ro == nil {
			// A mount of a handler that is not a chi router, or a
			// route chi.Walk does not list: routed from the root, the
			// path reaches it.
			return top, method, nonEmpty(path)
		}
	}
	if n := len(rc.URLParams.Keys) - 1; n >= 0 && rc.URLParams.Keys[n] == "*" && n < len(rc.URLParams.Values) && rc.URLParams.Values[n] != "" {
		// Inline on a mount route (r.With(...).Route): chi has matched
		// the mount but not yet moved the path past it (its mount
		// handler does that, and clears this wildcard).
		return ro, method, "/" + rc.URLParams.Values[n]
	}
	return ro, method, rc.RoutePath
}

func nonEmpty(path string) string {
	if path == "" {
		return "/"
	}
	return path
}
