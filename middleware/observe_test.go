package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/metrics"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/trustedproxy"
)

// failingLimiter is a store that always fails: the outcome is unknown.
type failingLimiter struct{}

var errStoreDown = errors.New("store down")

func (failingLimiter) Take(context.Context, []limiter.Decision, []limiter.Request) ([]limiter.Decision, error) {
	return nil, errStoreDown
}
func (failingLimiter) Peek(context.Context, []limiter.Decision, []limiter.Request) ([]limiter.Decision, error) {
	return nil, errStoreDown
}
func (failingLimiter) Release(context.Context, []limiter.Request, []limiter.Decision) error {
	return errStoreDown
}
func (failingLimiter) Settle(context.Context, []limiter.Request, []limiter.Decision, []int64) error {
	return errStoreDown
}

// observedStack is a chain Recorder → ClientAddress → RateLimiter with
// metrics on a fresh registry; the handler captures the Record it sees.
type observedStack struct {
	reg     *prometheus.Registry
	m       middleware.Metrics
	handler http.Handler
	seen    *middleware.Record
	logs    bytes.Buffer
}

func newObservedStack(t *testing.T, lim limiter.Limiter, policies ...policy.Policy) *observedStack {
	t.Helper()
	s := &observedStack{reg: prometheus.NewRegistry()}
	m, err := metrics.New(s.reg)
	if err != nil {
		t.Fatal(err)
	}
	s.m = m
	res := proxyResolver(t)
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Policies: policies,
		Operation: middleware.RouteOperation(r), Metrics: m,
		Logger: slog.New(slog.NewJSONHandler(&s.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(middleware.Recorder, middleware.ClientAddress(res, middleware.ClientAddressOptions{Metrics: m}), rl.Handler)
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.seen = middleware.RecordFrom(r.Context())
	})
	s.handler = r
	return s
}

func (s *observedStack) get(peer string, xff ...string) int {
	r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
	r.RemoteAddr = peer
	for _, v := range xff {
		r.Header.Add("X-Forwarded-For", v)
	}
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, r)
	return w.Code
}

// TestRecordReachesTheHandler: the Record a handler reads holds the
// derivation, the operation and every policy's key, decision and store.
func TestRecordReachesTheHandler(t *testing.T) {
	s := newObservedStack(t, memory.New(memory.Options{}), perNetwork("1/s", 3))
	if code := s.get("10.0.0.1:1", "198.51.100.7"); code != 200 {
		t.Fatalf("%d", code)
	}
	rec := s.seen
	if rec == nil {
		t.Fatal("no Record in the handler's context")
	}
	got, _ := json.Marshal(rec)
	for _, want := range []string{`"peer":"10.0.0.1:1"`, `"client":"198.51.100.7"`, `"network":"198.51.100.7/32"`,
		`"reason":"first_untrusted_hop"`, `"operation":"GET /v1/reports/{id}"`, `"limited":true`, `"decision":"PASSED"`,
		`"key":"per-network|network=198.51.100.7/32"`, `"store":"memory"`, `"remaining":2`, `"fail_mode":null`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("record lacks %s:\n%s", want, got)
		}
	}
}

// TestMetrics: decisions by policy and decision, store latency and errors,
// fail-open, and trusted-proxy anomalies are counted; no label value ever
// holds an address, a key or anything the client wrote.
func TestMetrics(t *testing.T) {
	s := newObservedStack(t, memory.New(memory.Options{}), perNetwork("1/m", 2))
	for range 3 {
		s.get("198.51.100.7:1")
	}
	s.get("10.0.0.1:1")                             // trusted peer, no header
	s.get("10.0.0.1:1", "10.0.0.2")                 // every hop trusted
	s.get("10.0.0.1:1", "not-an-address, 10.0.0.2") // malformed: 400
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"PASSED", series(t, s.reg, "ratekey_decisions_total", "decision", "PASSED"), 4},
		{"REJECTED", series(t, s.reg, "ratekey_decisions_total", "decision", "REJECTED"), 1},
		{"no header", series(t, s.reg, "ratekey_trusted_proxy_anomalies_total", "reason", "trusted_peer_without_header"), 1},
		{"all trusted", series(t, s.reg, "ratekey_trusted_proxy_anomalies_total", "reason", "all_hops_trusted"), 1},
		{"malformed", series(t, s.reg, "ratekey_trusted_proxy_anomalies_total", "reason", "malformed_entry"), 1},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v; want %v", tc.name, tc.got, tc.want)
		}
	}
	if n := seriesCount(t, s.reg, "ratekey_store_duration_seconds"); n != 1 {
		t.Errorf("store latency series: %d; want 1 (store=memory, operation=take)", n)
	}

	down := newObservedStack(t, failingLimiter{}, perNetwork("1/m", 2), func() policy.Policy {
		p := perNetwork("1/m", 2)
		p.Name, p.OnStoreError = "open", policy.OnStoreErrorAllow
		return p
	}())
	if code := down.get("198.51.100.7:1"); code != http.StatusServiceUnavailable {
		t.Errorf("store down, one policy fails closed: %d; want 503", code)
	}
	for name, c := range map[string]float64{
		"ratekey_store_errors_total": series(t, down.reg, "ratekey_store_errors_total", "store", "middleware_test"),
		"ratekey_fail_open_total":    series(t, down.reg, "ratekey_fail_open_total", "policy", "open"),
	} {
		if c != 1 {
			t.Errorf("%s = %v; want 1", name, c)
		}
	}

	// No label value may carry client-influenced data.
	for _, reg := range []*prometheus.Registry{s.reg, down.reg} {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if !strings.HasPrefix(f.GetName(), "ratekey_") {
				t.Errorf("metric %s lacks the ratekey_ prefix", f.GetName())
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if strings.ContainsAny(l.GetValue(), ".:|/=") && l.GetName() != "policy" {
						t.Errorf("%s{%s=%q}: a label value looks like an address or key", f.GetName(), l.GetName(), l.GetValue())
					}
				}
			}
		}
	}
}

// series returns the value of the counter family name whose label has
// value (0 when there is none).
func series(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// seriesCount returns how many series family name has.
func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// TestDebugSimulate: a POSTed description gets the same answer as the live
// request it describes, spends nothing, and is admitted on the live peer.
func TestDebugSimulate(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: debugPolicies()})
	tok := s.token("alice", "app-1")
	live := getDebug(t, s, req{path: "?method=GET&path=/v1/reports/7", peer: "10.0.0.1:5555", token: tok,
		headers: http.Header{"X-Forwarded-For": {"6.6.6.6, 192.0.2.10"}}})
	body := `{"peer": "10.0.0.1:5555", "method": "GET", "path": "/v1/reports/7",
	  "headers": {"X-Forwarded-For": ["6.6.6.6, 192.0.2.10"], "Authorization": ["Bearer ` + tok + `"]}}`
	post := func(peer, ctype, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://example.test/debug/ratekey", strings.NewReader(body))
		r.RemoteAddr = peer
		r.Header.Set("Content-Type", ctype)
		w := httptest.NewRecorder()
		s.handler.ServeHTTP(w, r)
		return w
	}
	for range 4 { // spends nothing
		w := post("192.0.2.10:1", "application/json", body)
		if w.Code != 200 {
			t.Fatalf("simulate: %d %s", w.Code, w.Body)
		}
		if strings.Contains(w.Body.String(), tok) || strings.Contains(w.Body.String(), strings.Split(tok, ".")[2]) {
			t.Fatal("the simulated credential is echoed")
		}
		var sim map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &sim); err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(sim)
		b, _ := json.Marshal(live)
		if string(a) != string(b) {
			t.Fatalf("simulated answer differs from the live one:\nsimulated %s\nlive      %s", a, b)
		}
	}
	if w := s.do(req{path: "/v1/reports/7", peer: "10.0.0.1:5555", token: tok, headers: http.Header{"X-Forwarded-For": {"192.0.2.10"}}}); w.Code != 200 {
		t.Errorf("a live request after four simulations: %d (the simulations spent budget?)", w.Code)
	}
	tests := []struct {
		name, peer, ctype, body string
		want                    int
	}{
		{"outsider simulating an admin peer", "203.0.113.9:1", "application/json", `{"peer": "192.0.2.10:1", "path": "/v1/reports/1"}`, 404},
		{"form post", "192.0.2.10:1", "application/x-www-form-urlencoded", "peer=1", 415},
		{"unknown field", "192.0.2.10:1", "application/json", `{"peer": "192.0.2.1:1", "path": "/", "body": "x"}`, 400},
		{"no peer", "192.0.2.10:1", "application/json", `{"path": "/v1/reports/1"}`, 400},
		{"relative path", "192.0.2.10:1", "application/json", `{"peer": "192.0.2.1:1", "path": "v1/reports/1"}`, 400},
		{"absolute URI, not a path", "192.0.2.10:1", "application/json", `{"peer": "192.0.2.1:1", "path": "http://x/v1/reports/1"}`, 400},
		{"bad method", "192.0.2.10:1", "application/json", `{"peer": "192.0.2.1:1", "method": "GE T", "path": "/"}`, 400},
		{"header with a newline", "192.0.2.10:1", "application/json", `{"peer": "192.0.2.1:1", "path": "/", "headers": {"X": ["a\nb"]}}`, 400},
		{"two objects", "192.0.2.10:1", "application/json", `{"peer": "192.0.2.1:1", "path": "/"} {}`, 400},
		{"oversized", "192.0.2.10:1", "application/json", `{"peer": "192.0.2.1:1", "path": "/", "headers": {"X": ["` + strings.Repeat("a", 70<<10) + `"]}}`, 400},
		// A header named twice has no order the simulation could replay
		// (JSON objects are unordered; net/http keeps the wire order), and
		// an exact repeat would silently drop a line (two Authorization
		// lines are a 400 live).
		{"header named twice, two cases", "192.0.2.10:1", "application/json",
			`{"peer": "10.0.0.1:1", "path": "/v1/reports/1", "headers": {"x-forwarded-for": ["6.6.6.6"], "X-Forwarded-For": ["192.0.2.77"]}}`, 400},
		{"header named twice, exactly", "192.0.2.10:1", "application/json",
			`{"peer": "10.0.0.1:1", "path": "/v1/reports/1", "headers": {"Authorization": ["Bearer a"], "Authorization": ["Bearer b"]}}`, 400},
		{"headers not an object", "192.0.2.10:1", "application/json", `{"peer": "10.0.0.1:1", "path": "/", "headers": ["X"]}`, 400},
		{"headers given twice", "192.0.2.10:1", "application/json",
			`{"peer": "10.0.0.1:1", "path": "/v1/reports/1", "headers": {"X-Forwarded-For": ["192.0.2.10"]}, "headers": {"x-forwarded-for": ["6.6.6.6"]}}`, 400},
		{"headers given twice, first empty", "192.0.2.10:1", "application/json",
			`{"peer": "10.0.0.1:1", "path": "/v1/reports/1", "headers": {}, "headers": {"X-Forwarded-For": ["6.6.6.6"]}}`, 400},
		{"headers null", "192.0.2.10:1", "application/json", `{"peer": "10.0.0.1:1", "path": "/", "headers": null}`, 200},
		// Any member given twice: which one would be simulated?
		{"peer given twice", "192.0.2.10:1", "application/json", `{"peer": "192.0.2.10:1", "path": "/v1/reports/1", "peer": "10.0.0.1:1"}`, 400},
		{"path given twice", "192.0.2.10:1", "application/json", `{"peer": "10.0.0.1:1", "path": "/v1/reports/1", "p\u0061th": "/v1/export"}`, 400},
	}
	for _, tt := range tests {
		if w := post(tt.peer, tt.ctype, tt.body); w.Code != tt.want {
			t.Errorf("%s: %d; want %d (%s)", tt.name, w.Code, tt.want, w.Body)
		}
	}
	// Lines of one header in one list keep their order: the live answer.
	live = getDebug(t, s, req{path: "?method=GET&path=/v1/reports/1", peer: "10.0.0.1:1", headers: http.Header{"X-Forwarded-For": {"6.6.6.6", "192.0.2.77"}}})
	w := post("192.0.2.10:1", "application/json", `{"peer": "10.0.0.1:1", "path": "/v1/reports/1", "headers": {"x-forwarded-for": ["6.6.6.6", "192.0.2.77"]}}`)
	var sim map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &sim); err != nil || sim["client"] != "192.0.2.77" || live["client"] != "192.0.2.77" {
		t.Errorf("two lines in one list: simulated client %v (%v), live %v; want 192.0.2.77", sim["client"], err, live["client"])
	}
}

// TestDebugHTML: Accept: text/html gets the same data as a page with a
// table per stage, escaped, with no script allowed to run.
func TestDebugHTML(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: debugPolicies()})
	w := s.do(req{path: "/debug/ratekey?method=GET&path=/v1/reports/7", peer: "10.0.0.1:5555",
		headers: http.Header{"Accept": {"text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"}, "X-Forwarded-For": {"<script>alert(1)</script>, 192.0.2.10"}}})
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("%d %q", w.Code, w.Header().Get("Content-Type"))
	}
	page := w.Body.String()
	for _, want := range []string{"<h2>1. Client address</h2>", "<h2>2. Credential</h2>", "<h2>3. Operation</h2>", "<h2>4. Policies</h2>",
		"<code>192.0.2.10</code>", "GET /v1/reports/{id}", "per-network|network=192.0.2.10/32",
		`name="method" value="GET"`, `name="path" value="/v1/reports/7"`} { // the form starts from the described request
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") {
		t.Error("a header value reached the page unescaped")
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	// q=0 refuses HTML; */* gets JSON.
	for _, accept := range []string{"text/html;q=0, application/json", "*/*"} {
		w := s.do(req{path: "/debug/ratekey", peer: "192.0.2.10:1", headers: http.Header{"Accept": {accept}}})
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Accept %q: %q; want JSON", accept, ct)
		}
	}
}

// TestLogFieldsMatchDebugNames: the rate limiter's log lines use the debug
// JSON's field names.
func TestLogFieldsMatchDebugNames(t *testing.T) {
	s := newObservedStack(t, memory.New(memory.Options{}), perNetwork("1/m", 1))
	s.get("198.51.100.7:1")
	s.get("198.51.100.7:1")
	line := s.logs.String()
	for _, want := range []string{`"policy":"per-network"`, `"decision":"REJECTED"`, `"key":"per-network|network=198.51.100.7/32"`,
		`"remaining":0`, `"store":"memory"`, `"retry_after_seconds":60`, `"client":"198.51.100.7"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log lacks %s:\n%s", want, line)
		}
	}
}

// stubAuth fails every credential with err, or finds none.
type stubAuth struct{ err error }

func (a stubAuth) Authenticate(*http.Request) (limitkey.Principal, error) {
	return limitkey.Principal{}, a.err
}

// TestAuthFailureMetricsAndRecord: refused credentials are counted by a
// fixed reason and recorded in the request's Record.
func TestAuthFailureMetricsAndRecord(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		err    error
		reason string
		status int
	}{
		{&identity.AuthError{Code: "invalid_token", Description: "bad signature"}, "invalid_token", 401},
		{&identity.AuthError{Code: "invalid_request", Description: "two credentials"}, "invalid_request", 400},
		{identity.ErrNoCredential, "missing", 401},
		{identity.ErrUnsupportedScheme, "unsupported_scheme", 401},
		{identity.ErrKeySourceUnavailable, "unavailable", 503},
	}
	for _, tc := range tests {
		h := middleware.Authenticate(stubAuth{tc.err}, middleware.AuthOptions{Metrics: m})(http.NotFoundHandler())
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		ctx, rec := middleware.WithRecord(r.Context())
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(ctx))
		if w.Code != tc.status {
			t.Errorf("%s: %d; want %d", tc.reason, w.Code, tc.status)
		}
		if got := series(t, reg, "ratekey_authentication_failures_total", "reason", tc.reason); got != 1 {
			t.Errorf("%s counted %v times; want 1", tc.reason, got)
		}
		if rec.Authentication.Status != tc.status || rec.Principal != nil {
			t.Errorf("%s: record %+v", tc.reason, rec.Authentication)
		}
	}
}

// countingAuth counts verifications and refuses every credential.
type countingAuth struct{ n *int }

func (a countingAuth) Authenticate(*http.Request) (limitkey.Principal, error) {
	*a.n++
	return limitkey.Principal{}, &identity.AuthError{Code: "invalid_token", Description: "bad signature"}
}

// TestPreAuthLimitsBadTokenFloods: a pre-auth network policy runs before
// the authenticator, so a flood of bad tokens is cut off without further
// verification; its fields and decision combine with the main policies'.
func TestPreAuthLimitsBadTokenFloods(t *testing.T) {
	pre := perNetwork("1/m", 3)
	pre.Name, pre.PreAuth = "pre-network", true
	main := perNetwork("1/m", 2)
	res, err := trustedproxy.New(trustedproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
		Policies: []policy.Policy{pre, main}, Operation: middleware.RouteOperation(r), DecisionHeader: true})
	if err != nil {
		t.Fatal(err)
	}
	verified := 0
	r.Use(middleware.ClientAddress(res, middleware.ClientAddressOptions{}), rl.PreAuthHandler, middleware.Authenticate(countingAuth{&verified}, middleware.AuthOptions{}), rl.Handler)
	r.Get("/x", func(http.ResponseWriter, *http.Request) {})
	codes := []int{}
	for range 6 {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.RemoteAddr = "198.51.100.7:1"
		req.Header.Set("Authorization", "Bearer not.a.token")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		codes = append(codes, w.Code)
	}
	if want := []int{401, 401, 401, 429, 429, 429}; !slices.Equal(codes, want) {
		t.Errorf("codes %v; want %v", codes, want)
	}
	if verified != 3 {
		t.Errorf("%d verifications; want 3 (the flood is cut before the authenticator)", verified)
	}
	bad := pre
	bad.Key = []limitkey.Dimension{limitkey.DimAccount}
	if _, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
		Policies: []policy.Policy{bad}, Operation: middleware.RouteOperation(r)}); err == nil || !strings.Contains(err.Error(), "pre_auth") {
		t.Errorf("a pre-auth account policy was accepted: %v", err)
	}

	// A good request passes both phases: one field line, one list (a
	// client reading only the first line, Header.Get, sees both).
	r2 := chi.NewRouter()
	rl2, _ := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
		Policies: []policy.Policy{pre, main}, Operation: middleware.RouteOperation(r2), DecisionHeader: true})
	r2.Use(middleware.ClientAddress(res, middleware.ClientAddressOptions{}), rl2.PreAuthHandler, rl2.Handler)
	r2.Get("/x", func(http.ResponseWriter, *http.Request) {})
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.RemoteAddr = "198.51.100.7:1"
	w := httptest.NewRecorder()
	r2.ServeHTTP(w, req)
	if n := len(w.Header().Values("RateLimit")); n != 1 {
		t.Errorf("RateLimit in %d lines; want 1", n)
	}
	got := parseList(t, "RateLimit", []string{w.Header().Get("RateLimit")})
	if len(got) != 2 || got[0].name != "pre-network" || got[1].name != "per-network" || w.Header().Get("RateLimit-Decision") != "PASSED" {
		t.Errorf("RateLimit %v, decision %q", got, w.Header().Get("RateLimit-Decision"))
	}
}

// TestEndedRequestIsNotAStoreFailure: a request whose context ended (the
// client went away) before the limiter answered is not a store failure.
// An on_store_error: allow policy must not let it through (its handler
// would run past the limit: a client that half-closes its connection
// reads the answer), and no store error or fail-open is counted or logged
// at Warn. It gets the abandoned problem (503), like a request that ends
// during its delay.
func TestEndedRequestIsNotAStoreFailure(t *testing.T) {
	open := perNetwork("1/m", 1)
	open.OnStoreError = policy.OnStoreErrorAllow
	s := newObservedStack(t, memory.New(memory.Options{}), open)
	served := 0
	base := s.handler
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base.ServeHTTP(w, r)
		if s.seen != nil {
			served++
			s.seen = nil
		}
	})
	var codes []int
	var last *httptest.ResponseRecorder
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the client went away
		r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil).WithContext(ctx)
		r.RemoteAddr = "198.51.100.7:1"
		last = httptest.NewRecorder()
		s.handler.ServeHTTP(last, r)
		codes = append(codes, last.Code)
	}
	if want := []int{503, 503, 503}; !slices.Equal(codes, want) || served != 0 {
		t.Errorf("ended requests: statuses %v, handler ran %d times; want %v and 0", codes, served, want)
	}
	if ct := last.Header().Get("Content-Type"); ct != "application/problem+json" || !strings.Contains(last.Body.String(), "urn:ratekey:problem:delay-abandoned") {
		t.Errorf("body %s (%s); want the %s problem", last.Body, ct, "urn:ratekey:problem:delay-abandoned")
	}
	for _, name := range []string{"ratekey_store_errors_total", "ratekey_fail_open_total"} {
		if n := seriesCount(t, s.reg, name); n != 0 {
			t.Errorf("%s has %d series; want none (no store failed)", name, n)
		}
	}
	if strings.Contains(s.logs.String(), `"level":"WARN"`) || !strings.Contains(s.logs.String(), `"outcome":"client_timeout"`) {
		t.Errorf("log: %s; want Info lines with outcome client_timeout, no Warn", s.logs.String())
	}
	// The budget was not spent: the client's next live request passes.
	if code := s.get("198.51.100.7:1"); code != http.StatusOK || served != 1 {
		t.Errorf("the next live request: %d, handler ran %d times; want 200 and 1", code, served)
	}
}

// TestRecordAddsThePhasesDelays: PreAuthHandler and Handler each wait out
// their own delay, one after the other (here 2 s, then 3 s, with the store
// on a clock that stands still), so the Record's delay_seconds is their
// sum, what the request waited (in a testing/synctest bubble: at once).
func TestRecordAddsThePhasesDelays(t *testing.T) {
	synctest.Test(t, testRecordAddsThePhasesDelays)
}

func testRecordAddsThePhasesDelays(t *testing.T) {
	r := chi.NewRouter()
	pre := policy.Policy{Name: "pre", Key: []limitkey.Dimension{limitkey.DimOperation}, Limit: limit("1/s", 3), Cost: 3, PreAuth: true}
	pre.Limit.DelayAfter = 1
	main := policy.Policy{Name: "main", Key: []limitkey.Dimension{limitkey.DimOperation}, Limit: limit("1/s", 4), Cost: 4}
	main.Limit.DelayAfter = 1
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter: memory.New(memory.Options{Now: clocktest.NewManualClock().Time}), Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{pre, main},
	})
	if err != nil {
		t.Fatal(err)
	}
	var rec *middleware.Record
	r.Use(middleware.Recorder, rl.PreAuthHandler, rl.Handler)
	r.Get("/a", func(_ http.ResponseWriter, r *http.Request) { rec = middleware.RecordFrom(r.Context()) })
	start := time.Now()
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/a", nil))
	if waited := time.Since(start); waited != 5*time.Second || rec == nil || rec.DelaySeconds == nil || *rec.DelaySeconds != 5 {
		t.Errorf("waited %v, record %+v; want 5s and delay_seconds 5", waited, rec)
	}
}
