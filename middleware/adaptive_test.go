package middleware_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// planAuth verifies nothing: it is a test's stand-in for an authenticator
// whose principals carry the plan of the X-Test-Plan field (tenant t1).
type planAuth struct{}

func (planAuth) Authenticate(r *http.Request) (limitkey.Principal, error) {
	plan := r.Header.Get("X-Test-Plan")
	if plan == "" {
		return limitkey.Principal{}, identity.ErrNoCredential
	}
	return limitkey.Principal{Method: limitkey.MethodJWT, Tenant: "t1", Account: "a-" + plan, Plan: plan}, nil
}

// adaptiveCap returns an adaptive policy whose limit cannot move: min and
// ceiling n (the cap's own tests move it).
func adaptiveCap(name string, n int64) policy.Policy {
	return policy.Policy{Name: name, Limit: limiter.Limit{MinInFlight: n, MaxInFlightCeiling: n}}
}

// holdRig is a chi router with GET /work behind Authenticate (planAuth,
// anonymous allowed) and a RateLimiter of the given policies on store;
// each request to /work blocks until the test releases it.
type holdRig struct {
	t       *testing.T
	rl      *middleware.RateLimiter
	h       http.Handler
	entered chan struct{}
	release chan struct{}
	wg      sync.WaitGroup
}

func newHoldRig(t *testing.T, store limiter.Limiter, policies ...policy.Policy) *holdRig {
	t.Helper()
	g := &holdRig{t: t, entered: make(chan struct{}, 64), release: make(chan struct{})}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: store, Operation: middleware.RouteOperation(r), Policies: policies,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g.rl = rl
	r.Use(middleware.Authenticate(planAuth{}, middleware.AuthOptions{Anonymous: true}), rl.Handler)
	r.Get("/work", func(w http.ResponseWriter, _ *http.Request) {
		g.entered <- struct{}{}
		<-g.release
	})
	g.h = r
	t.Cleanup(g.done)
	return g
}

// request returns GET /work, of the plan when not "".
func request(plan string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/work", nil)
	if plan != "" {
		req.Header.Set("X-Test-Plan", plan)
	}
	return req
}

// hold starts a request of the plan and waits until its handler runs (it
// was admitted), failing the test if it is answered instead.
func (g *holdRig) hold(plan string) {
	g.t.Helper()
	w := httptest.NewRecorder()
	done := make(chan struct{})
	g.wg.Go(func() { g.h.ServeHTTP(w, request(plan)); close(done) })
	select {
	case <-g.entered:
	case <-done:
		g.t.Fatalf("a %q request was refused: %d %s", plan, w.Code, w.Body)
	}
}

// try sends a request of the plan that the test expects refused (an
// admitted one would block) and returns its response.
func (g *holdRig) try(plan string) *httptest.ResponseRecorder {
	g.t.Helper()
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { g.h.ServeHTTP(w, request(plan)); close(done) }()
	select {
	case <-done:
	case <-g.entered:
		g.t.Fatalf("a %q request was admitted", plan)
	}
	return w
}

// check returns the would-be decision of a request of the plan (through
// Authenticate, so that it has its principal), charging nothing.
func (g *holdRig) check(plan string) decide.Evaluation {
	var ev decide.Evaluation
	middleware.Authenticate(planAuth{}, middleware.AuthOptions{Anonymous: true})(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		ev = g.rl.Check(r, false)
	})).ServeHTTP(httptest.NewRecorder(), request(plan))
	return ev
}

// done releases every held request and waits for them.
func (g *holdRig) done() {
	select {
	case <-g.release:
	default:
		close(g.release)
	}
	g.wg.Wait()
}

// TestAdaptiveRefusesOverloaded: a cap of 2 admits two requests at once;
// the third is 503 with Retry-After 1 (the default), no-store and the
// problem urn:ratekey:problem:overloaded naming the policy (no RateLimit
// fields: they describe quotas); once the two end, requests pass again.
func TestAdaptiveRefusesOverloaded(t *testing.T) {
	g := newHoldRig(t, memory.New(memory.Options{}), adaptiveCap("protect", 2))
	g.hold("")
	g.hold("")
	w := g.try("")
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || w.Header().Get("Cache-Control") != "no-store" ||
		w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Ratelimit") != "" {
		t.Errorf("%d %v", w.Code, w.Header())
	}
	want := map[string]any{"type": "urn:ratekey:problem:overloaded", "title": "Service overloaded", "status": 503.0, "policy": "protect",
		"violated-policies": []any{"protect"}, "detail": "policy protect: the service runs as many requests as it can take now (adaptive limit 2); retry in 1 s"}
	if b, _ := json.Marshal(p); string(b) != string(must(json.Marshal(want))) {
		t.Errorf("problem %s, want %s", b, must(json.Marshal(want)))
	}
	g.done()
	if ev := g.check(""); ev.Decision != decide.DecisionPassed || ev.Policies[0].InFlight != 1 {
		t.Errorf("after the two ended: %s, in flight %d (with this request); want PASSED, 1", ev.Decision, ev.Policies[0].InFlight)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestAdaptivePrioritiesShedSheddableFirst: a cap of 10 with 20% reserved
// and plan pro critical. Sheddable requests may hold 10 - 2 (the reserve)
// - what critical work held lately: the ninth sheddable one is refused
// while critical ones pass up to the whole limit; the eleventh request,
// critical, is refused only when all 10 slots are held. Each decision's
// class is in the record.
func TestAdaptivePrioritiesShedSheddableFirst(t *testing.T) {
	p := adaptiveCap("protect", 10)
	p.Reserved, p.Priorities = 0.2, []policy.Priority{{Plan: "pro", Class: policy.ClassCritical}}
	g := newHoldRig(t, memory.New(memory.Options{}), p)
	for range 8 {
		g.hold("free")
	}
	if w := g.try("free"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("the ninth sheddable request: %d, want 503", w.Code)
	}
	if w := g.try(""); w.Code != http.StatusServiceUnavailable {
		t.Errorf("an anonymous (sheddable) request: %d, want 503", w.Code)
	}
	g.hold("pro")
	g.hold("pro")
	ev := g.check("pro")
	if res := ev.Policies[0]; ev.Decision != decide.DecisionRejected || res.Class != policy.ClassCritical || res.InFlight != 10 || res.Limit.MaxInFlight != 10 {
		t.Errorf("a critical request with 10 held: %s %+v; want REJECTED, critical, 10 in flight of 10", ev.Decision, res)
	}
	if w := g.try("pro"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("the eleventh request, critical: %d, want 503", w.Code)
	}
	if ev := g.check("free"); ev.Policies[0].Class != policy.ClassSheddable {
		t.Errorf("a free plan's class %q, want sheddable", ev.Policies[0].Class)
	}
}

// TestAdaptiveDebugJSON: the debug JSON of an adaptive cap's policy entry
// says which limit applied (adaptive_limit and max_in_flight), the slots
// held with this request (in_flight), the class and the store "process";
// a token bucket's entry has adaptive_limit and class null.
func TestAdaptiveDebugJSON(t *testing.T) {
	p := adaptiveCap("protect", 4)
	p.Key = []limitkey.Dimension{limitkey.DimOperation}
	p.Reserved, p.Priorities = 0.25, []policy.Priority{{Plan: "pro", Class: policy.ClassCritical}}
	g := newHoldRig(t, memory.New(memory.Options{}), p, policy.Policy{Name: "bucket", Limit: limit("10/s", 10)})
	g.hold("pro")
	ev := g.check("pro")
	b, err := json.Marshal(ev.Policies)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`{"name":"protect","key":"protect|operation=GET /work","decision":"PASSED","dry_run":false,"cost":1,"rate":null,"burst":null,"remaining":2,"retry_after_seconds":null,"store":"process","fail_mode":null,"delay_after":null,"delay_seconds":null,"skipped_reason":null,"error":null,"override":null,"max_in_flight":4,"in_flight":1,"cached":false,"slot":null,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":4,"class":"critical"}`,
		`"name":"bucket"`, `"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("debug JSON lacks %s:\n%s", want, b)
		}
	}
}

// TestAdaptiveAllOrNothing: a request a token bucket refuses gives back
// the cap's slot it took (the cap still shows only the request it holds,
// and Check, which charges, reports the cap's result not charged), and a
// request the cap refuses spends no token (the bucket of 2 still admits
// one more after the refusal).
func TestAdaptiveAllOrNothing(t *testing.T) {
	g := newHoldRig(t, memory.New(memory.Options{}), adaptiveCap("protect", 1), policy.Policy{Name: "bucket", Limit: limit("1/h", 2)})
	g.hold("")
	if w := g.try(""); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("the cap full: %d, want 503", w.Code)
	}
	g.done()
	g.release = make(chan struct{})
	g.hold("") // the bucket's second token: the refusal spent none
	if w := g.try(""); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("the cap full again: %d, want 503", w.Code)
	}
	g.done()
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, request(""))
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("the bucket empty: %d, want 429", w.Code)
	}
	ev := g.check("")
	if res := ev.Policies[0]; res.InFlight != 1 || res.Decision != decide.DecisionPassed {
		t.Errorf("the cap after the bucket's refusal: %+v; want PASSED with 1 in flight (this request only): its slot went back", res)
	}
	if ev := g.rl.Check(request(""), true); ev.Allowed || ev.Charged || ev.Policies[0].Charged || ev.Policies[0].Decision != decide.DecisionPassed {
		t.Errorf("Check charging, the bucket empty: allowed %v, charged %v, cap %s charged %v; want refused, nothing charged, the cap PASSED but not charged",
			ev.Allowed, ev.Charged, ev.Policies[0].Decision, ev.Policies[0].Charged)
	}
}

// TestAdaptiveCapsOutliveTheRateLimiter: a RateLimiter built anew on the
// same store (as the demo does on a reload) shares the caps of its
// predecessor by policy name: a slot held under the first counts under
// the second. A store of its own has caps of its own.
func TestAdaptiveCapsOutliveTheRateLimiter(t *testing.T) {
	store := memory.New(memory.Options{})
	g := newHoldRig(t, store, adaptiveCap("protect", 1))
	g.hold("")
	again := newHoldRig(t, store, adaptiveCap("protect", 1))
	if w := again.try(""); w.Code != http.StatusServiceUnavailable {
		t.Errorf("the new RateLimiter: %d, want 503 (the slot held under the old one counts)", w.Code)
	}
	other := newHoldRig(t, memory.New(memory.Options{}), adaptiveCap("protect", 1))
	other.hold("")
}

// TestAdaptivePolicyErrors: NewRateLimiter refuses what cannot be an
// adaptive cap, naming the field and why.
func TestAdaptivePolicyErrors(t *testing.T) {
	auto := limiter.Limit{MinInFlight: 2, MaxInFlightCeiling: 64}
	critical := []policy.Priority{{Plan: "pro", Class: policy.ClassCritical}}
	for _, tc := range []struct {
		name string
		p    policy.Policy
		want string
	}{
		{"key on network", policy.Policy{Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: auto},
			`policies[0] ("p").key: an adaptive cap moves with this process's latency, which every client's requests share: key it on nothing ([]) or on operation (a cap per route); "network" would split one protection into many that each see the same latency (a per-client cap is a fixed max_in_flight)`},
		{"ceiling above the bound", policy.Policy{Limit: limiter.Limit{MaxInFlightCeiling: 1_000_001}},
			`policies[0] ("p").max_in_flight_ceiling: 1000001 must be 1 to 1000000 (the most requests this process runs at once, whatever latency says)`},
		{"min without ceiling", policy.Policy{Limit: limiter.Limit{MinInFlight: 4}},
			`policies[0] ("p").max_in_flight_ceiling: 0 must be 1 to 1000000`},
		{"min above ceiling", policy.Policy{Limit: limiter.Limit{MinInFlight: 9, MaxInFlightCeiling: 8}},
			`policies[0] ("p").min_in_flight: 9 must be 1 to max_in_flight_ceiling 8 (0: 1)`},
		{"fixed and adaptive", policy.Policy{Limit: limiter.Limit{MaxInFlight: 8, MaxInFlightCeiling: 8}},
			`policies[0] ("p").max_in_flight: 8 is a fixed cap; an adaptive one (max_in_flight: auto) moves between min_in_flight and max_in_flight_ceiling`},
		{"a rate", policy.Policy{Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: 1}, MaxInFlightCeiling: 8}},
			`policies[0] ("p").max_in_flight: an adaptive cap has no rate, burst, delay_after, max_delay or lease`},
		{"on_store_error local", policy.Policy{Limit: auto, OnStoreError: policy.OnStoreErrorLocal},
			`policies[0] ("p").on_store_error: "local": an adaptive cap is decided in this process and never asks a store`},
		{"log factor", policy.Policy{Limit: auto, LimitLogFactor: 1},
			`policies[0] ("p").limit_log_factor: 1 must be above 1 and at most 1000 (0: 2)`},
		{"priorities on a token bucket", policy.Policy{Limit: limit("1/s", 1), Priorities: critical, Reserved: 0.2},
			`policies[0] ("p").priorities: priorities, reserved and limit_log_factor are for adaptive caps (max_in_flight: auto); a fixed cap of this process that sheds by class is one with min_in_flight = max_in_flight_ceiling`},
		{"priority matching everything", policy.Policy{Limit: auto, Priorities: []policy.Priority{{Class: policy.ClassCritical}}},
			`policies[0] ("p").priorities[0]: matches every request: set tenant, plan or operation`},
		{"priority on an operation the policy does not apply to", policy.Policy{Limit: auto, Operations: []string{"GET /v1/work"},
			Priorities: []policy.Priority{{Operation: "GET /v1/reports/{id}", Class: policy.ClassCritical}}},
			`policies[0] ("p").priorities[0].operation: "GET /v1/reports/{id}" is not one of the policy's operations: the entry never matches`},
		{"unknown class", policy.Policy{Limit: auto, Priorities: []policy.Priority{{Plan: "pro", Class: "urgent"}}},
			`policies[0] ("p").priorities[0].class: "urgent" must be critical or sheddable`},
		{"plan before authentication", policy.Policy{Limit: auto, PreAuth: true, Priorities: critical},
			`policies[0] ("p").priorities[0]: a pre_auth policy runs before credentials are verified: match on operation only`},
		{"reserve without critical", policy.Policy{Limit: auto, Reserved: 0.2},
			`policies[0] ("p").reserved: 0.2 of the limit is kept for critical requests, but no priorities entry makes any request critical`},
		{"reserve of all", policy.Policy{Limit: auto, Reserved: 1, Priorities: critical},
			`policies[0] ("p").reserved: 1 must be a share of the limit from 0 to 0.99`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.Name = "p"
			_, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
				Operation: func(*http.Request) string { return "GET /x" }, Policies: []policy.Policy{tc.p}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant it to contain %s", err, tc.want)
			}
		})
	}
}

// TestAdaptiveKeepsFlusher: a handler behind an adaptive cap (which notes
// its status) still streams, on a real server: its ResponseWriter is an
// http.Flusher, and http.ResponseController reaches the server's writer
// through Unwrap (SetWriteDeadline, which the wrapper has not, succeeds).
func TestAdaptiveKeepsFlusher(t *testing.T) {
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{adaptiveCap("cap", 4)}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(rl.Handler)
	r.Get("/events", func(w http.ResponseWriter, _ *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("the handler's ResponseWriter is not an http.Flusher")
			return
		}
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline through the wrapper: %v", err)
		}
		_, _ = w.Write([]byte("data: 1\n\n"))
		f.Flush()
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "data: 1\n\n" {
		t.Errorf("%d %q; want 200 and the event", resp.StatusCode, body)
	}
}
