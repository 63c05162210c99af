package middleware_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

type problemBody struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	Policy           string   `json:"policy"`
	ViolatedPolicies []string `json:"violated-policies"`
}

func decodeProblem(t *testing.T, body string) problemBody {
	t.Helper()
	var p problemBody
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	return p
}

func perNetwork(rate string, burst int64) policy.Policy {
	return policy.Policy{Name: "per-network", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limit(rate, burst)}
}

// TestRejectionNamesTheWait: when the first rejecting policy is not the
// one whose wait sets Retry-After, the problem's detail says whose it is
// (a settling policy in debt, say, behind a per-second limit): "fast"
// (1/s) refuses first and would admit in 1 s, "slow" (1/m) in 60 s.
func TestRejectionNamesTheWait(t *testing.T) {
	fast, slow := perNetwork("1/s", 1), perNetwork("1/m", 1)
	fast.Name, slow.Name = "fast", "slow"
	s := newStack(t, stackOptions{policies: []policy.Policy{fast, slow}, anonymous: true})
	if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"}); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"})
	p := decodeProblem(t, w.Body.String())
	const want = "policy fast (burst 1, refill 1/s) has no room for this request; retry in 60 s, the wait of policy slow"
	if w.Code != 429 || w.Header().Get("Retry-After") != "60" || p.Policy != "fast" || p.Detail != want {
		t.Errorf("%d Retry-After %q policy %q detail %q; want 429, 60, fast, %q", w.Code, w.Header().Get("Retry-After"), p.Policy, p.Detail, want)
	}
}

func TestRejectionResponse(t *testing.T) {
	// burst 3 at 2/s: three pass, the fourth waits 0.5 s → Retry-After 1.
	s := newStack(t, stackOptions{policies: []policy.Policy{perNetwork("2/s", 3)}, anonymous: true})
	peer := "198.51.100.7:1"
	wantRL := []string{`"per-network";r=2;t=1`, `"per-network";r=1;t=1`, `"per-network";r=0;t=2`}
	for i, want := range wantRL {
		w := s.do(req{path: "/v1/reports/1", peer: peer})
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != `"per-network";q=3;w=2` {
			t.Errorf("request %d RateLimit-Policy = %q", i, got)
		}
		if got := w.Header().Get("RateLimit"); got != want {
			t.Errorf("request %d RateLimit = %q, want %q", i, got, want)
		}
	}
	w := s.do(req{path: "/v1/reports/1", peer: peer})
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("4th: %d, want 429", w.Code)
	}
	for h, want := range map[string]string{
		"Retry-After":   "1",
		"Cache-Control": "no-store",
		"Content-Type":  "application/problem+json",
		"RateLimit":     `"per-network";r=0;t=2`,
	} {
		if got := w.Header().Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	p := decodeProblem(t, w.Body.String())
	if p.Type != "urn:ratekey:problem:rate-limited" || p.Status != 429 || p.Policy != "per-network" ||
		len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "per-network" {
		t.Errorf("problem = %+v", p)
	}
	if strings.Contains(w.Body.String(), "198.51.100.7") {
		t.Errorf("problem body names the key: %s", w.Body.String())
	}
	// Retry-After rounds up: after 0.2 s the wait is 0.3 s → still 1.
	s.clock.Advance(200 * time.Millisecond)
	if w := s.do(req{path: "/v1/reports/1", peer: peer}); w.Header().Get("Retry-After") != "1" {
		t.Errorf("Retry-After after 0.2 s = %q, want 1", w.Header().Get("Retry-After"))
	}
	s.clock.Advance(300 * time.Millisecond)
	if w := s.do(req{path: "/v1/reports/1", peer: peer}); w.Code != http.StatusOK {
		t.Errorf("after 0.5 s: %d, want 200", w.Code)
	}
	// Another network has its own budget.
	if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.8:1"}); w.Code != http.StatusOK {
		t.Errorf("other network: %d", w.Code)
	}
}

func TestRetryAfterIsTheLongestWait(t *testing.T) {
	// Two policies reject; Retry-After covers the longer wait (5 s, not 1 s).
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{
		perNetwork("1/s", 1),
		{Name: "slow", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limit("12/m", 1), Status: 503},
	}})
	peer := "198.51.100.7:1"
	s.do(req{path: "/v1/reports/1", peer: peer})
	w := s.do(req{path: "/v1/reports/1", peer: peer})
	if w.Code != 429 || w.Header().Get("Retry-After") != "5" {
		t.Fatalf("got %d Retry-After %q, want 429 and 5", w.Code, w.Header().Get("Retry-After"))
	}
	if p := decodeProblem(t, w.Body.String()); strings.Join(p.ViolatedPolicies, ",") != "per-network,slow" {
		t.Errorf("violated-policies = %v", p.ViolatedPolicies)
	}
}

func TestPolicyStatus(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{
		{Name: "nginx-like", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limit("1/s", 1), Status: 503},
	}})
	s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"})
	if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"}); w.Code != 503 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("got %d %q, want 503 with Retry-After 1", w.Code, w.Header().Get("Retry-After"))
	}
}

func TestAllOrNothingAcrossPolicies(t *testing.T) {
	// The narrow per-export policy rejects; the broad per-network budget
	// must not be charged for it (Envoy ratelimit issue 1060).
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{
		perNetwork("1/h", 3),
		{Name: "export", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limit("1/h", 1), Operations: []string{"POST /v1/export"}},
	}})
	peer := "198.51.100.7:1"
	if w := s.do(req{method: "POST", path: "/v1/export", peer: peer}); w.Code != 200 {
		t.Fatalf("first export: %d", w.Code)
	}
	for range 5 {
		w := s.do(req{method: "POST", path: "/v1/export", peer: peer})
		if w.Code != 429 {
			t.Fatalf("export again: %d, want 429", w.Code)
		}
		// The fields state the budgets as they are: per-network was not
		// charged for the rejected request.
		if got, want := w.Header().Get("RateLimit"), `"per-network";r=2;t=3600, "export";r=0;t=3600`; got != want {
			t.Errorf("RateLimit on the rejection = %q, want %q", got, want)
		}
	}
	// per-network spent 1 of 3 (the rejected exports charged nothing).
	for i := range 2 {
		if w := s.do(req{path: "/v1/reports/1", peer: peer}); w.Code != 200 {
			t.Fatalf("report %d: %d, want 200", i, w.Code)
		}
	}
	if w := s.do(req{path: "/v1/reports/1", peer: peer}); w.Code != 429 {
		t.Fatalf("report 3: %d, want 429", w.Code)
	}
}

func TestMissingDimension(t *testing.T) {
	account := []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}
	tests := []struct {
		name      string
		policy    policy.Policy
		anonymous bool
		token     bool
		clientID  string
		wantCode  int
		wantAuthn string
	}{
		{"anonymous, reject", policy.Policy{Name: "acct", Key: account, Limit: limit("1/s", 5)}, true, false, "", 401, "Bearer"},
		{"anonymous, skip", policy.Policy{Name: "acct", Key: account, Limit: limit("1/s", 5), OnMissing: policy.OnMissingSkip}, true, false, "", 200, ""},
		{"verified, no client_id, reject", policy.Policy{Name: "cred", Key: []limitkey.Dimension{limitkey.DimCredential}, Limit: limit("1/s", 5)}, false, true, "", 403, ""},
		{"verified, client_id", policy.Policy{Name: "cred", Key: []limitkey.Dimension{limitkey.DimCredential}, Limit: limit("1/s", 5)}, false, true, "app-1", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, stackOptions{anonymous: tt.anonymous, policies: []policy.Policy{tt.policy}})
			q := req{path: "/v1/reports/1", peer: "198.51.100.7:1"}
			if tt.token {
				q.token = s.token("alice", tt.clientID)
			}
			w := s.do(q)
			if w.Code != tt.wantCode {
				t.Fatalf("got %d, want %d: %s", w.Code, tt.wantCode, w.Body)
			}
			if got := w.Header().Get("WWW-Authenticate"); got != tt.wantAuthn {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tt.wantAuthn)
			}
			if tt.wantCode != 200 {
				if p := decodeProblem(t, w.Body.String()); p.Type != "urn:ratekey:problem:missing-dimension" || p.Policy != tt.policy.Name {
					t.Errorf("problem = %+v", p)
				}
			}
		})
	}
}

func TestAccountsDoNotShareBudgets(t *testing.T) {
	s := newStack(t, stackOptions{policies: []policy.Policy{
		{Name: "acct", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}, Limit: limit("1/h", 2)},
	}})
	alice, bob := s.token("alice", ""), s.token("bob", "")
	for i, want := range []int{200, 200, 429} {
		if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1", token: alice}); w.Code != want {
			t.Fatalf("alice %d: %d, want %d", i, w.Code, want)
		}
	}
	// Same network, other account: full budget.
	if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1", token: bob}); w.Code != 200 {
		t.Fatalf("bob: %d", w.Code)
	}
	// Alice from another network: still her (spent) budget.
	if w := s.do(req{path: "/v1/reports/1", peer: "192.0.2.1:1", token: alice}); w.Code != 429 {
		t.Fatalf("alice elsewhere: %d, want 429", w.Code)
	}
}

func TestStoreErrorFailsClosedByDefault(t *testing.T) {
	// A real store error: the memory store is full of in-debt states that
	// must not be evicted (an abuser is never handed a fresh bucket).
	for _, mode := range []policy.OnStoreError{"", policy.OnStoreErrorAllow} {
		t.Run("on_store_error="+string(mode), func(t *testing.T) {
			p := perNetwork("1/h", 1)
			p.OnStoreError = mode
			s := newStack(t, stackOptions{anonymous: true, maxKeys: 1, policies: []policy.Policy{p}})
			if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"}); w.Code != 200 {
				t.Fatalf("first: %d", w.Code)
			}
			w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.8:1"})
			want := 503
			if mode == policy.OnStoreErrorAllow {
				want = 200
			}
			if w.Code != want {
				t.Fatalf("second network: %d, want %d", w.Code, want)
			}
			if want == 503 {
				if p := decodeProblem(t, w.Body.String()); p.Type != "urn:ratekey:problem:store-unavailable" {
					t.Errorf("problem = %+v", p)
				}
				if w.Header().Get("Retry-After") == "" {
					t.Error("503 without Retry-After")
				}
			}
		})
	}
}

func TestMalformedChainIsRefused(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{perNetwork("1/s", 5)}})
	w := s.do(req{path: "/v1/reports/1", peer: "10.0.0.2:1",
		headers: http.Header{"X-Forwarded-For": {"203.0.113.7, garbage, 10.0.0.1"}}})
	if w.Code != 400 {
		t.Fatalf("got %d, want 400", w.Code)
	}
	if p := decodeProblem(t, w.Body.String()); p.Type != "urn:ratekey:problem:invalid-forwarding-chain" {
		t.Errorf("problem = %+v", p)
	}
}

func TestNewRateLimiterListsEveryError(t *testing.T) {
	_, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Policies: []policy.Policy{
		{Name: "bad name!", Limit: limit("1/s", 1)},
		{Name: "x", Key: []limitkey.Dimension{"colour"}, Limit: limit("1/s", 1), OnMissing: "ignore"},
		{Name: "x", Limit: limit("1/s", 0), Status: 200},
	}})
	if err == nil {
		t.Fatal("no error")
	}
	want := "limiter: required\n" +
		"operation: required (use RouteOperation with the root router)\n" +
		"policies[0].name: \"bad name!\" must be 1-64 letters, digits, '.', '_' or '-'\n" +
		"policies[1] (\"x\").key: unknown dimension \"colour\" (built-in: tenant, account, credential, operation, network, plan)\n" +
		"policies[1] (\"x\").on_missing: \"ignore\" must be reject or skip\n" +
		"policies[2] (\"x\").burst: 0 must be >= 1 (the bucket capacity in tokens; nginx burst=N is N+1)\n" +
		"policies[2] (\"x\").status: 200 is not a 4xx or 5xx code\n" +
		"policies[2] (\"x\").name: defined twice"
	if err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
}

// TestNewRateLimiterRefusesNilFunctions: a nil cost or dimension function
// would silently do nothing (every request lacking the dimension), and a
// cost function must name a policy.
func TestNewRateLimiterRefusesNilFunctions(t *testing.T) {
	p := policy.Policy{Name: "p", Key: []limitkey.Dimension{"region"}, Limit: limit("1/s", 5)}
	_, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Policies: []policy.Policy{p},
		Operation: func(*http.Request) string { return "op" },
		Costs:     map[string]func(*http.Request) (int64, error){"p": nil},
		Custom:    map[limitkey.Dimension]func(*http.Request) (string, bool){"region": nil}})
	want := "costs[\"p\"]: a nil function\n" +
		"custom[\"region\"]: a nil function (every request would lack the dimension)"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
	_, err = middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Policies: []policy.Policy{{Name: "p", Limit: limit("1/s", 5)}},
		Operation: func(*http.Request) string { return "op" },
		Costs:     map[string]func(*http.Request) (int64, error){"gone": func(*http.Request) (int64, error) { return 1, nil }}})
	if want := `costs["gone"]: no policy has that name`; err == nil || err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
}

// TestNewRateLimiterRefusesWhatCannotWork: the safety checks are the
// library's own, each error naming the policy and the field. (A cost that
// can never fit is refused here; the never-satisfiable answer remains for
// limits a request cannot meet at run time.)
func TestNewRateLimiterRefusesWhatCannotWork(t *testing.T) {
	withDelay := func(rate string, burst, delayAfter int64, maxDelay time.Duration) limiter.Limit {
		l := limit(rate, burst)
		l.DelayAfter, l.MaxDelay = delayAfter, maxDelay
		return l
	}
	net := []limitkey.Dimension{limitkey.DimNetwork}
	for _, c := range []struct {
		name     string
		policies []policy.Policy
		maxWait  time.Duration
		want     string
	}{
		{"cost above burst", []policy.Policy{{Name: "export", Key: net, Limit: limit("1/m", 2), Cost: 5}}, 0,
			`policies[0] ("export").cost: 5 exceeds burst 2, so no request could ever pass`},
		{"max_delay too short for the cost", []policy.Policy{{Name: "export", Key: net, Limit: withDelay("1/s", 10, 1, 2*time.Second), Cost: 5}}, 0,
			`policies[0] ("export").max_delay: 2s is too short for cost 5: even from a full bucket a request would wait 4s (its cost beyond delay_after's 1 tokens), so no request could ever pass`},
		{"max_delay of 100 000 h", []policy.Policy{{Name: "p", Key: net, Limit: withDelay("1/s", 10, 1, 100000*time.Hour)}}, 0,
			`policies[0] ("p").max_delay: 100000h0m0s exceeds the longest wait allowed, 50s (RateLimitConfig.MaxWait)`},
		{"a wait beyond MaxWait", []policy.Policy{{Name: "p", Key: net, Limit: withDelay("2/m", 4, 1, 0)}}, 0,
			`policies[0] ("p").delay_after: a request may have to wait up to 1m30s (burst beyond delay_after at 2/m), longer than 50s (RateLimitConfig.MaxWait): set max_delay, a larger delay_after or a faster rate`},
		{"a wait within a larger MaxWait", []policy.Policy{{Name: "p", Key: net, Limit: withDelay("2/m", 4, 1, 0)}}, 2 * time.Minute, ""},
		{"the two phases together", []policy.Policy{
			{Name: "pre", Key: net, Limit: withDelay("1/s", 50, 1, 0), PreAuth: true},
			{Name: "dry", Key: net, Limit: withDelay("1/s", 50, 1, 0), DryRun: true},
			{Name: "main", Key: net, Limit: withDelay("1/s", 50, 2, 0)},
		}, 0, `policies[0] ("pre") (pre_auth) and policies[2] ("main"): a request may wait up to 49s before authentication and 48s after it, 1m37s in all, longer than 50s (RateLimitConfig.MaxWait): lower their max_delay or delay_after's share`},
	} {
		_, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
			Operation: func(*http.Request) string { return "GET /x" }, Policies: c.policies, MaxWait: c.maxWait})
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("%s: error %v\nwant %s", c.name, err, c.want)
		}
	}
}

func TestChainTooLongIsNamed(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{perNetwork("1/s", 5)}})
	w := s.do(req{path: "/v1/reports/1", peer: "10.0.0.2:1",
		headers: http.Header{"X-Forwarded-For": {strings.Repeat("10.0.0.1, ", 40) + "10.0.0.1"}}})
	p := decodeProblem(t, w.Body.String())
	if w.Code != 400 || p.Type != "urn:ratekey:problem:invalid-forwarding-chain" || p.Detail != "the forwarding chain needs more than 32 entries examined" {
		t.Errorf("got %d %+v", w.Code, p)
	}
}

// TestUnknownNodeIsNamed: an "unknown" node in a trusted chain gets its own
// detail (told apart by the derivation's reason, unknown_node).
func TestUnknownNodeIsNamed(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{perNetwork("1/s", 5)}})
	w := s.do(req{path: "/v1/reports/1", peer: "10.0.0.2:1", headers: http.Header{"X-Forwarded-For": {"192.0.2.1, unknown"}}})
	p := decodeProblem(t, w.Body.String())
	if w.Code != 400 || p.Type != "urn:ratekey:problem:invalid-forwarding-chain" || p.Detail != "the forwarding chain reaches an unknown or obfuscated node before an untrusted address" {
		t.Errorf("got %d %+v", w.Code, p)
	}
}

// TestResetIsNeverEarly: t (seconds until full) is the real time to full
// rounded up, so a client that comes back after t finds its whole burst,
// and a 429's Retry-After is never later than its t. At 3/s the bucket
// refills with a 333 333 334 ns interval: three tokens take 1.000000002 s,
// so t is 2 while w, Burst ÷ Rate exactly, is 1.
func TestResetIsNeverEarly(t *testing.T) {
	p := perNetwork("3/s", 3)
	p.Cost = 3
	s := newStack(t, stackOptions{policies: []policy.Policy{p}, anonymous: true})
	first := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"})
	second := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"})
	got := []string{
		first.Header().Get("RateLimit-Policy"), first.Header().Get("RateLimit"),
		strconv.Itoa(second.Code), second.Header().Get("Retry-After"), second.Header().Get("RateLimit"),
	}
	want := []string{`"per-network";q=3;w=1`, `"per-network";r=0;t=2`, "429", "2", `"per-network";r=0;t=2`}
	if !slices.Equal(got, want) {
		t.Errorf("fields %q; want %q", got, want)
	}
}
