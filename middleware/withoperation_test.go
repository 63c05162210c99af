package middleware_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// TestWithOperation: a request whose context WithOperation fixed is
// limited, recorded and explained under that operation, not the route its
// method and path would name (a gRPC call is a POST to its full method
// name, which no chi route serves: UNMATCHED otherwise); a policy of that
// operation applies to it alone, and Explain keeps it.
func TestWithOperation(t *testing.T) {
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter:   memory.New(memory.Options{}),
		Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{{
			Name: "per-method", Key: []limitkey.Dimension{limitkey.DimNetwork, limitkey.DimOperation},
			Limit: limit("1/h", 1), Operations: []string{"/pkg.Service/Method"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	res := proxyResolver(t)
	call := func(op string) (int, *middleware.Record) {
		req := httptest.NewRequest(http.MethodPost, "/pkg.Service/Method", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		var rec *middleware.Record
		if op != "" {
			req = req.WithContext(middleware.WithOperation(req.Context(), op))
		}
		w := httptest.NewRecorder()
		middleware.Recorder(middleware.ClientAddress(res, middleware.ClientAddressOptions{})(rl.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec = middleware.RecordFrom(r.Context())
			w.WriteHeader(http.StatusNoContent)
		})))).ServeHTTP(w, req)
		return w.Code, rec
	}
	for _, tc := range []struct {
		op       string
		wantCode int
		wantOp   string
		wantPols int
	}{
		{"/pkg.Service/Method", http.StatusNoContent, "/pkg.Service/Method", 1},
		{"/pkg.Service/Method", http.StatusTooManyRequests, "", 0},
		{"/pkg.Service/Other", http.StatusNoContent, "/pkg.Service/Other", 0},
		{"", http.StatusNoContent, middleware.UnmatchedOperation, 0},
	} {
		code, rec := call(tc.op)
		if code != tc.wantCode {
			t.Errorf("WithOperation(%q): status %d, want %d", tc.op, code, tc.wantCode)
		}
		if rec == nil {
			continue
		}
		if rec.Operation != tc.wantOp || len(rec.Policies) != tc.wantPols {
			t.Errorf("WithOperation(%q): record operation %q with %d policies, want %q with %d", tc.op, rec.Operation, len(rec.Policies), tc.wantOp, tc.wantPols)
		}
	}
	// Explain, as the debug endpoint: the fixed operation, and the bucket
	// the calls above emptied.
	dc := middleware.DebugConfig{Resolver: res, RateLimiter: rl}
	req := httptest.NewRequest(http.MethodPost, "/pkg.Service/Method", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	rec := dc.Explain(req.WithContext(middleware.WithOperation(req.Context(), "/pkg.Service/Method")))
	if rec.Operation != "/pkg.Service/Method" || len(rec.Policies) != 1 || rec.Policies[0].Decision != decide.DecisionRejected {
		t.Errorf("Explain: operation %q, policies %+v; want /pkg.Service/Method, one REJECTED", rec.Operation, rec.Policies)
	}
	// WithOperation on a context holding a Record fixes it in place.
	ctx, want := middleware.WithRecord(req.Context())
	ctx2 := middleware.WithOperation(ctx, "/pkg.Service/Other")
	if middleware.RecordFrom(ctx2) != want || ctx2 != ctx {
		t.Errorf("WithOperation on a WithRecord context made a new request state")
	}
}

// TestDebugGRPC: GET ?grpc=/pkg.Service/Method answers with the Record
// DebugConfig.GRPC gives for that method and the live request (its peer
// and headers), for admins only; a name that is not one gRPC full method
// name, or an endpoint without GRPC, gets 400.
func TestDebugGRPC(t *testing.T) {
	res := proxyResolver(t)
	describe := func(r *http.Request, method string) *middleware.Record {
		return &middleware.Record{Peer: r.RemoteAddr, Operation: method + " for " + r.Header.Get("X-Test"), Policies: []decide.PolicyResult{}}
	}
	for _, tc := range []struct {
		name, peer, query string
		grpc              bool
		want              int
		op                string
	}{
		{"described", "192.0.2.1:1234", "?grpc=/pkg.Service/Method", true, http.StatusOK, "/pkg.Service/Method for t"},
		{"not an admin", "198.51.100.1:1234", "?grpc=/pkg.Service/Method", true, http.StatusNotFound, ""},
		{"no GRPC", "192.0.2.1:1234", "?grpc=/pkg.Service/Method", false, http.StatusBadRequest, ""},
		{"an HTTP route", "192.0.2.1:1234", "?grpc=GET%20/v1/x", true, http.StatusBadRequest, ""},
		{"twice", "192.0.2.1:1234", "?grpc=/a.B/C&grpc=/a.B/D", true, http.StatusBadRequest, ""},
		{"empty", "192.0.2.1:1234", "?grpc=", true, http.StatusBadRequest, ""},
	} {
		cfg := middleware.DebugConfig{Resolver: res, Allow: []string{"192.0.2.0/24"}}
		if tc.grpc {
			cfg.GRPC = describe
		}
		r := httptest.NewRequest(http.MethodGet, "/debug"+tc.query, nil)
		r.RemoteAddr = tc.peer
		r.Header.Set("X-Test", "t")
		w := httptest.NewRecorder()
		mustDebug(t, cfg).ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: status %d, want %d: %s", tc.name, w.Code, tc.want, w.Body)
			continue
		}
		if tc.op == "" {
			continue
		}
		var rec struct {
			Peer, Operation string
		}
		if err := json.Unmarshal(w.Body.Bytes(), &rec); err != nil || rec.Operation != tc.op || rec.Peer != tc.peer {
			t.Errorf("%s: %+v (%v), want operation %q", tc.name, rec, err, tc.op)
		}
	}
}
