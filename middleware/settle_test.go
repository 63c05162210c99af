package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/metrics"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// settleRig is a chi router whose POST /v1/complete runs the test's
// handler behind a RateLimiter on a memory store with a manual clock, with
// Prometheus metrics on a fresh registry and a JSON log; waits are
// instant and recorded.
type settleRig struct {
	t     *testing.T
	clk   *clocktest.ManualClock
	lim   *memory.Limiter
	reg   *prometheus.Registry
	logs  bytes.Buffer
	h     http.Handler
	serve http.HandlerFunc
	waits []time.Duration
}

// llm is the rigs' settling policy: one bucket, 1000 tokens an hour (3.6 s
// a token: nothing refills during a test), burst 1000, 500 reserved.
func llm() policy.Policy {
	return policy.Policy{Name: "llm", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1000, Per: time.Hour}, Burst: 1000},
		Cost: 500, Settle: true, MaxCost: 2000}
}

func newSettleRig(t *testing.T, policies ...policy.Policy) *settleRig {
	t.Helper()
	return newSettleRigCosts(t, nil, policies...)
}

// newSettleRigCosts is newSettleRig with cost functions by policy name
// (RateLimitConfig.Costs).
func newSettleRigCosts(t *testing.T, costs map[string]func(*http.Request) (int64, error), policies ...policy.Policy) *settleRig {
	t.Helper()
	g := &settleRig{t: t, clk: clocktest.NewManualClock(), reg: prometheus.NewRegistry()}
	g.lim = memory.New(memory.Options{Now: g.clk.Time})
	m, err := metrics.New(g.reg)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: remoteLike{g.lim}, Policies: policies, Costs: costs,
		Operation: middleware.RouteOperation(r), Metrics: m, LogEveryDecision: true, SamplePassed: 1,
		Logger: slog.New(slog.NewJSONHandler(&g.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(rl.Handler)
	r.Post("/v1/complete", func(w http.ResponseWriter, r *http.Request) { g.serve(w, r) })
	g.h = r
	return g
}

// remoteLike is a memory store that, like a remote one, gives up a Settle
// whose context is done.
type remoteLike struct{ *memory.Limiter }

func (l remoteLike) Settle(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision, actual []int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.Limiter.Settle(ctx, reqs, ds, actual)
}

// do sends POST /v1/complete with a Record in its context and returns
// the response and the Record.
func (g *settleRig) do() (*httptest.ResponseRecorder, *middleware.Record) {
	ctx, rec := middleware.WithRecord(context.Background())
	w, _ := g.doCtx(ctx)
	return w, rec
}

// doCtx sends POST /v1/complete on ctx and returns the response and the
// handler's panic, recovered.
func (g *settleRig) doCtx(ctx context.Context) (w *httptest.ResponseRecorder, panicked any) {
	w = httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/complete", nil).WithContext(ctx)
	start := time.Now()
	func() {
		defer func() { panicked = recover() }()
		g.h.ServeHTTP(w, r)
	}()
	// In a testing/synctest bubble, the request's wait (a DELAYED
	// admission) passes at once on the bubble's clock: that is how long.
	if waited := time.Since(start); waited > 0 {
		g.waits = append(g.waits, waited)
	}
	return w, panicked
}

// tokens returns the whole tokens in policy p's bucket (key: its name).
func (g *settleRig) tokens(p policy.Policy) int64 {
	g.t.Helper()
	d, err := g.lim.Peek(context.Background(), nil, []limiter.Request{{Key: p.Name, Limit: p.Limit, Cost: 1}})
	if err != nil {
		g.t.Fatal(err)
	}
	if d[0].Allowed {
		return d[0].Remaining + 1
	}
	return d[0].Remaining
}

// reports returns a handler that reports each of costs to policy in turn,
// recording their errors in errs.
func reports(errs *[]string, policy string, costs ...int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for _, c := range costs {
			if err := middleware.ReportCost(r.Context(), policy, c); err != nil {
				*errs = append(*errs, err.Error())
			}
		}
	}
}

// settledJSON returns the "reserved" and "settled" of policy name in the
// Record's JSON, as JSON text ("null" when null).
func settledJSON(t *testing.T, rec *middleware.Record, name string) (reserved, settled string) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Policies []struct {
			Name     string          `json:"name"`
			Reserved json.RawMessage `json:"reserved"`
			Settled  json.RawMessage `json:"settled"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range v.Policies {
		if p.Name == name {
			return string(p.Reserved), string(p.Settled)
		}
	}
	t.Fatalf("no policy %s in %s", name, b)
	return "", ""
}

// TestSettleOutcomes is the table of what a request settles at: the cost
// reported, clamped to max_cost; the reservation when nothing was reported
// (a panic before the report, a client gone before it); the first of two
// reports; never a report after the handler returned; a dry-run policy is
// accounted the same way (TestSettleDryRun: never enforced); a reservation
// admitted with a delay (nginx delay) settles after its wait. Each row
// starts from a full bucket of 1000 tokens, reserves 500, and checks the
// handler's report errors, the Record's "reserved" and "settled", the
// tokens left and the metrics.
func TestSettleOutcomes(t *testing.T) {
	type row struct {
		name    string
		serve   func(errs *[]string, late *func()) http.HandlerFunc
		cancel  bool                 // the client goes away while the handler runs (before it reports)
		policy  func(*policy.Policy) // changes llm()
		settled int64
		tokens  int64
		errs    []string
		debts   float64
	}
	rows := []row{
		{name: "refund 500 to 100", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", 100) },
			settled: 100, tokens: 900},
		{name: "nothing reported", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm") },
			settled: 500, tokens: 500},
		{name: "at the reservation", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", 500) },
			settled: 500, tokens: 500},
		{name: "zero", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", 0) },
			settled: 0, tokens: 1000},
		{name: "debt", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", 1500) },
			settled: 1500, tokens: 0, debts: 1},
		{name: "clamped to max_cost", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", 5000) },
			settled: 2000, tokens: 0, debts: 1},
		{name: "every settling policy", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "", 300) },
			settled: 300, tokens: 700},
		{name: "reported twice", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", 100, 300) },
			settled: 100, tokens: 900, errs: []string{`ratekey: policy "llm": a cost (100) was reported already for this request; this report (300) is ignored`}},
		{name: "twice, the second for every policy", serve: func(e *[]string, _ *func()) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				reports(e, "llm", 100)(w, r)
				reports(e, "", 300)(w, r)
			}
		}, settled: 100, tokens: 900, errs: []string{`ratekey: policy "llm": a cost (100) was reported already for this request; this report (300) is ignored`}},
		{name: "negative", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", -1) },
			settled: 500, tokens: 500, errs: []string{"ratekey: cost -1 is negative (a cost is a whole number of tokens, at least 0)"}},
		{name: "a policy that does not settle", serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "plain", 10) },
			settled: 500, tokens: 500, errs: []string{`ratekey: policy "plain" has no reservation open for this request (no policy of that name applies, it does not settle, it did not charge the request, or its handler has returned)`}},
		{name: "from another goroutine, before return", serve: func(e *[]string, _ *func()) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				var wg sync.WaitGroup
				wg.Go(func() { reports(e, "llm", 200)(w, r) })
				wg.Wait()
			}
		}, settled: 200, tokens: 800},
		{name: "after return", serve: func(e *[]string, late *func()) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				*late = func() { reports(e, "llm", 100)(w, r) } // run once ServeHTTP has returned
			}
		}, settled: 500, tokens: 500, errs: []string{"ratekey: the request's handler has returned and its costs are settled; a later report is ignored"}},
		{name: "panic after the report", serve: func(e *[]string, _ *func()) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				reports(e, "llm", 100)(w, r)
				panic("boom")
			}
		}, settled: 100, tokens: 900},
		{name: "panic before any report", serve: func(e *[]string, _ *func()) http.HandlerFunc {
			return func(http.ResponseWriter, *http.Request) { panic("boom") }
		}, settled: 500, tokens: 500},
		{name: "client gone, reported", cancel: true, serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", 100) },
			settled: 100, tokens: 900},
		{name: "client gone, nothing reported", cancel: true, serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm") },
			settled: 500, tokens: 500},
		{name: "dry run: accounted", policy: func(p *policy.Policy) { p.DryRun = true },
			serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", 1500) }, settled: 1500, tokens: 0, debts: 1},
		{name: "delayed admission (nginx delay)", policy: func(p *policy.Policy) { p.Limit.DelayAfter, p.Limit.MaxDelay = 490, 40*time.Second },
			serve: func(e *[]string, _ *func()) http.HandlerFunc { return reports(e, "llm", 100) }, settled: 100, tokens: 900},
	}
	plain := policy.Policy{Name: "plain", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 10}}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := llm()
				if tc.policy != nil {
					tc.policy(&p)
				}
				g := newSettleRig(t, p, plain)
				var errs []string
				var late func()
				serve := tc.serve(&errs, &late)
				ctx, rec := middleware.WithRecord(context.Background())
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				g.serve = func(w http.ResponseWriter, r *http.Request) {
					if tc.cancel {
						cancel()
					}
					serve(w, r)
				}
				w, panicked := g.doCtx(ctx)
				if late != nil {
					late()
				}
				if w.Code != http.StatusOK || (panicked != nil) != strings.HasPrefix(tc.name, "panic") {
					t.Fatalf("status %d, panic %v", w.Code, panicked)
				}
				if fmt.Sprint(errs) != fmt.Sprint(tc.errs) {
					t.Errorf("report errors %q; want %q", errs, tc.errs)
				}
				if reserved, settled := settledJSON(t, rec, "llm"); reserved != "500" || settled != fmt.Sprint(tc.settled) {
					t.Errorf(`"reserved": %s, "settled": %s; want 500, %d`, reserved, settled, tc.settled)
				}
				if reserved, settled := settledJSON(t, rec, "plain"); reserved != "null" || settled != "null" {
					t.Errorf(`plain: "reserved": %s, "settled": %s; want null, null`, reserved, settled)
				}
				if strings.HasPrefix(tc.name, "delayed") && fmt.Sprint(g.waits) != "[36s]" {
					t.Errorf("waited %v; want [36s] (10 tokens past delay_after, at 3.6 s)", g.waits)
				}
				if n := g.tokens(p); n != tc.tokens {
					t.Errorf("%d tokens left; want %d", n, tc.tokens)
				}
				if got := series(t, g.reg, "ratekey_settled_cost_total", "policy", "llm"); got != float64(tc.settled) {
					t.Errorf("ratekey_settled_cost_total = %v; want %d", got, tc.settled)
				}
				if got := series(t, g.reg, "ratekey_settle_debts_total", "policy", "llm"); got != tc.debts {
					t.Errorf("ratekey_settle_debts_total = %v; want %v", got, tc.debts)
				}
			})
		})
	}
}

// TestSettleDebtRetryAfter: a request settled far above its reservation
// puts the bucket in debt; the next request is refused with the
// Retry-After that repaying the debt at the rate takes (1000/h: 3.6 s a
// token), and its RateLimit fields (written before the body) describe
// its own reservation.
func TestSettleDebtRetryAfter(t *testing.T) {
	g := newSettleRig(t, llm())
	var errs []string
	g.serve = reports(&errs, "llm", 1500)
	w, _ := g.do()
	if got := w.Header().Get("RateLimit"); got != `"llm";r=500;t=1800` {
		t.Errorf("RateLimit of the reservation: %q; want %q", got, `"llm";r=500;t=1800`)
	}
	// The bucket of 1000 owes 1500 tokens: the next 500 fit once 1000
	// are repaid, 3600 s.
	w, _ = g.do()
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "3600" {
		t.Fatalf("after a debt: %d, Retry-After %q; want 429, 3600", w.Code, w.Header().Get("Retry-After"))
	}
	g.clk.Set(3600*time.Second - 1)
	if w, _ = g.do(); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Errorf("a nanosecond before the debt is repaid: %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
	}
	g.clk.Set(3600 * time.Second)
	g.serve = reports(&errs, "llm")
	if w, _ = g.do(); w.Code != http.StatusOK {
		t.Errorf("once repaid: %d; want 200", w.Code)
	}
	if len(errs) > 0 {
		t.Errorf("report errors: %q", errs)
	}
}

// TestSettleDryRun: a dry-run settling policy is accounted (reserved and
// settled, its debt taken) and never enforced: the request after the debt
// passes, REJECTED_DRY_RUN, with nothing reserved, so its report is an
// error and charges nothing.
func TestSettleDryRun(t *testing.T) {
	p := llm()
	p.DryRun = true
	g := newSettleRig(t, p)
	var errs []string
	g.serve = reports(&errs, "llm", 1500)
	w, rec := g.do()
	if _, settled := settledJSON(t, rec, "llm"); w.Code != http.StatusOK || settled != "1500" {
		t.Fatalf("dry run: %d, settled %s; want 200, 1500", w.Code, settled)
	}
	w, rec = g.do()
	if w.Code != http.StatusOK || rec.Decision != decide.DecisionRejectedDryRun {
		t.Fatalf("in debt, dry run: %d %s; want 200 REJECTED_DRY_RUN", w.Code, rec.Decision)
	}
	if _, settled := settledJSON(t, rec, "llm"); settled != "null" {
		t.Errorf("nothing reserved, yet settled %s", settled)
	}
	if want := []string{`ratekey: policy "llm" has no reservation open for this request (no policy of that name applies, it does not settle, it did not charge the request, or its handler has returned)`}; fmt.Sprint(errs) != fmt.Sprint(want) {
		t.Errorf("report errors %q; want %q", errs, want)
	}
	if n := g.tokens(p); n != 0 {
		t.Errorf("%d tokens; want 0 (the debt of the first request, nothing more)", n)
	}
}

// TestSettleDelayed: a reservation admitted with a delay (nginx delay:
// burst 4 at 1/s, delay_after 1) waits, runs, and settles: reserved 2,
// settled at 1, the bucket is as if the request had cost 1.
func TestSettleDelayed(t *testing.T) {
	synctest.Test(t, testSettleDelayed) // the 1 s wait passes at once
}

func testSettleDelayed(t *testing.T) {
	p := policy.Policy{Name: "llm", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 4, DelayAfter: 1},
		Cost: 2, Settle: true}
	g := newSettleRig(t, p)
	var errs []string
	g.serve = reports(&errs, "llm", 1)
	w, rec := g.do()
	if w.Code != http.StatusOK || rec.Decision != decide.DecisionDelayed || fmt.Sprint(g.waits) != "[1s]" {
		t.Fatalf("%d %s after waiting %v; want 200 DELAYED after [1s]", w.Code, rec.Decision, g.waits)
	}
	if _, settled := settledJSON(t, rec, "llm"); settled != "1" {
		t.Errorf("settled %s; want 1", settled)
	}
	if n := g.tokens(p); n != 3 {
		t.Errorf("%d tokens; want 3", n)
	}
}

// TestSettleNoRequestState: behind a RateLimiter alone (no ClientAddress
// or Recorder in front, so no request state), the handler still reports;
// a context that never passed a rate limiter gets an error.
func TestSettleNoRequestState(t *testing.T) {
	g := newSettleRig(t, llm())
	var errs []string
	g.serve = reports(&errs, "llm", 100)
	if w, _ := g.doCtx(context.Background()); w.Code != http.StatusOK || len(errs) > 0 {
		t.Fatalf("%d, report errors %q", w.Code, errs)
	}
	if n := g.tokens(llm()); n != 900 {
		t.Errorf("%d tokens; want 900", n)
	}
	err := middleware.ReportCost(context.Background(), "llm", 1)
	if err == nil || err.Error() != "ratekey: no rate limiter reserved tokens for this request (ReportCost takes the context of a request behind RateLimiter.Handler)" {
		t.Errorf("ReportCost on a bare context: %v", err)
	}
}

// TestSettleLog: the decision line of a settling request is written once
// its handler has returned, with "reserved" and "settled"; a report above
// max_cost gets a Warn line naming the policy, never a secret.
func TestSettleLog(t *testing.T) {
	g := newSettleRig(t, llm())
	var errs []string
	g.serve = reports(&errs, "llm", 5000)
	g.do()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(g.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines; want the clamp's and the decision's:\n%s", len(lines), g.logs.String())
	}
	clamp, dec := lines[0], lines[1]
	if clamp["level"] != "WARN" || clamp["reported"] != 5000.0 || clamp["max_cost"] != 2000.0 || clamp["policy"] != "llm" {
		t.Errorf("clamp line: %v", clamp)
	}
	if dec["msg"] != "ratekey decision" || dec["reserved"] != 500.0 || dec["settled"] != 2000.0 || dec["decision"] != "PASSED" {
		t.Errorf("decision line: %v", dec)
	}
}

// TestSettleValidation: NewRateLimiter refuses settle fields that can only
// be mistakes, naming the field; a settling policy with plan overrides is
// fine ("free: 100 000 tokens a day, pro: 5 000 000").
func TestSettleValidation(t *testing.T) {
	daily := func(n int64) limiter.Limit {
		return limiter.Limit{Rate: limiter.Rate{Count: n, Per: 24 * time.Hour}, Burst: n}
	}
	plans := policy.Policy{Name: "tokens", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimPlan}, Limit: daily(100_000), Cost: 500, Settle: true,
		Overrides: []policy.Override{{Plan: "pro", Limit: daily(5_000_000)}}}
	for _, c := range []struct {
		name string
		p    policy.Policy
		want string
	}{
		{"plans", plans, ""},
		{"max_cost without settle", policy.Policy{Name: "p", Limit: limit("1/s", 10), MaxCost: 5},
			`policies[0] ("p").max_cost: 5 is for settling policies (settle: true)`},
		{"negative max_cost", policy.Policy{Name: "p", Limit: limit("1/s", 10), Settle: true, MaxCost: -1},
			`policies[0] ("p").max_cost: -1 must not be negative (0: the burst)`},
		{"max_cost below the reservation", policy.Policy{Name: "p", Limit: limit("1/s", 10), Cost: 5, Settle: true, MaxCost: 4},
			`policies[0] ("p").max_cost: 4 is below the cost 5 reserved: no request could settle at its own reservation`},
		{"an override's reservation", policy.Policy{Name: "p", Key: []limitkey.Dimension{limitkey.DimTenant}, Limit: limit("1/s", 10), Cost: 2, Settle: true, MaxCost: 4,
			Overrides: []policy.Override{{Tenant: "acme", Cost: 6}}},
			`policies[0] ("p").max_cost: 4 is below the cost 6 reserved (overrides[0]): no request could settle at its own reservation`},
		{"max_cost beyond the largest settle", policy.Policy{Name: "p", Limit: limit("1/h", 10), Settle: true, MaxCost: 3_000_000},
			`policies[0] ("p").max_cost: 3000000 tokens at 1/h exceed the largest settle, 2^53-1 ns of the rate (about 104 days): lower max_cost`},
		{"a default max_cost (the burst) beyond it", policy.Policy{Name: "p", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1000, Per: 24 * time.Hour}, Burst: 200_000}, Settle: true},
			`policies[0] ("p").max_cost: 200000 tokens at 1000/d exceed the largest settle, 2^53-1 ns of the rate (about 104 days): lower max_cost`},
		{"in-flight", policy.Policy{Name: "p", Limit: limiter.Limit{MaxInFlight: 2}, Settle: true},
			`policies[0] ("p").settle: an in-flight policy's request holds one slot: nothing to settle (settle and max_cost are for token buckets)`},
	} {
		_, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
			Operation: func(*http.Request) string { return "GET /x" }, Policies: []policy.Policy{c.p}})
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("%s: error %v\nwant %s", c.name, err, c.want)
		}
	}
}

// TestSettleExactness: 16 goroutines send 8 requests each through the
// Handler, from 8 client networks, under two settling policies (input and
// output tokens, each its own bucket per network, so that on a Cluster a
// request's two buckets are in different slots); each handler reports a
// random cost to each, or nothing, or more than max_cost. At 1 token an
// hour nothing refills, so the tokens each bucket spent must equal the sum
// of what its requests settled at, exactly: on the memory store, one
// Redis server and a 3-master Redis Cluster.
func TestSettleExactness(t *testing.T) {
	stores := []struct {
		name string
		new  func(t *testing.T) limiter.Limiter
	}{
		{"memory", func(*testing.T) limiter.Limiter { return memory.New(memory.Options{}) }},
		{"redis", func(t *testing.T) limiter.Limiter {
			srv := redistest.Start(t)
			c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return mustRedis(t, c)
		}},
		{"cluster", func(t *testing.T) limiter.Limiter {
			cl := redistest.StartMasters(t, 3)
			c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return mustRedis(t, c)
		}},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			testSettleExactness(t, s.new(t))
		})
	}
}

func mustRedis(t *testing.T, c goredis.UniversalClient) limiter.Limiter {
	t.Helper()
	l, err := rkredis.New(c, rkredis.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testSettleExactness(t *testing.T, store limiter.Limiter) {
	const nets, workers, each = 8, 16, 8
	slow := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Hour}, Burst: 2000}
	pol := func(name string) policy.Policy {
		return policy.Policy{Name: name, Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: slow, Cost: 50, Settle: true, MaxCost: 100}
	}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: store, Policies: []policy.Policy{pol("in"), pol("out")},
		Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}), rl.Handler)
	r.Post("/v1/complete", func(w http.ResponseWriter, r *http.Request) {
		for _, p := range []string{"in", "out"} {
			if c, _ := strconv.ParseInt(r.Header.Get(p), 10, 64); c >= 0 {
				if err := middleware.ReportCost(r.Context(), p, c); err != nil {
					t.Error(err)
				}
			}
		}
	})
	var mu sync.Mutex
	spent := map[string]int64{} // policy|network -> tokens settled
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 27))
			for i := range each {
				network := fmt.Sprintf("198.51.100.%d", (g+i)%nets)
				req := httptest.NewRequest(http.MethodPost, "/v1/complete", nil)
				req.RemoteAddr = network + ":1"
				settled := map[string]int64{}
				for _, p := range []string{"in", "out"} {
					c := rng.Int64N(130) - 10 // -10..-1: nothing reported (the reservation, 50); above 100: clamped
					req.Header.Set(p, strconv.FormatInt(c, 10))
					settled[p] = min(c, 100)
					if c < 0 {
						settled[p] = 50
					}
				}
				w := httptest.NewRecorder()
				r.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					t.Errorf("%s: %d %s", network, w.Code, w.Body)
					return
				}
				mu.Lock()
				for p, c := range settled {
					spent[p+"|"+network] += c
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := int64(0)
	for k, want := range spent {
		p, network, _ := strings.Cut(k, "|")
		key := p + "|network=" + network + "/32"
		d, err := store.Peek(context.Background(), nil, []limiter.Request{{Key: key, Limit: slow, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		left := d[0].Remaining
		if d[0].Allowed {
			left++
		}
		if got := slow.Burst - left; got != want {
			t.Errorf("%s: spent %d tokens; the settled costs sum to %d", key, got, want)
		}
		total += want
	}
	t.Logf("%d requests, %d buckets, %d tokens settled, each bucket exact", workers*each, len(spent), total)
}

// plannedAuth is an authenticator whose principals (tenant acme) carry the
// plan and account the test names in headers: a stand-in for verified
// credentials.
type plannedAuth struct{}

func (plannedAuth) Authenticate(r *http.Request) (limitkey.Principal, error) {
	h := r.Header
	return limitkey.Principal{Issuer: "test", Tenant: "acme", Plan: h.Get("Plan"), Account: h.Get("Account"), Method: limitkey.MethodJWT}, nil
}

// TestSettlePlans: quotas by plan in the units that matter, one settling
// policy with a plan override: free 100 000 tokens a day, pro 5 000 000.
// Each plan's bucket spends exactly what its requests settled at, and a
// free account past its quota is refused with the Retry-After of its
// debt, while a pro account with the same usage is not.
func TestSettlePlans(t *testing.T) {
	daily := func(n int64) limiter.Limit {
		return limiter.Limit{Rate: limiter.Rate{Count: n, Per: 24 * time.Hour}, Burst: n}
	}
	p := policy.Policy{Name: "tokens", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimPlan, limitkey.DimAccount},
		Limit: daily(100_000), Cost: 1000, Settle: true, MaxCost: 1_000_000,
		Overrides: []policy.Override{{Plan: "pro", Limit: daily(5_000_000)}}}
	clk := clocktest.NewManualClock()
	store := memory.New(memory.Options{Now: clk.Time})
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: store, Policies: []policy.Policy{p},
		Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(middleware.Authenticate(plannedAuth{}, middleware.AuthOptions{}), rl.Handler)
	r.Post("/v1/complete", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.Header.Get("Tokens"), 10, 64)
		if err := middleware.ReportCost(r.Context(), "tokens", n); err != nil {
			t.Error(err)
		}
	})
	send := func(plan string, tokens int64) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/complete", nil)
		req.Header.Set("Plan", plan)
		req.Header.Set("Account", plan+"-user")
		req.Header.Set("Tokens", strconv.FormatInt(tokens, 10))
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	for _, plan := range []string{"free", "pro"} {
		for _, tokens := range []int64{40_000, 50_000, 30_000} { // 120 000: 20 000 past the free quota
			if w := send(plan, tokens); w.Code != http.StatusOK {
				t.Fatalf("%s, %d tokens: %d %s", plan, tokens, w.Code, w.Body)
			}
		}
	}
	// free owes 20 000 tokens (0.864 s each) and reserves 1000 more:
	// 21 000 tokens of repayment, 18 144 s.
	if w := send("free", 10); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "18144" {
		t.Errorf("free past its quota: %d, Retry-After %q; want 429, 18144", w.Code, w.Header().Get("Retry-After"))
	}
	if w := send("pro", 10); w.Code != http.StatusOK {
		t.Errorf("pro: %d; want 200", w.Code)
	}
	for _, c := range []struct {
		plan  string
		limit limiter.Limit
		want  int64 // tokens left
	}{{"free", daily(100_000), 0}, {"pro", daily(5_000_000), 5_000_000 - 120_000 - 10}} {
		key := "tokens|tenant=acme|plan=" + c.plan + "|account=" + c.plan + "-user"
		d, err := store.Peek(context.Background(), nil, []limiter.Request{{Key: key, Limit: c.limit, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		left := d[0].Remaining
		if d[0].Allowed {
			left++
		}
		if left != c.want {
			t.Errorf("%s: %d tokens left; want %d", c.plan, left, c.want)
		}
	}
}

// TestSettleCostFunc: with a cost function, its answer is the reservation
// (300 here, for a request asking for up to 300 tokens), and the report
// replaces it.
func TestSettleCostFunc(t *testing.T) {
	p := llm()
	p.Cost = 0
	g := newSettleRigCosts(t, map[string]func(*http.Request) (int64, error){"llm": func(*http.Request) (int64, error) { return 300, nil }}, p)
	var errs []string
	g.serve = reports(&errs, "llm", 120)
	_, rec := g.do()
	if reserved, settled := settledJSON(t, rec, "llm"); reserved != "300" || settled != "120" || len(errs) > 0 {
		t.Errorf(`"reserved": %s, "settled": %s, errors %q; want 300, 120`, reserved, settled, errs)
	}
	if n := g.tokens(p); n != 880 {
		t.Errorf("%d tokens; want 880", n)
	}
}

// TestSettleCostFuncAboveMaxCost: a cost function's estimate above the
// policy's max_cost (2000) is an invalid cost, 400 naming the policy,
// charged nothing, as a fixed cost above it is refused by validation: a
// report would be clamped below the reservation, and none would leave it
// charged. At max_cost it is reserved.
func TestSettleCostFuncAboveMaxCost(t *testing.T) {
	for _, tc := range []struct {
		estimate, status, tokens int64
	}{{2001, http.StatusBadRequest, 3000}, {2000, http.StatusOK, 1000}} {
		p := llm()
		p.Limit.Burst, p.Limit.Rate.Count = 3000, 3000
		p.Cost = 0
		g := newSettleRigCosts(t, map[string]func(*http.Request) (int64, error){"llm": func(*http.Request) (int64, error) { return tc.estimate, nil }}, p)
		g.serve = func(http.ResponseWriter, *http.Request) {}
		w, _ := g.do()
		if int64(w.Code) != tc.status || g.tokens(p) != tc.tokens {
			t.Errorf("estimate %d: %d, %d tokens left; want %d, %d", tc.estimate, w.Code, g.tokens(p), tc.status, tc.tokens)
		}
		if tc.status == http.StatusBadRequest {
			if pr := decodeProblem(t, w.Body.String()); pr.Type != "urn:ratekey:problem:invalid-cost" || pr.Policy != "llm" ||
				pr.Detail != "policy llm cannot determine this request's cost (a whole number of tokens, from 1 to its max_cost, 2000)" {
				t.Errorf("estimate %d: problem %+v; want invalid-cost naming llm and its max_cost", tc.estimate, pr)
			}
		}
	}
}

// twoPhaseSettle returns a router and a rate limiter on store with two
// settling policies: "pre" (pre-auth, reserving 200) and llm() (main,
// reserving 500).
func twoPhaseSettle(t *testing.T, store limiter.Limiter) (*chi.Mux, *middleware.RateLimiter, policy.Policy, policy.Policy) {
	t.Helper()
	pre, main := llm(), llm()
	pre.Name, pre.PreAuth, pre.Cost = "pre", true, 200
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: store, Policies: []policy.Policy{pre, main},
		Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return r, rl, pre, main
}

// TestSettleTwoPhases: a pre-auth settling policy and a main one each
// reserve in their phase; one report for every policy ("") settles both,
// each when its own phase's handler returns, into its own bucket.
func TestSettleTwoPhases(t *testing.T) {
	clk := clocktest.NewManualClock()
	store := memory.New(memory.Options{Now: clk.Time})
	r, rl, pre, main := twoPhaseSettle(t, store)
	var errs []string
	r.Use(rl.PreAuthHandler, rl.Handler)
	r.Post("/v1/complete", reports(&errs, "", 100))
	ctx, rec := middleware.WithRecord(context.Background())
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/complete", nil).WithContext(ctx))
	if w.Code != http.StatusOK || len(errs) > 0 {
		t.Fatalf("%d, report errors %q", w.Code, errs)
	}
	for _, c := range []struct {
		p                 policy.Policy
		reserved, settled string
		tokens            int64
	}{{pre, "200", "100", 900}, {main, "500", "100", 900}} {
		if reserved, settled := settledJSON(t, rec, c.p.Name); reserved != c.reserved || settled != c.settled {
			t.Errorf("%s: reserved %s, settled %s; want %s, %s", c.p.Name, reserved, settled, c.reserved, c.settled)
		}
		d, err := store.Peek(context.Background(), nil, []limiter.Request{{Key: c.p.Name, Limit: c.p.Limit, Cost: 1}})
		if err != nil || d[0].Remaining+1 != c.tokens {
			t.Errorf("%s: %+v %v; want %d tokens", c.p.Name, d, err, c.tokens)
		}
	}
}
