package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// TestConcurrentEvaluationsOfOneRequestWithRecord: concurrent evaluations
// of one request with Recorder in the chain (as in the demo) all append to
// the request's one Record: none may be lost, and -race must stay quiet.
func TestConcurrentEvaluationsOfOneRequestWithRecord(t *testing.T) {
	res := proxyResolver(t)
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{perNetwork("1000/s", 1000)}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	inner := rl.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r.Use(middleware.Recorder, middleware.ClientAddress(res, middleware.ClientAddressOptions{}))
	var got int
	r.Get("/v1/reports/{id}", func(_ http.ResponseWriter, r *http.Request) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { inner.ServeHTTP(httptest.NewRecorder(), r) })
		}
		wg.Wait()
		got = len(middleware.RecordFrom(r.Context()).Policies)
	})
	req := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
	req.RemoteAddr = "10.0.0.1:1"
	req.Header.Set("X-Forwarded-For", "198.51.100.1")
	r.ServeHTTP(httptest.NewRecorder(), req)
	if got != n {
		t.Errorf("the Record holds %d policy results after %d evaluations; want %d", got, n, n)
	}
}
