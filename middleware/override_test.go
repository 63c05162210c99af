package middleware_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// fakeAuth verifies "Bearer tenant:plan:account" (a test stand-in for an
// issuer record or an API key record vouching for the three).
type fakeAuth struct{}

func (fakeAuth) Authenticate(r *http.Request) (limitkey.Principal, error) {
	v := r.Header.Get("Authorization")
	if v == "" {
		return limitkey.Principal{}, identity.ErrNoCredential
	}
	f := strings.Split(strings.TrimPrefix(v, "Bearer "), ":")
	return limitkey.Principal{Issuer: "test", Tenant: f[0], Plan: f[1], Account: f[2], Method: limitkey.MethodJWT}, nil
}

// overrideStack mounts a rate limiter with policies ps behind fakeAuth on
// POST /batch, with a Recorder; each response carries the debug JSON of
// its policies in the X-Record header.
func overrideStack(t *testing.T, ps []policy.Policy) http.Handler {
	t.Helper()
	return overrideStackOf(t, middleware.RateLimitConfig{Policies: ps})
}

// overrideStackOf is overrideStack with cfg's policies and settings (its
// limiter, operation and logger are the stack's).
func overrideStackOf(t *testing.T, cfg middleware.RateLimitConfig) http.Handler {
	t.Helper()
	r := chi.NewRouter()
	cfg.Limiter = memory.New(memory.Options{Now: clocktest.NewManualClock().Time})
	cfg.Operation, cfg.Logger = middleware.RouteOperation(r), slog.New(slog.DiscardHandler)
	rl, err := middleware.NewRateLimiter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.Use(middleware.Recorder, middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}),
		middleware.Authenticate(fakeAuth{}, middleware.AuthOptions{Anonymous: true}), recordHeader, rl.Handler)
	r.Post("/batch", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	return r
}

// recordHeader writes the request's Record policies into X-Record before
// the response is written.
func recordHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&recordingWriter{ResponseWriter: w, r: r}, r)
	})
}

type recordingWriter struct {
	http.ResponseWriter
	r    *http.Request
	done bool
}

func (w *recordingWriter) WriteHeader(code int) {
	if !w.done {
		w.done = true
		b, _ := json.Marshal(middleware.RecordFrom(w.r.Context()).Policies)
		w.Header().Set("X-Record", string(b))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func post(h http.Handler, who string, items int) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/batch", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if who != "" {
		r.Header.Set("Authorization", "Bearer "+who)
	}
	if items != 0 {
		r.Header.Set("X-Items", strconv.Itoa(items))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func perTenant(overrides ...policy.Override) policy.Policy {
	return policy.Policy{Name: "per-tenant", Key: []limitkey.Dimension{limitkey.DimTenant},
		Limit: limit("1/m", 3), Overrides: overrides, OnMissing: policy.OnMissingSkip}
}

// admitted counts the requests of who admitted out of n sent at once.
func admitted(h http.Handler, who string, n int) int {
	ok := 0
	for range n {
		if post(h, who, 0).Code == http.StatusOK {
			ok++
		}
	}
	return ok
}

// TestOverrides: first match wins over tenant, plan and account (of a
// tenant); fields fall back to the policy's; the effective limit is what
// the response fields and the debug JSON show. The key holds every
// dimension the overrides match on.
func TestOverrides(t *testing.T) {
	p := perTenant(
		policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 6}},
		policy.Override{Plan: "pro", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1000, Per: 24 * time.Hour}, Burst: 10}},
		policy.Override{Tenant: "acme3", Account: "vip", Limit: limiter.Limit{Burst: 4}},
		policy.Override{Plan: "big", Cost: 2},
	)
	p.Key = []limitkey.Dimension{limitkey.DimTenant, limitkey.DimPlan, limitkey.DimAccount}
	h := overrideStack(t, []policy.Policy{p})
	tests := []struct {
		who        string
		admitted   int
		policy     string // RateLimit-Policy of the first response
		override   string // JSON of "override"
		rate       string
		burst, cos int64
	}{
		{"beta:free:alice", 3, `"per-tenant";q=3;w=180`, `null`, "1/m", 3, 1},
		{"acme:free:bob", 6, `"per-tenant";q=6;w=360`, `"tenant=acme"`, "1/m", 6, 1},
		{"acme2:pro:carol", 10, `"per-tenant";q=10;w=864`, `"plan=pro"`, "1000/d", 10, 1}, // 10 × 86.4 s
		{"acme3:free:vip", 4, `"per-tenant";q=4;w=240`, `"tenant=acme3|account=vip"`, "1/m", 4, 1},
		{"acme4:free:vip", 3, `"per-tenant";q=3;w=180`, `null`, "1/m", 3, 1},            // another tenant's vip
		{"acme:pro:vip", 6, `"per-tenant";q=6;w=360`, `"tenant=acme"`, "1/m", 6, 1},     // tenant=acme is first
		{"acme3:pro:vip", 10, `"per-tenant";q=10;w=864`, `"plan=pro"`, "1000/d", 10, 1}, // plan before account
		{"acme5:big:x", 1, `"per-tenant";q=3;w=180`, `"plan=big"`, "1/m", 3, 2},         // cost 2 of 3
	}
	for _, tc := range tests {
		first := post(h, tc.who, 0)
		got := admitted(h, tc.who, 20)
		if first.Code == http.StatusOK {
			got++
		}
		if got != tc.admitted {
			t.Errorf("%s: admitted %d of 21; want %d", tc.who, got, tc.admitted)
		}
		if tc.policy == "" {
			continue
		}
		if p := first.Header().Get("RateLimit-Policy"); p != tc.policy {
			t.Errorf("%s: RateLimit-Policy %q; want %q", tc.who, p, tc.policy)
		}
		var rec []map[string]json.RawMessage
		if err := json.Unmarshal([]byte(first.Header().Get("X-Record")), &rec); err != nil || len(rec) != 1 {
			t.Fatalf("%s: record %q: %v", tc.who, first.Header().Get("X-Record"), err)
		}
		want := map[string]string{"override": tc.override, "rate": strconv.Quote(tc.rate), "burst": strconv.FormatInt(tc.burst, 10), "cost": strconv.FormatInt(tc.cos, 10)}
		for k, v := range want {
			if string(rec[0][k]) != v {
				t.Errorf("%s: debug %s = %s; want %s", tc.who, k, rec[0][k], v)
			}
		}
	}
	// Anonymous requests (no verified principal) skip a tenant policy; a
	// policy without a tenant in its key still takes the policy's limit.
	if w := post(h, "", 0); w.Code != http.StatusOK || w.Header().Get("X-Record") != `[{"name":"per-tenant","key":null,"decision":"SKIPPED","dry_run":false,"cost":1,"rate":"1/m","burst":3,"remaining":0,"retry_after_seconds":null,"store":"memory","fail_mode":null,"delay_after":3,"delay_seconds":null,"skipped_reason":"no verified principal carries a tenant","error":null,"override":null,"max_in_flight":null,"in_flight":null,"cached":false,"slot":null,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}]` {
		t.Errorf("anonymous: %d %s", w.Code, w.Header().Get("X-Record"))
	}
}

// TestOverrideProblemBody: a rejection names the effective limit.
func TestOverrideProblemBody(t *testing.T) {
	h := overrideStack(t, []policy.Policy{perTenant(policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 6}})})
	admitted(h, "acme:free:a", 6)
	w := post(h, "acme:free:a", 0)
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"detail":"policy per-tenant (burst 6, refill 1/m) has no room for this request; retry in 60 s"`) {
		t.Errorf("429 body: %d %s", w.Code, w.Body)
	}
}

// TestOverrideFunc: the library's function of the key, after the static
// overrides; an invalid answer is ERROR with the fail mode.
func TestOverrideFunc(t *testing.T) {
	calls := 0
	p := perTenant(policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 6}})
	p.OverrideFunc = func(k limitkey.Key) (policy.Override, bool) {
		calls++
		if k.Policy != "per-tenant" || len(k.Parts) != 1 || k.Parts[0].Dimension != limitkey.DimTenant {
			t.Errorf("OverrideFunc asked with key %+v; want the per-tenant key", k)
			return policy.Override{}, false
		}
		switch tenant := k.Parts[0].Value; tenant {
		case "db":
			return policy.Override{Tenant: tenant, Limit: limiter.Limit{Burst: 5}}, true
		case "anon":
			return policy.Override{Limit: limiter.Limit{Burst: 2}}, true
		case "bad":
			return policy.Override{Tenant: tenant, Cost: 9}, true
		}
		return policy.Override{}, false
	}
	h := overrideStack(t, []policy.Policy{p})
	for _, tc := range []struct {
		who      string
		admitted int
		override string
	}{
		{"acme:x:a", 6, `"tenant=acme"`}, // static first: the function is not asked
		{"db:x:a", 5, `"tenant=db"`},
		{"anon:x:a", 2, `"function"`},
		{"other:x:a", 3, `null`},
	} {
		before := calls
		first := post(h, tc.who, 0)
		if got := 1 + admitted(h, tc.who, 10); got != tc.admitted {
			t.Errorf("%s: admitted %d; want %d", tc.who, got, tc.admitted)
		}
		var rec []map[string]json.RawMessage
		_ = json.Unmarshal([]byte(first.Header().Get("X-Record")), &rec)
		if len(rec) != 1 || string(rec[0]["override"]) != tc.override {
			t.Errorf("%s: record %s; want override %s", tc.who, first.Header().Get("X-Record"), tc.override)
		}
		if tc.who == "acme:x:a" && calls != before {
			t.Errorf("the function was called for a static match")
		}
	}
	w := post(h, "bad:x:a", 0)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Header().Get("X-Record"), `"decision":"ERROR"`) ||
		!strings.Contains(w.Header().Get("X-Record"), `"error":"override function: tenant=bad: cost: 9 exceeds burst 3, so no request could ever pass"`) {
		t.Errorf("invalid override: %d %s", w.Code, w.Header().Get("X-Record"))
	}
}

// TestCostFunc: a cost from the request; an error or a cost below 1 is a
// 400 problem naming the policy; a cost above the burst is the
// never-satisfiable answer (429 without Retry-After).
func TestCostFunc(t *testing.T) {
	p := perTenant()
	items := func(r *http.Request) (int64, error) {
		s := r.Header.Get("X-Items")
		if s == "" {
			return 0, errors.New("no X-Items")
		}
		return strconv.ParseInt(s, 10, 64)
	}
	dry := p
	dry.Name, dry.DryRun = "dry", true
	h := overrideStackOf(t, middleware.RateLimitConfig{Policies: []policy.Policy{p}, Costs: map[string]func(*http.Request) (int64, error){"per-tenant": items}})
	tests := []struct {
		items      int
		code       int
		body       string
		retryAfter string
		cost       string
	}{
		{0, 400, `{"type":"urn:ratekey:problem:invalid-cost","title":"Request cost cannot be determined","status":400,"detail":"policy per-tenant cannot determine this request's cost (a whole number of tokens, at least 1)","policy":"per-tenant"}`, "", "0"},
		{-2, 400, `"type":"urn:ratekey:problem:invalid-cost"`, "", "-2"},
		{4, 429, `{"type":"urn:ratekey:problem:cost-exceeds-burst","title":"Request cost exceeds the burst","status":429,"detail":"policy per-tenant: a request costing 4 tokens can never fit a burst of 3","policy":"per-tenant","violated-policies":["per-tenant"]}`, "", "4"},
		{2, 200, "", "", "2"},
		{2, 429, `"type":"urn:ratekey:problem:rate-limited"`, "60", "2"},
		{1, 200, "", "", "1"},
	}
	for i, tc := range tests {
		w := post(h, "acme:free:a", tc.items)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) || w.Header().Get("Retry-After") != tc.retryAfter {
			t.Errorf("%d: items %d: %d Retry-After %q %s; want %d %q %s", i, tc.items, w.Code, w.Header().Get("Retry-After"), w.Body, tc.code, tc.retryAfter, tc.body)
		}
		if !strings.Contains(w.Header().Get("X-Record"), `"cost":`+tc.cost+`,`) {
			t.Errorf("%d: record %s; want cost %s", i, w.Header().Get("X-Record"), tc.cost)
		}
		if tc.code == 400 && w.Header().Get("RateLimit") != "" {
			t.Errorf("%d: a 400 advertises RateLimit %q", i, w.Header().Get("RateLimit"))
		}
	}
	if w := post(h, "acme:free:a", 0); !strings.Contains(w.Header().Get("X-Record"), `"error":"cost function: no X-Items"`) {
		t.Errorf("record of a failing cost function: %s", w.Header().Get("X-Record"))
	}
	// A dry-run policy reports the failure and lets the request through.
	hd := overrideStackOf(t, middleware.RateLimitConfig{Policies: []policy.Policy{dry}, Costs: map[string]func(*http.Request) (int64, error){"dry": items}})
	if w := post(hd, "acme:free:a", 0); w.Code != 200 || !strings.Contains(w.Header().Get("X-Record"), `"decision":"REJECTED_DRY_RUN"`) {
		t.Errorf("dry run: %d %s", w.Code, w.Header().Get("X-Record"))
	}
}

// TestOverrideValidation: every problem named by its field path.
func TestOverrideValidation(t *testing.T) {
	costFn := func(*http.Request) (int64, error) { return 1, nil }
	tests := []struct {
		name  string
		p     policy.Policy
		want  string
		costs bool // a cost function for per-tenant
	}{
		{"no match", perTenant(policy.Override{Limit: limiter.Limit{Burst: 6}}),
			`policies[0] ("per-tenant").overrides[0]: set one of tenant, plan or account, or an account with its tenant (the verified attributes it matches)`, false},
		{"two matches", perTenant(policy.Override{Tenant: "a", Plan: "p"}),
			`policies[0] ("per-tenant").overrides[0]: set one of tenant, plan or account, or an account with its tenant (the verified attributes it matches)`, false},
		{"duplicate", func() policy.Policy {
			p := perTenant(policy.Override{Tenant: "acme"}, policy.Override{Plan: "acme"}, policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 9}})
			p.Key = append(p.Key, limitkey.DimPlan)
			return p
		}(), `policies[0] ("per-tenant").overrides[2].tenant: "acme" is matched by overrides[0] already (the first match wins, so this one never applies)`, false},
		{"duplicate account of a tenant", func() policy.Policy {
			p := perTenant(policy.Override{Tenant: "acme", Account: "vip"}, policy.Override{Tenant: "beta", Account: "vip"}, policy.Override{Tenant: "acme", Account: "vip"})
			p.Key = append(p.Key, limitkey.DimAccount)
			return p
		}(), `policies[0] ("per-tenant").overrides[2].account: "vip" of tenant "acme" is matched by overrides[0] already (the first match wins, so this one never applies)`, false},
		{"cost above burst", perTenant(policy.Override{Tenant: "beta", Cost: 4}),
			`policies[0] ("per-tenant").overrides[0].cost: 4 exceeds burst 3, so no request could ever pass`, false},
		{"negative burst", perTenant(policy.Override{Tenant: "beta", Limit: limiter.Limit{Burst: -1}}),
			`policies[0] ("per-tenant").overrides[0].burst: -1 must be >= 1 (the bucket capacity in tokens; nginx burst=N is N+1)`, false},
		{"delay_after above the override's burst", func() policy.Policy {
			p := perTenant(policy.Override{Tenant: "beta", Limit: limiter.Limit{Burst: 2}})
			p.Limit.DelayAfter = 3
			return p
		}(), `policies[0] ("per-tenant").overrides[0].delay_after: 3 must be 1 to burst 2 (0: nothing is delayed, nginx nodelay)`, false},
		{"wait too long", perTenant(policy.Override{Tenant: "beta", Limit: limiter.Limit{DelayAfter: 1, Burst: 6}}),
			`policies[0] ("per-tenant").overrides[0].delay_after: a request may have to wait up to 5m0s (burst beyond delay_after at 1/m), longer than 50s (RateLimitConfig.MaxWait): set max_delay, a larger delay_after or a faster rate`, false},
		{"pre_auth", func() policy.Policy {
			p := perTenant(policy.Override{Tenant: "acme"})
			p.Key, p.PreAuth = []limitkey.Dimension{limitkey.DimNetwork}, true
			return p
		}(), `policies[0] ("per-tenant").overrides: a pre_auth policy runs before any credential is verified, so no tenant, plan or account can match`, false},
		{"cost and cost function", func() policy.Policy {
			p := perTenant()
			p.Cost = 2
			return p
		}(), `policies[0] ("per-tenant").cost: 2 is fixed, but the policy has a cost function: set one or the other`, true},
		{"override cost with a cost function", perTenant(policy.Override{Tenant: "acme", Cost: 2}),
			`policies[0] ("per-tenant").overrides[0].cost: the policy's cost comes from its cost function`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Policies: []policy.Policy{tc.p},
				Operation: func(*http.Request) string { return "op" }}
			if tc.costs {
				cfg.Costs = map[string]func(*http.Request) (int64, error){"per-tenant": costFn}
			}
			_, err := middleware.NewRateLimiter(cfg)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}

// TestOverrideReload: a changed override is reported, and its tenants'
// buckets restart in the new shape while the others keep theirs.
func TestOverrideReload(t *testing.T) {
	old := []policy.Policy{perTenant(policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 6}})}
	nw := []policy.Policy{perTenant(policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 8}}, policy.Override{Plan: "pro", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1000, Per: 24 * time.Hour}}})}
	got := policy.Diff(old, nw)
	want := []policy.Change{{Policy: "per-tenant", Change: "updated",
		Detail: `overrides ["tenant=acme" 1/m burst 6 cost 1] -> ["tenant=acme" 1/m burst 8 cost 1, "plan=pro" 1000/d burst 3 cost 1]`}}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("policy.Diff = %+v; want %+v", got, want)
	}
}

// TestOverridesMatchKeyDimensions: an override matches only on dimensions
// of its policy's key, so that one key's requests never spend buckets of
// two shapes (a tenant's quota split by plan: 3 + 5 requests a day), and
// an account override names its tenant unless every principal has the
// same one (an account name is unique only per tenant).
func TestOverridesMatchKeyDimensions(t *testing.T) {
	dims := func(ds ...limitkey.Dimension) []limitkey.Dimension { return ds }
	daily := limiter.Limit{Rate: limiter.Rate{Count: 3, Per: 24 * time.Hour}, Burst: 3}
	tests := []struct {
		name   string
		key    []limitkey.Dimension
		o      policy.Override
		single bool // RateLimitConfig.SingleTenant
		want   string
	}{
		{"plan override on a tenant key (issue 24: 3 + 5 a day)", dims(limitkey.DimTenant),
			policy.Override{Plan: "pro", Limit: limiter.Limit{Rate: limiter.Rate{Count: 5, Per: 24 * time.Hour}, Burst: 5}}, false,
			`policies[0] ("p").overrides[0].plan: plan is not a dimension of the policy's key [tenant], so requests of one key with plan "pro" and without it would spend two buckets, each with its own burst: add plan to the key (a bucket per plan; a request without one then meets on_missing), or match a dimension of the key`},
		{"account override in every tenant", dims(limitkey.DimTenant, limitkey.DimAccount), policy.Override{Account: "vip"}, false,
			`policies[0] ("p").overrides[0].account: "vip" would match the account of that name in every tenant (the credentials may name several tenants, and an account name is unique only per tenant): name its tenant too`},
		{"account override, one tenant", dims(limitkey.DimAccount), policy.Override{Account: "vip"}, true, ""},
		{"account override on a tenant key, one tenant", dims(limitkey.DimTenant), policy.Override{Account: "vip"}, true,
			`policies[0] ("p").overrides[0].account: account is not a dimension of the policy's key [tenant], so requests of one key with account "vip" and without it would spend two buckets, each with its own burst: add account to the key (a bucket per account; a request without one then meets on_missing), or match a dimension of the key`},
		{"tenant override on a network key", dims(limitkey.DimNetwork), policy.Override{Tenant: "acme"}, true,
			`policies[0] ("p").overrides[0].tenant: tenant is not a dimension of the policy's key [network], so requests of one key with tenant "acme" and without it would spend two buckets, each with its own burst: add tenant to the key (a bucket per tenant; a request without one then meets on_missing), or match a dimension of the key`},
		{"tenant override on an account key", dims(limitkey.DimAccount), policy.Override{Tenant: "acme"}, true,
			`policies[0] ("p").overrides[0].tenant: tenant is not a dimension of the policy's key [account], so requests of one key with tenant "acme" and without it would spend two buckets, each with its own burst: add tenant to the key (a bucket per tenant; a request without one then meets on_missing), or match a dimension of the key`},
		{"account of a tenant on an account key", dims(limitkey.DimAccount), policy.Override{Tenant: "acme", Account: "vip"}, false,
			`policies[0] ("p").overrides[0].tenant: tenant is not a dimension of the policy's key [account], so requests of one key with tenant "acme" and without it would spend two buckets, each with its own burst: add tenant to the key (a bucket per tenant; a request without one then meets on_missing), or match a dimension of the key`},
		{"override on the global bucket", nil, policy.Override{Plan: "pro"}, false,
			`policies[0] ("p").overrides[0].plan: plan is not a dimension of the policy's key [], so requests of one key with plan "pro" and without it would spend two buckets, each with its own burst: add plan to the key (a bucket per plan; a request without one then meets on_missing), or match a dimension of the key`},
		{"account of a tenant", dims(limitkey.DimTenant, limitkey.DimAccount), policy.Override{Tenant: "acme", Account: "vip"}, false, ""},
		{"plan override on a plan key", dims(limitkey.DimTenant, limitkey.DimPlan), policy.Override{Plan: "pro"}, false, ""},
		{"tenant override on a tenant key", dims(limitkey.DimTenant, limitkey.DimOperation), policy.Override{Tenant: "acme"}, false, ""},
		{"tenant and plan", dims(limitkey.DimTenant, limitkey.DimPlan), policy.Override{Tenant: "acme", Plan: "pro"}, false,
			`policies[0] ("p").overrides[0]: set one of tenant, plan or account, or an account with its tenant (the verified attributes it matches)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := policy.Policy{Name: "p", Key: tc.key, Limit: daily, Overrides: []policy.Override{tc.o}}
			_, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Policies: []policy.Policy{p},
				Operation: func(*http.Request) string { return "op" }, SingleTenant: tc.single})
			if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
				t.Errorf("error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}

// TestAccountOverrideOfOneTenant: {tenant: acme, account: vip} gives
// acme's vip its limit, and beta's vip (another account of the same name)
// the policy's. With SingleTenant, {account: vip} matches the vip of the
// one tenant (its rows use tenant "solo"); {tenant: acme, account: vip}
// before it still wins for acme's.
func TestAccountOverrideOfOneTenant(t *testing.T) {
	per := func(os ...policy.Override) []policy.Policy {
		return []policy.Policy{{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount},
			Limit: limit("1/m", 3), Overrides: os}}
	}
	acmeVIP := policy.Override{Tenant: "acme", Account: "vip", Limit: limiter.Limit{Burst: 5}}
	h := overrideStack(t, per(acmeVIP))
	single := overrideStackOf(t, middleware.RateLimitConfig{SingleTenant: true, Policies: per(acmeVIP, policy.Override{Account: "vip", Limit: limiter.Limit{Burst: 2}})})
	for _, tc := range []struct {
		h        http.Handler
		who      string
		admitted int
		override string
	}{
		{h, "acme:free:vip", 5, `"tenant=acme|account=vip"`},
		{h, "beta:free:vip", 3, `null`},
		{h, "acme:free:bob", 3, `null`},
		{single, "solo:free:vip", 2, `"account=vip"`},
		{single, "acme:free:vip", 5, `"tenant=acme|account=vip"`},
		{single, "solo:free:bob", 3, `null`},
	} {
		h := tc.h
		first := post(h, tc.who, 0)
		if got := 1 + admitted(h, tc.who, 10); got != tc.admitted {
			t.Errorf("%s: admitted %d; want %d", tc.who, got, tc.admitted)
		}
		var rec []map[string]json.RawMessage
		_ = json.Unmarshal([]byte(first.Header().Get("X-Record")), &rec)
		if len(rec) != 1 || string(rec[0]["override"]) != tc.override {
			t.Errorf("%s: record %s; want override %s", tc.who, first.Header().Get("X-Record"), tc.override)
		}
	}
}
