package middleware_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/middleware"
)

// argDim keys test policies by the "k" query argument, as the nginx
// differential test keys its zones by $arg_k. (A client-written value: fine
// for a test, never for production keys.)
const argDim limitkey.Dimension = "arg"

// nginxStack is a RateLimiter whose store runs on a manual clock; made and
// used in a testing/synctest bubble, where a DELAYED request's wait passes
// at once on the bubble's clock, which get reads to tell how long it was.
type nginxStack struct {
	clock   *clocktest.ManualClock
	rl      *middleware.RateLimiter
	handler http.Handler
	mu      sync.Mutex
	served  int
	logs    bytes.Buffer
	lim     *memory.Limiter
	cfg     middleware.RateLimitConfig
}

func newNginxStack(t *testing.T, cfg middleware.RateLimitConfig) *nginxStack {
	t.Helper()
	s := &nginxStack{clock: clocktest.NewManualClock()}
	s.lim = memory.New(memory.Options{Now: s.clock.Time})
	r := chi.NewRouter()
	cfg.Limiter = s.lim
	cfg.Operation = middleware.RouteOperation(r)
	cfg.Custom = map[limitkey.Dimension]func(*http.Request) (string, bool){argDim: func(r *http.Request) (string, bool) {
		v := r.URL.Query().Get("k")
		return v, v != ""
	}}
	cfg.Logger = slog.New(slog.NewJSONHandler(&s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s.cfg = cfg
	rl, err := middleware.NewRateLimiter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.rl = rl
	ok := func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.served++
		s.mu.Unlock()
	}
	r.Use(rl.Handler)
	r.Get("/a", ok)
	r.Get("/b", ok)
	s.handler = r
	return s
}

// get sends GET path and returns the status, the RateLimit-Decision field
// and how long the request waited on the bubble's clock (0 if it did not).
func (s *nginxStack) get(path string) (int, string, time.Duration) {
	return s.getWithin(path, 0)
}

// getWithin is get for a client that gives up after patience (0: never).
func (s *nginxStack) getWithin(path string, patience time.Duration) (int, string, time.Duration) {
	r := httptest.NewRequest(http.MethodGet, "http://x.test"+path, nil)
	if patience > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), patience)
		defer cancel()
		r = r.WithContext(ctx)
	}
	w := httptest.NewRecorder()
	start := time.Now()
	s.handler.ServeHTTP(w, r)
	return w.Code, w.Header().Get("RateLimit-Decision"), time.Since(start)
}

// nginxPolicy translates an nginx limit_req zone at 1r/s into a Policy:
// burst=N is Burst N+1; delay=D is DelayAfter D+1; nodelay is DelayAfter 0.
func nginxPolicy(name string, burst int64, nodelay bool, delay int64) policy.Policy {
	l := limit("1r/s", burst+1)
	switch {
	case nodelay:
	case delay > 0:
		l.DelayAfter = delay + 1
	default:
		l.DelayAfter = 1
	}
	return policy.Policy{Name: name, Key: []limitkey.Dimension{argDim}, Limit: l, Status: http.StatusTooManyRequests}
}

type outcome struct {
	status   int
	decision string
	delay    time.Duration
}

// TestNginxBurstModes: six simultaneous requests per nginx limit_req mode,
// with the expected status, $limit_req_status and delay written out (the
// same expectations the differential test checks against a real nginx).
func TestNginxBurstModes(t *testing.T) {
	const s = time.Second
	pass := outcome{200, "PASSED", 0}
	rej := outcome{429, "REJECTED", 0}
	tests := []struct {
		name   string
		policy policy.Policy
		dryRun bool
		want   []outcome
	}{
		{"burst=2", nginxPolicy("p", 2, false, 0), false,
			[]outcome{pass, {200, "DELAYED", 1 * s}, {200, "DELAYED", 2 * s}, rej, rej, rej}},
		{"burst=2 nodelay", nginxPolicy("p", 2, true, 0), false,
			[]outcome{pass, pass, pass, rej, rej, rej}},
		{"burst=2 delay=1", nginxPolicy("p", 2, false, 1), false,
			[]outcome{pass, pass, {200, "DELAYED", 1 * s}, rej, rej, rej}},
		{"no burst", nginxPolicy("p", 0, false, 0), false,
			[]outcome{pass, rej, rej, rej, rej, rej}},
		{"no burst, default nginx status 503", func() policy.Policy {
			p := nginxPolicy("p", 0, false, 0)
			p.Status = http.StatusServiceUnavailable
			return p
		}(), false,
			[]outcome{pass, {503, "REJECTED", 0}, {503, "REJECTED", 0}, {503, "REJECTED", 0}, {503, "REJECTED", 0}, {503, "REJECTED", 0}}},
		{"burst=2 dry run", nginxPolicy("p", 2, false, 0), true,
			[]outcome{pass, {200, "DELAYED_DRY_RUN", 0}, {200, "DELAYED_DRY_RUN", 0},
				{200, "REJECTED_DRY_RUN", 0}, {200, "REJECTED_DRY_RUN", 0}, {200, "REJECTED_DRY_RUN", 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newNginxStack(t, middleware.RateLimitConfig{Policies: []policy.Policy{tc.policy}, DryRun: tc.dryRun, DecisionHeader: true})
				for i, want := range tc.want {
					code, dec, delay := st.get("/a?k=x")
					if got := (outcome{code, dec, delay}); got != want {
						t.Errorf("request %d: got %+v; want %+v", i+1, got, want)
					}
				}
				// After 1.1 s one more token is back: the next request is
				// admitted (for nodelay at once; otherwise after its wait).
				st.clock.Advance(1100 * time.Millisecond)
				if code, _, _ := st.get("/a?k=x"); code != http.StatusOK {
					t.Errorf("after 1.1 s: %d; want 200", code)
				}
			})
		})
	}
}

// TestDryRunAccountsLikeEnforcing: a dry-run policy's bucket evolves
// exactly as an enforcing one's on the same trace, and nothing is refused.
func TestDryRunAccountsLikeEnforcing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		trace := []time.Duration{0, 0, 0, 0, 300, 400, 1200, 1300, 1400, 3000, 3000, 3000, 3000} // ms since start
		run := func(dry bool) (codes []int, remaining []int64) {
			p := nginxPolicy("p", 2, true, 0)
			p.DryRun = dry
			st := newNginxStack(t, middleware.RateLimitConfig{Policies: []policy.Policy{p}, DecisionHeader: true})
			for _, at := range trace {
				st.clock.Set(at * time.Millisecond)
				code, _, _ := st.get("/a?k=x")
				codes = append(codes, code)
				d, err := st.lim.Peek(context.Background(), nil, []limiter.Request{{Key: "p|arg=x", Limit: p.Limit, Cost: 1}})
				if err != nil {
					t.Fatal(err)
				}
				remaining = append(remaining, d[0].Remaining)
			}
			return codes, remaining
		}
		enfCodes, enfRem := run(false)
		dryCodes, dryRem := run(true)
		if want := []int{200, 200, 200, 429, 429, 429, 200, 429, 429, 200, 200, 429, 429}; !slices.Equal(enfCodes, want) {
			t.Errorf("enforcing codes %v; want %v", enfCodes, want)
		}
		for i, c := range dryCodes {
			if c != http.StatusOK {
				t.Errorf("dry run request %d: %d; want 200", i, c)
			}
		}
		if !slices.Equal(enfRem, dryRem) {
			t.Errorf("bucket after each request: enforcing %v, dry run %v; want equal", enfRem, dryRem)
		}
	})
}

// TestDryRunPolicyNeverWeakensEnforcing: a dry-run policy rejecting does not
// stop an enforcing policy of the same request from being charged, and
// its own bucket is not charged (as enforcing mode would not charge it).
func TestDryRunPolicyNeverWeakensEnforcing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		enf := nginxPolicy("enf", 4, true, 0) // 5 requests at once
		dry := nginxPolicy("dry", 0, true, 0) // 1 at once
		dry.DryRun = true
		st := newNginxStack(t, middleware.RateLimitConfig{Policies: []policy.Policy{enf, dry}, DecisionHeader: true})
		var decisions []string
		for range 7 {
			code, dec, _ := st.get("/a?k=x")
			decisions = append(decisions, strings.Join([]string{http.StatusText(code), dec}, " "))
		}
		want := []string{"OK PASSED", "OK REJECTED_DRY_RUN", "OK REJECTED_DRY_RUN", "OK REJECTED_DRY_RUN", "OK REJECTED_DRY_RUN",
			"Too Many Requests REJECTED", "Too Many Requests REJECTED"}
		if !slices.Equal(decisions, want) {
			t.Errorf("decisions %q; want %q", decisions, want)
		}
		ev := st.rl.Check(httptest.NewRequest(http.MethodGet, "/a?k=x", nil), false)
		if got := ev.Policies[1].Remaining; got != 0 {
			t.Errorf("dry-run bucket remaining %d; want 0 (charged once, by the first request)", got)
		}
	})
}

// TestMaxDelay: a wait longer than max_delay is a rejection up front that
// charges nothing, with a Retry-After after which the delay fits.
func TestMaxDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := nginxPolicy("p", 4, false, 0) // burst=4: delays 1s, 2s, 3s, 4s
		p.Limit.MaxDelay = 2 * time.Second
		st := newNginxStack(t, middleware.RateLimitConfig{Policies: []policy.Policy{p}, DecisionHeader: true})
		want := []outcome{{200, "PASSED", 0}, {200, "DELAYED", time.Second}, {200, "DELAYED", 2 * time.Second}, {429, "REJECTED", 0}, {429, "REJECTED", 0}}
		for i, w := range want {
			code, dec, delay := st.get("/a?k=x")
			if got := (outcome{code, dec, delay}); got != w {
				t.Errorf("request %d: got %+v; want %+v", i+1, got, w)
			}
		}
		if !strings.Contains(st.logs.String(), `"error":"the wait would exceed max_delay","max_delay_seconds":2`) {
			t.Errorf("the max_delay rejection is not explained in the log:\n%s", st.logs.String())
		}
		ev := st.rl.Check(httptest.NewRequest(http.MethodGet, "/a?k=x", nil), false)
		if got := ev.Policies[0]; got.RetryAfter != time.Second || got.Remaining != 2 {
			t.Errorf("after the rejections: retry %v remaining %d; want 1s and 2 (rejections charged nothing)", got.RetryAfter, got.Remaining)
		}
	})
}

// TestDelayAbandoned: a client that goes away during its delay is recorded
// as a client timeout, not served, and its budget stays spent.
func TestDelayAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newNginxStack(t, middleware.RateLimitConfig{Policies: []policy.Policy{nginxPolicy("p", 2, false, 0)}, DecisionHeader: true})
		if code, dec, _ := st.get("/a?k=x"); code != 200 || dec != "PASSED" {
			t.Fatalf("first: %d %s", code, dec)
		}
		// Delayed 1 s; the client leaves after 400 ms.
		code, dec, delay := st.getWithin("/a?k=x", 400*time.Millisecond)
		if code != http.StatusServiceUnavailable || dec != "DELAYED" || delay != 400*time.Millisecond {
			t.Errorf("abandoned: %d %s after %v; want 503 DELAYED after 400ms", code, dec, delay)
		}
		if st.served != 1 {
			t.Errorf("served %d; want 1 (the abandoned request never reaches the handler)", st.served)
		}
		if !strings.Contains(st.logs.String(), `"decision":"DELAYED"`) || !strings.Contains(st.logs.String(), `"outcome":"client_timeout"`) {
			t.Errorf("log lacks the client timeout record:\n%s", st.logs.String())
		}
		if _, dec, delay := st.get("/a?k=x"); dec != "DELAYED" || delay != 2*time.Second {
			t.Errorf("next: %s %v; want DELAYED 2s (the abandoned request's cost stays spent)", dec, delay)
		}
	})
}

// TestTwoRoutesShareAPolicy: two routes under one policy without an
// operation dimension share one budget, as two nginx locations share a zone.
func TestTwoRoutesShareAPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newNginxStack(t, middleware.RateLimitConfig{Policies: []policy.Policy{nginxPolicy("p", 1, true, 0)}})
		got := []int{}
		for _, path := range []string{"/a?k=x", "/b?k=x", "/a?k=x", "/b?k=x"} {
			code, _, _ := st.get(path)
			got = append(got, code)
		}
		if want := []int{200, 200, 429, 429}; !slices.Equal(got, want) {
			t.Errorf("codes %v; want %v", got, want)
		}
	})
}

// TestDecisionHeaderOff: without decision_header no RateLimit-Decision field.
func TestDecisionHeaderOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newNginxStack(t, middleware.RateLimitConfig{Policies: []policy.Policy{nginxPolicy("p", 1, true, 0)}})
		if _, dec, _ := st.get("/a?k=x"); dec != "" {
			t.Errorf("RateLimit-Decision %q without decision_header", dec)
		}
	})
}

// TestReload: unchanged policies keep their budgets, changed ones start
// fresh, an invalid configuration is refused and the old one keeps running.
func TestReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keep := nginxPolicy("keep", 1, true, 0)
		change := nginxPolicy("change", 1, true, 0)
		change.Key = []limitkey.Dimension{argDim}
		st := newNginxStack(t, middleware.RateLimitConfig{Policies: []policy.Policy{keep}})
		st2Policies := func(ps ...policy.Policy) middleware.RateLimitConfig {
			c := st.cfg
			c.Policies = ps
			return c
		}
		// Spend keep's budget on /a.
		st.get("/a?k=x")
		st.get("/a?k=x")
		if code, _, _ := st.get("/a?k=x"); code != 429 {
			t.Fatalf("keep not exhausted: %d", code)
		}
		bad := nginxPolicy("keep", 1, true, 0)
		bad.Limit.Burst = 0
		if _, err := st.rl.Reload(st2Policies(bad)); err == nil || err.Error() != `policies[0] ("keep").burst: 0 must be >= 1 (the bucket capacity in tokens; nginx burst=N is N+1)` {
			t.Fatalf("invalid reload: %v", err)
		}
		if code, _, _ := st.get("/a?k=x"); code != 429 {
			t.Errorf("after a refused reload: %d; want 429 (old config and state)", code)
		}

		other := nginxPolicy("other", 0, true, 0)
		changes, err := st.rl.Reload(st2Policies(keep, other))
		if err != nil {
			t.Fatal(err)
		}
		if want := []policy.Change{{Policy: "other", Change: "added"}}; !slices.Equal(changes, want) {
			t.Errorf("changes %+v; want %+v", changes, want)
		}
		if code, _, _ := st.get("/a?k=x"); code != 429 {
			t.Errorf("keep after reload: %d; want 429 (budget kept)", code)
		}

		bigger := keep
		bigger.Limit.Burst = 5
		slower := keep
		slower.DryRun = true
		changes, err = st.rl.Reload(st2Policies(bigger))
		if err != nil {
			t.Fatal(err)
		}
		want := []policy.Change{
			{Policy: "keep", Change: "restarted", Detail: "burst 2 -> 5"},
			{Policy: "other", Change: "removed"},
		}
		if !slices.Equal(changes, want) {
			t.Errorf("changes %+v; want %+v", changes, want)
		}
		if code, _, _ := st.get("/a?k=x"); code != 200 {
			t.Errorf("keep after a burst change: %d; want 200 (fresh bucket)", code)
		}
		if !strings.Contains(st.logs.String(), `"change":"restarted"`) {
			t.Errorf("reload not logged:\n%s", st.logs.String())
		}
		changes, _ = st.rl.Reload(st2Policies(slower))
		if want := []policy.Change{{Policy: "keep", Change: "restarted", Detail: "burst 5 -> 2, dry_run false -> true"}}; !slices.Equal(changes, want) {
			t.Errorf("changes %+v; want %+v", changes, want)
		}
		if code, dec, _ := st.get("/a?k=x"); code != 200 || dec != "" {
			t.Errorf("dry run after reload: %d %q; want 200 (and no header: decision_header is off)", code, dec)
		}
		// delay_after is reported in tokens: its default, 0, is the whole burst.
		delayed := slower
		delayed.Limit.DelayAfter = 1
		changes, _ = st.rl.Reload(st2Policies(delayed))
		if want := []policy.Change{{Policy: "keep", Change: "updated", Detail: "delay_after 2 -> 1"}}; !slices.Equal(changes, want) {
			t.Errorf("changes %+v; want %+v", changes, want)
		}
	})
}
