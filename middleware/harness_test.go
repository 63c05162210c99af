package middleware_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/policy"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/trustedproxy"
)

const testIssuer = "https://issuer.test.invalid"

// stack is a chi router wired like the demo, over the real trusted-proxy
// resolver, JWT authenticator and in-memory limiter, with a manual clock.
type stack struct {
	t       *testing.T
	clock   *clocktest.ManualClock
	lim     *memory.Limiter
	key     ed25519.PrivateKey
	handler http.Handler
	now     time.Time
}

type stackOptions struct {
	policies  []policy.Policy
	anonymous bool
	maxKeys   int
	// replicas is the memory store's Replicas.
	replicas int
	// mount: "root" puts the limiter on the root router, "" (default) on a /v1
	// sub-router, "with" inline on each route.
	mount string
	// admins are the debug endpoint's admin networks; default 192.0.2.0/24.
	admins []string
	// limited is the debug endpoint's DebugConfig.Limited.
	limited func(*http.Request) bool
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, clock: clocktest.NewManualClock(), key: priv, now: time.Now()}
	s.lim = memory.New(memory.Options{Now: s.clock.Time, MaxKeys: o.maxKeys, Replicas: o.replicas})
	res, err := trustedproxy.New(trustedproxy.Config{Rules: []trustedproxy.Rule{{From: []string{"127.0.0.1", "10.0.0.0/8"}, Header: "X-Forwarded-For"}}})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := identity.NewJWTAuthenticator(identity.JWTConfig{
		Issuers: []identity.IssuerRecord{{
			Issuer: testIssuer, Tenant: "acme", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
			Keys: []identity.VerificationKey{{KID: "k1", Key: pub}},
		}},
		Now: func() time.Time { return s.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter: s.lim, Policies: o.policies, Operation: middleware.RouteOperation(r),
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.admins == nil {
		o.admins = []string{"192.0.2.0/24"}
	}
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }
	chain := []func(http.Handler) http.Handler{
		middleware.ClientAddress(res, middleware.ClientAddressOptions{}),
		rl.PreAuthHandler, // the policies with PreAuth, if any
		middleware.Authenticate(auth, middleware.AuthOptions{Anonymous: o.anonymous}),
	}
	if o.mount == "root" {
		// Everything, unmatched requests included, passes the limiter.
		r.Use(chain...)
		r.Use(rl.Handler)
		r.Get("/v1/reports/{id}", ok)
		r.Post("/v1/export", ok)
		s.handler = r
		return s
	}
	r.Handle("/debug/ratekey", mustDebug(t, middleware.DebugConfig{
		Resolver: res, Authenticator: auth, Auth: middleware.AuthOptions{Anonymous: o.anonymous}, RateLimiter: rl, Allow: o.admins, Limited: o.limited,
	}))
	if o.mount == "with" {
		r.Route("/v1", func(v chi.Router) {
			v.With(chain...).With(rl.Handler).Get("/reports/{id}", ok)
			v.With(chain...).With(rl.Handler).Post("/export", ok)
		})
	} else {
		r.Route("/v1", func(v chi.Router) {
			v.Use(chain...)
			v.Use(rl.Handler)
			v.Get("/reports/{id}", ok)
			v.Post("/export", ok)
		})
	}
	s.handler = r
	return s
}

// token mints an EdDSA token for sub signed with the stack's key.
func (s *stack) token(sub, clientID string) string {
	s.t.Helper()
	claims := jwt.MapClaims{"iss": testIssuer, "sub": sub, "aud": "api",
		"iat": s.now.Unix(), "exp": s.now.Add(time.Hour).Unix()}
	if clientID != "" {
		claims["client_id"] = clientID
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = "k1"
	str, err := tok.SignedString(s.key)
	if err != nil {
		s.t.Fatal(err)
	}
	return str
}

type req struct {
	method, path, peer, token string
	headers                   http.Header
}

func (s *stack) do(q req) *httptest.ResponseRecorder {
	s.t.Helper()
	if q.method == "" {
		q.method = http.MethodGet
	}
	r := httptest.NewRequest(q.method, "http://example.test"+q.path, nil)
	if q.peer != "" {
		r.RemoteAddr = q.peer
	}
	for k, v := range q.headers {
		r.Header[k] = v
	}
	if q.token != "" {
		r.Header.Set("Authorization", "Bearer "+q.token)
	}
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, r)
	return w
}

func limit(rate string, burst int64) limiter.Limit {
	r, err := limiter.ParseRate(rate)
	if err != nil {
		panic(err)
	}
	return limiter.Limit{Rate: r, Burst: burst}
}

// newDemoLikeRouter has the demo's routes on a mounted sub-router.
func newDemoLikeRouter() chi.Router {
	ok := func(w http.ResponseWriter, r *http.Request) {}
	r := chi.NewRouter()
	r.Get("/healthz", ok)
	r.Handle("/any", http.HandlerFunc(ok))
	sub := chi.NewRouter()
	sub.Get("/reports/{id}", ok)
	sub.Post("/export", ok)
	r.Mount("/v1", sub)
	return r
}

// proxyResolver returns the tests' trusted-proxy policy: peers in
// 10.0.0.0/8 are proxies whose X-Forwarded-For is read.
func proxyResolver(tb testing.TB) *trustedproxy.Resolver {
	tb.Helper()
	res, err := trustedproxy.New(trustedproxy.Config{Rules: []trustedproxy.Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}}})
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// mustDebug is middleware.Debug(cfg), failing t on an error.
func mustDebug(t testing.TB, cfg middleware.DebugConfig) http.Handler {
	t.Helper()
	h, err := middleware.Debug(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
