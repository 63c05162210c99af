package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// anonymousAuth admits every request as the anonymous principal.
type anonymousAuth struct{}

func (anonymousAuth) Authenticate(*http.Request) (limitkey.Principal, error) {
	return limitkey.Principal{}, identity.ErrNoCredential
}

// TestChainAllocs pins ratekey's own allocations per request: the whole
// chain (ClientAddress with a 3-hop X-Forwarded-For, Authenticate,
// RateLimiter with two policies on the memory store, RateLimit fields)
// costs at most 2 allocations more than the same chi router without it,
// whether it runs on the root router or on a mounted sub-router: the
// request state (which is also the context layer, and holds the keys and
// response field values) and the request copy that carries it. The rate
// limiter's working memory is pooled, and the operation is looked up in
// the router chi is routing without allocating.
func TestChainAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	ok := func(w http.ResponseWriter, r *http.Request) {}
	res := proxyResolver(t)
	req := httptest.NewRequest(http.MethodGet, "/v1/reports/7", nil)
	req.RemoteAddr = "10.0.0.1:1234"
	req.Header.Set("X-Forwarded-For", "198.51.100.7, 10.0.0.3, 10.0.0.2")
	for _, mounted := range []bool{false, true} {
		t.Run(fmt.Sprintf("mounted=%v", mounted), func(t *testing.T) {
			// route registers the route on r, on a /v1 sub-router when
			// mounted, behind mws.
			route := func(r chi.Router, mws ...func(http.Handler) http.Handler) {
				if !mounted {
					r.Use(mws...)
					r.Get("/v1/reports/{id}", ok)
					return
				}
				r.Route("/v1", func(v chi.Router) {
					v.Use(mws...)
					v.Get("/reports/{id}", ok)
				})
			}
			bare := chi.NewRouter()
			route(bare)
			limited := chi.NewRouter()
			rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
				Operation: middleware.RouteOperation(limited), Policies: []policy.Policy{
					perNetwork("1000000/s", 1000000),
					{Name: "per-operation", Key: []limitkey.Dimension{limitkey.DimOperation}, Limit: limit("1000000/s", 1000000)},
				}})
			if err != nil {
				t.Fatal(err)
			}
			route(limited, middleware.ClientAddress(res, middleware.ClientAddressOptions{}), middleware.Authenticate(anonymousAuth{}, middleware.AuthOptions{Anonymous: true}), rl.Handler)

			w := &discardWriter{h: http.Header{}}
			run := func(h http.Handler) float64 {
				return testing.AllocsPerRun(200, func() {
					clear(w.h)
					h.ServeHTTP(w, req)
				})
			}
			base, chain := run(bare), run(limited)
			if w.code != 0 && w.code != http.StatusOK {
				t.Fatalf("status %d", w.code)
			}
			if len(w.h["Ratelimit"]) != 1 {
				t.Fatalf("no RateLimit field: %v", w.h)
			}
			if got := chain - base; got > 2+raceSlack {
				t.Errorf("the ratekey chain costs %v allocations per request over bare chi (%v); want at most %d", got, base, 2+raceSlack)
			}
			t.Logf("bare chi %v allocs, with ratekey %v", base, chain)
		})
	}
}

// TestSettleAllocs: a request whose policy settles (a reservation, the
// handler's ReportCost, the settle when it returns) allocates two more
// times than the same request with a fixed cost, on the memory store, and
// no more: its handler's settle scope (the context layer that tells its
// reports from those of a sibling evaluation or an outer phase) and the
// request copy that carries it.
func TestSettleAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	res := proxyResolver(t)
	req := httptest.NewRequest(http.MethodPost, "/v1/complete", nil)
	req.RemoteAddr = "198.51.100.7:1234"
	build := func(settle bool) http.Handler {
		r := chi.NewRouter()
		p := perNetwork("1000000/s", 1000000)
		p.Cost, p.Settle = 500, settle
		rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
			Operation: middleware.RouteOperation(r), Policies: []policy.Policy{p}})
		if err != nil {
			t.Fatal(err)
		}
		r.Use(middleware.ClientAddress(res, middleware.ClientAddressOptions{}), rl.Handler)
		r.Post("/v1/complete", func(w http.ResponseWriter, r *http.Request) {
			if settle {
				if err := middleware.ReportCost(r.Context(), "per-network", 100); err != nil {
					t.Error(err)
				}
			}
		})
		return r
	}
	w := &discardWriter{h: http.Header{}}
	run := func(h http.Handler) float64 {
		return testing.AllocsPerRun(200, func() {
			clear(w.h)
			h.ServeHTTP(w, req)
		})
	}
	fixed, settling := run(build(false)), run(build(true))
	if settling > fixed+2+raceSlack {
		t.Errorf("a settling request: %v allocations; a fixed-cost one %v; want at most 2 more", settling, fixed)
	}
	t.Logf("fixed cost %v allocs, settling %v", fixed, settling)
}

// TestAdaptiveAllocs: an adaptive cap keyed on operation, beside a token
// bucket, costs the chain no allocation per request: the cap is found by
// operation without allocating once it exists, its slot is one
// compare-and-swap, and its result lives in the pooled working memory.
// (The chain is ClientAddress and the RateLimiter on a chi router.)
func TestAdaptiveAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	ok := func(w http.ResponseWriter, r *http.Request) {}
	req := httptest.NewRequest(http.MethodGet, "/v1/reports/7", nil)
	req.RemoteAddr = "10.0.0.1:1234"
	req.Header.Set("X-Forwarded-For", "198.51.100.7")
	run := func(p ...policy.Policy) float64 {
		r := chi.NewRouter()
		rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
			Operation: middleware.RouteOperation(r), Policies: p})
		if err != nil {
			t.Fatal(err)
		}
		r.Use(middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}), rl.Handler)
		r.Get("/v1/reports/{id}", ok)
		w := &discardWriter{h: http.Header{}}
		r.ServeHTTP(w, req) // the cap of the operation exists from now on
		return testing.AllocsPerRun(200, func() {
			clear(w.h)
			r.ServeHTTP(w, req)
		})
	}
	bucket := perNetwork("1000000/s", 1000000)
	capped := policy.Policy{Name: "protect", Key: []limitkey.Dimension{limitkey.DimOperation},
		Limit: limiter.Limit{MinInFlight: 64, MaxInFlightCeiling: 64}}
	base, with := run(bucket), run(bucket, capped)
	if with > base+raceSlack {
		t.Errorf("an adaptive cap costs %v allocations per request over the bucket alone (%v); want none", with-base, base)
	}
	t.Logf("bucket %v allocs, with the cap %v", base, with)
}
