package otelmetrics_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// TestThroughTheMiddleware: the rate limiter's own calls, for real
// requests, reach the instruments: four requests from one network against
// "slow" (burst 3, one admitted without waiting, then 1 s apart; the
// store's clock stands still) and the dry-run "shadow" (burst 1) are
// PASSED, DELAYED (1 s), DELAYED (2 s) and REJECTED by slow, PASSED then
// REJECTED_DRY_RUN by shadow; the two waits are in slow's queue and
// leave it having waited 3 s in all. No attribute holds the key or the
// address. In a testing/synctest bubble: the waits take no real time, and
// the store calls none of the bubble's.
func TestThroughTheMiddleware(t *testing.T) {
	synctest.Test(t, testThroughTheMiddleware)
}

func testThroughTheMiddleware(t *testing.T) {
	m, reader := newReader(t)
	rate, _ := limiter.ParseRate("1/s")
	slow := policy.Policy{Name: "slow", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limiter.Limit{Rate: rate, Burst: 3, DelayAfter: 1}}
	shadow := policy.Policy{Name: "shadow", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limiter.Limit{Rate: rate, Burst: 1}, DryRun: true}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter: memory.New(memory.Options{Now: clocktest.NewManualClock().Time}), Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{slow, shadow}, Metrics: m, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(middleware.ClientAddress(proxyFree(t), middleware.ClientAddressOptions{Metrics: m}), rl.Handler)
	r.Get("/v1/reports/{id}", func(http.ResponseWriter, *http.Request) {})
	var codes []int
	for range 4 {
		req := httptest.NewRequest(http.MethodGet, "/v1/reports/7", nil)
		req.RemoteAddr = "198.51.100.7:4000"
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		codes = append(codes, w.Code)
	}
	if want := []int{200, 200, 200, 429}; !slices.Equal(codes, want) {
		t.Errorf("statuses %v; want %v", codes, want)
	}
	got := points(t, reader)
	equal(t, "four requests", got, []string{
		"ratekey.queued_requests {request} updowncounter {ratekey.policy=slow} 0",
		"ratekey.request.time_in_queue s histogram {ratekey.policy=slow,ratekey.queue.outcome=proceeded} count 2 sum 3",
		"ratekey.requests {request} counter {ratekey.decision=DELAYED,ratekey.policy=slow} 2",
		"ratekey.requests {request} counter {ratekey.decision=PASSED,ratekey.policy=shadow} 1",
		"ratekey.requests {request} counter {ratekey.decision=PASSED,ratekey.policy=slow} 1",
		"ratekey.requests {request} counter {ratekey.decision=REJECTED,ratekey.policy=slow} 1",
		"ratekey.requests {request} counter {ratekey.decision=REJECTED_DRY_RUN,ratekey.policy=shadow} 3",
		"ratekey.store.call.duration s histogram {ratekey.store=memory,ratekey.store.operation=take} count 4 sum 0",
	})
	for _, p := range got {
		if strings.Contains(p, "198.51.100") || strings.Contains(p, "|") {
			t.Errorf("an attribute holds the address or a key: %s", p)
		}
	}
}

// proxyFree is a resolver that trusts no proxy: the TCP peer is the client.
func proxyFree(t *testing.T) *trustedproxy.Resolver {
	t.Helper()
	res, err := trustedproxy.New(trustedproxy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
