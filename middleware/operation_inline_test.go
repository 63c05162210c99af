package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
)

// TestOperationInlineAfterRewrite: with a path-rewriting chi middleware on
// the root (CleanPath, StripSlashes) and the rate limiter inline with
// r.With, the operation is the route chi serves the rewritten path with:
//
//   - on a leaf route (root.With(rl.Handler).Get(...)) the request is
//     already routed: "/v1/reports/1/" (StripSlashes) and "/v1//reports/1"
//     (CleanPath) are GET /v1/reports/{id}, not UNMATCHED;
//   - on a mount (root.With(rl.Handler).Route("/v1", ...)) the limiter runs
//     before chi's mount handler moves the routing path past "/v1".
//
// Otherwise a policy scoped to the operation would not apply.
// TestOperationAfterChiRewrites covers the limiter mounted with Use.
func TestOperationInlineAfterRewrite(t *testing.T) {
	const op = "GET /v1/reports/{id}"
	tests := []struct {
		name  string
		mw    func(http.Handler) http.Handler
		mount bool
		path  string
	}{
		{"StripSlashes, leaf", chimw.StripSlashes, false, "/v1/reports/1/"},
		{"CleanPath, leaf", chimw.CleanPath, false, "/v1//reports/1"},
		{"CleanPath, mount", chimw.CleanPath, true, "/v1/reports/1"},
		{"CleanPath, mount, dot segment", chimw.CleanPath, true, "/v1/./reports/1"},
		{"StripSlashes, mount", chimw.StripSlashes, true, "/v1/reports/1/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := chi.NewRouter()
			root.Use(tt.mw)
			rl, ca := limitedTo(t, root, op)
			get := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("report")) }
			if tt.mount {
				root.With(ca, rl.Handler).Route("/v1", func(v chi.Router) { v.Get("/reports/{id}", get) })
			} else {
				root.With(ca, rl.Handler).Get("/v1/reports/{id}", get)
			}
			do := func(path string) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.URL.Path = path
				r.RemoteAddr = "198.51.100.9:1"
				w := httptest.NewRecorder()
				root.ServeHTTP(w, r)
				return w
			}
			first := do("/v1/reports/1")
			if first.Code != http.StatusOK || first.Body.String() != "report" {
				t.Fatalf("first GET /v1/reports/1: %d %q", first.Code, first.Body)
			}
			if first.Header().Get("RateLimit") == "" {
				t.Errorf("GET /v1/reports/1: no RateLimit field: the policy for %q did not apply", op)
			}
			for i := range 3 {
				if w := do(tt.path); w.Code != http.StatusTooManyRequests {
					t.Errorf("GET %s #%d: %d %q; want 429 (served by %s, whose budget is spent)", tt.path, i+1, w.Code, w.Body, op)
				}
			}
		})
	}
}
