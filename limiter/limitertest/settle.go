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

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// Reserve, then settle ([limiter.Request].Settle, [limiter.Limiter].Settle).
// A Reservation's value belongs to the store: the cases compare whether it
// is set (1 in the wanted Decisions stands for "set"), never its value.

// some marks a wanted Decision's Reservation as set.
const some = 1

// settling returns r as a settling request.
func settling(r limiter.Request) limiter.Request {
	r.Settle = true
	return r
}

// reserve takes reqs, checks the Decisions against want (a Reservation
// compared only as set or not), and returns them as the store gave them,
// for Settle.
func (h *harness) reserve(t *testing.T, step string, want []dec, reqs ...limiter.Request) []dec {
	t.Helper()
	got := h.take(t, reqs...)
	expect(t, step, marked(got), want)
	return got
}

// marked returns a copy of ds with every non-zero Reservation set to some.
func marked(ds []dec) []dec {
	out := append([]dec(nil), ds...)
	for i := range out {
		if out[i].Reservation != 0 {
			out[i].Reservation = some
		}
	}
	return out
}

// settle settles reqs at actual, failing t on an error.
func (h *harness) settle(t *testing.T, reqs []limiter.Request, ds []dec, actual ...int64) {
	t.Helper()
	if err := h.l.Settle(context.Background(), reqs, ds, actual); err != nil {
		t.Fatalf("Settle(%+v, %v): %v", reqs, actual, err)
	}
}

// wantTokens checks the whole tokens in r's bucket now.
func (h *harness) wantTokens(t *testing.T, step string, r limiter.Request, want int64) {
	t.Helper()
	if n := h.tokens(t, r); n != want {
		t.Errorf("%s: %d tokens; want %d", step, n, want)
	}
}

// testSettleRefund: reserved 500, settled at 100: the 400 come back and the
// next request spends them; a refund never gives back what refilled, nor
// what another request charged since (the cap), and changes nothing on a
// full bucket; Reservations are set on charged settling requests only.
func testSettleRefund(t *testing.T, h *harness) {
	s := time.Second
	big := settling(req("k500", lim(10, s, 1000), 500))
	ds := h.reserve(t, "reserve 500", []dec{{Allowed: true, Remaining: 500, ResetAfter: 50 * s, Reservation: some}}, big)
	h.settle(t, []limiter.Request{big}, ds, 100)
	h.wantTokens(t, "after settling 500 at 100", big, 900)
	expect(t, "the next request sees them", h.take(t, req("k500", lim(10, s, 1000), 900)), []dec{{Allowed: true, Remaining: 0, ResetAfter: 100 * s}})

	li := lim(1, s, 10)
	equal := settling(req("equal", li, 3))
	h.settle(t, []limiter.Request{equal}, h.reserve(t, "equal", []dec{{Allowed: true, Remaining: 7, ResetAfter: 3 * s, Reservation: some}}, equal), 3)
	h.wantTokens(t, "settled at the reservation", equal, 7)
	capped := settling(req("capped", li, 4))
	cds := h.reserve(t, "capped", []dec{{Allowed: true, Remaining: 6, ResetAfter: 4 * s, Reservation: some}}, capped)
	full := settling(req("full", li, 2))
	fds := h.reserve(t, "full", []dec{{Allowed: true, Remaining: 8, ResetAfter: 2 * s, Reservation: some}}, full)
	expect(t, "not settling: no reservation", marked(h.take(t, req("plain", li, 2))), []dec{{Allowed: true, Remaining: 8, ResetAfter: 2 * s}})
	expect(t, "Peek: no reservation", marked(h.peek(t, settling(req("plain", li, 2)))), []dec{{Allowed: true, Remaining: 6, ResetAfter: 4 * s}})
	expect(t, "rejected: no reservation", marked(h.take(t, settling(req("plain", li, 9)))), []dec{{Remaining: 8, RetryAfter: s, ResetAfter: 2 * s}})

	// At 3 s, 3 of capped's 4 tokens have refilled; another request then
	// charges 5. Giving the 4 back would erase 3 of that charge: only the
	// 1 not yet refilled comes back.
	h.at(3 * s)
	expect(t, "another request", h.take(t, req("capped", li, 5)), []dec{{Allowed: true, Remaining: 4, ResetAfter: 6 * s}})
	h.settle(t, []limiter.Request{capped}, cds, 0)
	h.wantTokens(t, "capped refund", capped, 5)
	// full's reservation refilled at 2 s: nothing to give back.
	h.settle(t, []limiter.Request{full}, fds, 0)
	h.wantTokens(t, "refund on a full bucket", full, 10)
}

// testSettleDebt: settled far above its reservation, a bucket goes into
// debt; the next request is rejected with the RetryAfter that repaying the
// debt at the rate takes, and admitted exactly then. A debt on a bucket
// whose reservation has refilled starts from a full bucket.
func testSettleDebt(t *testing.T, h *harness) {
	s := time.Second
	li := lim(1, s, 5)
	r := settling(req("debt", li, 1))
	ds := h.reserve(t, "reserve 1", []dec{{Allowed: true, Remaining: 4, ResetAfter: s, Reservation: some}}, r)
	late := settling(req("late", li, 1))
	lds := h.reserve(t, "late", []dec{{Allowed: true, Remaining: 4, ResetAfter: s, Reservation: some}}, late)
	h.settle(t, []limiter.Request{r}, ds, 10) // 9 tokens of debt: 10 s to full
	expect(t, "in debt", h.take(t, req("debt", li, 1)), []dec{{Remaining: 0, RetryAfter: 6 * s, ResetAfter: 10 * s}})
	h.at(6*s - 1)
	expect(t, "a nanosecond early", h.take(t, req("debt", li, 1)), []dec{{Remaining: 0, RetryAfter: 1, ResetAfter: 4*s + 1}})
	h.at(6 * s)
	expect(t, "repaid", h.take(t, req("debt", li, 1)), []dec{{Allowed: true, Remaining: 0, ResetAfter: 5 * s}})
	h.at(100 * s)
	h.settle(t, []limiter.Request{late}, lds, 3)
	h.wantTokens(t, "debt of 2 on a full bucket", late, 3)
}

// testSettleDelayed: a reservation admitted with a delay (nginx delay) and
// settled below it leaves the bucket as a request of the actual cost would
// have.
func testSettleDelayed(t *testing.T, h *harness) {
	li := lim(2, time.Second, 3)
	li.DelayAfter = 1
	r := settling(req("k", li, 2))
	ds := h.reserve(t, "reserve 2", []dec{{Allowed: true, Remaining: 1, ResetAfter: time.Second, Delay: 500 * ms, Reservation: some}}, r)
	h.settle(t, []limiter.Request{r}, ds, 1)
	expect(t, "after settling at 1", h.take(t, req("k", li, 1)), []dec{{Allowed: true, Remaining: 1, ResetAfter: time.Second, Delay: 500 * ms}})
}

// testSettleDryRun: a dry-run settling request is charged and settled as
// in enforcing mode; one the call does not charge (an enforcing rejection,
// or the dry-run rule's second pass, even when its own Decision is
// Allowed) gets no Reservation.
func testSettleDryRun(t *testing.T, h *harness) {
	s := time.Second
	d := dry(settling(req("d", lim(1, s, 5), 2)))
	h.settle(t, []limiter.Request{d}, h.reserve(t, "dry alone", []dec{{Allowed: true, Remaining: 3, ResetAfter: 2 * s, Reservation: some}}, d), 5)
	h.wantTokens(t, "dry run settled", d, 0)

	x := req("x", lim(1, time.Minute, 1), 1)
	h.take(t, x)
	y := dry(settling(req("y", lim(1, time.Minute, 2), 1)))
	h.reserve(t, "enforcing rejected", []dec{{RetryAfter: time.Minute, ResetAfter: time.Minute}, {Allowed: true, Remaining: 1, ResetAfter: time.Minute}}, x, y)

	k := lim(1, s, 3)
	h.reserve(t, "second pass", []dec{{Allowed: true, Remaining: 1, ResetAfter: 2 * s}, {Allowed: true, Remaining: 1, ResetAfter: 2 * s, Reservation: some}},
		dry(settling(req("k", k, 2))), settling(req("k", k, 2)))
	h.wantTokens(t, "the enforcing charge only", req("k", k, 1), 1)
}

// testSettleCall: the requests of one call settle together, each at its
// own actual; one without a Reservation is ignored; two in one bucket are
// settled one after the other, each capped by its own reservation.
func testSettleCall(t *testing.T, h *harness) {
	s := time.Second
	li := lim(1, s, 10)
	reqs := []limiter.Request{settling(req("a", li, 4)), settling(req("b", li, 2)), req("c", li, 1)}
	ds := h.reserve(t, "call", []dec{
		{Allowed: true, Remaining: 6, ResetAfter: 4 * s, Reservation: some},
		{Allowed: true, Remaining: 8, ResetAfter: 2 * s, Reservation: some},
		{Allowed: true, Remaining: 9, ResetAfter: s},
	}, reqs...)
	h.settle(t, reqs, ds, 1, 6, 99)
	for i, want := range []int64{9, 4, 9} {
		h.wantTokens(t, fmt.Sprintf("request %d", i), reqs[i], want)
	}
	dup := []limiter.Request{settling(req("d", li, 3)), settling(req("d", li, 2))}
	ds = h.reserve(t, "same bucket", []dec{
		{Allowed: true, Remaining: 7, ResetAfter: 3 * s, Reservation: some},
		{Allowed: true, Remaining: 5, ResetAfter: 5 * s, Reservation: some},
	}, dup...)
	h.settle(t, dup, ds, 0, 2)
	h.wantTokens(t, "same bucket, first refunded", dup[0], 8)
}

// testSettleInvalid: malformed settles fail with ErrInvalidRequest and
// settle nothing; a settling in-flight request is refused by Take; a
// Decision without a Reservation is not settled.
func testSettleInvalid(t *testing.T, h *harness) {
	li := lim(1, time.Second, 10)
	r := settling(req("k", li, 4))
	ds := h.take(t, r)
	plain := r
	plain.Settle = false
	for _, tc := range []struct {
		name   string
		reqs   []limiter.Request
		ds     []dec
		actual []int64
	}{
		{"lengths", []limiter.Request{r}, ds, nil},
		{"negative", []limiter.Request{r}, ds, []int64{-1}},
		{"too large", []limiter.Request{r}, ds, []int64{gcra.MaxSettle/int64(time.Second) + 1}},
		{"not settling", []limiter.Request{plain}, ds, []int64{0}},
		{"malformed", []limiter.Request{{Key: "", Limit: li, Cost: 4, Settle: true}}, ds, []int64{0}},
	} {
		if err := h.l.Settle(context.Background(), tc.reqs, tc.ds, tc.actual); !errors.Is(err, limiter.ErrInvalidRequest) {
			t.Errorf("%s: Settle = %v; want an error wrapping ErrInvalidRequest", tc.name, err)
		}
	}
	h.wantTokens(t, "after invalid settles", r, 6)
	h.settle(t, []limiter.Request{r}, []dec{{Allowed: true}}, 0)
	h.wantTokens(t, "no reservation, nothing settled", r, 6)
	for name, f := range map[string]func(context.Context, []dec, []limiter.Request) ([]dec, error){"Take": h.l.Take, "Peek": h.l.Peek} {
		if d, err := f(context.Background(), nil, []limiter.Request{settling(req("cap", inFlight(2), 1))}); d != nil || !errors.Is(err, limiter.ErrInvalidRequest) {
			t.Errorf("%s of a settling in-flight request: %v, %v; want an error wrapping ErrInvalidRequest", name, d, err)
		}
	}
}

// testSettleRandom: random traces of calls with settling requests, settled
// later at random actual costs (below, at and above the reservation, some
// never), against the reference model.
func testSettleRandom(t *testing.T, h *harness) {
	limits := []limiter.Limit{
		lim(1, time.Second, 1),
		lim(3, time.Second, 5),
		{Rate: limiter.Rate{Count: 2, Per: time.Second}, Burst: 6, DelayAfter: 2},
		lim(1000, time.Second, 20),
		lim(1, time.Hour, 10),
	}
	keys := []string{"a", "b", "per-account|tenant=acme|account=alice"}
	steps := 400
	if testing.Short() {
		steps = 120
	}
	rng := rand.New(rand.NewSource(20270127))
	ref := newModel()
	type pending struct {
		reqs      []limiter.Request
		got, want []dec
	}
	var held []pending
	var now time.Duration
	for st := range steps {
		now += []time.Duration{0, 1, 300 * ms, 2 * time.Second, time.Hour}[rng.Intn(5)]
		h.at(now)
		if len(held) > 0 && rng.Intn(3) == 0 {
			k := rng.Intn(len(held))
			p := held[k]
			held = append(held[:k], held[k+1:]...)
			actual := make([]int64, len(p.reqs))
			for i := range actual {
				actual[i] = rng.Int63n(2*p.reqs[i].Limit.Burst + 2)
			}
			h.settle(t, p.reqs, p.got, actual...)
			ref.settle(p.reqs, p.want, actual, int64(now))
		}
		reqs := make([]limiter.Request, 1+rng.Intn(3))
		for i := range reqs {
			li := limits[rng.Intn(len(limits))]
			reqs[i] = limiter.Request{Key: keys[rng.Intn(len(keys))], Limit: li, Cost: 1 + rng.Int63n(li.Burst),
				DryRun: rng.Intn(6) == 0, Settle: rng.Intn(3) > 0}
		}
		want := ref.call(reqs, int64(now), true)
		got := h.take(t, reqs...)
		if m, w := marked(got), marked(want); fmt.Sprint(m) != fmt.Sprint(w) {
			t.Fatalf("step %d t=%v %+v: Take %+v; reference %+v", st, now, reqs, m, w)
		}
		held = append(held, pending{reqs, got, want})
	}
}

// testSettleConcurrent: goroutines reserve and settle on one bucket at a
// frozen time (nothing refills): the tokens spent equal the sum of the
// settled costs exactly.
func testSettleConcurrent(t *testing.T, h *harness) {
	const burst = 1_000_000
	li := lim(1000, time.Second, burst)
	var settled atomic.Int64
	racetest.Run(16, func(g int) {
		rng := rand.New(rand.NewSource(int64(g)))
		for range 20 {
			r := settling(req("hot", li, 1+rng.Int63n(100)))
			reqs := []limiter.Request{r}
			ds, err := h.l.Take(context.Background(), nil, reqs)
			if err != nil || !ds[0].Allowed || ds[0].Reservation == 0 {
				t.Errorf("Take: %+v, %v; want an admitted reservation", ds, err)
				return
			}
			actual := rng.Int63n(300)
			if rng.Intn(4) == 0 {
				actual = r.Cost // as reserved
			}
			if err := h.l.Settle(context.Background(), reqs, ds, []int64{actual}); err != nil {
				t.Error(err)
				return
			}
			settled.Add(actual)
		}
	})
	h.wantTokens(t, "after the race", req("hot", li, 1), burst-settled.Load())
}

// testSharesSettle: a store shared by n replicas settles at the request's
// share: of 2/s with burst 3n, 2 per n seconds (T = n/2 s) with burst 3;
// reserving 2 and settling at 5 leaves 3 tokens of debt, 3T.
func testSharesSettle(t *testing.T, h *harness, n int64) {
	T := time.Duration(n) * 500 * ms
	r := settling(req("k", lim(2, time.Second, 3*n), 2))
	ds := h.reserve(t, "reserve 2 of the share's 3", []dec{{Allowed: true, Remaining: 1, ResetAfter: 2 * T, Reservation: some}}, r)
	h.settle(t, []limiter.Request{r}, ds, 5)
	expect(t, "in debt", h.take(t, req("k", r.Limit, 1)), []dec{{Remaining: 0, RetryAfter: 3 * T, ResetAfter: 5 * T}})
}
