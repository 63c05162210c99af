package ratekey_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/internal/logtest"
	"github.com/ratekey/ratekey/limitkey"
)

// TestOperationsNoRouteServes (issue 26): a policy restricted to an
// operation that no route serves would silently apply to nothing.
// ratekey.New refuses an operation that the router can never name (no
// method, two spaces, lower case for chi, ...). Whether a route serves a
// well-formed one is known only once the routes are registered, which with
// chi is after New (r.Use must come first): the first request checks the
// operations against the tree it is routed through (chi) or the mux, and
// logs an error per operation no route serves, naming the field as New
// would; the request is served as before. A program that registers its
// routes before or after New is never refused for it.
func TestOperationsNoRouteServes(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	const (
		hint   = ` (an operation is a route's method and full template as registered, e.g. "GET /v1/reports/{id}", a gRPC full method name, e.g. "/pkg.Service/Method", or UNMATCHED)`
		unserv = `: the policy never applies to it`
	)
	notServed := func(i, j int, op string) string {
		return `ERROR ratekey operation served by no route policy=p operation=` + op +
			` error=policies[` + string(rune('0'+i)) + `] ("p").operations[` + string(rune('0'+j)) + `]: "` + op + `" is served by no route of the router` + unserv + hint
	}
	malformed := func(j int, op, why string) string {
		return `policies[0] ("p").operations[` + string(rune('0'+j)) + `]: ` + strconv.QuoteToASCII(op) + ` is not an operation: ` + why + hint
	}
	tests := []struct {
		name string
		// build registers the routes and mounts m, returning the handler
		// to serve; it is called after New (the README's order) unless
		// before is set.
		build  func(router http.Handler, m func(http.Handler) http.Handler) http.Handler
		mux    bool // Config.Router is an *http.ServeMux (else a chi router)
		before bool // routes registered before New
		sub    bool // Config.Router is the /v1 sub-router
		ops    []string
		newErr string   // New's error, "" for none
		logs   []string // logged at the first request
	}{
		{name: "chi, served", ops: []string{"GET /v1/reports/{id}", "POST /v1/export", "UNMATCHED"}},
		{name: "chi, no route", ops: []string{"GET /nope", "GET /v1/reports/{id}", "POST /v1/reports/{id}"},
			logs: []string{notServed(0, 0, "GET /nope"), notServed(0, 2, "POST /v1/reports/{id}")}},
		{name: "chi, a mounted router's and a handler's routes", ops: []string{"GET /api/x", "GET /files/*", "GET /api/y"},
			logs: []string{notServed(0, 2, "GET /api/y")}},
		{name: "chi, middleware on a sub-router: full templates", sub: true, ops: []string{"GET /v1/reports/{id}", "GET /reports/{id}"},
			logs: []string{notServed(0, 1, "GET /reports/{id}")}},
		{name: "chi, routes before New, inline with r.With", before: true, ops: []string{"GET /v1/reports/{id}", "GET /v1/gone"},
			logs: []string{notServed(0, 1, "GET /v1/gone")}},
		{name: "chi, gRPC methods: left to grpclimit", ops: []string{"/pkg.Service/Method", "GET /v1/reports/{id}", "/grpc.health.v1.Health/Check"}},
		{name: "mux, gRPC methods: left to grpclimit", mux: true, ops: []string{"/pkg.Service/Method"}},
		{name: "chi, a gRPC method with three segments", ops: []string{"/pkg.Service/Method/x"},
			newErr: malformed(0, "/pkg.Service/Method/x", "write the method, a space and the route's template")},
		{name: "chi, no method", ops: []string{"/v1/reports/{id}"},
			newErr: malformed(0, "/v1/reports/{id}", "write the method, a space and the route's template")},
		{name: "chi, lower-case method", ops: []string{"GET /v1/reports/{id}", "get /v1/reports/{id}"},
			newErr: malformed(1, "get /v1/reports/{id}", "chi names methods in upper case")},
		{name: "chi, two spaces", ops: []string{"GET  /v1/export"},
			newErr: malformed(0, "GET  /v1/export", "a chi route's template starts with /")},
		{name: "mux, served", mux: true, ops: []string{"GET /v1/reports/{id}", "POST /static/", "UNMATCHED"}},
		{name: "mux, routes before New", mux: true, before: true, ops: []string{"GET /v1/reports/{id}", "HEAD /v1/reports/{id}", "GET /v1/reports"},
			logs: []string{notServed(0, 1, "HEAD /v1/reports/{id}"), notServed(0, 2, "GET /v1/reports")}},
		{name: "mux, no route", mux: true, ops: []string{"GET /nope"}, logs: []string{notServed(0, 0, "GET /nope")}},
		{name: "mux, no method", mux: true, ops: []string{"/static/"},
			newErr: malformed(0, "/static/", "write the method, a space and the route's pattern")},
		{name: "mux, tab", mux: true, ops: []string{"GET\t/static/"},
			newErr: malformed(0, "GET\t/static/", "write the method, a space and the route's pattern")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				router  http.Handler
				serve   http.Handler
				install func(m func(http.Handler) http.Handler)
			)
			if tt.mux {
				mux := http.NewServeMux()
				router, serve = mux, nil
				routes := func() {
					mux.HandleFunc("GET /v1/reports/{id}", ok)
					mux.HandleFunc("POST /v1/export", ok)
					mux.HandleFunc("/static/", ok)
				}
				if tt.before {
					routes()
				}
				install = func(m func(http.Handler) http.Handler) {
					if !tt.before {
						routes()
					}
					serve = m(mux)
				}
			} else {
				r := chi.NewRouter()
				router, serve = r, r
				switch {
				case tt.sub:
					var sub chi.Router
					r.Route("/v1", func(v chi.Router) { sub = v })
					router = sub
					install = func(m func(http.Handler) http.Handler) {
						sub.Use(m)
						sub.Get("/reports/{id}", ok)
					}
				case tt.before:
					r.Get("/healthz", ok)
					install = func(m func(http.Handler) http.Handler) {
						r.With(m).Get("/v1/reports/{id}", ok)
					}
				default:
					install = func(m func(http.Handler) http.Handler) {
						r.Use(m)
						r.Get("/v1/reports/{id}", ok)
						r.Post("/v1/export", ok)
						api := chi.NewRouter()
						api.Get("/x", ok)
						r.Mount("/api", api)
						r.Mount("/files", ok)
					}
				}
			}
			logs := &logtest.Lines{}
			m, err := ratekey.New(ratekey.Config{
				Router: router, Logger: slog.New(logs),
				Policies: []ratekey.Policy{{Name: "p", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: perMinute(100, 100), Operations: tt.ops}},
			})
			if tt.newErr != "" {
				if err == nil || err.Error() != tt.newErr {
					t.Fatalf("New: error\n%v\nwant\n%s", err, tt.newErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			install(m.Handler)
			if got := logs.Get(); len(got) > 0 {
				t.Errorf("logged before any request: %q", got)
			}
			for range 3 {
				w := httptest.NewRecorder()
				serve.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil))
				if w.Code != http.StatusOK {
					t.Fatalf("GET /v1/reports/1: %d", w.Code)
				}
			}
			if got := logs.Get(); !slices.Equal(got, tt.logs) {
				t.Errorf("logged\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.logs, "\n"))
			}
		})
	}
}

// TestPolicies: Policies returns the policies as the chain applies them
// (defaults filled in), a copy.
func TestPolicies(t *testing.T) {
	m, err := ratekey.New(ratekey.Config{Router: chi.NewRouter(), Policies: []ratekey.Policy{
		{Name: "a", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: perMinute(60, 2), Operations: []string{"/pkg.S/M", "POST /v1/export"}},
		{Name: "b", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: perMinute(60, 2)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ps := m.Policies()
	if len(ps) != 2 || ps[0].Name != "a" || !slices.Equal(ps[0].Operations, []string{"/pkg.S/M", "POST /v1/export"}) || ps[1].Name != "b" || ps[1].Operations != nil {
		t.Fatalf("Policies() = %+v", ps)
	}
	ps[0].Operations[0] = "changed"
	if got := m.Policies()[0].Operations[0]; got != "/pkg.S/M" {
		t.Errorf("Policies() shares its slices: operations[0] became %q", got)
	}
}
