package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/middleware"
)

// TestServesOperation pins which operations a router serves (issue 26: a
// policy restricted to an operation no route serves never applies). Each
// served row names a request that the router's namer (RouteOperation,
// MuxOperation) names op, so the answer is checked against the namer.
func TestServesOperation(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	chiRouter := func() http.Handler {
		r := chi.NewRouter()
		r.Get("/healthz", ok)
		r.Get("/r/{id:[0-9]+}", ok)
		r.Handle("/any", ok)
		r.Route("/v1", func(v chi.Router) {
			v.Get("/reports/{id}", ok)
			v.Post("/export", ok)
			v.Route("/admin", func(a chi.Router) { a.Get("/", ok) })
		})
		r.Mount("/files", http.FileServer(http.Dir(".")))
		r.Get("/trail/", ok)
		return r
	}
	muxRouter := func() http.Handler {
		m := http.NewServeMux()
		m.HandleFunc("GET /v1/reports/{id}", ok)
		m.HandleFunc("POST /v1/export", ok)
		m.HandleFunc("/static/", ok)
		m.HandleFunc("GET example.com/h", ok)
		m.HandleFunc("GET /v1/{$}", ok)
		m.HandleFunc("GET /tree/", ok)
		m.HandleFunc("GET /files/{rest...}", ok)
		m.HandleFunc("GET /a%20b", ok)
		m.HandleFunc("FOO /custom", ok)
		return m
	}
	tests := []struct {
		router, op string
		want       bool
		witness    string // a request ("METHOD host/path") the namer names op
	}{
		{"chi", "UNMATCHED", true, ""},
		{"chi", "GET /healthz", true, "GET /healthz"},
		{"chi", "GET /v1/reports/{id}", true, "GET /v1/reports/7"},
		{"chi", "POST /v1/export", true, "POST /v1/export"},
		{"chi", "GET /r/{id:[0-9]+}", true, "GET /r/12"},
		{"chi", "DELETE /any", true, "DELETE /any"},
		{"chi", "GET /v1/admin/", true, "GET /v1/admin"},
		{"chi", "GET /files/*", true, "GET /files/a.txt"},
		{"chi", "GET /trail/", true, "GET /trail/"},
		{"chi", "GET /nope", false, ""},
		{"chi", "GET /v1/reports/{ID}", false, ""},
		{"chi", "GET /r/{id}", false, ""},
		{"chi", "POST /v1/reports/{id}", false, ""},
		{"chi", "get /healthz", false, ""},
		{"chi", "GET /reports/{id}", false, ""}, // relative to the mount
		{"chi", "GET /v1", false, ""},
		{"chi", "GET /trail", false, ""},
		{"chi", "/healthz", false, ""},
		{"chi", "GET  /healthz", false, ""},
		{"chi", "", false, ""},
		{"mux", "UNMATCHED", true, ""},
		{"mux", "GET /v1/reports/{id}", true, "GET /v1/reports/7"},
		{"mux", "POST /v1/export", true, "POST /v1/export"},
		{"mux", "POST /static/", true, "POST /static/x.css"},
		{"mux", "GET /static/", true, "GET /static/"},
		{"mux", "GET example.com/h", true, "GET example.com/h"},
		{"mux", "GET /v1/{$}", true, "GET /v1/"},
		{"mux", "GET /tree/", true, "GET /tree/a"},
		{"mux", "GET /files/{rest...}", true, "GET /files/a/b"},
		{"mux", "GET /a%20b", true, "GET /a%20b"},
		{"mux", "FOO /custom", true, "FOO /custom"},
		{"mux", "GET /nope", false, ""},
		{"mux", "HEAD /v1/reports/{id}", false, ""}, // named "GET /v1/reports/{id}"
		{"mux", "GET /v1/reports/{name}", false, ""},
		{"mux", "DELETE /v1/export", false, ""},
		{"mux", "GET /tree", false, ""}, // redirected to /tree/
		{"mux", "GET /v1/", false, ""},
		{"mux", "X1 /static/", false, ""}, // not a standard method: UNMATCHED
		{"mux", "GET other.example/h", false, ""},
		{"mux", "GET /h", false, ""},
		{"mux", "/static/", false, ""},
		{"mux", "GET  /v1/export", false, ""},
		{"mux", "GET /a%2", false, ""},
	}
	routers := map[string]http.Handler{"chi": chiRouter(), "mux": muxRouter()}
	for _, tt := range tests {
		router := routers[tt.router]
		if got := middleware.ServesOperation(router, tt.op); got != tt.want {
			t.Errorf("%s: ServesOperation(%q) = %v, want %v", tt.router, tt.op, got, tt.want)
		}
		if tt.witness == "" {
			continue
		}
		var name func(*http.Request) string
		if tt.router == "chi" {
			name = middleware.RouteOperation(router.(chi.Routes))
		} else {
			name = middleware.MuxOperation(router.(*http.ServeMux))
		}
		method, target, _ := cut(tt.witness)
		r := httptest.NewRequest(method, "http://"+target, nil)
		if got := name(r); got != tt.op {
			t.Errorf("%s: %s is named %q, the row says %q", tt.router, tt.witness, got, tt.op)
		}
	}
	if middleware.ServesOperation(ok, "GET /healthz") || middleware.ServesOperation(nil, "GET /healthz") {
		t.Error("a handler that is no router serves an operation")
	}
}

// cut splits a witness "GET /path" into its method and a target with a
// host ("example.org/path" when the path is "/path").
func cut(w string) (method, target string, ok bool) {
	method, target, ok = strings.Cut(w, " ")
	if strings.HasPrefix(target, "/") {
		target = "example.org" + target
	}
	return method, target, ok
}
