package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/middleware"
)

// TestCheckReleasesSlots: Check with charge true takes an in-flight slot
// and releases it before returning (only the Handler holds slots), so a
// cap of 1 admits every sequential Check; a slot held by a running handler
// makes Check report REJECTED, and is free again when it returns.
func TestCheckReleasesSlots(t *testing.T) {
	r := chi.NewRouter()
	lim := memory.New(memory.Options{})
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Operation: middleware.RouteOperation(r),
		Policies: []middleware.Policy{{Name: "conc", Limit: limiter.Limit{MaxInFlight: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	var inside middleware.Evaluation
	r.With(rl.Handler).Get("/x", func(w http.ResponseWriter, req *http.Request) {
		inside = rl.Check(req, true)
	})
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	for i := range 3 {
		ev := rl.Check(req, true)
		if ev.Decision != middleware.DecisionPassed || !ev.Charged || !ev.Policies[0].Charged {
			t.Fatalf("Check %d: %+v; want PASSED and charged", i, ev)
		}
		if free, _ := ev.Policies[0].Current(); free != 0 {
			t.Errorf("Check %d: %d free while it held the slot; want 0", i, free)
		}
	}
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	if w.Code != http.StatusOK || inside.Decision != middleware.DecisionRejected {
		t.Errorf("Check inside the handler: %d, %s; want 200 and REJECTED (the handler's request holds the slot)", w.Code, inside.Decision)
	}
	if ev := rl.Check(req, false); ev.Decision != middleware.DecisionPassed {
		t.Errorf("after the handler: %s; want PASSED", ev.Decision)
	}
}
