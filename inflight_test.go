package ratekey_test

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/policy"
)

// gauge is a middleware.Metrics that keeps the in-flight gauge and counts
// decisions.
type gauge struct {
	mu        sync.Mutex
	inFlight  map[string]int
	decisions map[string]int
}

func newGauge() *gauge { return &gauge{inFlight: map[string]int{}, decisions: map[string]int{}} }

func (g *gauge) Decision(policy, decision string) {
	g.mu.Lock()
	g.decisions[policy+" "+decision]++
	g.mu.Unlock()
}
func (g *gauge) InFlight(policy string, delta int) {
	g.mu.Lock()
	g.inFlight[policy] += delta
	g.mu.Unlock()
}
func (g *gauge) get(m map[string]int, k string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return m[k]
}
func (*gauge) StoreCall(string, string, time.Duration, error)               {}
func (*gauge) FailOpen(string)                                              {}
func (*gauge) JWKSFetch(string, error)                                      {}
func (*gauge) Settled(string, int64, bool)                                  {}
func (*gauge) CachedRejection(string)                                       {}
func (*gauge) Fallback(string)                                              {}
func (*gauge) ProxyAnomaly(string)                                          {}
func (*gauge) AuthFailure(string)                                           {}
func (*gauge) Queued(string)                                                {}
func (*gauge) Dequeued(string, time.Duration, bool)                         {}
func (*gauge) Adaptive(string, string, int64, time.Duration, time.Duration) {}

// slowRig is the front door on a chi router with GET /slow, whose handler
// the test supplies, one concurrency policy (and optionally more), over a
// real HTTP server.
type slowRig struct {
	srv     *httptest.Server
	rk      *ratekey.Middleware
	metrics *gauge
}

func newSlowRig(t *testing.T, policies []ratekey.Policy, h http.HandlerFunc) *slowRig {
	t.Helper()
	r := chi.NewRouter()
	g := newGauge()
	rk, err := ratekey.New(ratekey.Config{Router: r, Policies: policies, Metrics: g,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DebugAllow: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(rk.Handler)
	r.Get("/slow", h)
	srv := httptest.NewUnstartedServer(r)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test's panics
	srv.Start()
	t.Cleanup(srv.Close)
	return &slowRig{srv: srv, rk: rk, metrics: g}
}

// policy returns the debug JSON entry of the named policy for GET /slow,
// via Check (which takes no slot).
func (s *slowRig) policy(t *testing.T, name string) map[string]any {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/slow", nil)
	req.RemoteAddr = "127.0.0.1:1234"
	b, err := json.Marshal(s.rk.Check(req))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Policies []map[string]any }
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	for _, p := range rec.Policies {
		if p["name"] == name {
			return p
		}
	}
	t.Fatalf("no policy %q in %s", name, b)
	return nil
}

// inFlightNow returns the debug JSON's in_flight of policy name, waiting
// up to 2 s for it to reach want (a handler that noticed a hang-up
// returns on its own time).
func (s *slowRig) waitInFlight(t *testing.T, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		p := s.policy(t, name)
		if p["in_flight"] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy %s: in_flight %v; want %v (%v)", name, p["in_flight"], want, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// peak tracks the handler's concurrency, measured inside it.
type peak struct{ cur, max atomic.Int64 }

func (p *peak) enter() {
	n := p.cur.Add(1)
	for {
		m := p.max.Load()
		if n <= m || p.max.CompareAndSwap(m, n) {
			return
		}
	}
}
func (p *peak) leave() { p.cur.Add(-1) }

var conc8 = ratekey.Policy{Name: "conc", Limit: limiter.Limit{MaxInFlight: 8}}

// fire sends n concurrent GET /slow through client calls, each with its
// own context from ctxFor, and returns the statuses (0 for a transport
// error) and the responses' headers.
func fire(t *testing.T, url string, n int, ctxFor func(i int) context.Context) ([]int, []http.Header, []string) {
	statuses, headers, bodies := make([]int, n), make([]http.Header, n), make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctxFor(i), http.MethodGet, url+"/slow", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses[i], headers[i], bodies[i] = resp.StatusCode, resp.Header, string(b)
		}()
	}
	wg.Wait()
	return statuses, headers, bodies
}

func count(statuses []int, code int) int {
	n := 0
	for _, s := range statuses {
		if s == code {
			n++
		}
	}
	return n
}

// TestInFlight64: 64 concurrent slow requests of one key under
// max_in_flight 8: the handler never sees more than 8 at once, exactly 56
// are refused (429, the concurrency-limited problem, no Retry-After, no
// RateLimit fields), and every slot is free afterwards (debug JSON and
// gauge).
func TestInFlight64(t *testing.T) {
	var p peak
	var rejected atomic.Int64
	gate := make(chan struct{})
	rig := newSlowRig(t, []ratekey.Policy{conc8}, func(w http.ResponseWriter, r *http.Request) {
		p.enter()
		defer p.leave()
		<-gate // held until the surplus has been refused
	})
	go func() {
		// Open the gate once 56 have been refused (or after 5 s).
		deadline := time.Now().Add(5 * time.Second)
		for rejected.Load() < 56 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		close(gate)
	}()
	statuses := make([]int, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(rig.srv.URL + "/slow")
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
			if resp.StatusCode == http.StatusTooManyRequests {
				rejected.Add(1)
				mu.Lock()
				problems = append(problems, string(b))
				mu.Unlock()
				if resp.Header.Get("Retry-After") != "" || resp.Header.Get("RateLimit") != "" || resp.Header.Get("RateLimit-Policy") != "" {
					t.Errorf("refusal headers: %v; want no Retry-After, no RateLimit fields", resp.Header)
				}
			}
		}()
	}
	wg.Wait()
	if ok, no := count(statuses, 200), count(statuses, 429); ok != 8 || no != 56 {
		t.Fatalf("%d passed, %d refused; want 8 and 56 (%v)", ok, no, statuses)
	}
	if m := p.max.Load(); m > 8 {
		t.Errorf("the handler saw %d requests at once; want at most 8", m)
	}
	for _, b := range problems[:1] {
		if !strings.Contains(b, `"type":"urn:ratekey:problem:concurrency-limited"`) || !strings.Contains(b, `"policy":"conc"`) {
			t.Errorf("problem body %s", b)
		}
	}
	rig.waitInFlight(t, "conc", 0)
	if n := rig.metrics.get(rig.metrics.inFlight, "conc"); n != 0 {
		t.Errorf("ratekey_in_flight{policy=conc} = %d after the load; want 0", n)
	}
	if n := rig.metrics.get(rig.metrics.decisions, "conc REJECTED"); n != 56 {
		t.Errorf("%d REJECTED decisions counted; want 56", n)
	}
	if n := rig.metrics.get(rig.metrics.decisions, "conc PASSED"); n != 8 {
		t.Errorf("%d PASSED decisions counted; want 8", n)
	}
	// The debug JSON's entry: rate, burst and delay_after null; all 8 free.
	pol := rig.policy(t, "conc")
	for k, want := range map[string]any{"rate": nil, "burst": nil, "delay_after": nil, "max_in_flight": 8.0, "in_flight": 0.0, "remaining": 7.0, "decision": "PASSED"} {
		if pol[k] != want {
			t.Errorf("debug JSON %s = %v; want %v (%v)", k, pol[k], want, pol)
		}
	}
}

// TestInFlightHangUp: the 8 admitted clients hang up mid-request; their
// handlers notice the cancelled context and return, which frees every
// slot; the 56 others were refused.
func TestInFlightHangUp(t *testing.T) {
	var p peak
	entered := make(chan struct{}, 64)
	rig := newSlowRig(t, []ratekey.Policy{conc8}, func(w http.ResponseWriter, r *http.Request) {
		p.enter()
		defer p.leave()
		entered <- struct{}{}
		select {
		case <-r.Context().Done(): // the client went away
		case <-time.After(10 * time.Second):
			t.Error("the handler was never cancelled")
		}
	})
	ctx, hangUp := context.WithCancel(context.Background())
	var refused atomic.Int64
	done := make(chan []int)
	go func() {
		st, _, _ := fire(t, rig.srv.URL, 64, func(int) context.Context { return ctx })
		done <- st
	}()
	// Hang up once 8 are inside and the rest refused.
	for range 8 {
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("8 requests never entered the handler")
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for rig.metrics.get(rig.metrics.decisions, "conc REJECTED") < 56 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	hangUp()
	st := <-done
	// A refused client whose answer was still on its way when it hung
	// up reads no status: count decisions on the server's side.
	refused.Store(int64(rig.metrics.get(rig.metrics.decisions, "conc REJECTED")))
	if passed := rig.metrics.get(rig.metrics.decisions, "conc PASSED"); refused.Load() != 56 || passed != 8 || count(st, 0) < 8 || count(st, 0)+count(st, 429) != 64 {
		t.Errorf("%d refused, %d passed, %d hung up; want 56, 8 and at least 8 (%v)", refused.Load(), passed, count(st, 0), st)
	}
	if m := p.max.Load(); m > 8 {
		t.Errorf("the handler saw %d at once; want at most 8", m)
	}
	rig.waitInFlight(t, "conc", 0)
	deadline = time.Now().Add(2 * time.Second)
	for rig.metrics.get(rig.metrics.inFlight, "conc") != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := rig.metrics.get(rig.metrics.inFlight, "conc"); n != 0 {
		t.Errorf("gauge %d after hang-ups; want 0", n)
	}
	// And the cap is whole again: 8 more fit at once.
	if got := rig.policy(t, "conc"); got["remaining"] != 7.0 {
		t.Errorf("after hang-ups: %v", got)
	}
}

// TestInFlightPanic: the 8 admitted handlers panic; their slots are
// released all the same (the panic goes on to net/http, which drops the
// connection), and the 56 others were refused.
func TestInFlightPanic(t *testing.T) {
	var p peak
	gate := make(chan struct{})
	rig := newSlowRig(t, []ratekey.Policy{conc8}, func(w http.ResponseWriter, r *http.Request) {
		p.enter()
		defer p.leave()
		<-gate
		panic("handler bug")
	})
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for rig.metrics.get(rig.metrics.decisions, "conc REJECTED") < 56 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		close(gate)
	}()
	st, _, _ := fire(t, rig.srv.URL, 64, func(int) context.Context { return context.Background() })
	if count(st, 429) != 56 || count(st, 0) != 8 {
		t.Errorf("%d refused, %d dropped by the panic; want 56 and 8 (%v)", count(st, 429), count(st, 0), st)
	}
	if m := p.max.Load(); m > 8 {
		t.Errorf("the handler saw %d at once; want at most 8", m)
	}
	rig.waitInFlight(t, "conc", 0)
	if n := rig.metrics.get(rig.metrics.inFlight, "conc"); n != 0 {
		t.Errorf("gauge %d after panics; want 0", n)
	}
}

// TestInFlightWithRate: a concurrency policy and a token bucket on one
// request: refusals by either never leave a slot taken or a token spent.
func TestInFlightWithRate(t *testing.T) {
	rate, _ := limiter.ParseRate("1/h")
	pols := []ratekey.Policy{
		{Name: "bucket", Limit: limiter.Limit{Rate: rate, Burst: 10}},
		{Name: "conc", Limit: limiter.Limit{MaxInFlight: 3}, RetryAfter: 2 * time.Second},
	}
	gate := make(chan struct{})
	var p peak
	rig := newSlowRig(t, pols, func(w http.ResponseWriter, r *http.Request) {
		p.enter()
		defer p.leave()
		<-gate
	})
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for rig.metrics.get(rig.metrics.decisions, "conc REJECTED") < 17 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		close(gate)
	}()
	st, hdr, body := fire(t, rig.srv.URL, 20, func(int) context.Context { return context.Background() })
	if count(st, 200) != 3 || count(st, 429) != 17 {
		t.Fatalf("%d passed, %d refused; want 3 and 17 (%v)", count(st, 200), count(st, 429), st)
	}
	for i := range st {
		if st[i] == 429 && (hdr[i].Get("Retry-After") != "2" || !strings.Contains(body[i], "concurrency-limited")) {
			t.Errorf("a slot refusal: Retry-After %q, %s; want 2 (the policy's retry_after), concurrency-limited", hdr[i].Get("Retry-After"), body[i])
		}
	}
	// The 17 refused by the cap spent no token: 10 - 3 left.
	if got := rig.policy(t, "bucket"); got["remaining"] != 6.0 { // Check's would-be: 7 now, 6 after
		t.Fatalf("bucket after the cap's refusals: %v; want 7 tokens left (remaining 6 after this one)", got)
	}
	rig.waitInFlight(t, "conc", 0)
	// Spend the 7 tokens one request at a time, then the bucket refuses:
	// its refusal takes no slot.
	for i := range 8 {
		resp, err := http.Get(rig.srv.URL + "/slow")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := 200
		if i == 7 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %s; want %d", i, resp.StatusCode, b, want)
		}
		if i == 7 && !strings.Contains(string(b), "urn:ratekey:problem:rate-limited") {
			t.Errorf("the bucket's refusal: %s", b)
		}
	}
	if got := rig.policy(t, "conc"); got["in_flight"] != 0.0 {
		t.Errorf("after the bucket's refusal: %v; want no slot taken", got)
	}
	if n := rig.metrics.get(rig.metrics.inFlight, "conc"); n != 0 {
		t.Errorf("gauge %d; want 0", n)
	}
}

// TestInFlightDryRun: a dry-run concurrency policy never refuses, counts
// its requests in flight (limit_conn_dry_run) and reports
// REJECTED_DRY_RUN beyond the cap.
func TestInFlightDryRun(t *testing.T) {
	gate := make(chan struct{})
	pol := ratekey.Policy{Name: "conc", Limit: limiter.Limit{MaxInFlight: 2}, DryRun: true}
	entered := make(chan struct{}, 4)
	rig := newSlowRig(t, []ratekey.Policy{pol}, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-gate
	})
	done := make(chan []int)
	go func() {
		st, _, _ := fire(t, rig.srv.URL, 4, func(int) context.Context { return context.Background() })
		done <- st
	}()
	for range 4 {
		<-entered
	}
	if got := rig.policy(t, "conc"); got["in_flight"] != 2.0 || got["decision"] != "REJECTED_DRY_RUN" {
		t.Errorf("dry run with 4 running: %v; want in_flight 2 (the 2 admitted hold slots), REJECTED_DRY_RUN", got)
	}
	close(gate)
	if st := <-done; count(st, 200) != 4 {
		t.Errorf("dry run refused: %v", st)
	}
	if n := rig.metrics.get(rig.metrics.decisions, "conc REJECTED_DRY_RUN"); n != 2 {
		t.Errorf("%d REJECTED_DRY_RUN; want 2", n)
	}
	rig.waitInFlight(t, "conc", 0)
}

// TestInFlightRefusedConfigs: New refuses what can only be a mistake.
func TestInFlightRefusedConfigs(t *testing.T) {
	rate, _ := limiter.ParseRate("1/s")
	for _, tc := range []struct {
		p    ratekey.Policy
		want string
	}{
		{ratekey.Policy{Name: "a", Limit: limiter.Limit{MaxInFlight: 2, Rate: rate, Burst: 2}}, `policies[0] ("a").max_in_flight: a policy has rate and burst`},
		{ratekey.Policy{Name: "a", Limit: limiter.Limit{MaxInFlight: 2}, Cost: 2}, `policies[0] ("a").cost: an in-flight policy's request holds one slot`},
		{ratekey.Policy{Name: "a", Limit: limiter.Limit{MaxInFlight: -1}}, `policies[0] ("a").max_in_flight: -1 must be 1 to 1000000000`},
		{ratekey.Policy{Name: "a", Limit: limiter.Limit{MaxInFlight: 2, Lease: time.Millisecond}}, `policies[0] ("a").lease: 1ms must be between 1s and 1h`},
		{ratekey.Policy{Name: "a", Limit: limiter.Limit{MaxInFlight: 2}, Overrides: []policy.Override{{Tenant: "x"}}}, `policies[0] ("a").overrides: overrides are for token-bucket policies`},
		{ratekey.Policy{Name: "a", Limit: limiter.Limit{Rate: rate, Burst: 2}, RetryAfter: time.Second}, `policies[0] ("a").retry_after: 1s is for max_in_flight policies`},
		{ratekey.Policy{Name: "a", Limit: limiter.Limit{MaxInFlight: 2}, RetryAfter: -time.Second}, `policies[0] ("a").retry_after: -1s must be 0`},
	} {
		_, err := ratekey.New(ratekey.Config{Router: chi.NewRouter(), Policies: []ratekey.Policy{tc.p}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.p, err, tc.want)
		}
	}
}
