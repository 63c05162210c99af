package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/middleware"
)

// TestOperationChiAndServeMux runs one table through a chi router and a
// Go 1.22+ ServeMux holding the same routes: both name the route template
// (never the raw path), with UNMATCHED for what no route serves. The two
// differ only where the routers do (noted per case).
func TestOperationChiAndServeMux(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

	cr := chi.NewRouter()
	cr.Get("/v1/reports/{id}", ok)
	cr.Post("/v1/export", ok)
	cr.Get("/v1/users/{user}/keys/{key}", ok)
	cr.Get("/healthz", ok)
	cr.Handle("/static/*", ok)
	chiOp := middleware.RouteOperation(cr)

	mux := http.NewServeMux()
	mux.Handle("GET /v1/reports/{id}", ok)
	mux.Handle("POST /v1/export", ok)
	mux.Handle("GET /v1/users/{user}/keys/{key}", ok)
	mux.Handle("GET /healthz", ok)
	mux.Handle("/static/", ok)
	muxOp := middleware.MuxOperation(mux)

	for _, c := range []struct {
		method, target   string
		wantChi, wantMux string
	}{
		{"GET", "/v1/reports/1", "GET /v1/reports/{id}", "GET /v1/reports/{id}"},
		{"GET", "/v1/reports/2", "GET /v1/reports/{id}", "GET /v1/reports/{id}"},
		{"GET", "/v1/reports/1%2F2", "GET /v1/reports/{id}", "GET /v1/reports/{id}"},
		{"GET", "/v1/reports/1?x=../../etc", "GET /v1/reports/{id}", "GET /v1/reports/{id}"},
		{"POST", "/v1/export", "POST /v1/export", "POST /v1/export"},
		{"GET", "/v1/users/alice/keys/k1", "GET /v1/users/{user}/keys/{key}", "GET /v1/users/{user}/keys/{key}"},
		{"GET", "/healthz", "GET /healthz", "GET /healthz"},
		// A route for every method: the request's method in front.
		{"DELETE", "/static/a/b.css", "DELETE /static/*", "DELETE /static/"},
		// A method outside RFC 9110 on a route for every method would mint
		// one operation (one bucket) per made-up method.
		{"X1", "/static/a", "UNMATCHED", "UNMATCHED"},
		{"get", "/static/a", "UNMATCHED", "UNMATCHED"},
		// Unmatched paths and methods share one operation.
		{"GET", "/nope", "UNMATCHED", "UNMATCHED"},
		{"GET", "/v1/reports/1/extra", "UNMATCHED", "UNMATCHED"},
		{"GET", "/v1/export", "UNMATCHED", "UNMATCHED"},
		{"PUT", "/v1/reports/1", "UNMATCHED", "UNMATCHED"},
		{"GET", "/v1/reports", "UNMATCHED", "UNMATCHED"},
		{"POST", "/v1/reports/1", "UNMATCHED", "UNMATCHED"},
		// ServeMux serves HEAD with a GET pattern; chi does not.
		{"HEAD", "/healthz", "UNMATCHED", "GET /healthz"},
		// ServeMux redirects an unclean path to its pattern; chi routes
		// the path as it comes.
		{"GET", "/v1//reports/1", "UNMATCHED", "GET /v1/reports/{id}"},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		if got := chiOp(r); got != c.wantChi {
			t.Errorf("chi: %s %s = %q, want %q", c.method, c.target, got, c.wantChi)
		}
		if got := muxOp(r); got != c.wantMux {
			t.Errorf("ServeMux: %s %s = %q, want %q", c.method, c.target, got, c.wantMux)
		}
	}
}

// TestMuxOperationInline: a limiter inline on one ServeMux route, or on a
// mux mounted under another, names the route of the mux it is given.
func TestMuxOperationInline(t *testing.T) {
	mux := http.NewServeMux()
	op := middleware.MuxOperation(mux)
	var got string
	mux.Handle("GET /v1/reports/{id}", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = op(r) }))
	mux.Handle("example.com/v1/hosted", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = op(r) }))
	inner := http.NewServeMux()
	innerOp := middleware.MuxOperation(inner)
	inner.Handle("GET /items/{id}", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = innerOp(r) }))
	mux.Handle("/api/", http.StripPrefix("/api", inner))
	for _, c := range []struct{ method, target, want string }{
		{"GET", "/v1/reports/7", "GET /v1/reports/{id}"},
		{"PATCH", "http://example.com/v1/hosted", "PATCH example.com/v1/hosted"},
		{"GET", "/api/items/3", "GET /items/{id}"},
	} {
		got = ""
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(c.method, c.target, nil))
		if w.Code != http.StatusOK || got != c.want {
			t.Errorf("%s %s: status %d, operation %q, want 200 and %q", c.method, c.target, w.Code, got, c.want)
		}
	}
}
