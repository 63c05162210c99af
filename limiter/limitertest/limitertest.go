// Package limitertest is the conformance suite of the [limiter.Limiter]
// contract: every store (limiter/memory, limiter/redis, yours) runs [Run]
// from its tests and must give the same Decisions for the same traces.
//
// The suite pins the contract with hand-computed traces (the GCRA rule of
// package [limiter] with rate, burst, cost, delay_after and max_delay; Never;
// rejected requests charging nothing; all-or-nothing; duplicate buckets in
// one call; a changed limit shape finding a fresh bucket; a daily quota
// (1000/d) across the day's edge; keys of one policy under different
// limits (per-tenant overrides) and an override changed and restored; the dry-run
// two-pass rule; Peek deciding like Take and charging nothing; empty,
// invalid and cancelled calls) and with random traces checked against a
// reference model built on the stores' shared implementation of that rule,
// plus goroutines racing for one burst.
//
// Reserve, then settle (Request.Settle, Limiter.Settle) is pinned the same
// way: refunds (500 settled at 100: 400 back), capped by what refilled and
// by later charges; debts and the RetryAfter that repays them; a delayed
// admission; dry run and the two-pass rule; several settles in one call;
// invalid settles; random traces against the reference model; and
// goroutines whose spent tokens equal the sum of their settled costs.
//
// In-flight caps (Limit.MaxInFlight) are pinned the same way: slots taken
// and refused, Never, Peek taking none, all-or-nothing with token buckets
// in both directions, the dry-run rule, the slots held (Decision.InFlight,
// above a lowered MaxInFlight too), Release (of part of a call, of
// several slots, after MaxInFlight changed), invalid caps, random traces
// of takes and releases against the reference model, and goroutines that
// never hold more than the cap. Every store must implement them: a store
// that answers errors.ErrUnsupported (as the [limiter.Limiter] contract
// allows a token-bucket-only store to) fails those subtests.
//
// Time is the suite's: it gives the [Factory] the Now function the store
// must read its time from (as limiter/memory's Options.Now), reading the
// Unix epoch when the store is made, and only moves it forward from there,
// in nanoseconds; no store needs to observe real time passing.
package limitertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/racetest"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

// Factory returns a new Limiter with no state (every bucket full) that
// reads its time from now (a clock the suite moves; it reads the Unix
// epoch, time.Unix(0, 0), when the Factory is called). Run calls it once
// per subtest; Limiters it returns must not share buckets with each other
// (use a fresh key prefix, database or server). It may skip or fail t, and
// register cleanups with t.Cleanup.
//
// Every limit the suite uses has a window (Burst × Interval) of at most 30
// days, so stores whose arithmetic is narrower than int64 nanoseconds
// (limiter/redis: windows up to 2^53 ns) can run it; intervals go down to
// 3ns and time steps up to hours.
type Factory func(t *testing.T, now func() time.Time) limiter.Limiter

// Run runs the conformance suite against the Limiters newLimiter returns,
// as subtests of t.
func Run(t *testing.T, newLimiter Factory) {
	tests := []struct {
		name string
		f    func(t *testing.T, h *harness)
	}{
		{"SeedTrace", testSeedTrace},
		{"DecisionValues", testDecisionValues},
		{"RejectedConsumesNothing", testRejectedConsumesNothing},
		{"Never", testNever},
		{"DelayAfter", testDelayAfter},
		{"MaxDelay", testMaxDelay},
		{"AllOrNothing", testAllOrNothing},
		{"DuplicateBuckets", testDuplicateBuckets},
		{"ShapeChange", testShapeChange},
		{"DailyWindow", testDailyWindow},
		{"Overrides", testOverrides},
		{"DryRun", testDryRun},
		{"PeekChargesNothing", testPeekChargesNothing},
		{"EmptyAndDst", testEmptyAndDst},
		{"InvalidRequests", testInvalidRequests},
		{"CancelledContext", testCancelledContext},
		{"RandomTraces", testRandomTraces},
		{"ConcurrentBurst", testConcurrentBurst},
		{"ConcurrentAllOrNothing", testConcurrentAllOrNothing},
		{"InFlight", testInFlight},
		{"InFlightAllOrNothing", testInFlightAllOrNothing},
		{"InFlightDryRun", testInFlightDryRun},
		{"InFlightRelease", testInFlightRelease},
		{"InFlightInvalid", testInFlightInvalid},
		{"InFlightRandom", testInFlightRandom},
		{"InFlightConcurrent", testInFlightConcurrent},
		{"SettleRefund", testSettleRefund},
		{"SettleDebt", testSettleDebt},
		{"SettleDelayed", testSettleDelayed},
		{"SettleDryRun", testSettleDryRun},
		{"SettleCall", testSettleCall},
		{"SettleInvalid", testSettleInvalid},
		{"SettleRandom", testSettleRandom},
		{"SettleConcurrent", testSettleConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.NewManualClock()
			tc.f(t, &harness{l: diagnosticsCleared{newLimiter(t, clk.Time)}, clk: clk})
		})
	}
}

// diagnosticsCleared wraps a Limiter under test, clearing the Decision
// fields that describe how a store reached a decision, not the decision
// (HashSlot, RoundTrips), so that every store is held to the same values.
type diagnosticsCleared struct{ limiter.Limiter }

func (l diagnosticsCleared) Take(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	return clearDiagnostics(l.Limiter.Take(ctx, dst, reqs))
}

func (l diagnosticsCleared) Peek(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	return clearDiagnostics(l.Limiter.Peek(ctx, dst, reqs))
}

func clearDiagnostics(ds []limiter.Decision, err error) ([]limiter.Decision, error) {
	for i := range ds {
		ds[i].HashSlot, ds[i].RoundTrips = 0, 0
	}
	return ds, err
}

// harness is one subtest's limiter and clock.
type harness struct {
	l   limiter.Limiter
	clk *clocktest.ManualClock
}

// dec is a readable shorthand for limiter.Decision.
type dec = limiter.Decision

const ms = time.Millisecond

// lim returns a Limit of count tokens per period with burst b.
func lim(count int64, per time.Duration, b int64) limiter.Limit {
	return limiter.Limit{Rate: limiter.Rate{Count: count, Per: per}, Burst: b}
}

// req returns a request for key with limit li and cost.
func req(key string, li limiter.Limit, cost int64) limiter.Request {
	return limiter.Request{Key: key, Limit: li, Cost: cost}
}

// dry returns r as a dry-run request.
func dry(r limiter.Request) limiter.Request {
	r.DryRun = true
	return r
}

func (h *harness) at(d time.Duration) { h.clk.Set(d) }

func (h *harness) take(t *testing.T, reqs ...limiter.Request) []dec {
	t.Helper()
	d, err := h.l.Take(context.Background(), nil, reqs)
	if err != nil {
		t.Fatalf("Take(%+v): %v", reqs, err)
	}
	if len(d) != len(reqs) {
		t.Fatalf("Take(%+v) returned %d decisions; want %d", reqs, len(d), len(reqs))
	}
	return d
}

func (h *harness) peek(t *testing.T, reqs ...limiter.Request) []dec {
	t.Helper()
	d, err := h.l.Peek(context.Background(), nil, reqs)
	if err != nil {
		t.Fatalf("Peek(%+v): %v", reqs, err)
	}
	if len(d) != len(reqs) {
		t.Fatalf("Peek(%+v) returned %d decisions; want %d", reqs, len(d), len(reqs))
	}
	return d
}

// tokens returns the whole tokens in r's bucket now, via a cost-1 Peek
// (which reports them after the hypothetical charge when allowed).
func (h *harness) tokens(t *testing.T, r limiter.Request) int64 {
	t.Helper()
	r.Cost, r.DryRun = 1, false
	d := h.peek(t, r)[0]
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

// expect checks got against want, naming the step.
func expect(t *testing.T, step string, got, want []dec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d decisions %+v; want %d %+v", step, len(got), got, len(want), want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s, request %d: got %+v; want %+v", step, i, got[i], want[i])
		}
	}
}

// step is one call of a single-request trace.
type step struct {
	at   time.Duration
	cost int64
	want dec
}

// runSteps takes key with li at each step's time and cost.
func runSteps(t *testing.T, h *harness, key string, li limiter.Limit, steps []step) {
	t.Helper()
	for i, s := range steps {
		h.at(s.at)
		got := h.take(t, req(key, li, s.cost))
		expect(t, fmt.Sprintf("step %d (t=%v cost=%d)", i+1, s.at, s.cost), got, []dec{s.want})
	}
}

// testSeedTrace: capacity 3, rate 2/s (T = 500ms, tau = 1.5s).
func testSeedTrace(t *testing.T, h *harness) {
	li := lim(2, time.Second, 3)
	runSteps(t, h, "k", li, []step{
		{0, 1, dec{Allowed: true, Remaining: 2, ResetAfter: 500 * ms}},
		{0, 1, dec{Allowed: true, Remaining: 1, ResetAfter: 1000 * ms}},
		{0, 1, dec{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{0, 1, dec{Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
		{250 * ms, 1, dec{Remaining: 0, RetryAfter: 250 * ms, ResetAfter: 1250 * ms}},
		{500 * ms, 1, dec{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{1500 * ms, 2, dec{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{100 * time.Second, 1, dec{Allowed: true, Remaining: 2, ResetAfter: 500 * ms}},
		{100 * time.Second, 1, dec{Allowed: true, Remaining: 1, ResetAfter: 1000 * ms}},
		{100 * time.Second, 1, dec{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{100 * time.Second, 1, dec{Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
	})
}

// testDecisionValues pins Remaining, RetryAfter and ResetAfter on a rate
// whose interval is rounded (3/s: T = 333333334ns) and weighted requests.
func testDecisionValues(t *testing.T, h *harness) {
	const T = 333333334 * time.Nanosecond
	runSteps(t, h, "k", lim(3, time.Second, 5), []step{
		{0, 3, dec{Allowed: true, Remaining: 2, ResetAfter: 3 * T}},
		{0, 3, dec{Remaining: 2, RetryAfter: T, ResetAfter: 3 * T}},
		{0, 2, dec{Allowed: true, Remaining: 0, ResetAfter: 5 * T}},
		{T - 1, 1, dec{Remaining: 0, RetryAfter: 1, ResetAfter: 4*T + 1}},
		{T, 1, dec{Allowed: true, Remaining: 0, ResetAfter: 5 * T}},
		{T + T/2, 5, dec{Remaining: 0, RetryAfter: 4*T + T/2, ResetAfter: 4*T + T/2}},
		{6 * T, 6, dec{Never: true, Remaining: 5, ResetAfter: 0}},
		{6 * T, 5, dec{Allowed: true, Remaining: 0, ResetAfter: 5 * T}},
		{8*T + 1, 1, dec{Allowed: true, Remaining: 1, ResetAfter: 4*T - 1}},
	})
}

func testRejectedConsumesNothing(t *testing.T, h *harness) {
	li := lim(1, time.Second, 3)
	h.take(t, req("k", li, 2))
	for i := range 5 {
		expect(t, fmt.Sprintf("rejection %d", i), h.take(t, req("k", li, 2)),
			[]dec{{Remaining: 1, RetryAfter: time.Second, ResetAfter: 2 * time.Second}})
	}
	expect(t, "after rejections", h.take(t, req("k", li, 1)),
		[]dec{{Allowed: true, Remaining: 0, ResetAfter: 3 * time.Second}})
}

// testNever: a cost above the burst gets Never, no RetryAfter, and charges
// nothing, on a full bucket and on one in debt.
func testNever(t *testing.T, h *harness) {
	li := lim(2, time.Second, 3)
	expect(t, "cost 4 on a full bucket", h.take(t, req("k", li, 4)), []dec{{Never: true, Remaining: 3}})
	if n := h.tokens(t, req("k", li, 1)); n != 3 {
		t.Errorf("tokens after Never = %d; want 3", n)
	}
	h.take(t, req("k", li, 3))
	h.at(250 * ms)
	before := h.peek(t, req("k", li, 1))
	expect(t, "Peek before", before, []dec{{Remaining: 0, RetryAfter: 250 * ms, ResetAfter: 1250 * ms}})
	expect(t, "cost 4 in debt", h.take(t, req("k", li, 4)), []dec{{Never: true, Remaining: 0, ResetAfter: 1250 * ms}})
	expect(t, "Peek after", h.peek(t, req("k", li, 1)), before)
	// A Never among other requests blocks the whole call.
	h.at(time.Hour)
	other := req("other", li, 1)
	expect(t, "Never with another", h.take(t, other, req("k", li, 4)),
		[]dec{{Allowed: true, Remaining: 2, ResetAfter: 500 * ms}, {Never: true, Remaining: 3}})
	if n := h.tokens(t, other); n != 3 {
		t.Errorf("other charged by a call with a Never: %d tokens; want 3", n)
	}
}

// testDelayAfter: nginx "rate=2r/s burst=2" (Burst 3, DelayAfter 1): the
// first request passes, the next two wait in line.
func testDelayAfter(t *testing.T, h *harness) {
	li := lim(2, time.Second, 3)
	li.DelayAfter = 1
	runSteps(t, h, "k", li, []step{
		{0, 1, dec{Allowed: true, Remaining: 2, ResetAfter: 500 * ms}},
		{0, 1, dec{Allowed: true, Remaining: 1, ResetAfter: time.Second, Delay: 500 * ms}},
		{0, 1, dec{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms, Delay: time.Second}},
		{0, 1, dec{Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
		{600 * ms, 1, dec{Allowed: true, Remaining: 0, ResetAfter: 1400 * ms, Delay: 900 * ms}},
		{10 * time.Second, 2, dec{Allowed: true, Remaining: 1, ResetAfter: time.Second, Delay: 500 * ms}},
	})
}

// testMaxDelay: Burst 5 at 1/s, DelayAfter 2, MaxDelay 1.5s: the ceiling
// is 3.5s of debt; a request that would wait longer is rejected up front,
// and a cost whose own wait exceeds it is Never.
func testMaxDelay(t *testing.T, h *harness) {
	li := lim(1, time.Second, 5)
	li.DelayAfter, li.MaxDelay = 2, 1500*ms
	s := time.Second
	runSteps(t, h, "k", li, []step{
		{0, 1, dec{Allowed: true, Remaining: 4, ResetAfter: s}},
		{0, 1, dec{Allowed: true, Remaining: 3, ResetAfter: 2 * s}},
		{0, 1, dec{Allowed: true, Remaining: 2, ResetAfter: 3 * s, Delay: s}},
		{0, 1, dec{Remaining: 2, RetryAfter: 500 * ms, ResetAfter: 3 * s}},
		{500 * ms, 1, dec{Allowed: true, Remaining: 1, ResetAfter: 3500 * ms, Delay: 1500 * ms}},
		{500 * ms, 4, dec{Never: true, Remaining: 1, ResetAfter: 3500 * ms}},
		{time.Hour, 4, dec{Never: true, Remaining: 5}},
		{time.Hour, 3, dec{Allowed: true, Remaining: 2, ResetAfter: 3 * s, Delay: s}},
	})
}

// testAllOrNothing: several policies on one request; one rejects, none is
// charged.
func testAllOrNothing(t *testing.T, h *harness) {
	account := req("account=a", lim(1, time.Second, 5), 1)
	tenant := req("tenant=t", lim(10, time.Second, 10), 1)
	op := req("op=GET /x", lim(1, time.Minute, 2), 1)
	for i, want := range [][]dec{
		{{Allowed: true, Remaining: 4, ResetAfter: time.Second}, {Allowed: true, Remaining: 9, ResetAfter: 100 * ms}, {Allowed: true, Remaining: 1, ResetAfter: time.Minute}},
		{{Allowed: true, Remaining: 3, ResetAfter: 2 * time.Second}, {Allowed: true, Remaining: 8, ResetAfter: 200 * ms}, {Allowed: true, Remaining: 0, ResetAfter: 2 * time.Minute}},
	} {
		expect(t, fmt.Sprintf("call %d", i+1), h.take(t, account, tenant, op), want)
	}
	want := []dec{
		{Allowed: true, Remaining: 2, ResetAfter: 3 * time.Second},
		{Allowed: true, Remaining: 7, ResetAfter: 300 * ms},
		{Remaining: 0, RetryAfter: time.Minute, ResetAfter: 2 * time.Minute},
	}
	for round := range 3 {
		expect(t, fmt.Sprintf("rejected call %d", round), h.take(t, account, tenant, op), want)
	}
	if n := h.tokens(t, account); n != 3 {
		t.Errorf("account tokens = %d; want 3 (unchanged)", n)
	}
	if n := h.tokens(t, tenant); n != 8 {
		t.Errorf("tenant tokens = %d; want 8 (unchanged)", n)
	}
	// The first request rejecting blocks the later ones too.
	got := h.take(t, op, account)
	if got[0].Allowed || !got[1].Allowed {
		t.Fatalf("op then account: got %+v; want op rejected, account allowed", got)
	}
	if n := h.tokens(t, account); n != 3 {
		t.Errorf("account tokens = %d; want 3", n)
	}
}

// testDuplicateBuckets: requests naming one bucket in one call are decided
// in order; the second sees the first's charge.
func testDuplicateBuckets(t *testing.T, h *harness) {
	li := lim(1, time.Second, 3)
	tests := []struct {
		name   string
		costs  []int64
		want   []dec
		tokens int64 // after the call
	}{
		{"both fit", []int64{1, 2},
			[]dec{{Allowed: true, Remaining: 2, ResetAfter: time.Second}, {Allowed: true, Remaining: 0, ResetAfter: 3 * time.Second}}, 0},
		{"second does not fit after first", []int64{2, 2},
			[]dec{{Allowed: true, Remaining: 1, ResetAfter: 2 * time.Second}, {Remaining: 1, RetryAfter: time.Second, ResetAfter: 2 * time.Second}}, 3},
		{"first never, second sees no charge", []int64{4, 3},
			[]dec{{Remaining: 3, Never: true}, {Allowed: true, Remaining: 0, ResetAfter: 3 * time.Second}}, 3},
		{"three times", []int64{1, 1, 1},
			[]dec{{Allowed: true, Remaining: 2, ResetAfter: time.Second}, {Allowed: true, Remaining: 1, ResetAfter: 2 * time.Second}, {Allowed: true, Remaining: 0, ResetAfter: 3 * time.Second}}, 0},
	}
	for i, tc := range tests {
		key := fmt.Sprintf("k%d", i)
		other := fmt.Sprintf("other%d", i)
		var reqs []limiter.Request
		for j, c := range tc.costs {
			reqs = append(reqs, req(key, li, c))
			if j == 0 {
				reqs = append(reqs, req(other, li, 1)) // another bucket in between
			}
		}
		got := h.take(t, reqs...)
		got = append(got[:1], got[2:]...)
		expect(t, tc.name, got, tc.want)
		if n := h.tokens(t, req(key, li, 1)); n != tc.tokens {
			t.Errorf("%s: tokens after = %d; want %d", tc.name, n, tc.tokens)
		}
		if tc.tokens == 3 { // nothing charged: a Peek sees the same
			p := h.peek(t, reqs...)
			expect(t, tc.name+" (Peek after)", append(p[:1], p[2:]...), tc.want)
		}
	}
}

// testShapeChange: a bucket is named by key and limit shape (interval and
// burst): another rate or burst finds a fresh bucket, the old state stays;
// another delay_after or max_delay keeps the state.
func testShapeChange(t *testing.T, h *harness) {
	big, small := lim(1, time.Second, 10), lim(1, time.Second, 2)
	expect(t, "big", h.take(t, req("k", big, 10)), []dec{{Allowed: true, ResetAfter: 10 * time.Second}})
	h.at(3 * time.Second)
	expect(t, "smaller burst", h.take(t, req("k", small, 1)), []dec{{Allowed: true, Remaining: 1, ResetAfter: time.Second}})
	expect(t, "faster rate", h.take(t, req("k", lim(2, time.Second, 10), 1)), []dec{{Allowed: true, Remaining: 9, ResetAfter: 500 * ms}})
	expect(t, "big's shape as 60/m", h.take(t, req("k", lim(60, time.Minute, 10), 3)), []dec{{Allowed: true, Remaining: 0, ResetAfter: 10 * time.Second}})
	delayed := big
	delayed.DelayAfter, delayed.MaxDelay = 1, time.Hour
	expect(t, "delay_after changed", h.take(t, req("k", delayed, 1)), []dec{{RetryAfter: time.Second, ResetAfter: 10 * time.Second}})
	expect(t, "other key", h.take(t, req("k2", big, 1)), []dec{{Allowed: true, Remaining: 9, ResetAfter: time.Second}})
}

// testDailyWindow: a daily quota, 1000/d (T = 86.4 s, a window of 24 h),
// spent at once and then at the day's edge: one token back every 86.4 s,
// the whole quota exactly 24 h after the bucket was last emptied.
func testDailyWindow(t *testing.T, h *harness) {
	const T = 86400 * ms
	const day = 24 * time.Hour
	li := lim(1000, day, 1000)
	runSteps(t, h, "p|tenant=acme", li, []step{
		{0, 1000, dec{Allowed: true, Remaining: 0, ResetAfter: day}},
		{0, 1, dec{Remaining: 0, RetryAfter: T, ResetAfter: day}},
		{T - 1, 1, dec{Remaining: 0, RetryAfter: 1, ResetAfter: day - T + 1}},
		{T, 1, dec{Allowed: true, Remaining: 0, ResetAfter: day}},
		{12 * time.Hour, 1000, dec{Remaining: 499, RetryAfter: 12*time.Hour + T, ResetAfter: 12*time.Hour + T}},
		// The day's edge: a full day after the bucket was last emptied
		// (at T), less a nanosecond, the last token is not back yet.
		{day + T - 1, 1000, dec{Remaining: 999, RetryAfter: 1, ResetAfter: 1}},
		{day + T, 1000, dec{Allowed: true, Remaining: 0, ResetAfter: day}},
		{2*day + T, 1, dec{Allowed: true, Remaining: 999, ResetAfter: T}},
	})
}

// testOverrides: the keys of one policy under different limits, as
// per-tenant overrides give them (acme burst 6, the policy's 3), each in
// its own bucket; an override whose burst changes (a reload) finds a full
// bucket of the new shape, and the old shape's state is still there when
// the override is restored.
func testOverrides(t *testing.T, h *harness) {
	policy, acme, acme8 := lim(1, time.Minute, 3), lim(1, time.Minute, 6), lim(1, time.Minute, 8)
	both := func(step string, acmeCost, betaCost int64, want ...dec) {
		t.Helper()
		expect(t, step, h.take(t, req("p|tenant=acme", acme, acmeCost), req("p|tenant=beta", policy, betaCost)), want)
	}
	both("first", 1, 1, dec{Allowed: true, Remaining: 5, ResetAfter: time.Minute}, dec{Allowed: true, Remaining: 2, ResetAfter: time.Minute})
	both("acme 5, beta 2", 5, 2, dec{Allowed: true, Remaining: 0, ResetAfter: 6 * time.Minute}, dec{Allowed: true, Remaining: 0, ResetAfter: 3 * time.Minute})
	expect(t, "beta is spent", h.take(t, req("p|tenant=beta", policy, 1)), []dec{{Remaining: 0, RetryAfter: time.Minute, ResetAfter: 3 * time.Minute}})
	expect(t, "acme is spent", h.take(t, req("p|tenant=acme", acme, 1)), []dec{{Remaining: 0, RetryAfter: time.Minute, ResetAfter: 6 * time.Minute}})
	expect(t, "acme's burst raised to 8", h.take(t, req("p|tenant=acme", acme8, 8)), []dec{{Allowed: true, Remaining: 0, ResetAfter: 8 * time.Minute}})
	h.at(time.Minute)
	expect(t, "acme's override restored", h.take(t, req("p|tenant=acme", acme, 1)), []dec{{Allowed: true, Remaining: 0, ResetAfter: 6 * time.Minute}})
	expect(t, "beta's own limit", h.take(t, req("p|tenant=beta", policy, 1)), []dec{{Allowed: true, Remaining: 0, ResetAfter: 3 * time.Minute}})
}

// testDryRun pins the two-pass rule.
func testDryRun(t *testing.T, h *harness) {
	s := time.Second
	e := req("e", lim(1, s, 2), 1)
	d := dry(req("d", lim(1, s, 1), 1))
	expect(t, "call 1", h.take(t, e, d), []dec{{Allowed: true, Remaining: 1, ResetAfter: s}, {Allowed: true, Remaining: 0, ResetAfter: s}})
	// The dry-run request is rejected: the enforcing one is decided again
	// alone and charged alone.
	expect(t, "call 2", h.take(t, e, d), []dec{{Allowed: true, Remaining: 0, ResetAfter: 2 * s}, {RetryAfter: s, ResetAfter: s}})
	expect(t, "e after call 2", h.peek(t, e), []dec{{RetryAfter: s, ResetAfter: 2 * s}})
	expect(t, "d after call 2 (not charged)", h.peek(t, d), []dec{{RetryAfter: s, ResetAfter: s}})
	h.at(s)
	expect(t, "call 3", h.take(t, e, d), []dec{{Allowed: true, Remaining: 0, ResetAfter: 2 * s}, {Allowed: true, Remaining: 0, ResetAfter: s}})

	// Same bucket: a dry-run charge earlier in the call makes an enforcing
	// request fail the first pass; the second pass, without it, admits and
	// charges the enforcing request alone.
	h.at(time.Hour)
	k := lim(1, s, 3)
	expect(t, "dry then enforcing, same bucket", h.take(t, dry(req("k", k, 2)), req("k", k, 2)),
		[]dec{{Allowed: true, Remaining: 1, ResetAfter: 2 * s}, {Allowed: true, Remaining: 1, ResetAfter: 2 * s}})
	if n := h.tokens(t, req("k", k, 1)); n != 1 {
		t.Errorf("k tokens = %d; want 1 (the enforcing charge only)", n)
	}
	// Both rejected: the enforcing one in the second pass too.
	expect(t, "dry then enforcing, both rejected", h.take(t, dry(req("k", k, 2)), req("k", k, 2)),
		[]dec{{Remaining: 1, RetryAfter: s, ResetAfter: 2 * s}, {Remaining: 1, RetryAfter: s, ResetAfter: 2 * s}})

	// An enforcing rejection charges nobody, dry-run requests included.
	x := req("x", lim(1, time.Minute, 1), 1)
	y := dry(req("y", lim(1, time.Minute, 2), 1))
	h.take(t, x)
	expect(t, "enforcing rejected", h.take(t, x, y), []dec{{RetryAfter: time.Minute, ResetAfter: time.Minute}, {Allowed: true, Remaining: 1, ResetAfter: time.Minute}})
	if n := h.tokens(t, y); n != 2 {
		t.Errorf("dry-run y charged by a rejected call: %d tokens; want 2", n)
	}
	// Only dry-run requests, one rejected: nothing is charged, as in
	// enforcing mode.
	z := dry(req("z", lim(1, time.Minute, 1), 1))
	expect(t, "all dry, one never", h.take(t, z, dry(req("z2", lim(1, time.Minute, 1), 2))), []dec{{Allowed: true, Remaining: 0, ResetAfter: time.Minute}, {Never: true, Remaining: 1}})
	if n := h.tokens(t, z); n != 1 {
		t.Errorf("dry-run z charged by a call that enforcing mode would reject: %d tokens; want 1", n)
	}
	// Peek follows the same rule.
	h.at(time.Hour + 500*ms)
	p := h.peek(t, e, d, dry(req("k", k, 3)))
	tk := h.take(t, e, d, dry(req("k", k, 3)))
	expect(t, "Peek vs Take with dry run", p, tk)
}

// testPeekChargesNothing: Peek returns what Take would, charges nothing,
// and repeated Peeks see the same.
func testPeekChargesNothing(t *testing.T, h *harness) {
	a := req("a", lim(2, time.Second, 3), 1)
	b := req("b", lim(1, time.Second, 1), 1)
	want := []dec{
		{Allowed: true, Remaining: 2, ResetAfter: 500 * ms},
		{Allowed: true, Remaining: 0, ResetAfter: time.Second},
		{Allowed: true, Remaining: 1, ResetAfter: time.Second},
	}
	for i := range 5 {
		expect(t, fmt.Sprintf("Peek %d", i), h.peek(t, a, b, a), want)
	}
	expect(t, "Take after Peeks", h.take(t, a, b, a), want)
	h.at(250 * ms)
	for range 3 {
		if n := h.tokens(t, a); n != 1 {
			t.Fatalf("a tokens = %d; want 1", n)
		}
	}
	p := h.peek(t, a, b)
	expect(t, "Take after Peek of a rejected call", h.take(t, a, b), p)
	if p[1].Allowed {
		t.Errorf("b allowed: %+v", p)
	}
	// Peek never creates state that a later Take could see.
	c := req("c", lim(1, time.Hour, 2), 2)
	for range 3 {
		h.peek(t, c)
	}
	expect(t, "Take after Peeks of a new bucket", h.take(t, c), []dec{{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Hour}})
}

// testEmptyAndDst: no requests give a non-nil empty slice; decisions are
// appended to dst.
func testEmptyAndDst(t *testing.T, h *harness) {
	for name, f := range map[string]func(context.Context, []dec, []limiter.Request) ([]dec, error){"Take": h.l.Take, "Peek": h.l.Peek} {
		d, err := f(context.Background(), nil, nil)
		if err != nil || d == nil || len(d) != 0 {
			t.Errorf("%s of no requests: %#v, %v; want an empty non-nil slice", name, d, err)
		}
		marker := dec{Remaining: 42}
		d, err = f(context.Background(), []dec{marker}, []limiter.Request{})
		if err != nil || len(d) != 1 || d[0] != marker {
			t.Errorf("%s of no requests with a dst: %#v, %v; want dst unchanged", name, d, err)
		}
		buf := make([]dec, 1, 8)
		buf[0] = marker
		d, err = f(context.Background(), buf, []limiter.Request{req("dst-"+name, lim(1, time.Second, 2), 1)})
		if err != nil || len(d) != 2 || d[0] != marker || d[1] != (dec{Allowed: true, Remaining: 1, ResetAfter: time.Second}) {
			t.Errorf("%s with a dst: %+v, %v; want the marker then one decision", name, d, err)
		}
		if &d[0] != &buf[0] {
			t.Errorf("%s did not append in place to a dst with room", name)
		}
	}
}

func testInvalidRequests(t *testing.T, h *harness) {
	ok := lim(1, time.Second, 1)
	valid := req("valid", ok, 1)
	bad := []struct {
		name string
		reqs []limiter.Request
	}{
		{"empty key", []limiter.Request{valid, {Key: "", Limit: ok, Cost: 1}}},
		{"zero cost", []limiter.Request{valid, {Key: "b", Limit: ok, Cost: 0}}},
		{"negative cost", []limiter.Request{{Key: "b", Limit: ok, Cost: -1}, valid}},
		{"zero limit", []limiter.Request{valid, {Key: "b", Limit: limiter.Limit{}, Cost: 1}}},
		{"burst 0", []limiter.Request{valid, {Key: "b", Limit: lim(1, time.Second, 0), Cost: 1}}},
		{"delay_after above burst", []limiter.Request{valid, {Key: "b", Limit: limiter.Limit{Rate: ok.Rate, Burst: 1, DelayAfter: 2}, Cost: 1}}},
		{"negative max_delay", []limiter.Request{valid, {Key: "b", Limit: limiter.Limit{Rate: ok.Rate, Burst: 1, MaxDelay: -1}, Cost: 1}}},
	}
	for _, tc := range bad {
		for name, f := range map[string]func(context.Context, []dec, []limiter.Request) ([]dec, error){"Take": h.l.Take, "Peek": h.l.Peek} {
			d, err := f(context.Background(), make([]dec, 0, 4), tc.reqs)
			if d != nil || !errors.Is(err, limiter.ErrInvalidRequest) {
				t.Errorf("%s %s: got %v, %v; want nil and an error wrapping ErrInvalidRequest", name, tc.name, d, err)
			}
		}
	}
	if n := h.tokens(t, valid); n != 1 {
		t.Errorf("a valid request in an invalid call was charged: %d tokens; want 1", n)
	}
}

func testCancelledContext(t *testing.T, h *harness) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := req("k", lim(1, time.Minute, 1), 1)
	for name, f := range map[string]func(context.Context, []dec, []limiter.Request) ([]dec, error){"Take": h.l.Take, "Peek": h.l.Peek} {
		d, err := f(ctx, nil, []limiter.Request{r})
		if d != nil || !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, %v; want nil and an error wrapping context.Canceled", name, d, err)
		}
	}
	if n := h.tokens(t, r); n != 1 {
		t.Errorf("a cancelled Take charged: %d tokens; want 1", n)
	}
}

// testRandomTraces checks random multi-request traces (rounded intervals,
// weighted requests, costs above the burst, delay_after, max_delay, dry
// run, repeated buckets, limits sharing a shape, zero and huge time steps)
// against the reference model: every Peek and Take decision must equal the
// model's.
func testRandomTraces(t *testing.T, h *harness) {
	limits := []limiter.Limit{
		lim(1, time.Second, 1),
		lim(2, time.Second, 3),
		{Rate: limiter.Rate{Count: 2, Per: time.Second}, Burst: 3, DelayAfter: 1},                     // shares lim(2,s,3)'s bucket
		{Rate: limiter.Rate{Count: 2, Per: time.Second}, Burst: 3, DelayAfter: 1, MaxDelay: 700 * ms}, // and this one
		lim(3, time.Second, 5), // T rounded up
		lim(7, time.Minute, 4), // T rounded up
		lim(1, time.Hour, 10),  // 10h window
		lim(1000, time.Second, 20),
		{Rate: limiter.Rate{Count: 1000, Per: time.Second}, Burst: 20, DelayAfter: 5, MaxDelay: 3 * ms},
		lim(3, 7, 2), // T = 3ns
		{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 6, DelayAfter: 2, MaxDelay: 2500 * ms},
	}
	keys := []string{"a", "b", "c", "per-account|tenant=acme|account=alice"}
	traces, steps := 12, 120
	if testing.Short() {
		traces, steps = 4, 60
	}
	rng := rand.New(rand.NewSource(20260601))
	var now time.Duration
	for trace := range traces {
		ref := newModel()
		prefix := fmt.Sprintf("t%d-", trace) // fresh buckets per trace
		for st := range steps {
			switch rng.Intn(7) {
			case 0: // same instant
			case 1:
				now += time.Duration(rng.Int63n(10))
			case 2, 3:
				now += time.Duration(rng.Int63n(int64(2*time.Second) + 1))
			case 4:
				now += time.Duration(rng.Int63n(int64(5*ms)) + 1)
			case 5:
				now += 250*ms + time.Duration(rng.Int63n(3)) - 1
			case 6:
				now += time.Duration(rng.Int63n(int64(3 * time.Hour)))
			}
			h.at(now)
			reqs := make([]limiter.Request, 1+rng.Intn(4))
			if rng.Intn(20) == 0 {
				reqs = make([]limiter.Request, 9+rng.Intn(4)) // more than a small-call buffer
			}
			for i := range reqs {
				li := limits[rng.Intn(len(limits))]
				reqs[i] = limiter.Request{
					Key:    prefix + keys[rng.Intn(len(keys))],
					Limit:  li,
					Cost:   1 + rng.Int63n(li.Burst+1),
					DryRun: rng.Intn(5) == 0,
				}
			}
			want := ref.call(reqs, int64(now), false)
			peek := h.peek(t, reqs...)
			got := h.take(t, reqs...)
			ref.call(reqs, int64(now), true)
			for i := range reqs {
				if got[i] != want[i] || peek[i] != want[i] {
					t.Fatalf("trace %d step %d t=%dns request %d of %+v: Take %+v, Peek %+v; reference %+v",
						trace, st, now, i, reqs, got[i], peek[i], want[i])
				}
			}
		}
	}
}

// testConcurrentBurst: goroutines race for a burst of 5 at a frozen time;
// exactly 5 are admitted, every time, and the bucket is then empty.
func testConcurrentBurst(t *testing.T, h *harness) {
	li := lim(1, time.Minute, 5)
	for rep := range 20 {
		key := fmt.Sprintf("hot-%d", rep)
		var admitted atomic.Int64
		racetest.Run(16, func(int) {
			d, err := h.l.Take(context.Background(), nil, []limiter.Request{req(key, li, 1)})
			if err != nil {
				t.Error(err)
				return
			}
			if d[0].Allowed {
				admitted.Add(1)
			}
		})
		if n := admitted.Load(); n != 5 {
			t.Fatalf("rep %d: %d admitted; want 5", rep, n)
		}
		expect(t, fmt.Sprintf("rep %d state", rep), h.peek(t, req(key, li, 1)), []dec{{RetryAfter: time.Minute, ResetAfter: 5 * time.Minute}})
	}
}

// testConcurrentAllOrNothing: goroutines take a shared bucket together with
// a private one, in both orders; the shared burst is never exceeded and no
// private bucket is charged by a rejected call.
func testConcurrentAllOrNothing(t *testing.T, h *harness) {
	shared := lim(1, time.Minute, 5)
	private := lim(1, time.Minute, 2)
	for rep := range 20 {
		var admitted atomic.Int64
		racetest.Run(16, func(g int) {
			for i := range 3 {
				reqs := []limiter.Request{
					req(fmt.Sprintf("shared-%d", rep), shared, 1),
					req(fmt.Sprintf("private-%d-%d", rep, g), private, 1),
				}
				if (g+i)%2 == 1 {
					reqs[0], reqs[1] = reqs[1], reqs[0]
				}
				d, err := h.l.Take(context.Background(), nil, reqs)
				if err != nil {
					t.Error(err)
					return
				}
				if d[0].Allowed && d[1].Allowed {
					admitted.Add(1)
				}
			}
		})
		if n := admitted.Load(); n != 5 {
			t.Fatalf("rep %d: %d admitted; want 5", rep, n)
		}
		var charged int64
		for g := range 16 {
			charged += 2 - h.tokens(t, req(fmt.Sprintf("private-%d-%d", rep, g), private, 1))
		}
		if charged != 5 {
			t.Fatalf("rep %d: private buckets charged %d tokens; want 5", rep, charged)
		}
	}
}

// inFlight returns an in-flight cap of n slots.
func inFlight(n int64) limiter.Limit { return limiter.Limit{MaxInFlight: n} }

// slotted returns ds with every non-zero Slot read as 1: the value is the
// store's, only whether it is set is the contract's.
func slotted(ds []dec) []dec {
	out := make([]dec, len(ds))
	for i, d := range ds {
		if d.Slot != 0 {
			d.Slot = 1
		}
		out[i] = d
	}
	return out
}

// release releases reqs with ds, failing t on error.
func (h *harness) release(t *testing.T, reqs []limiter.Request, ds []dec) {
	t.Helper()
	if err := h.l.Release(context.Background(), reqs, ds); err != nil {
		t.Fatalf("Release(%+v, %+v): %v", reqs, ds, err)
	}
}

// free returns the free slots of r's counter, via a cost-1 Peek.
func (h *harness) free(t *testing.T, r limiter.Request) int64 {
	t.Helper()
	r.Cost, r.DryRun = 1, false
	d := h.peek(t, r)[0]
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

// testInFlight: a cap of 3 slots: three takes hold them, the fourth is
// refused (no RetryAfter), Peek takes none, a release frees one, a cost
// above the cap is Never.
func testInFlight(t *testing.T, h *harness) {
	li := inFlight(3)
	r := req("k", li, 1)
	var held [][]dec
	for i, want := range []dec{{Allowed: true, Remaining: 2, Slot: 1, InFlight: 1}, {Allowed: true, Remaining: 1, Slot: 1, InFlight: 2}, {Allowed: true, Remaining: 0, Slot: 1, InFlight: 3}} {
		expect(t, fmt.Sprintf("peek before take %d", i+1), h.peek(t, r), []dec{{Allowed: true, Remaining: want.Remaining, InFlight: want.InFlight}})
		d := h.take(t, r)
		expect(t, fmt.Sprintf("take %d", i+1), slotted(d), []dec{want})
		held = append(held, d)
	}
	h.at(time.Hour) // time frees nothing
	expect(t, "take 4", h.take(t, r), []dec{{Remaining: 0, InFlight: 3}})
	expect(t, "peek 4", h.peek(t, r), []dec{{Remaining: 0, InFlight: 3}})
	expect(t, "cost 4 of 3", h.take(t, req("k", li, 4)), []dec{{Remaining: 0, Never: true, InFlight: 3}})
	expect(t, "cost 4 of 3, free key", h.take(t, req("other", li, 4)), []dec{{Remaining: 3, Never: true}})
	h.release(t, []limiter.Request{r}, held[1])
	expect(t, "take after a release", slotted(h.take(t, r)), []dec{{Allowed: true, Remaining: 0, Slot: 1, InFlight: 3}})
	expect(t, "take 5", h.take(t, r), []dec{{Remaining: 0, InFlight: 3}})
	if n := h.free(t, req("other", li, 1)); n != 3 {
		t.Errorf("another key: %d free slots; want 3", n)
	}
	// The bucket of the same key is another state.
	b := req("k", lim(1, time.Minute, 2), 1)
	expect(t, "bucket of the same key", h.take(t, b), []dec{{Allowed: true, Remaining: 1, ResetAfter: time.Minute}})
}

// testInFlightAllOrNothing: a call holding a token bucket and an in-flight
// cap takes the slot and spends the token together or does neither.
func testInFlightAllOrNothing(t *testing.T, h *harness) {
	bucket := lim(1, time.Minute, 2)
	slots := inFlight(1)
	call := []limiter.Request{req("b", bucket, 1), req("s", slots, 1)}
	d1 := h.take(t, call...)
	expect(t, "first call", slotted(d1), []dec{{Allowed: true, Remaining: 1, ResetAfter: time.Minute}, {Allowed: true, Remaining: 0, Slot: 1, InFlight: 1}})
	// The slot is held: the call is refused and the token not spent.
	expect(t, "slot held", slotted(h.take(t, call...)), []dec{{Allowed: true, Remaining: 0, ResetAfter: 2 * time.Minute}, {Remaining: 0, InFlight: 1}})
	if n := h.tokens(t, call[0]); n != 1 {
		t.Errorf("a call refused a slot spent a token: %d left; want 1", n)
	}
	h.release(t, call, d1)
	if n := h.free(t, call[1]); n != 1 {
		t.Fatalf("after release: %d free slots; want 1", n)
	}
	// Spend the last token elsewhere: the bucket refuses, no slot is taken.
	h.take(t, call[0])
	expect(t, "bucket empty", h.take(t, call...), []dec{{Remaining: 0, RetryAfter: time.Minute, ResetAfter: 2 * time.Minute}, {Allowed: true, Remaining: 0, InFlight: 1}})
	if n := h.free(t, call[1]); n != 1 {
		t.Errorf("a call refused a token took a slot: %d free; want 1", n)
	}
	// Two requests of one counter in one call see each other.
	two := []limiter.Request{req("s2", inFlight(2), 1), req("s2", inFlight(2), 1), req("s2", inFlight(2), 1)}
	expect(t, "three of two in one call", h.take(t, two...), []dec{{Allowed: true, Remaining: 1, InFlight: 1}, {Allowed: true, Remaining: 0, InFlight: 2}, {Remaining: 0, InFlight: 2}})
	d := h.take(t, two[:2]...)
	expect(t, "two of two in one call", slotted(d), []dec{{Allowed: true, Remaining: 1, Slot: 1, InFlight: 1}, {Allowed: true, Remaining: 0, Slot: 1, InFlight: 2}})
	h.release(t, two[:2], d)
	if n := h.free(t, two[0]); n != 2 {
		t.Errorf("after releasing both: %d free; want 2", n)
	}
}

// testInFlightDryRun: the dry-run rule holds for slots: a dry-run slot is
// held only when enforcing mode would hold it, and an enforcing slot is
// taken when only a dry-run request refuses.
func testInFlightDryRun(t *testing.T, h *harness) {
	empty := lim(1, time.Hour, 1)
	h.take(t, req("e", empty, 1)) // now empty
	// Enforcing bucket refuses: the dry-run slot is not taken.
	d := h.take(t, req("e", empty, 1), dry(req("s", inFlight(1), 1)))
	expect(t, "enforcing bucket refuses", slotted(d), []dec{{RetryAfter: time.Hour, ResetAfter: time.Hour}, {Allowed: true, Remaining: 0, InFlight: 1}})
	if n := h.free(t, req("s", inFlight(1), 1)); n != 1 {
		t.Errorf("dry-run slot taken by a refused call: %d free; want 1", n)
	}
	// A dry-run bucket refuses: the enforcing slot is taken, alone.
	d = h.take(t, dry(req("e", empty, 1)), req("s", inFlight(1), 1))
	expect(t, "dry-run bucket refuses", slotted(d), []dec{{RetryAfter: time.Hour, ResetAfter: time.Hour}, {Allowed: true, Remaining: 0, Slot: 1, InFlight: 1}})
	// A dry-run slot request at the cap is refused and the enforcing
	// bucket beside it still charged; when all are admitted, the dry-run
	// slot is held like an enforcing one (limit_conn_dry_run counts).
	b := lim(1, time.Minute, 5)
	d2 := h.take(t, req("b", b, 1), dry(req("s", inFlight(1), 1)))
	expect(t, "dry-run slot refused", slotted(d2), []dec{{Allowed: true, Remaining: 4, ResetAfter: time.Minute}, {Remaining: 0, InFlight: 1}})
	h.release(t, []limiter.Request{dry(req("e", empty, 1)), req("s", inFlight(1), 1)}, d)
	d3 := h.take(t, req("b", b, 1), dry(req("s", inFlight(1), 1)))
	expect(t, "dry-run slot admitted", slotted(d3), []dec{{Allowed: true, Remaining: 3, ResetAfter: 2 * time.Minute}, {Allowed: true, Remaining: 0, Slot: 1, InFlight: 1}})
	if n := h.free(t, req("s", inFlight(1), 1)); n != 0 {
		t.Errorf("dry-run slot not held: %d free; want 0", n)
	}
	h.release(t, []limiter.Request{req("b", b, 1), dry(req("s", inFlight(1), 1))}, d3)
	if n := h.free(t, req("s", inFlight(1), 1)); n != 1 {
		t.Errorf("after release: %d free; want 1", n)
	}
}

// testInFlightRelease: Release frees exactly the slots of the Decisions
// that hold one; a counter is named by its key alone, so a changed cap
// applies to the slots already held; mismatched slices are refused.
func testInFlightRelease(t *testing.T, h *harness) {
	r := req("k", inFlight(5), 3)
	d := h.take(t, r)
	expect(t, "cost 3 of 5", slotted(d), []dec{{Allowed: true, Remaining: 2, Slot: 1, InFlight: 3}})
	// The cap lowered to 2 while 3 are held: no room, 0 free, and the 3
	// held are reported (InFlight above MaxInFlight).
	expect(t, "lowered cap", h.take(t, req("k", inFlight(2), 1)), []dec{{Remaining: 0, InFlight: 3}})
	expect(t, "lowered cap, peek", h.peek(t, req("k", inFlight(2), 1)), []dec{{Remaining: 0, InFlight: 3}})
	// Raised to 4: one more fits.
	d4 := h.take(t, req("k", inFlight(4), 1))
	expect(t, "raised cap", slotted(d4), []dec{{Allowed: true, Remaining: 0, Slot: 1, InFlight: 4}})
	// A Decision without a Slot frees nothing.
	h.release(t, []limiter.Request{req("k", inFlight(4), 1)}, []dec{{Allowed: true}})
	if n := h.free(t, req("k", inFlight(4), 1)); n != 0 {
		t.Errorf("a release without a Slot freed: %d free; want 0", n)
	}
	for name, f := range map[string]func() error{
		"fewer decisions": func() error { return h.l.Release(context.Background(), []limiter.Request{r, r}, d) },
		"more decisions":  func() error { return h.l.Release(context.Background(), nil, d) },
	} {
		if err := f(); !errors.Is(err, limiter.ErrInvalidRequest) {
			t.Errorf("Release with %s: %v; want an error wrapping ErrInvalidRequest", name, err)
		}
	}
	if n := h.free(t, req("k", inFlight(4), 1)); n != 0 {
		t.Errorf("a refused release freed: %d free; want 0", n)
	}
	h.release(t, []limiter.Request{r}, d)
	if n := h.free(t, req("k", inFlight(4), 1)); n != 3 {
		t.Errorf("after releasing 3: %d free of 4; want 3", n)
	}
	h.release(t, []limiter.Request{req("k", inFlight(4), 1)}, d4)
	if n := h.free(t, req("k", inFlight(5), 1)); n != 5 {
		t.Errorf("after releasing all: %d free of 5; want 5", n)
	}
}

// testInFlightInvalid: malformed caps are refused by Take and Peek.
func testInFlightInvalid(t *testing.T, h *harness) {
	for name, li := range map[string]limiter.Limit{
		"negative":          {MaxInFlight: -1},
		"too large":         {MaxInFlight: 1_000_000_001},
		"with rate":         {MaxInFlight: 2, Rate: limiter.Rate{Count: 1, Per: time.Second}},
		"with burst":        {MaxInFlight: 2, Burst: 2},
		"short lease":       {MaxInFlight: 2, Lease: time.Millisecond},
		"long lease":        {MaxInFlight: 2, Lease: 2 * time.Hour},
		"lease on a bucket": {Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 1, Lease: time.Minute},
	} {
		for op, f := range map[string]func(context.Context, []dec, []limiter.Request) ([]dec, error){"Take": h.l.Take, "Peek": h.l.Peek} {
			d, err := f(context.Background(), nil, []limiter.Request{{Key: "k", Limit: li, Cost: 1}})
			if d != nil || !errors.Is(err, limiter.ErrInvalidRequest) {
				t.Errorf("%s %s: %v, %v; want nil and an error wrapping ErrInvalidRequest", op, name, d, err)
			}
		}
	}
	if n := h.free(t, req("k", inFlight(2), 1)); n != 2 {
		t.Errorf("%d free; want 2", n)
	}
}

// testInFlightRandom checks random traces of calls mixing caps and buckets
// (dry run, repeated counters, costs above the cap) and releases of held
// Decisions, in random order, against the reference model.
func testInFlightRandom(t *testing.T, h *harness) {
	limits := []limiter.Limit{inFlight(1), inFlight(2), inFlight(3), lim(2, time.Second, 3)}
	keys := []string{"a", "b", "c"}
	rng := rand.New(rand.NewSource(7))
	steps := 400
	if testing.Short() {
		steps = 100
	}
	m := newModel()
	type holding struct {
		reqs []limiter.Request
		ds   []dec
	}
	var held []holding
	now := time.Duration(0)
	for st := range steps {
		if len(held) > 0 && rng.Intn(3) == 0 {
			k := rng.Intn(len(held))
			hd := held[k]
			held = append(held[:k], held[k+1:]...)
			h.release(t, hd.reqs, hd.ds)
			for i := range hd.reqs {
				if hd.ds[i].Slot != 0 {
					m.release(&hd.reqs[i])
				}
			}
			continue
		}
		now += time.Duration(rng.Intn(400)) * ms
		h.at(now)
		reqs := make([]limiter.Request, 1+rng.Intn(3))
		for i := range reqs {
			li := limits[rng.Intn(len(limits))]
			cost := int64(1)
			if rng.Intn(8) == 0 {
				cost = 1 + rng.Int63n(4)
			}
			reqs[i] = limiter.Request{Key: keys[rng.Intn(len(keys))], Limit: li, Cost: cost, DryRun: rng.Intn(5) == 0}
		}
		want := m.call(reqs, int64(now), false)
		peek := h.peek(t, reqs...)
		got := h.take(t, reqs...)
		wantTake := m.call(reqs, int64(now), true)
		for i := range reqs {
			if peek[i] != want[i] || slotted(got)[i] != wantTake[i] {
				t.Fatalf("step %d request %d of %+v: Take %+v, Peek %+v; reference %+v, %+v", st, i, reqs, got[i], peek[i], wantTake[i], want[i])
			}
		}
		held = append(held, holding{reqs, got})
	}
	for _, hd := range held {
		h.release(t, hd.reqs, hd.ds)
	}
	for _, k := range keys {
		if n := h.free(t, req(k, inFlight(3), 1)); n != 3 {
			t.Errorf("key %s after releasing everything: %d free of 3; want 3", k, n)
		}
	}
}

// testInFlightConcurrent: goroutines take and release a cap of 4 slots in
// a loop; the slots they hold at once, counted by themselves, never
// exceed 4, and every slot is free at the end.
func testInFlightConcurrent(t *testing.T, h *harness) {
	li := inFlight(4)
	var holding, most, admitted atomic.Int64
	racetest.Run(16, func(g int) {
		for range 50 {
			reqs := []limiter.Request{req("hot", li, 1)}
			d, err := h.l.Take(context.Background(), nil, reqs)
			if err != nil {
				t.Error(err)
				return
			}
			if d[0].Slot == 0 {
				continue
			}
			admitted.Add(1)
			n := holding.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			holding.Add(-1)
			if err := h.l.Release(context.Background(), reqs, d); err != nil {
				t.Error(err)
				return
			}
		}
	})
	if m := most.Load(); m > 4 || m < 1 {
		t.Errorf("%d slots held at once; want 1 to 4", m)
	}
	if n := h.free(t, req("hot", li, 1)); n != 4 {
		t.Errorf("after the race: %d free; want 4", n)
	}
	t.Logf("%d slots taken, at most %d at once", admitted.Load(), most.Load())
}
