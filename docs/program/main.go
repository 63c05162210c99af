// Command program is the complete ratekey.New program of docs/library.md
// ("A complete program"): trusted proxies, JWT verification against a JWK
// Set, a pre-auth limit per client network, a per-tenant limit with plan
// overrides, Redis shared by 3 processes with a local fallback, Prometheus
// metrics and the debug endpoint. TestDocsCompleteProgram keeps the page
// and this file the same; `go vet ./...` compiles it.
package main

import (
	"log"
	"net/http"
	"os"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/metrics"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

func main() {
	// Redis holds every budget, shared by the 3 processes of the service.
	opt, err := goredis.ParseURL(os.Getenv("REDIS_URL")) // never log the URL: it may hold a password
	if err != nil {
		log.Fatal("REDIS_URL is not a Redis URL")
	}
	opt.ContextTimeoutEnabled = true // a request's deadline bounds its Redis call
	opt.DialerRetries = 1            // a refused connection fails at once
	store, err := rkredis.New(goredis.NewClient(opt), rkredis.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}

	// Tenant and plan come only from verified tokens: the org and plan
	// claims, each limited to a list.
	auth, err := identity.NewJWTAuthenticator(identity.JWTConfig{Issuers: []identity.IssuerRecord{{
		Issuer:      "https://login.example.com/",
		TenantClaim: "org", Tenants: []string{"acme", "globex"},
		PlanClaim: "plan", Plans: []string{"free", "pro"},
		Audiences:  []string{"https://api.example.com"},
		Algorithms: []string{"RS256"},
		JWKSURL:    "https://login.example.com/.well-known/jwks.json",
	}}})
	if err != nil {
		log.Fatal(err)
	}

	m, err := metrics.New(prometheus.DefaultRegisterer)
	if err != nil {
		log.Fatal(err)
	}

	perMinute := func(n int64) limiter.Rate { return limiter.Rate{Count: n, Per: time.Minute} }
	r := chi.NewRouter()
	rk, err := ratekey.New(ratekey.Config{
		Router: r,
		// The load balancers, in 10.0.0.0/28, write X-Forwarded-For;
		// nobody else is believed (name the balancers, not the LAN).
		Proxies:       trustedproxy.Config{Rules: []trustedproxy.Rule{{From: []string{"10.0.0.0/28"}, Header: "X-Forwarded-For"}}},
		Authenticator: auth,
		Limiter:       store,
		// While Redis cannot decide, "local" policies decide here, at this
		// process's share of 3: the fleet stays within each limit.
		Fallback: memory.New(memory.Options{Replicas: 3}),
		Metrics:  m,
		// Operators read the debug endpoint from this network only,
		// connecting to the admin port directly (not through a balancer).
		DebugAllow: []string{"10.1.0.0/16"},
		Policies: []ratekey.Policy{
			// Before any signature check: a flood of bad tokens is capped
			// per client network.
			{Name: "per-network", Key: []limitkey.Dimension{limitkey.DimNetwork},
				Limit: limiter.Limit{Rate: perMinute(300), Burst: 60}, PreAuth: true},
			// Per tenant and plan; pro gets ten times as much.
			{Name: "per-plan", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimPlan},
				Limit:        limiter.Limit{Rate: perMinute(600), Burst: 120},
				OnStoreError: policy.OnStoreErrorLocal,
				Overrides:    []ratekey.Override{{Plan: "pro", Limit: limiter.Limit{Rate: perMinute(6000), Burst: 1200}}}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	r.Use(rk.Handler) // before the routes
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("report\n")) })

	// The admin port: the balancers do not forward it, and a firewall
	// opens it to the operators' network only; Debug also checks
	// DebugAllow against the peer (a loopback listener would be out of
	// the operators' reach).
	admin := http.NewServeMux()
	admin.Handle("/debug/ratekey", rk.Debug())
	admin.Handle("/metrics", promhttp.Handler())
	go func() { log.Fatal(http.ListenAndServe(":9090", admin)) }()
	log.Fatal(http.ListenAndServe(":8080", r))
}
