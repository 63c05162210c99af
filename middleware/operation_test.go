package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"

	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// perOperation allows one request per operation and network, so a second
// request lands in the same bucket exactly when it has the same operation.
func perOperation() []policy.Policy {
	return []policy.Policy{{
		Name: "per-op", Key: []limitkey.Dimension{limitkey.DimOperation, limitkey.DimNetwork},
		Limit: limit("1/h", 1),
	}}
}

func TestOperationIsTheRouteTemplateWhereverMounted(t *testing.T) {
	for _, mount := range []string{"root", "", "with"} {
		t.Run("mount="+mount, func(t *testing.T) {
			s := newStack(t, stackOptions{policies: perOperation(), anonymous: true, mount: mount})
			peer := "203.0.113.1:1000"
			if w := s.do(req{path: "/v1/reports/1", peer: peer}); w.Code != http.StatusOK {
				t.Fatalf("first request: %d", w.Code)
			}
			// Other ids, encoded slashes and upper-case escapes are the
			// same operation: the same (spent) bucket.
			for _, path := range []string{"/v1/reports/2", "/v1/reports/1%2F2", "/v1/reports/%2e%2e", "/v1/reports/1?x=1"} {
				if w := s.do(req{path: path, peer: peer}); w.Code != http.StatusTooManyRequests {
					t.Errorf("%s: got %d, want 429 (same budget as /v1/reports/1)", path, w.Code)
				}
			}
			// Another operation has its own bucket.
			if w := s.do(req{method: http.MethodPost, path: "/v1/export", peer: peer}); w.Code != http.StatusOK {
				t.Errorf("POST /v1/export: %d, want 200", w.Code)
			}
		})
	}
}

func TestOperationTemplateValues(t *testing.T) {
	tests := []struct {
		method, path, want string
	}{
		{"GET", "/v1/reports/1", "GET /v1/reports/{id}"},
		{"GET", "/v1/reports/1%2F2", "GET /v1/reports/{id}"},
		{"POST", "/v1/export", "POST /v1/export"},
		{"GET", "/v1/export", middleware.UnmatchedOperation},  // method not served
		{"BREW", "/v1/export", middleware.UnmatchedOperation}, // unknown method
		{"GET", "/v1//reports/1", middleware.UnmatchedOperation},
		{"GET", "/v1/reports/1/", middleware.UnmatchedOperation},
		{"GET", "/nope", middleware.UnmatchedOperation},
		{"GET", "/", middleware.UnmatchedOperation},
		{"GET", "/v1", middleware.UnmatchedOperation},  // the mount point itself
		{"GET", "/v1/", middleware.UnmatchedOperation}, // ... with a slash
		{"GET", "/healthz", "GET /healthz"},
		{"DELETE", "/any", "DELETE /any"}, // a route for every method
	}
	root := newDemoLikeRouter()
	op := middleware.RouteOperation(root)
	for _, tt := range tests {
		r, _ := http.NewRequest(tt.method, "http://x"+tt.path, nil)
		if got := op(r); got != tt.want {
			t.Errorf("%s %s: got %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
}

func TestUnmatchedRequestsShareOneBudget(t *testing.T) {
	s := newStack(t, stackOptions{policies: perOperation(), anonymous: true, mount: "root"})
	peer := "203.0.113.1:1000"
	if w := s.do(req{path: "/scan/1", peer: peer}); w.Code != http.StatusNotFound {
		t.Fatalf("first unmatched: %d, want 404", w.Code)
	}
	for _, path := range []string{"/scan/2", "/v1//reports/1", "//v1/reports/1", "/v1/reports/1/x"} {
		if w := s.do(req{path: path, peer: peer}); w.Code != http.StatusTooManyRequests {
			t.Errorf("%s: %d, want 429 from the shared UNMATCHED bucket", path, w.Code)
		}
	}
}

// TestOperationAfterChiRewrites: chi middlewares that rewrite how a request
// is routed (GetHead, StripSlashes, CleanPath) do not let it escape its
// operation's policies, whether the limiter is on the root router or on a
// mounted sub-router with path parameters.
func TestOperationAfterChiRewrites(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) {}
	tests := []struct {
		name    string
		mw      func(http.Handler) http.Handler
		method  string
		path    string
		mounted bool
		wantOp  string
	}{
		{"GetHead, root", chimw.GetHead, http.MethodHead, "/v1/reports/1", false, "GET /v1/reports/{id}"},
		{"StripSlashes, root", chimw.StripSlashes, http.MethodGet, "/v1/reports/1/", false, "GET /v1/reports/{id}"},
		{"CleanPath, root", chimw.CleanPath, http.MethodGet, "/v1/x/../reports/3", false, "GET /v1/reports/{id}"},
		{"CleanPath double slash, root", chimw.CleanPath, http.MethodGet, "/v1//reports/3", false, "GET /v1/reports/{id}"},
		{"GetHead, mounted", chimw.GetHead, http.MethodHead, "/t/acme/reports/1", true, "GET /t/{tenant}/reports/{id}"},
		{"StripSlashes, mounted", chimw.StripSlashes, http.MethodGet, "/t/acme/reports/1/", true, "GET /t/{tenant}/reports/{id}"},
		{"CleanPath, mounted", chimw.CleanPath, http.MethodGet, "/t/acme/./reports/2", true, "GET /t/{tenant}/reports/{id}"},
		{"no rewrite, mounted", func(h http.Handler) http.Handler { return h }, http.MethodGet, "/t/acme/reports/2", true, "GET /t/{tenant}/reports/{id}"},
		{"unknown route, mounted", func(h http.Handler) http.Handler { return h }, http.MethodGet, "/t/acme/nope", true, middleware.UnmatchedOperation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := chi.NewRouter()
			root.Use(tt.mw)
			record, got := recordOperation(root)
			if tt.mounted {
				root.Route("/t/{tenant}", func(sub chi.Router) {
					sub.Use(record)
					sub.Get("/reports/{id}", ok)
					sub.NotFound(http.NotFound)
				})
			} else {
				root.Use(record)
				root.Get("/v1/reports/{id}", ok)
			}
			req := httptest.NewRequest(tt.method, "http://x.test/", nil)
			req.URL.Path = tt.path
			root.ServeHTTP(httptest.NewRecorder(), req)
			if *got != tt.wantOp {
				t.Errorf("operation %q; want %q", *got, tt.wantOp)
			}
		})
	}
}

// TestOperationInsideNestedSubRouters: from a middleware of a mounted
// sub-router, the operation is the full template of the route chi will
// serve, whether that route is the sub-router's own or one of a router
// mounted below it; a path that only reaches a mount point, or no route,
// is UNMATCHED.
func TestOperationInsideNestedSubRouters(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) {}
	root := chi.NewRouter()
	record, got := recordOperation(root)
	root.Get("/v1x/reports/{id}", ok) // shares the text "/v1" with the mount below
	root.Route("/v1", func(v chi.Router) {
		v.Use(record)
		v.Get("/reports/{id}", ok)
		v.Route("/t/{tenant}", func(tr chi.Router) {
			tr.Get("/items/{id}", ok)
			tr.Delete("/items/{id}", ok)
		})
	})
	tests := []struct{ method, path, want string }{
		{http.MethodGet, "/v1/reports/7", "GET /v1/reports/{id}"},
		{http.MethodGet, "/v1/t/acme/items/3", "GET /v1/t/{tenant}/items/{id}"},
		{http.MethodDelete, "/v1/t/acme/items/3", "DELETE /v1/t/{tenant}/items/{id}"},
		{http.MethodPost, "/v1/t/acme/items/3", middleware.UnmatchedOperation},
		{http.MethodGet, "/v1/t/acme/", middleware.UnmatchedOperation},
		{http.MethodGet, "/v1/t/acme", middleware.UnmatchedOperation},
		{http.MethodGet, "/v1/", middleware.UnmatchedOperation},
		{http.MethodGet, "/v1/nope", middleware.UnmatchedOperation},
	}
	for _, tt := range tests {
		*got = ""
		root.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tt.method, "http://x.test"+tt.path, nil))
		if *got != tt.want {
			t.Errorf("%s %s: operation %q; want %q", tt.method, tt.path, *got, tt.want)
		}
	}
}

// recordOperation returns a middleware that stores, in *got, the operation
// RouteOperation(root) names for each request passing it.
func recordOperation(root chi.Routes) (func(http.Handler) http.Handler, *string) {
	opOf := middleware.RouteOperation(root)
	got := new(string)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			*got = opOf(r)
			next.ServeHTTP(w, r)
		})
	}, got
}
