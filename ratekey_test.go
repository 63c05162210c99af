package ratekey_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/logtest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

func perMinute(n, burst int64) limiter.Limit {
	return limiter.Limit{Rate: limiter.Rate{Count: n, Per: 60e9}, Burst: burst}
}

// TestNewRefuses: every problem of a config is listed at once, each
// naming its field.
func TestNewRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  ratekey.Config
		want string
	}{
		{"nothing", ratekey.Config{},
			"router: required (a chi router or an *http.ServeMux): operations are named by its route templates\npolicies: at least one policy is required"},
		{"not a router", ratekey.Config{Router: http.NotFoundHandler(), Policies: []ratekey.Policy{{Name: "p", Limit: perMinute(1, 1)}}},
			"router: a http.HandlerFunc is neither a chi router nor an *http.ServeMux"},
		{"account without an authenticator", ratekey.Config{Router: chi.NewRouter(), Policies: []ratekey.Policy{
			{Name: "p", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}, Limit: perMinute(1, 1)}}},
			"policies[0] (\"p\").key: dimension tenant comes from a verified credential, but no Authenticator is configured\n" +
				"policies[0] (\"p\").key: dimension account comes from a verified credential, but no Authenticator is configured"},
		{"trust everyone", ratekey.Config{Router: http.NewServeMux(),
			Proxies:  trustedproxy.Config{Rules: []trustedproxy.Rule{{From: []string{"0.0.0.0/0"}, Header: "X-Forwarded-For"}}},
			Policies: []ratekey.Policy{{Name: "p", Limit: perMinute(1, 1)}}},
			`proxies.rules[0].from[0] "0.0.0.0/0": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`},
		{"cost above burst", ratekey.Config{Router: http.NewServeMux(), Policies: []ratekey.Policy{{Name: "export", Limit: perMinute(1, 2), Cost: 3}}},
			`policies[0] ("export").cost: 3 exceeds burst 2, so no request could ever pass`},
		{"bad debug network", ratekey.Config{Router: http.NewServeMux(), Policies: []ratekey.Policy{{Name: "p", Limit: perMinute(1, 1)}},
			DebugAllow: []string{"10.0.0.0/33"}},
			`debug_allow[0] "10.0.0.0/33": not a CIDR prefix: the length must be 0..32 for IPv4`},
	} {
		m, err := ratekey.New(c.cfg)
		if m != nil || err == nil || err.Error() != c.want {
			t.Errorf("%s: New = %v, %v\nwant error:\n%s", c.name, m, err, c.want)
		}
	}
	var noMux *chi.Mux
	var noAuth *identity.JWTAuthenticator
	if _, err := ratekey.PerClient(noMux, "5/s", 1); err == nil || err.Error() != "router: required (a chi router or an *http.ServeMux): operations are named by its route templates" {
		t.Errorf("PerClient with a nil *chi.Mux: %v", err)
	}
	if _, err := ratekey.PerAccount(http.NewServeMux(), noAuth, "5/s", 1); err == nil || err.Error() != "auth: required: PerAccount limits verified accounts (identity.NewJWTAuthenticator, identity.NewAPIKeyAuthenticator)" {
		t.Errorf("PerAccount with a nil authenticator: %v", err)
	}
	if _, err := ratekey.New(ratekey.Config{Router: http.NewServeMux(), Authenticator: noAuth, Policies: []ratekey.Policy{{Name: "p", Limit: perMinute(1, 1)}}}); err == nil ||
		err.Error() != "authenticator: a nil *identity.JWTAuthenticator (was the error of its constructor ignored?)" {
		t.Errorf("New with a nil authenticator: %v", err)
	}
	if _, err := ratekey.PerClient(http.NewServeMux(), "5/x", 1); err == nil || err.Error() != `rate: limiter: invalid rate "5/x": unit "x" is not s, m, h or d` {
		t.Errorf("PerClient with a bad rate: %v", err)
	}
}

// TestSameCasesChiAndServeMux: the front door keys a request by the same
// operation whichever router it is given, and shares one bucket between
// ids, never one per raw path.
func TestSameCasesChiAndServeMux(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	cr := chi.NewRouter()
	cr.Get("/v1/reports/{id}", ok)
	cr.Post("/v1/export", ok)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/reports/{id}", ok)
	mux.Handle("POST /v1/export", ok)
	policies := []ratekey.Policy{{Name: "per-op", Key: []limitkey.Dimension{limitkey.DimOperation}, Limit: perMinute(1, 2)}}
	for name, router := range map[string]http.Handler{"chi": cr, "ServeMux": mux} {
		rk, err := ratekey.New(ratekey.Config{Router: router, Policies: policies})
		if err != nil {
			t.Fatal(err)
		}
		h := rk.Handler(router)
		for i, c := range []struct {
			method, path string
			want         int
			key          string
		}{
			{"GET", "/v1/reports/1", 200, "per-op|operation=GET /v1/reports/{id}"},
			{"GET", "/v1/reports/2", 200, "per-op|operation=GET /v1/reports/{id}"},
			{"GET", "/v1/reports/3", 429, "per-op|operation=GET /v1/reports/{id}"},
			{"POST", "/v1/export", 200, "per-op|operation=POST /v1/export"},
			{"GET", "/nope/1", 404, "per-op|operation=UNMATCHED"},
			{"GET", "/nope/2", 404, "per-op|operation=UNMATCHED"},
			{"GET", "/nope/3", 429, "per-op|operation=UNMATCHED"},
		} {
			req := httptest.NewRequest(c.method, c.path, nil)
			req.RemoteAddr = "192.0.2.1:1"
			rec := rk.Check(req)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != c.want || len(rec.Policies) != 1 || rec.Policies[0].Key != c.key {
				t.Errorf("%s #%d %s %s: status %d, Check %+v; want %d and key %q", name, i, c.method, c.path, w.Code, rec.Policies, c.want, c.key)
			}
		}
	}
}

// TestCheckSpendsNothing: Check shows the would-be decision and charges
// nothing; Debug answers the listed admin networks only.
func TestCheckSpendsNothing(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /x", func(http.ResponseWriter, *http.Request) {})
	rk, err := ratekey.New(ratekey.Config{Router: mux, DebugAllow: []string{"127.0.0.1"},
		Policies: []ratekey.Policy{{Name: "p", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: perMinute(1, 1)}}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/x", nil)
	req.RemoteAddr = "192.0.2.1:1"
	for range 3 {
		if rec := rk.Check(req); rec.Policies[0].Decision != decide.DecisionPassed || rec.Client == nil || *rec.Client != "192.0.2.1" {
			t.Fatalf("Check = %+v", rec)
		}
	}
	for _, c := range []struct {
		peer string
		want int
	}{{"127.0.0.1:5", 200}, {"192.0.2.1:5", 404}} {
		dreq := httptest.NewRequest("GET", "/debug?path=/x", nil)
		dreq.RemoteAddr = c.peer
		w := httptest.NewRecorder()
		rk.Debug().ServeHTTP(w, dreq)
		if w.Code != c.want {
			t.Errorf("Debug from %s: %d, want %d", c.peer, w.Code, c.want)
		}
	}
}

// TestChiSubRouter: given a chi sub-router (and mounted on it, or on the
// root), the middleware still names operations by the full route template,
// never UNMATCHED for every request.
func TestChiSubRouter(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	policies := []ratekey.Policy{{Name: "per-op", Key: []limitkey.Dimension{limitkey.DimOperation}, Limit: perMinute(1, 5)}}
	for _, mountOnRoot := range []bool{false, true} {
		root := chi.NewRouter()
		sub := chi.NewRouter()
		rk, err := ratekey.New(ratekey.Config{Router: sub, Policies: policies, DecisionHeader: true})
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		record := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen = append(seen, w.Header().Get("RateLimit"))
				next.ServeHTTP(w, r)
			})
		}
		if mountOnRoot {
			root.Use(rk.Handler, record)
		} else {
			sub.Use(rk.Handler, record)
		}
		sub.Get("/reports/{id}", ok)
		sub.Get("/other", ok)
		root.Mount("/v1", sub)
		for _, path := range []string{"/v1/reports/1", "/v1/reports/2", "/v1/other"} {
			w := httptest.NewRecorder()
			req := httptest.NewRequest("GET", path, nil)
			req.RemoteAddr = "192.0.2.1:1"
			root.ServeHTTP(w, req)
			if w.Code != 200 {
				t.Fatalf("mounted on root %v: %s: %d", mountOnRoot, path, w.Code)
			}
		}
		// The two reports spent their route's bucket, the other route its
		// own (named UNMATCHED, all three would share one).
		if want := []string{`"per-op";r=4;t=60`, `"per-op";r=3;t=120`, `"per-op";r=4;t=60`}; len(seen) != 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
			t.Errorf("mounted on root %v: RateLimit %q, want %q", mountOnRoot, seen, want)
		}
		// Check, outside any routing context, names it by the root live
		// requests came through.
		req := httptest.NewRequest("GET", "/v1/reports/9", nil)
		req.RemoteAddr = "192.0.2.1:1"
		if rec := rk.Check(req); rec.Operation != "GET /v1/reports/{id}" {
			t.Errorf("Check: operation %q", rec.Operation)
		}
	}
}

// TestNewOverridesMatchKey: New refuses an account override that would
// apply in every tenant when the Authenticator's credentials may name
// several tenants (a tenant claim, API keys), accepts it when they name
// one, and refuses an override on a dimension the policy's key lacks (a
// tenant's quota split by plan), or a tenant the Authenticator's complete
// list lacks (an incomplete list, with API keys, refuses nothing), each
// naming its field.
func TestNewOverridesMatchKey(t *testing.T) {
	jwtAuth := oneIssuer(t)
	oneTenant := jwtAuth(identity.IssuerRecord{Tenant: "acme"})
	twoTenants := jwtAuth(identity.IssuerRecord{TenantClaim: "org", Tenants: []string{"acme", "beta"}})
	store, err := identity.NewMemoryAPIKeyStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := identity.NewAPIKeyAuthenticator(identity.APIKeyConfig{Store: store, Pepper: []byte(strings.Repeat("p", 32))})
	if err != nil {
		t.Fatal(err)
	}
	withKeys, err := identity.NewCombinedAuthenticator(identity.CombinedConfig{JWT: oneTenant, APIKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	perAccount := []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}
	daily := func(n int64) limiter.Limit {
		return limiter.Limit{Rate: limiter.Rate{Count: n, Per: 24 * time.Hour}, Burst: n}
	}
	vip := `policies[0] ("p").overrides[0].account: "vip" would match the account of that name in every tenant (the credentials may name several tenants, and an account name is unique only per tenant): name its tenant too`
	for _, c := range []struct {
		name string
		auth identity.Authenticator
		p    ratekey.Policy
		want string
	}{
		{"account override, tenant claim", twoTenants, ratekey.Policy{Name: "p", Key: perAccount, Limit: daily(3),
			Overrides: []policy.Override{{Account: "vip", Limit: limiter.Limit{Burst: 7}}}}, vip},
		{"account override, API keys", withKeys, ratekey.Policy{Name: "p", Key: perAccount, Limit: daily(3),
			Overrides: []policy.Override{{Account: "vip", Limit: limiter.Limit{Burst: 7}}}}, vip},
		{"account override, one tenant", oneTenant, ratekey.Policy{Name: "p", Key: perAccount, Limit: daily(3),
			Overrides: []policy.Override{{Account: "vip", Limit: limiter.Limit{Burst: 7}}}}, ""},
		{"account of a tenant, tenant claim", twoTenants, ratekey.Policy{Name: "p", Key: perAccount, Limit: daily(3),
			Overrides: []policy.Override{{Tenant: "acme", Account: "vip", Limit: limiter.Limit{Burst: 7}}}}, ""},
		{"plan override on a tenant key", withKeys, ratekey.Policy{Name: "p", Key: []limitkey.Dimension{limitkey.DimTenant}, Limit: daily(3),
			Overrides: []policy.Override{{Plan: "pro", Limit: daily(5)}}},
			`policies[0] ("p").overrides[0].plan: plan is not a dimension of the policy's key [tenant], so requests of one key with plan "pro" and without it would spend two buckets, each with its own burst: add plan to the key (a bucket per plan; a request without one then meets on_missing), or match a dimension of the key`},
		{"override on a tenant no issuer names", twoTenants, ratekey.Policy{Name: "p", Key: perAccount, Limit: daily(3),
			Overrides: []policy.Override{{Tenant: "Acme", Limit: daily(5)}}},
			`policies[0] ("p").overrides[0].tenant: "Acme" is none of the 2 tenants the Authenticator names, so it never matches`},
		{"priority on a tenant no issuer names", oneTenant, ratekey.Policy{Name: "p", Limit: limiter.Limit{MaxInFlightCeiling: 8},
			Priorities: []policy.Priority{{Tenant: "beta", Class: policy.ClassCritical}}},
			`policies[0] ("p").priorities[0].tenant: "beta" is none of the 1 tenants the Authenticator names, so it never matches`},
		{"override on an unlisted tenant, API keys", withKeys, ratekey.Policy{Name: "p", Key: perAccount, Limit: daily(3),
			Overrides: []policy.Override{{Tenant: "beta", Limit: daily(5)}}}, ""},
	} {
		m, err := ratekey.New(ratekey.Config{Router: http.NewServeMux(), Authenticator: c.auth, Policies: []ratekey.Policy{c.p}})
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && (m != nil || got != c.want) {
			t.Errorf("%s: New = %v, %v\nwant error:\n%s", c.name, m, err, c.want)
		}
	}
}

// TestNewRefusesTenantlessAccountKeys: with credentials that name several
// tenants, a policy keyed by account or credential without tenant is
// refused (one tenant's alice would spend another's budget), as demo
// check refuses it; with one tenant, or with tenant in the key, it is
// accepted.
func TestNewRefusesTenantlessAccountKeys(t *testing.T) {
	jwtAuth := oneIssuer(t)
	oneTenant := jwtAuth(identity.IssuerRecord{Tenant: "acme"})
	twoTenants := jwtAuth(identity.IssuerRecord{TenantClaim: "org", Tenants: []string{"acme", "beta"}})
	lim := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 3}
	for _, c := range []struct {
		name string
		auth identity.Authenticator
		key  []limitkey.Dimension
		want string
	}{
		{"account, two tenants", twoTenants, []limitkey.Dimension{limitkey.DimAccount},
			"policies[0] (\"p\").key: account and credential are unique only per tenant, and the Authenticator names 2 tenants: add tenant to the key"},
		{"credential, two tenants", twoTenants, []limitkey.Dimension{limitkey.DimCredential, limitkey.DimOperation},
			"policies[0] (\"p\").key: account and credential are unique only per tenant, and the Authenticator names 2 tenants: add tenant to the key"},
		{"tenant and account, two tenants", twoTenants, []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}, ""},
		{"account, one tenant", oneTenant, []limitkey.Dimension{limitkey.DimAccount}, ""},
	} {
		_, err := ratekey.New(ratekey.Config{Router: chi.NewRouter(), Authenticator: c.auth,
			Policies: []ratekey.Policy{{Name: "p", Key: c.key, Limit: lim}}})
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
}

// TestNewWithHollowAuthenticators: New neither panics nor refuses
// anything on an authenticator whose tenant list it cannot read (a wrapper
// around a nil one, whose constructor's error was ignored; a zero value),
// and names a typed nil one.
func TestNewWithHollowAuthenticators(t *testing.T) {
	type wrapJWT struct{ *identity.JWTAuthenticator }
	type wrapCombined struct {
		*identity.CombinedAuthenticator
	}
	var nilJWT *identity.JWTAuthenticator
	daily := limiter.Limit{Rate: limiter.Rate{Count: 5, Per: 24 * time.Hour}, Burst: 5}
	p := ratekey.Policy{Name: "p", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}, Limit: daily,
		Overrides: []policy.Override{{Tenant: "partner", Account: "vip", Limit: daily}}}
	for _, c := range []struct {
		name string
		auth identity.Authenticator
		want string
	}{
		{"typed nil", nilJWT, "authenticator: a nil *identity.JWTAuthenticator (was the error of its constructor ignored?)\n" +
			`policies[0] ("p").key: dimension tenant comes from a verified credential, but no Authenticator is configured` + "\n" +
			`policies[0] ("p").key: dimension account comes from a verified credential, but no Authenticator is configured`},
		{"wrapper of a nil JWTAuthenticator", wrapJWT{}, "<nil>"},
		{"pointer to a wrapper of a nil one", &wrapJWT{}, "<nil>"},
		{"wrapper of a nil CombinedAuthenticator", wrapCombined{}, "<nil>"},
		{"zero JWTAuthenticator", &identity.JWTAuthenticator{}, "<nil>"},
		{"zero CombinedAuthenticator", &identity.CombinedAuthenticator{}, "<nil>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ratekey.New(ratekey.Config{Router: http.NewServeMux(), Authenticator: c.auth, Policies: []ratekey.Policy{p}})
			if got := fmt.Sprint(err); got != c.want {
				t.Errorf("New: %s\nwant %s", got, c.want)
			}
		})
	}
}

// oneIssuer returns a constructor of JWT authenticators of one issuer
// record (its tenant and plan fields as given; issuer, audience, EdDSA
// and a fresh key filled in).
func oneIssuer(t *testing.T) func(identity.IssuerRecord) *identity.JWTAuthenticator {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return func(rec identity.IssuerRecord) *identity.JWTAuthenticator {
		rec.Issuer, rec.Audiences, rec.Algorithms = "https://issuer.invalid", []string{"api"}, []string{"EdDSA"}
		rec.Keys = []identity.VerificationKey{{KID: "k1", Key: pub}}
		a, err := identity.NewJWTAuthenticator(identity.JWTConfig{Issuers: []identity.IssuerRecord{rec}})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}

// TestNewPassesTheLimiterSettings: the Config fields the rate limiter
// takes reach it: a custom dimension keys a policy, MaxWait refuses a
// policy that could wait longer, SamplePassed logs PASSED decisions.
func TestNewPassesTheLimiterSettings(t *testing.T) {
	region := limitkey.Dimension("region")
	var logs logtest.Lines
	r := chi.NewRouter()
	m, err := ratekey.New(ratekey.Config{Router: r, Logger: slog.New(&logs), SamplePassed: 1,
		Custom: map[limitkey.Dimension]func(*http.Request) (string, bool){region: func(r *http.Request) (string, bool) {
			return r.Header.Get("X-Region"), true
		}},
		Policies: []ratekey.Policy{{Name: "p", Key: []limitkey.Dimension{region}, Limit: perMinute(10, 10)}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(m.Handler)
	r.Get("/v1/x", func(http.ResponseWriter, *http.Request) {})
	req := httptest.NewRequest(http.MethodGet, "/v1/x", nil)
	req.Header.Set("X-Region", "eu")
	r.ServeHTTP(httptest.NewRecorder(), req)
	if rec := m.Check(req); len(rec.Policies) != 1 || rec.Policies[0].Key != "p|region=eu" {
		t.Errorf("Check: %+v; want the key p|region=eu", rec.Policies)
	}
	if got := logs.Get(); len(got) != 1 || got[0] != "INFO ratekey decision policy=p decision=PASSED key=p|region=eu operation=GET /v1/x cost=1 remaining=9 store=memory client=192.0.2.1 network=192.0.2.1/32" {
		t.Errorf("logged %q; want one PASSED line (SamplePassed 1)", got)
	}
	slow := ratekey.Policy{Name: "slow", Key: []limitkey.Dimension{limitkey.DimNetwork},
		Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 5, DelayAfter: 1}}
	_, err = ratekey.New(ratekey.Config{Router: chi.NewRouter(), MaxWait: 2 * time.Second, Policies: []ratekey.Policy{slow}})
	if err == nil || err.Error() != `policies[0] ("slow").delay_after: a request may have to wait up to 4s (burst beyond delay_after at 1/s), longer than 2s (RateLimitConfig.MaxWait): set max_delay, a larger delay_after or a faster rate` {
		t.Errorf("New with MaxWait 2s and a 4 s delay: %v; want a refusal", err)
	}
	if _, err := ratekey.New(ratekey.Config{Router: chi.NewRouter(), Policies: []ratekey.Policy{slow}}); err != nil {
		t.Errorf("New with the default MaxWait (50 s) and a 4 s delay: %v", err)
	}
}
