package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// limitedTo returns a rate limiter for root with one policy: one request
// per hour per network, applying only to op.
func limitedTo(t *testing.T, root chi.Router, op string) (*middleware.RateLimiter, func(http.Handler) http.Handler) {
	t.Helper()
	res := proxyResolver(t)
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter: memory.New(memory.Options{}), Operation: middleware.RouteOperation(root),
		Policies: []policy.Policy{{Name: "one-per-hour", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limit("1/h", 1), Operations: []string{op}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rl, middleware.ClientAddress(res, middleware.ClientAddressOptions{})
}

// TestOperationOfMountPointWithoutSlash: chi's README shape,
// r.Route("/articles", func(r) { r.Get("/", list) }), serves GET /articles
// (no trailing slash) with the "/" route of the sub-router, the route
// chi.Walk lists as "GET /articles/". Its operation must be that route's,
// with the limiter on the root router and on the sub-router: otherwise
// dropping the slash escapes a policy scoped to the operation.
func TestOperationOfMountPointWithoutSlash(t *testing.T) {
	for _, where := range []string{"root", "sub-router"} {
		t.Run(where, func(t *testing.T) {
			root := chi.NewRouter()
			rl, ca := limitedTo(t, root, "GET /articles/")
			list := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("list")) }
			if where == "root" {
				root.Use(ca, rl.Handler)
			}
			root.Route("/articles", func(a chi.Router) {
				if where != "root" {
					a.Use(ca, rl.Handler)
				}
				a.Get("/", list)
				a.Get("/{id}", func(http.ResponseWriter, *http.Request) {})
			})
			op := middleware.RouteOperation(root)
			for _, path := range []string{"/articles/", "/articles"} {
				if got := op(httptest.NewRequest(http.MethodGet, path, nil)); got != "GET /articles/" {
					t.Errorf("operation of GET %s = %q; want %q (the route that serves it)", path, got, "GET /articles/")
				}
			}
			do := func(path string) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodGet, path, nil)
				r.RemoteAddr = "198.51.100.9:1"
				w := httptest.NewRecorder()
				root.ServeHTTP(w, r)
				return w
			}
			if w := do("/articles/"); w.Code != http.StatusOK || w.Body.String() != "list" {
				t.Fatalf("first GET /articles/: %d %q", w.Code, w.Body)
			}
			for i := range 3 {
				if w := do("/articles"); w.Code != http.StatusTooManyRequests {
					t.Errorf("GET /articles #%d after the budget is spent: %d %q; want 429 (same route, same policy)", i+1, w.Code, w.Body)
				}
			}
		})
	}
}

// TestOperationOfPlainMount: a handler that is not a chi router, mounted
// with Mount("/files", h), serves "/files", "/files/" and every path below;
// all of them are its operation "GET /files/*", so that dropping the rest
// of the path does not escape a policy scoped to it.
func TestOperationOfPlainMount(t *testing.T) {
	root := chi.NewRouter()
	rl, ca := limitedTo(t, root, "GET /files/*")
	root.Use(ca, rl.Handler)
	root.Mount("/files", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("file")) }))
	root.Get("/other", func(http.ResponseWriter, *http.Request) {})
	op := middleware.RouteOperation(root)
	for _, tt := range []struct{ method, path, want string }{
		{"GET", "/files", "GET /files/*"},
		{"GET", "/files/", "GET /files/*"},
		{"GET", "/files/a/b", "GET /files/*"},
		{"POST", "/files", "POST /files/*"},
		{"GET", "/other", "GET /other"},
		{"GET", "/filesx", middleware.UnmatchedOperation},
		{"GET", "/", middleware.UnmatchedOperation},
	} {
		if got := op(httptest.NewRequest(tt.method, tt.path, nil)); got != tt.want {
			t.Errorf("operation of %s %s = %q; want %q", tt.method, tt.path, got, tt.want)
		}
	}
	if got, want := statuses(root, "/files/a", "/files", "/files/"), []int{200, 429, 429}; !slices.Equal(got, want) {
		t.Errorf("statuses %v; want %v (one handler, one policy)", got, want)
	}
}

// statuses serves GET requests for paths, in order, from one client, and
// returns their status codes.
func statuses(h http.Handler, paths ...string) []int {
	codes := make([]int, 0, len(paths))
	for _, path := range paths {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "198.51.100.9:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	return codes
}

// TestOperationOfNestedMountPoint: chi's README shape one level down,
// /v1 → /articles → "/": GET /v1/articles (no slash) is served by the
// articles router's "/" route, so it is "GET /v1/articles/" wherever the
// limiter sits.
func TestOperationOfNestedMountPoint(t *testing.T) {
	for _, where := range []string{"root", "v1", "articles"} {
		t.Run(where, func(t *testing.T) {
			root := chi.NewRouter()
			rl, ca := limitedTo(t, root, "GET /v1/articles/")
			use := func(r chi.Router, at string) {
				if where == at {
					r.Use(ca, rl.Handler)
				}
			}
			use(root, "root")
			root.Route("/v1", func(v1 chi.Router) {
				use(v1, "v1")
				v1.Route("/articles", func(a chi.Router) {
					use(a, "articles")
					a.Get("/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("list")) })
				})
			})
			op := middleware.RouteOperation(root)
			for _, path := range []string{"/v1/articles/", "/v1/articles"} {
				if got := op(httptest.NewRequest(http.MethodGet, path, nil)); got != "GET /v1/articles/" {
					t.Errorf("operation of GET %s = %q; want %q", path, got, "GET /v1/articles/")
				}
			}
			if got, want := statuses(root, "/v1/articles/", "/v1/articles", "/v1/articles"), []int{200, 429, 429}; !slices.Equal(got, want) {
				t.Errorf("statuses %v; want %v (one route, one policy)", got, want)
			}
		})
	}
}

// TestOperationUnderSlashMounts: routers mounted at "/" of routers mounted
// at "/" (modules of an app): chi.Walk lists their routes as "/*/x", chi
// serves them as "/x"; the operation is "GET /x" with the limiter at the
// root, on the inner router and inline.
func TestOperationUnderSlashMounts(t *testing.T) {
	for _, where := range []string{"root", "module", "inline"} {
		t.Run(where, func(t *testing.T) {
			root := chi.NewRouter()
			rl, ca := limitedTo(t, root, "GET /x")
			app, mod := chi.NewRouter(), chi.NewRouter()
			h := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("x")) }
			switch where {
			case "root":
				root.Use(ca, rl.Handler)
				mod.Get("/x", h)
			case "module":
				mod.Use(ca, rl.Handler)
				mod.Get("/x", h)
			case "inline":
				mod.With(ca, rl.Handler).Get("/x", h)
			}
			app.Mount("/", mod)
			root.Mount("/", app)
			if got := middleware.RouteOperation(root)(httptest.NewRequest(http.MethodGet, "/x", nil)); got != "GET /x" {
				t.Errorf("operation of GET /x = %q; want %q", got, "GET /x")
			}
			if got, want := statuses(root, "/x", "/x"), []int{200, 429}; !slices.Equal(got, want) {
				t.Errorf("statuses %v; want %v", got, want)
			}
		})
	}
}

// TestOperationInlineKeepsTrailingSlash: "/x" and "/x/" are two routes;
// a limiter inline on "/x/" names its requests "GET /x/" (chi's
// RoutePattern would say "/x"), so they do not spend "/x"'s budget.
func TestOperationInlineKeepsTrailingSlash(t *testing.T) {
	root := chi.NewRouter()
	rl, ca := limitedTo(t, root, "GET /x")
	root.With(ca, rl.Handler).Get("/x", func(http.ResponseWriter, *http.Request) {})
	root.With(ca, rl.Handler).Get("/x/", func(http.ResponseWriter, *http.Request) {})
	if got, want := statuses(root, "/x/", "/x/", "/x", "/x"), []int{200, 200, 200, 429}; !slices.Equal(got, want) {
		t.Errorf("statuses %v; want %v (GET /x/ is not GET /x)", got, want)
	}
}

// TestOperationOfStubs: a mount point is served by what is mounted there,
// whatever other routes share its name. A sub-router with "/" and "/*"
// serves GET /a with "/"; a handler mounted at /y serves GET /y although a
// module mounted at "/" has a route "/y".
func TestOperationOfStubs(t *testing.T) {
	for _, where := range []string{"root", "inline"} {
		t.Run(where, func(t *testing.T) {
			root := chi.NewRouter()
			rl, ca := limitedTo(t, root, "GET /a/")
			mw := func(r chi.Router) chi.Router { return r }
			if where == "root" {
				root.Use(ca, rl.Handler)
			} else {
				mw = func(r chi.Router) chi.Router { return r.With(ca, rl.Handler) }
			}
			h := func(http.ResponseWriter, *http.Request) {}
			mod := chi.NewRouter()
			mod.Get("/y", h)
			mw(root).Mount("/", mod)
			mw(root).Mount("/y", http.HandlerFunc(h))
			mw(root).Route("/a", func(a chi.Router) {
				a.Get("/", h)
				a.Get("/*", h)
			})
			op := middleware.RouteOperation(root)
			for _, tt := range []struct{ path, want string }{
				{"/a", "GET /a/"}, {"/a/", "GET /a/"}, {"/a/b", "GET /a/*"},
				{"/y", "GET /y/*"}, {"/y/", "GET /y/*"},
			} {
				if got := op(httptest.NewRequest(http.MethodGet, tt.path, nil)); got != tt.want {
					t.Errorf("operation of GET %s = %q; want %q", tt.path, got, tt.want)
				}
			}
			if got, want := statuses(root, "/a/", "/a", "/a/b"), []int{200, 429, 200}; !slices.Equal(got, want) {
				t.Errorf("statuses %v; want %v", got, want)
			}
		})
	}
}
