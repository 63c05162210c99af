package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// failingPolicy is a limiter whose calls for policy fail; the others go
// to the memory store.
type failingPolicy struct {
	limiter.Limiter
	policy string
}

func (l failingPolicy) fails(reqs []limiter.Request) bool {
	return len(reqs) > 0 && strings.HasPrefix(reqs[0].Key, l.policy+"|")
}

func (l failingPolicy) Take(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	if l.fails(reqs) {
		return dst, errors.New("store down")
	}
	return l.Limiter.Take(ctx, dst, reqs)
}

func (l failingPolicy) Peek(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	if l.fails(reqs) {
		return dst, errors.New("store down")
	}
	return l.Limiter.Peek(ctx, dst, reqs)
}

// TestDecisionAcrossPhases: the request's Decision ranks its policies'
// decisions one way, within one evaluation and across the live chain's two
// phases. A pre-auth policy failing open (ERROR) and a main policy delaying
// the request make it DELAYED, as one evaluation of both says (see
// Evaluation.Decision): in the Record, its JSON, and the
// RateLimit-Decision field. Each policy keeps its own decision.
func TestDecisionAcrossPhases(t *testing.T) {
	synctest.Test(t, testDecisionAcrossPhases) // the 1 s delay passes at once
}

func testDecisionAcrossPhases(t *testing.T) {
	r := chi.NewRouter()
	pre := policy.Policy{Name: "pre", Key: []limitkey.Dimension{limitkey.DimOperation}, Limit: limit("1/s", 3),
		PreAuth: true, OnStoreError: policy.OnStoreErrorAllow}
	main := policy.Policy{Name: "main", Key: []limitkey.Dimension{limitkey.DimOperation}, Limit: limit("1/s", 2), Cost: 2}
	main.Limit.DelayAfter = 1
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter:   failingPolicy{memory.New(memory.Options{Now: clocktest.NewManualClock().Time}), "pre"},
		Operation: middleware.RouteOperation(r), Policies: []policy.Policy{pre, main}, DecisionHeader: true,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(middleware.Recorder, rl.PreAuthHandler, rl.Handler)
	var rec *middleware.Record
	r.Get("/a", func(_ http.ResponseWriter, r *http.Request) { rec = middleware.RecordFrom(r.Context()) })
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/a", nil))
	if w.Code != http.StatusOK || rec == nil {
		t.Fatalf("status %d, record %v; want 200 and a record", w.Code, rec)
	}
	if got := w.Header().Get("RateLimit-Decision"); got != "DELAYED" {
		t.Errorf("RateLimit-Decision %q; want DELAYED", got)
	}
	if rec.Decision != decide.DecisionDelayed || len(rec.Policies) != 2 ||
		rec.Policies[0].Decision != decide.DecisionError || rec.Policies[1].Decision != decide.DecisionDelayed {
		t.Errorf("record: %+v; want DELAYED, policies ERROR then DELAYED", rec)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"limited":true,"decision":"DELAYED","delay_seconds":1,"policies":[`,
		`{"name":"pre","key":"pre|operation=GET /a","decision":"ERROR","dry_run":false,"cost":1,"rate":"1/s","burst":3,"remaining":0,"retry_after_seconds":null,"store":"middleware_test","fail_mode":"allow","delay_after":3,"delay_seconds":null,"skipped_reason":null,"error":"store down","override":null,"max_in_flight":null,"in_flight":null,"cached":false,"slot":null,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}`,
		`{"name":"main","key":"main|operation=GET /a","decision":"DELAYED","dry_run":false,"cost":2,"rate":"1/s","burst":2,"remaining":0,"retry_after_seconds":null,"store":"middleware_test","fail_mode":null,"delay_after":1,"delay_seconds":1,"skipped_reason":null,"error":null,"override":null,"max_in_flight":null,"in_flight":null,"cached":false,"slot":null,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("record JSON lacks\n%s\n%s", want, b)
		}
	}
}

// shared is a limiter that reports store diagnostics on every decision, as
// limiter/redis does on a Cluster: the hash slot (+1) of the policy's key,
// two round trips per call, and a cached answer for policy "cached".
type shared struct{ limiter.Limiter }

func (l shared) Take(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	ds, err := l.Limiter.Take(ctx, dst, reqs)
	for i := range ds {
		ds[i].HashSlot, ds[i].RoundTrips = 100+i, 2
		if strings.HasPrefix(reqs[i].Key, "cached|") && !ds[i].Allowed {
			ds[i].Cached, ds[i].RoundTrips = true, 0
		}
	}
	return ds, err
}

// TestStoreDiagnostics: the debug record says which Cluster slot decided
// each policy ("slot", the slot itself, null for a store without one),
// whether a deny cache answered ("cached"), and how many round trips the
// request's calls took, both phases together ("round_trips").
func TestStoreDiagnostics(t *testing.T) {
	r := chi.NewRouter()
	op := []limitkey.Dimension{limitkey.DimOperation}
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter:   shared{memory.New(memory.Options{Now: clocktest.NewManualClock().Time})},
		Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{{Name: "pre", Key: op, Limit: limit("1/m", 5), PreAuth: true},
			{Name: "cached", Key: op, Limit: limit("1/m", 1)}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(rl.PreAuthHandler, rl.Handler)
	r.Get("/a", func(http.ResponseWriter, *http.Request) {})
	for i, want := range []struct {
		status int
		json   []string
	}{
		{200, []string{`"round_trips":4,"replicas":1}`, `"name":"pre"`, `"cached":false,"slot":99,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}`, `"name":"cached"`, `"cached":false,"slot":99,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}`}},
		{429, nil},
	} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/a", nil)
		ctx, rec := middleware.WithRecord(req.Context()) // as an access logger wrapping the chain
		r.ServeHTTP(w, req.WithContext(ctx))
		if w.Code != want.status {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want.status)
		}
		b, _ := json.Marshal(rec)
		if i == 1 {
			// The main phase's rejection came from the deny cache: no
			// round trip; the pre-auth phase took 2.
			want.json = []string{`"round_trips":2,"replicas":1}`, `"name":"cached","key":"cached|operation=GET /a","decision":"REJECTED"`, `"in_flight":null,"cached":true,"slot":99,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}`}
		}
		for _, s := range want.json {
			if !strings.Contains(string(b), s) {
				t.Errorf("request %d: record JSON lacks %s:\n%s", i, s, b)
			}
		}
	}
}
