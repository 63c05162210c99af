package middleware_test

// Regressions found by the attack run of 2026-12-05 on the decision core's
// move (internal/engine and decide): each failed before its fix.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// TestInFlightRetryAfterOnlyWhenRejected: an in-flight cap's (and an
// adaptive cap's) PolicyResult.RetryAfter is its retry_after setting only
// when the cap rejected the request: 0 on a PASSED result and on a
// missing-dimension rejection, which has no Retry-After.
func TestInFlightRetryAfterOnlyWhenRejected(t *testing.T) {
	capP := policy.Policy{Name: "cap", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limiter.Limit{MaxInFlight: 2}, RetryAfter: 5_000_000_000}
	adapt := policy.Policy{Name: "adapt", Limit: limiter.Limit{MinInFlight: 3, MaxInFlightCeiling: 3}}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Policies: []policy.Policy{capP, adapt},
		Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// No ClientAddress: "cap" lacks its network (REJECTED, missing dimension);
	// "adapt" PASSES.
	ev := rl.Check(httptest.NewRequest(http.MethodGet, "/x", nil), false)
	for _, res := range ev.Policies {
		secs, ok := res.RetryAfterSeconds()
		t.Logf("%s %s missing=%q RetryAfter=%v RetryAfterSeconds()=%d,%v", res.Policy, res.Decision, res.Missing, res.RetryAfter, secs, ok)
		if res.RetryAfter != 0 && !ok {
			t.Errorf("%s %s: RetryAfter %v on a result that has no Retry-After (RetryAfterSeconds ok=false); want 0 (as at 7d278e5)", res.Policy, res.Decision, res.RetryAfter)
		}
	}
}

// TestSettleConcurrentEvaluationsKeepTheirOwnReports: two concurrent
// evaluations of one request each reserve 500 on a settling policy and
// each handler reports its own cost (100, 300): both reports land, each in
// its own reservation, 400 tokens spent (the first report used to land in
// both, and the second be refused: 200 spent).
func TestSettleConcurrentEvaluationsKeepTheirOwnReports(t *testing.T) {
	store := memory.New(memory.Options{Now: clocktest.NewManualClock().Time})
	p := llm()
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: store, Policies: []policy.Policy{p},
		Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var entered sync.WaitGroup
	entered.Add(2)
	first := make(chan struct{})
	var mu sync.Mutex
	errs := map[int64]error{}
	inner := rl.Handler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cost := map[string]int64{"a": 100, "b": 300}[req.Header.Get("X-Which")]
		entered.Done()
		entered.Wait() // both settlements are open
		if cost == 300 {
			<-first
		}
		err := middleware.ReportCost(req.Context(), "llm", cost)
		mu.Lock()
		errs[cost] = err
		mu.Unlock()
		if cost == 100 {
			close(first)
		}
	}))
	r.Post("/v1/complete", func(w http.ResponseWriter, req *http.Request) {
		var wg sync.WaitGroup
		for _, which := range []string{"a", "b"} {
			rq := req.Clone(req.Context())
			rq.Header.Set("X-Which", which)
			wg.Go(func() { inner.ServeHTTP(httptest.NewRecorder(), rq) })
		}
		wg.Wait()
	})
	ctx, _ := middleware.WithRecord(context.Background())
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/complete", nil).WithContext(ctx))
	d, _ := store.Peek(context.Background(), nil, []limiter.Request{{Key: "llm", Limit: p.Limit, Cost: 1}})
	spent := p.Limit.Burst - (d[0].Remaining + 1)
	if errs[100] != nil || errs[300] != nil || spent != 400 {
		t.Errorf("each evaluation's handler reported its own cost (100, 300): errors %v, %d tokens spent; want no error, 400", errs, spent)
	}
}

// TestSettleLateReportRefusedWhileOuterPhaseRuns: a report made on the
// main phase's handler context after that handler returned is refused,
// even while the pre-auth phase's handler (a middleware around the main
// phase) still runs with a reservation open (it used to settle the
// pre-auth policy at the late cost).
func TestSettleLateReportRefusedWhileOuterPhaseRuns(t *testing.T) {
	store := memory.New(memory.Options{Now: clocktest.NewManualClock().Time})
	r, rl, _, _ := twoPhaseSettle(t, store)
	var late error
	var handlerCtx context.Context
	between := func(next http.Handler) http.Handler { // e.g. an access log between the phases
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			next.ServeHTTP(w, req)
			late = middleware.ReportCost(handlerCtx, "", 900) // the handler has returned
		})
	}
	r.Use(rl.PreAuthHandler, between, rl.Handler)
	r.Post("/v1/complete", func(w http.ResponseWriter, req *http.Request) { handlerCtx = req.Context() })
	ctx, rec := middleware.WithRecord(context.Background())
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/complete", nil).WithContext(ctx))
	b, _ := json.Marshal(rec.Policies)
	if late == nil {
		t.Errorf("a report after the handler returned was accepted (ReportCost: \"a report after the handler returned (the costs were settled then)\" is an error); policies %s", b)
	}
}

// TestAbandonedHasNoFailMode: a request whose context ended before the
// limiter answered is abandoned, and no fail mode applies: its results'
// FailMode is "", and the Record (the debug JSON) shows neither a
// fail_mode nor a Retry-After (it used to say "deny" and 1 s).
func TestAbandonedHasNoFailMode(t *testing.T) {
	var logs bytes.Buffer
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
		Policies:  []policy.Policy{{Name: "p", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limit("1/s", 1)}},
		Operation: middleware.RouteOperation(r), Logger: slog.New(slog.NewJSONHandler(&logs, nil)), LogEveryDecision: true})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}), rl.Handler)
	r.Get("/x", func(http.ResponseWriter, *http.Request) {})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ctx, rec := middleware.WithRecord(ctx)
	req := httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	b, _ := json.Marshal(rec)
	if rec.Outcome != "client_timeout" {
		t.Fatalf("not abandoned: %s", b)
	}
	if fm := rec.Policies[0].FailMode(); fm != "" || strings.Contains(string(b), `"fail_mode":"deny"`) || strings.Contains(string(b), `"retry_after_seconds":1`) {
		t.Errorf("abandoned request (response %d, Retry-After %q; log %s): FailMode() %q, record %s; want no fail mode and no Retry-After",
			w.Code, w.Header().Get("Retry-After"), strings.TrimSpace(logs.String()), fm, b)
	}
}

// F4: RetryAfterSeconds of an in-flight rejection without retry_after
// returns secs 1 with ok false; ExampleNew_chi's Deny (example_test.go)
// reads it as "secs, _ :=", so a Deny written after it tells the client
// "retry in 1 s" while the response carries no Retry-After (and "in 0 s"
// for a cost that never fits).
func TestAtkF4RetryAfterSecondsNonZeroWhenNotOK(t *testing.T) {
	for _, res := range []decide.PolicyResult{
		{Policy: "cap", Decision: decide.DecisionRejected, Limit: limiter.Limit{MaxInFlight: 1}},
		{Policy: "never", Decision: decide.DecisionRejected, Never: true, Cost: 9, Limit: limit("1/s", 3)},
	} {
		if secs, ok := res.RetryAfterSeconds(); !ok && secs != 0 {
			t.Errorf("%s: RetryAfterSeconds() = %d, false: a Deny following ExampleNew_chi prints \"%s in %d s\" with no Retry-After sent", res.Policy, secs, res.Policy, secs)
		}
	}
}
