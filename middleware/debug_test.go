package middleware_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

func debugPolicies() []policy.Policy {
	return []policy.Policy{
		perNetwork("1/s", 3),
		{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount, limitkey.DimOperation},
			Limit: limit("1/s", 2), OnMissing: policy.OnMissingSkip},
	}
}

func getDebug(t *testing.T, s *stack, q req) map[string]any {
	t.Helper()
	q.path = "/debug/ratekey" + q.path
	w := s.do(q)
	if w.Code != 200 {
		t.Fatalf("debug: %d %s", w.Code, w.Body)
	}
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Error("debug output may be cached")
	}
	var v map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDebugOnlyForAdmins(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: debugPolicies()})
	tests := []struct {
		name    string
		peer    string
		headers http.Header
		want    int
	}{
		{"admin direct", "192.0.2.10:1", nil, 200},
		{"outsider direct", "203.0.113.9:1", nil, 404},
		{"outsider forging an admin XFF", "203.0.113.9:1", http.Header{"X-Forwarded-For": {"192.0.2.10"}}, 404},
		{"admin behind a trusted proxy", "10.0.0.1:1", http.Header{"X-Forwarded-For": {"192.0.2.10"}}, 200},
		{"outsider behind a trusted proxy", "10.0.0.1:1", http.Header{"X-Forwarded-For": {"192.0.2.10, 203.0.113.9"}}, 404},
		{"the proxy itself", "10.0.0.1:1", nil, 404},
	}
	for _, tt := range tests {
		if w := s.do(req{path: "/debug/ratekey", peer: tt.peer, headers: tt.headers}); w.Code != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, w.Code, tt.want)
		}
	}
}

func TestDebugExplainsWithoutSpending(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: debugPolicies()})
	tok := s.token("alice", "app-1")
	q := req{path: "?method=GET&path=/v1/reports/7", peer: "10.0.0.1:5555", token: tok,
		headers: http.Header{"X-Forwarded-For": {"6.6.6.6, 192.0.2.10"}}}
	var first map[string]any
	for range 5 { // five looks spend nothing
		first = getDebug(t, s, q)
	}
	want := map[string]any{
		"peer":      "10.0.0.1:5555",
		"client":    "192.0.2.10",
		"network":   "192.0.2.10/32",
		"operation": "GET /v1/reports/{id}",
	}
	for k, v := range want {
		if first[k] != v {
			t.Errorf("%s = %v, want %v", k, first[k], v)
		}
	}
	der := first["derivation"].(map[string]any)
	if der["header"] != "X-Forwarded-For" || der["reason"] != "first_untrusted_hop" {
		t.Errorf("derivation = %v", der)
	}
	hops := der["hops"].([]any)
	if len(hops) != 1 || hops[0].(map[string]any)["verdict"] != "client" || hops[0].(map[string]any)["address"] != "192.0.2.10" {
		t.Errorf("hops = %v (the forged 6.6.6.6 left of the client is never examined)", hops)
	}
	pr := first["principal"].(map[string]any)
	if pr["issuer"] != testIssuer || pr["tenant"] != "acme" || pr["account"] != "alice" || pr["credential_id"] != "app-1" || pr["method"] != "jwt" {
		t.Errorf("principal = %v", pr)
	}
	pols := first["policies"].([]any)
	if len(pols) != 2 {
		t.Fatalf("policies = %v", pols)
	}
	p0, p1 := pols[0].(map[string]any), pols[1].(map[string]any)
	if p0["name"] != "per-network" || p0["key"] != "per-network|network=192.0.2.10/32" || p0["decision"] != "PASSED" || p0["remaining"] != 2.0 {
		t.Errorf("policy 0 = %v", p0)
	}
	if p1["name"] != "per-account" || p1["key"] != "per-account|tenant=acme|account=alice|operation=GET /v1/reports/{id}" || p1["decision"] != "PASSED" || p1["remaining"] != 1.0 {
		t.Errorf("policy 1 = %v", p1)
	}
	for _, field := range []string{"retry_after_seconds", "skipped_reason"} {
		if v, ok := p0[field]; !ok || v != nil {
			t.Errorf("policy 0 %s = %v, want present and null", field, v)
		}
	}
	// Nothing was spent: a real request still sees the full budgets.
	w := s.do(req{path: "/v1/reports/7", peer: "10.0.0.1:5555", token: tok, headers: q.headers})
	if got := w.Header().Get("RateLimit"); got != `"per-network";r=2;t=1, "per-account";r=1;t=1` {
		t.Errorf("RateLimit after debug looks = %q", got)
	}
	// The debug output never holds the token or any part of its signature.
	dw := s.do(req{path: "/debug/ratekey", peer: "192.0.2.10:1", token: tok})
	body := dw.Body.String()
	// It is the view of a request whose token was verified: the token
	// reached the code that must keep it out.
	if dw.Code != 200 || !strings.Contains(body, `"outcome": "verified"`) || !strings.Contains(body, `"credential_id": "app-1"`) {
		t.Fatalf("debug of the token's request: %d, want 200 with the verified principal:\n%s", dw.Code, body)
	}
	for _, part := range append([]string{tok}, strings.Split(tok, ".")...) {
		if strings.Contains(body, part) {
			t.Errorf("debug output contains a token part")
		}
	}
}

func TestDebugShowsSkippedAndRejected(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: debugPolicies()})
	for range 3 {
		s.do(req{path: "/v1/reports/1", peer: "192.0.2.10:1"})
	}
	v := getDebug(t, s, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1"})
	if v["principal"] != nil {
		t.Errorf("principal = %v, want null for an anonymous request", v["principal"])
	}
	if a := v["authentication"].(map[string]any); a["outcome"] != "anonymous" {
		t.Errorf("authentication = %v", a)
	}
	pols := v["policies"].([]any)
	p0, p1 := pols[0].(map[string]any), pols[1].(map[string]any)
	if p0["decision"] != "REJECTED" || p0["retry_after_seconds"] != 1.0 || p0["remaining"] != 0.0 {
		t.Errorf("per-network = %v", p0)
	}
	if p1["decision"] != "SKIPPED" || p1["key"] != nil || p1["skipped_reason"] != "no verified principal carries a tenant" {
		t.Errorf("per-account = %v", p1)
	}
}

func TestDebugShowsFailedDerivation(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: debugPolicies()})
	// The admin network reaches the service through the trusted 10/8
	// proxy, which forwarded a malformed chain.
	s2 := newStack(t, stackOptions{anonymous: true, policies: debugPolicies(), admins: []string{"10.0.0.0/8"}})
	v := getDebug(t, s, req{peer: "192.0.2.10:1", headers: http.Header{"X-Forwarded-For": {"203.0.113.7, garbage"}}})
	// 192.0.2.10 is not a trusted proxy: its headers are not read at all.
	if v["client"] != "192.0.2.10" {
		t.Fatalf("client = %v", v["client"])
	}
	// Live, such a request is not admitted, although its TCP peer is an
	// admin address: the client chose to make the derivation fail.
	if w := s2.do(req{path: "/debug/ratekey", peer: "10.0.0.1:1", headers: http.Header{"X-Forwarded-For": {"203.0.113.7, garbage, 10.0.0.1"}}}); w.Code != 404 {
		t.Errorf("live failed derivation from the admin proxy: %d, want 404", w.Code)
	}
	// Simulated from an admin address, it is explained.
	r := httptest.NewRequest(http.MethodPost, "http://example.test/debug/ratekey", strings.NewReader(
		`{"peer": "10.0.0.1:1", "path": "/v1/reports/1", "headers": {"X-Forwarded-For": ["203.0.113.7, garbage, 10.0.0.1"]}}`))
	r.RemoteAddr = "10.0.0.9:1" // the admin, direct: keyed as itself
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	s2.handler.ServeHTTP(w, r)
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || w.Code != 200 {
		t.Fatalf("simulation: %d %s", w.Code, w.Body)
	}
	if v["client"] != nil || v["network"] != nil {
		t.Errorf("client = %v network = %v, want null", v["client"], v["network"])
	}
	der := v["derivation"].(map[string]any)
	if der["reason"] != "malformed_entry" || !strings.Contains(der["error"].(string), "garbage") {
		t.Errorf("derivation = %v", der)
	}
	// Live, ClientAddress answers 400: nothing after it runs, so the
	// view shows no credential check and no policy decision.
	if a := v["authentication"].(map[string]any); a["outcome"] != "not_reached" {
		t.Errorf("authentication = %v; want not_reached", a)
	}
	if pols := v["policies"].([]any); len(pols) != 0 || v["decision"] != "" || v["limited"] != false || v["operation"] != "" {
		t.Errorf("policies %v, decision %q, limited %v, operation %q; want none, \"\", false, \"\" (as the live Record)", pols, v["decision"], v["limited"], v["operation"])
	}
	// The same request on a normal route is refused, never keyed by the peer.
	if w := s2.do(req{path: "/v1/reports/1", peer: "10.0.0.1:1", headers: http.Header{"X-Forwarded-For": {"203.0.113.7, garbage, 10.0.0.1"}}}); w.Code != 400 {
		t.Errorf("normal route: %d, want 400", w.Code)
	}
}

func TestLogLinesCarryNoSecret(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
	defer slog.SetDefault(prev)
	s := newStack(t, stackOptions{policies: []policy.Policy{
		{Name: "acct", Key: []limitkey.Dimension{limitkey.DimAccount}, Limit: limit("1/h", 1)},
	}})
	tok := s.token("alice", "")
	for range 3 {
		s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1", token: tok})
	}
	s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1", token: tok + "x"})
	out := buf.String()
	if !strings.Contains(out, `"decision":"REJECTED"`) || !strings.Contains(out, `"key":"acct|account=alice"`) {
		t.Errorf("expected a REJECTED line with the key, got:\n%s", out)
	}
	for _, part := range strings.Split(tok, ".") {
		if strings.Contains(out, part) {
			t.Errorf("log contains a token part:\n%s", out)
		}
	}
}

func TestDebugDescribedRequests(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: debugPolicies()})
	admin := "192.0.2.10:1"
	for _, bad := range []string{"v1/reports/1", "*", "%zz", "http://[::1", "http://x/v1/reports/1"} {
		w := s.do(req{path: "/debug/ratekey?path=" + url.QueryEscape(bad), peer: admin})
		if w.Code != 400 || decodeProblem(t, w.Body.String()).Type != "urn:ratekey:problem:invalid-request" {
			t.Errorf("path=%q: %d %s, want 400 invalid-request", bad, w.Code, w.Body)
		}
	}
	// A method that is not a token (CR LF), and parameters given twice.
	for _, bad := range []string{"?method=GET%0D%0AX&path=/v1/reports/1", "?method=GET&method=POST&path=/v1/export", "?path=/v1/reports/1&path=/v1/export"} {
		w := s.do(req{path: "/debug/ratekey" + bad, peer: admin})
		if w.Code != 400 || decodeProblem(t, w.Body.String()).Type != "urn:ratekey:problem:invalid-request" {
			t.Errorf("%s: %d %s, want 400 invalid-request", bad, w.Code, w.Body)
		}
	}
	v := getDebug(t, s, req{path: "?method=POST&path=" + url.QueryEscape("/v1/export?x=1"), peer: admin})
	if v["operation"] != "POST /v1/export" || v["limited"] != true {
		t.Errorf("operation = %v limited = %v", v["operation"], v["limited"])
	}
}

func TestDebugSaysWhenARouteIsNotLimited(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: debugPolicies(),
		limited: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/v1/") }})
	v := getDebug(t, s, req{path: "?path=/healthz", peer: "192.0.2.10:1"})
	if v["limited"] != false || len(v["policies"].([]any)) != 0 || v["operation"] != "" {
		t.Errorf("limited = %v policies = %v operation = %q, want false, none and \"\" (as a live Record: no rate limiter names it)", v["limited"], v["policies"], v["operation"])
	}
	v = getDebug(t, s, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1"})
	if v["limited"] != true || len(v["policies"].([]any)) != 2 {
		t.Errorf("limited = %v policies = %v, want true and two", v["limited"], v["policies"])
	}
}

func TestDebugPredictsAFullStore(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, maxKeys: 1, policies: []policy.Policy{perNetwork("1/h", 1)}})
	if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"}); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	// The admin's own network is a new key that the full store cannot take:
	// the real request would get 503, so the debug view must not say PASSED.
	v := getDebug(t, s, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1"})
	p := v["policies"].([]any)[0].(map[string]any)
	if p["decision"] != "ERROR" || !strings.HasPrefix(p["error"].(string), "store full") {
		t.Errorf("policy = %v, want ERROR with the store error", p)
	}
	if w := s.do(req{path: "/v1/reports/1", peer: "192.0.2.10:1"}); w.Code != 503 {
		t.Errorf("the real request: %d, want 503", w.Code)
	}
}

// TestDebugStopsAtAFailedCredential: a request whose credential fails is
// answered by Authenticate (401), so of the rate limiter only the pre-auth
// policies, mounted in front of it, decide; the debug view shows those,
// not a PASSED from policies the request never reaches.
func TestDebugStopsAtAFailedCredential(t *testing.T) {
	pre := perNetwork("1/s", 3)
	pre.Name, pre.PreAuth = "pre-network", true
	s := newStack(t, stackOptions{anonymous: true, policies: append([]policy.Policy{pre}, debugPolicies()...)})
	names := func(v map[string]any) (out []string) {
		for _, p := range v["policies"].([]any) {
			out = append(out, p.(map[string]any)["name"].(string))
		}
		return out
	}
	bad := getDebug(t, s, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1", token: "not.a.token"})
	if a := bad["authentication"].(map[string]any); a["outcome"] != "invalid_token" || a["status"] != 401.0 {
		t.Errorf("authentication = %v; want invalid_token, 401", a)
	}
	if got := names(bad); !slices.Equal(got, []string{"pre-network"}) {
		t.Errorf("policies shown for a 401 request: %v; want only the pre-auth one", got)
	}
	good := getDebug(t, s, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1", token: s.token("alice", "app-1")})
	if got := names(good); !slices.Equal(got, []string{"pre-network", "per-network", "per-account"}) {
		t.Errorf("policies shown for a verified request: %v; want all three", got)
	}
}

// preAuthSpent returns a stack whose pre-auth policy "pre-network" (1 per
// hour) has spent its one token on 192.0.2.10, with the debug policies
// after Authenticate, a token, and the debug view of that client's next
// request with it.
func preAuthSpent(t *testing.T) (*stack, string, map[string]any) {
	t.Helper()
	pre := perNetwork("1/h", 1)
	pre.Name, pre.PreAuth = "pre-network", true
	s := newStack(t, stackOptions{anonymous: true, policies: append([]policy.Policy{pre}, debugPolicies()...)})
	tok := s.token("alice", "app-1")
	s.do(req{path: "/v1/reports/1", peer: "192.0.2.10:1", token: tok}) // spends pre-network's one token
	return s, tok, getDebug(t, s, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1", token: tok})
}

// TestDebugFollowsTheLiveChain: the view runs the steps the live chain
// runs, in its order, and stops where it stops. A pre-auth rejection
// answers 429 before the credential is checked: only the pre-auth policy
// shows, and the credential is not_reached. A request delayed in both
// phases waits for one delay and then the other, and the view adds them,
// as the live request's Record does.
func TestDebugFollowsTheLiveChain(t *testing.T) {
	_, _, v := preAuthSpent(t)
	var names []string
	for _, p := range v["policies"].([]any) {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	if a := v["authentication"].(map[string]any); a["outcome"] != "not_reached" || v["principal"] != nil ||
		!slices.Equal(names, []string{"pre-network"}) || v["decision"] != "REJECTED" {
		t.Errorf("after a pre-auth rejection: authentication %v, principal %v, policies %v, decision %v; want not_reached, null, [pre-network], REJECTED",
			a, v["principal"], names, v["decision"])
	}

	delayed := func(name string, preAuth bool, burst, cost int64) policy.Policy {
		p := policy.Policy{Name: name, Key: []limitkey.Dimension{limitkey.DimOperation}, Limit: limit("1/s", burst), Cost: cost, PreAuth: preAuth}
		p.Limit.DelayAfter = 1
		return p
	}
	// 2 s in the pre-auth phase (cost 3, one free), 3 s in the main one.
	s2 := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{delayed("pre", true, 3, 3), delayed("main", false, 4, 4)}})
	v = getDebug(t, s2, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1"})
	if v["delay_seconds"] != 5.0 {
		t.Errorf("delay_seconds %v; want 5 (2 s before authentication, then 3 s)", v["delay_seconds"])
	}
}

// TestDebugMatchesTheLiveRecord: for a request refused before
// Authenticate (a pre-auth rejection), the debug view and the live
// request's Record say the same: authentication not_reached, the same
// decision and policies.
func TestDebugMatchesTheLiveRecord(t *testing.T) {
	s, tok, view := preAuthSpent(t)

	// The live request, through a chain with a Record of its own.
	r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
	r.RemoteAddr = "192.0.2.10:1"
	r.Header.Set("Authorization", "Bearer "+tok)
	ctx, rec := middleware.WithRecord(r.Context())
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, r.WithContext(ctx))
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("live: %d", w.Code)
	}
	var live map[string]any
	b, _ := json.Marshal(rec)
	if err := json.Unmarshal(b, &live); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"authentication", "decision", "policies", "principal", "operation", "limited"} {
		a, _ := json.Marshal(view[field])
		l, _ := json.Marshal(live[field])
		if string(a) != string(l) {
			t.Errorf("%s: debug view %s, live Record %s", field, a, l)
		}
	}
}

// TestDebugConfigErrors: Debug and AdminOnly name each bad admin network
// by its index under "allow", and refuse a nil resolver.
func TestDebugConfigErrors(t *testing.T) {
	res := proxyResolver(t)
	const want = "allow[0] \"localhost\": not an IP address or CIDR prefix\nallow[2] \"10.0.0.0/8 \": has leading or trailing space: remove it (entries are not trimmed)"
	allow := []string{"localhost", "192.0.2.0/24", "10.0.0.0/8 "}
	if _, err := middleware.Debug(middleware.DebugConfig{Resolver: res, Allow: allow}); err == nil || err.Error() != want {
		t.Errorf("Debug: %v\nwant %s", err, want)
	}
	if _, err := middleware.AdminOnly(res, allow); err == nil || err.Error() != want {
		t.Errorf("AdminOnly: %v\nwant %s", err, want)
	}
	if _, err := middleware.Debug(middleware.DebugConfig{Allow: []string{"192.0.2.0/24"}}); err == nil || err.Error() != "resolver: required" {
		t.Errorf("Debug without a resolver: %v", err)
	}
}
