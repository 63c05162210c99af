package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// A chi API behind one trusted proxy (10.0.0.1), limited per client network
// and operation. A client that forges X-Forwarded-For still spends its own
// budget, and every report id shares the operation's budget.
func ExampleRateLimiter_Handler() {
	resolver, err := trustedproxy.New(trustedproxy.Config{
		Rules: []trustedproxy.Rule{{From: []string{"10.0.0.1"}, Header: "X-Forwarded-For"}},
	})
	if err != nil {
		panic(err)
	}
	rate, _ := limiter.ParseRate("1/m")
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter: memory.New(memory.Options{}),
		Policies: []policy.Policy{{
			Name:  "per-network",
			Key:   []limitkey.Dimension{limitkey.DimNetwork, limitkey.DimOperation},
			Limit: limiter.Limit{Rate: rate, Burst: 2},
		}},
		Operation: middleware.RouteOperation(r),
	})
	if err != nil {
		panic(err)
	}
	r.Use(middleware.ClientAddress(resolver, middleware.ClientAddressOptions{}))
	r.Use(rl.Handler)
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		c, _ := middleware.ClientFrom(r.Context())
		fmt.Fprintf(w, "report %s for %s", chi.URLParam(r, "id"), c.Client)
	})

	for i, forged := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
		req := httptest.NewRequest("GET", fmt.Sprintf("/v1/reports/%d", i), nil)
		req.RemoteAddr = "10.0.0.1:4000"                          // the trusted proxy
		req.Header.Set("X-Forwarded-For", forged+", 203.0.113.9") // the proxy appended the true client
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"), w.Body.String())
	}
	// Output:
	// 200 "per-network";r=1;t=60  report 0 for 203.0.113.9
	// 200 "per-network";r=0;t=120  report 1 for 203.0.113.9
	// 429 "per-network";r=0;t=120 60 {"type":"urn:ratekey:problem:rate-limited","title":"Rate limit exceeded","status":429,"detail":"policy per-network (burst 2, refill 1/m) has no room for this request; retry in 60 s","policy":"per-network","violated-policies":["per-network"]}
}

// An LLM proxy limited in the units that matter: 100 000 tokens a day per
// client network. Each request reserves 500 tokens at admission; the
// handler reads the usage from the upstream's response and reports it;
// the reservation is replaced by it when the handler returns (a refund
// below it, a debt above it). The RateLimit field describes the
// reservation: it goes out before the body.
func ExampleReportCost() {
	rate, _ := limiter.ParseRate("100000/d")
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter: memory.New(memory.Options{}),
		Policies: []policy.Policy{{
			Name:   "llm-tokens",
			Key:    []limitkey.Dimension{limitkey.DimNetwork},
			Limit:  limiter.Limit{Rate: rate, Burst: 100000},
			Cost:   500, // the reservation: an estimate
			Settle: true,
		}},
		Operation: middleware.RouteOperation(r),
	})
	if err != nil {
		panic(err)
	}
	resolver, _ := trustedproxy.New(trustedproxy.Config{})
	r.Use(middleware.ClientAddress(resolver, middleware.ClientAddressOptions{}), rl.Handler)
	r.Post("/v1/complete", func(w http.ResponseWriter, r *http.Request) {
		usage := int64(120) // e.g. the upstream's usage.total_tokens
		if err := middleware.ReportCost(r.Context(), "llm-tokens", usage); err != nil {
			panic(err)
		}
		fmt.Fprintf(w, "%d tokens", usage)
	})

	for range 2 {
		req := httptest.NewRequest("POST", "/v1/complete", nil)
		req.RemoteAddr = "198.51.100.7:4000"
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"), w.Body.String())
	}
	// Output:
	// 200 "llm-tokens";r=99500;t=432 120 tokens
	// 200 "llm-tokens";r=99380;t=536 120 tokens
}
