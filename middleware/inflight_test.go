package middleware_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// TestCheckReleasesSlots: Check with charge true takes an in-flight slot
// and releases it before returning (only the Handler holds slots), so a
// cap of 1 admits every sequential Check; a slot held by a running handler
// makes Check report REJECTED, and is free again when it returns.
func TestCheckReleasesSlots(t *testing.T) {
	r := chi.NewRouter()
	lim := memory.New(memory.Options{})
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{{Name: "conc", Limit: limiter.Limit{MaxInFlight: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	var inside decide.Evaluation
	r.With(rl.Handler).Get("/x", func(w http.ResponseWriter, req *http.Request) {
		inside = rl.Check(req, true)
	})
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	for i := range 3 {
		ev := rl.Check(req, true)
		if ev.Decision != decide.DecisionPassed || !ev.Charged || !ev.Policies[0].Charged {
			t.Fatalf("Check %d: %+v; want PASSED and charged", i, ev)
		}
		if free, _ := ev.Policies[0].Current(); free != 0 {
			t.Errorf("Check %d: %d free while it held the slot; want 0", i, free)
		}
	}
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	if w.Code != http.StatusOK || inside.Decision != decide.DecisionRejected {
		t.Errorf("Check inside the handler: %d, %s; want 200 and REJECTED (the handler's request holds the slot)", w.Code, inside.Decision)
	}
	if ev := rl.Check(req, false); ev.Decision != decide.DecisionPassed {
		t.Errorf("after the handler: %s; want PASSED", ev.Decision)
	}
}

// TestInFlightShowsHeld: the debug JSON's in_flight is the slots held,
// even above a cap lowered by a reload while they were taken (the
// requests already running keep them), and remaining the free slots (0
// then). Each row holds some slots under a cap of 2, reloads the cap, and
// reads the would-be decision of one more request.
func TestInFlightShowsHeld(t *testing.T) {
	tests := []struct {
		held     int
		cap      int64
		decision decide.Decision
		json     string // "decision", "remaining", "max_in_flight", "in_flight" of the JSON
	}{
		{2, 1, decide.DecisionRejected, `"REJECTED" 0 1 2`},
		{2, 2, decide.DecisionRejected, `"REJECTED" 0 2 2`},
		{1, 1, decide.DecisionRejected, `"REJECTED" 0 1 1`},
		{1, 3, decide.DecisionPassed, `"PASSED" 1 3 1`},
		{0, 1, decide.DecisionPassed, `"PASSED" 0 1 0`},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d held, cap 2 -> %d", tc.held, tc.cap), func(t *testing.T) {
			policy := func(n int64) []policy.Policy {
				return []policy.Policy{{Name: "conc", Limit: limiter.Limit{MaxInFlight: n}}}
			}
			r := chi.NewRouter()
			cfg := middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Operation: middleware.RouteOperation(r),
				Policies: policy(2), Logger: slog.New(slog.DiscardHandler)}
			rl, err := middleware.NewRateLimiter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			entered, done := make(chan struct{}), make(chan struct{})
			r.With(rl.Handler).Get("/x", func(http.ResponseWriter, *http.Request) { entered <- struct{}{}; <-done })
			var wg sync.WaitGroup
			for range tc.held {
				wg.Go(func() { r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil)) })
				<-entered // its slot is held
			}
			defer wg.Wait()
			defer close(done)
			cfg.Policies = policy(tc.cap)
			if _, err := rl.Reload(cfg); err != nil {
				t.Fatal(err)
			}
			ev := rl.Check(httptest.NewRequest(http.MethodGet, "/x", nil), false)
			var got map[string]json.RawMessage
			if b, err := json.Marshal(ev.Policies[0]); err != nil || json.Unmarshal(b, &got) != nil {
				t.Fatalf("JSON of %+v: %v", ev.Policies[0], err)
			}
			if s := fmt.Sprintf("%s %s %s %s", got["decision"], got["remaining"], got["max_in_flight"], got["in_flight"]); ev.Decision != tc.decision || s != tc.json {
				t.Errorf("%s, JSON %s; want %s, %s", ev.Decision, s, tc.decision, tc.json)
			}
		})
	}
}
