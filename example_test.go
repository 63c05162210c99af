package ratekey_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// serve sends one request from the load balancer 10.0.0.11 on behalf of
// the client 203.0.113.7, which forged the X-Forwarded-For entry it sent
// (the load balancer appends the address it saw), and prints what the
// client gets.
func serve(h http.Handler, path, forged string) {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = "10.0.0.11:51234"
	req.Header.Set("X-Forwarded-For", forged+", 203.0.113.7")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Header().Get("RateLimit"), w.Header().Get("RateLimit-Policy"))
	if w.Code != http.StatusOK {
		fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
		fmt.Print(w.Header().Get("Content-Type"), " ", w.Body.String())
	}
}

// A chi router limited per client network behind one load balancer: the
// client forges a new X-Forwarded-For on every request, and still spends
// one budget (2 requests, then 1 a minute).
func ExamplePerClient_chi() {
	r := chi.NewRouter()
	limit, err := ratekey.PerClient(r, "1/m", 2, "10.0.0.11") // 10.0.0.11: your load balancer
	if err != nil {
		log.Fatal(err)
	}
	r.Use(limit)
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "report") })

	for i, forged := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
		serve(r, fmt.Sprintf("/v1/reports/%d", i), forged)
	}
	// Output:
	// 200 "per-client";r=1;t=60 "per-client";q=2;w=120
	// 200 "per-client";r=0;t=120 "per-client";q=2;w=120
	// 429 "per-client";r=0;t=120 "per-client";q=2;w=120
	// Retry-After: 60
	// application/problem+json {"type":"urn:ratekey:problem:rate-limited","title":"Rate limit exceeded","status":429,"detail":"policy per-client (burst 2, refill 1/m) has no room for this request; retry in 60 s","policy":"per-client","violated-policies":["per-client"]}
}

// The same limit on a Go 1.22+ http.ServeMux: the middleware wraps the
// mux it was given.
func ExamplePerClient_serveMux() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/reports/{id}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "report") })
	limit, err := ratekey.PerClient(mux, "1/m", 2, "10.0.0.11") // 10.0.0.11: your load balancer
	if err != nil {
		log.Fatal(err)
	}
	h := limit(mux) // http.ListenAndServe(addr, h)

	for i, forged := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
		serve(h, fmt.Sprintf("/v1/reports/%d", i), forged)
	}
	// Output:
	// 200 "per-client";r=1;t=60 "per-client";q=2;w=120
	// 200 "per-client";r=0;t=120 "per-client";q=2;w=120
	// 429 "per-client";r=0;t=120 "per-client";q=2;w=120
	// Retry-After: 60
	// application/problem+json {"type":"urn:ratekey:problem:rate-limited","title":"Rate limit exceeded","status":429,"detail":"policy per-client (burst 2, refill 1/m) has no room for this request; retry in 60 s","policy":"per-client","violated-policies":["per-client"]}
}

// account returns an HMAC-verified JWT authenticator for the issuer
// https://issuer.example (tenant "acme") and a function minting its tokens.
// In production, use your identity provider's public keys or JWK Set.
func account() (identity.Authenticator, func(sub string) string) {
	secret := []byte("an example secret of 32 bytes!!!")
	auth, err := identity.NewJWTAuthenticator(identity.JWTConfig{Issuers: []identity.IssuerRecord{{
		Issuer: "https://issuer.example", Tenant: "acme", Audiences: []string{"api"}, Algorithms: []string{"HS256"},
		Keys: []identity.VerificationKey{{KID: "k1", Key: secret}},
	}}})
	if err != nil {
		log.Fatal(err)
	}
	mint := func(sub string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "https://issuer.example", "aud": "api", "sub": sub,
			"exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(secret)
		if err != nil {
			log.Fatal(err)
		}
		return s
	}
	return auth, mint
}

// call sends a request for the verified account of token (none when
// empty) through the load balancer, the client forging X-Forwarded-For,
// and prints the status, the RateLimit field, Retry-After and
// WWW-Authenticate when present, and a plain-text body.
func call(h http.Handler, path, token string) {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = "10.0.0.11:51234"
	req.Header.Set("X-Forwarded-For", "198.51.100.9, 203.0.113.7")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	line := fmt.Sprint(w.Code)
	for _, f := range []string{"RateLimit", "Retry-After", "WWW-Authenticate"} {
		if v := w.Header().Get(f); v != "" {
			line += " " + f + ": " + v
		}
	}
	if w.Code != http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		line += " " + strings.TrimSpace(w.Body.String())
	}
	fmt.Println(line)
}

// A chi router limited per verified account and operation: alice's third
// report in a minute is refused; bob, behind the same load balancer, keeps
// his own budget; a request without a token is a 401, never charged to
// anyone.
func ExamplePerAccount_chi() {
	auth, mint := account()
	r := chi.NewRouter()
	limit, err := ratekey.PerAccount(r, auth, "1/m", 2, "10.0.0.11")
	if err != nil {
		log.Fatal(err)
	}
	r.Use(limit)
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "report") })

	alice, bob := mint("alice"), mint("bob")
	call(r, "/v1/reports/1", alice)
	call(r, "/v1/reports/2", alice)
	call(r, "/v1/reports/3", alice)
	call(r, "/v1/reports/1", bob)
	call(r, "/v1/reports/1", "")
	// Output:
	// 200 RateLimit: "per-account";r=1;t=60
	// 200 RateLimit: "per-account";r=0;t=120
	// 429 RateLimit: "per-account";r=0;t=120 Retry-After: 60
	// 200 RateLimit: "per-account";r=1;t=60
	// 401 WWW-Authenticate: Bearer
}

// The same limit on a Go 1.22+ http.ServeMux.
func ExamplePerAccount_serveMux() {
	auth, mint := account()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/reports/{id}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "report") })
	limit, err := ratekey.PerAccount(mux, auth, "1/m", 2, "10.0.0.11")
	if err != nil {
		log.Fatal(err)
	}
	h := limit(mux)

	alice, bob := mint("alice"), mint("bob")
	call(h, "/v1/reports/1", alice)
	call(h, "/v1/reports/2", alice)
	call(h, "/v1/reports/3", alice)
	call(h, "/v1/reports/1", bob)
	call(h, "/v1/reports/1", "")
	// Output:
	// 200 RateLimit: "per-account";r=1;t=60
	// 200 RateLimit: "per-account";r=0;t=120
	// 429 RateLimit: "per-account";r=0;t=120 Retry-After: 60
	// 200 RateLimit: "per-account";r=1;t=60
	// 401 WWW-Authenticate: Bearer
}

// New composes the whole chain: a pre-auth limit per client network (so
// a flood of bad tokens is capped before any signature check; it stays
// charged when a later policy refuses), then one per verified account and
// operation, which anonymous requests skip (OnMissingSkip), and a custom
// answer to refusals.
func ExampleNew_chi() {
	auth, mint := account()
	perMinute := func(n int64) limiter.Rate { return limiter.Rate{Count: n, Per: time.Minute} }
	r := chi.NewRouter()
	rk, err := ratekey.New(ratekey.Config{
		Router:        r,
		Proxies:       trustedproxy.Config{Rules: []trustedproxy.Rule{{From: []string{"10.0.0.11"}, Header: "X-Forwarded-For"}}},
		Authenticator: auth,
		Anonymous:     true,
		Policies: []ratekey.Policy{
			{Name: "per-network", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limiter.Limit{Rate: perMinute(1), Burst: 3}, PreAuth: true},
			{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount, limitkey.DimOperation},
				Limit: limiter.Limit{Rate: perMinute(1), Burst: 1}, OnMissing: policy.OnMissingSkip},
		},
		Deny: func(w http.ResponseWriter, _ *http.Request, status int, ev *decide.Evaluation) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(status)
			fmt.Fprintf(w, "slow down (%s):", ev.Decision)
			for i := range ev.Policies {
				if res := &ev.Policies[i]; res.Decision == decide.DecisionRejected {
					fmt.Fprintf(w, " %s", res.Policy)
					if secs, ok := res.RetryAfterSeconds(); ok {
						fmt.Fprintf(w, " in %d s", secs)
					}
				}
			}
			fmt.Fprintln(w)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	r.Use(rk.Handler)
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "report") })

	alice := mint("alice")
	call(r, "/v1/reports/1", alice)
	call(r, "/v1/reports/2", alice) // per-account refuses
	call(r, "/v1/reports/3", "")    // anonymous: per-network only
	call(r, "/v1/reports/4", "")    // per-network's burst of 3 is spent
	// Output:
	// 200 RateLimit: "per-network";r=2;t=60, "per-account";r=0;t=60
	// 429 RateLimit: "per-network";r=1;t=120, "per-account";r=0;t=60 Retry-After: 60 slow down (REJECTED): per-account in 60 s
	// 200 RateLimit: "per-network";r=0;t=180
	// 429 RateLimit: "per-network";r=0;t=180 Retry-After: 60 slow down (REJECTED): per-network in 60 s
}
