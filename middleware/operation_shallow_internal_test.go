package middleware

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// shallowTrees are routers whose mounts a RouteOperation looks paths up
// through: static routes beside mounts of the same prefix, stubs of
// routers and plain handlers, trailing-slash mounts, nested and "/"
// mounts, a route added on a mount's pattern, parameters (no copy where
// a router holds one) and a regexp below a mount.
func shallowTrees() map[string]chi.Router {
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	trees := map[string]chi.Router{}

	r := chi.NewRouter()
	r.Get("/healthz", h)
	r.Handle("/any", h)
	r.Route("/v1", func(v chi.Router) {
		v.Get("/reports/{id}", h)
		v.Post("/export", h)
	})
	trees["demo"] = r

	r = chi.NewRouter()
	r.Get("/articles/special", h)
	r.Route("/articles", func(a chi.Router) {
		a.Get("/", h)
		a.Get("/{id}", h)
		a.Put("/{id}/tags/*", h)
	})
	r.Route("/b/", func(b chi.Router) {
		b.Get("/", h)
		b.Get("/c", h)
	})
	r.Get("/b", h)
	trees["static beside mounts"] = r

	r = chi.NewRouter()
	mod := chi.NewRouter()
	mod.Get("/y", h)
	mod.Get("/z/{id}", h)
	r.Mount("/", mod)
	r.Mount("/y", h)
	r.Route("/a", func(a chi.Router) {
		a.Get("/", h)
		a.Get("/*", h)
	})
	trees["stubs"] = r

	r = chi.NewRouter()
	r.Route("/v1", func(v chi.Router) {
		v.Route("/admin", func(a chi.Router) {
			a.Get("/users/{id}", h)
			a.Delete("/users/{id}", h)
			a.Get("/", h)
		})
		v.Get("/x", h)
		v.Mount("/files", h)
		v.Get("/{id:[0-9]+}", h)
	})
	r.Mount("/v2", h)
	r.Handle("/v4", h)
	r.Route("/v4/", func(v chi.Router) { v.Get("/q", h) })
	v3 := chi.NewRouter()
	v3.Post("/p", h)
	r.Mount("/v3", v3)
	r.Get("/v3/*", h)
	trees["nested"] = r

	r = chi.NewRouter()
	r.Get("/{tenant}/info", h)
	r.Route("/v1", func(v chi.Router) {
		v.Get("/static", h)
		v.Route("/deep", func(d chi.Router) { d.Get("/{id}", h) })
	})
	trees["parameter at the root"] = r

	r = chi.NewRouter()
	app := chi.NewRouter()
	inner := chi.NewRouter()
	inner.Get("/x", h)
	inner.Route("/m", func(m chi.Router) { m.Get("/n", h) })
	app.Mount("/", inner)
	app.Get("/w", h)
	r.Mount("/", app)
	r.Get("/top", h)
	trees["slash mounts"] = r
	return trees
}

var paramSegment = regexp.MustCompile(`\{[^}]*\}`)

// probePaths returns paths around every route of root: the route with its
// parameters and wildcard filled in, with and without a trailing slash,
// extended, doubled slashes, and every prefix ending at a slash.
func probePaths(root chi.Routes) []string {
	seen := map[string]bool{}
	var paths []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	for _, p := range []string{"/", "", "/nope", "//", "/v1", "/v1/", "/a", "/y/", "/x", "/w", "/m/n"} {
		add(p)
	}
	_ = chi.Walk(root, func(_, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		for _, fill := range []string{"7", "abc"} {
			base := paramSegment.ReplaceAllString(pattern, fill)
			for _, tail := range []string{"", "a", "a/b"} {
				p := strings.ReplaceAll(base, "*", tail)
				for _, v := range []string{p, p + "/", strings.TrimSuffix(p, "/"), p + "x", p + "/z", strings.ReplaceAll(p, "/", "//")} {
					add(v)
					for i := range len(v) {
						if v[i] == '/' {
							add(v[:i+1])
							add(v[:i])
						}
					}
				}
			}
		}
		return nil
	})
	return paths
}

// TestShallowLookup: looking paths up router by router through shallow
// copies names every request as chi's Find through the mounts does, for
// every method, on the trees above; the copies exist where they should
// and are used.
func TestShallowLookup(t *testing.T) {
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE", "QUERY", "X1"}
	// What no request is named: the stubs of Mount("/y", h) serve GET /y.
	shadowed := map[string]bool{"GET /y": true}
	for name, root := range shallowTrees() {
		t.Run(name, func(t *testing.T) {
			top := walkOperations(root, true)
			if wantCopy := name != "parameter at the root"; (top.shallow != nil) != wantCopy {
				t.Errorf("root router has a shallow copy: %v; want %v", top.shallow != nil, wantCopy)
			}
			if name == "parameter at the root" && top.mounts["/v1/*"].shallow == nil {
				t.Error("the /v1 router (static routes and a mount) has no shallow copy")
			}
			fast, slow := routeOperation(root, true), routeOperation(root, false)
			n, named := 0, map[string]bool{}
			for _, path := range probePaths(root) {
				for _, m := range methods {
					req := httptest.NewRequest(http.MethodGet, "/", nil)
					req.Method, req.URL.Path = m, path
					got, want := fast(req), slow(req)
					if got != want {
						t.Errorf("%s %q: %q through the shallow copies, %q through chi's Find", m, path, got, want)
					}
					n++
					named[got] = true
				}
			}
			// Every route is some probe's answer.
			_ = chi.Walk(root, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
				if op := method + " " + joinPatterns([]string{pattern}); method != "*" && !named[op] && !shadowed[op] {
					t.Errorf("no probe is named %q", op)
				}
				return nil
			})
			t.Logf("%d requests, %d operations", n, len(named))
		})
	}
}

// TestMountPath: the path a mounted router routes is a suffix of the
// request's path, or "/".
func TestMountPath(t *testing.T) {
	for _, tt := range []struct{ path, want string }{
		{"/v1/reports/7", "/reports/7"},
		{"/v1/", "/"},
		{"/v1/a//b", "/a//b"},
		{"/v1//", "//"},
	} {
		r := chi.NewRouter()
		r.Mount("/v1/", http.NotFoundHandler()) // no stubs: "/v1/" reaches the mount
		rctx := chi.NewRouteContext()
		if p := r.Find(rctx, http.MethodGet, tt.path); p != "/v1/*" {
			t.Fatalf("Find %s = %q", tt.path, p)
		}
		got := mountPath(rctx, tt.path)
		if got != tt.want || !strings.HasSuffix(tt.path, got) {
			t.Errorf("mountPath(%s) = %q; want %q, a suffix of the path", tt.path, got, tt.want)
		}
	}
}
