package gcra

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// TestDecideSaturation: sums near the int64 limits saturate without ever
// turning a rejection into an admission, and a new TAT past MaxInt64 is
// refused. (Decide's ordinary traces are in
// the conformance suite, limiter/limitertest, which every store runs.)
func TestDecideSaturation(t *testing.T) {
	huge := limiter.Limit{Rate: limiter.Rate{Count: 1_000_000_000, Per: time.Second}, Burst: math.MaxInt64} // T = 1ns, tau = MaxInt64
	type D = limiter.Decision
	tests := []struct {
		name     string
		tat, now int64
		l        limiter.Limit
		cost     int64
		want     D
		wantTat  int64
	}{
		{"whole huge bucket", 0, 0, huge, math.MaxInt64, D{Allowed: true, ResetAfter: math.MaxInt64}, math.MaxInt64},
		{"debt plus cost saturates", 10, 0, huge, math.MaxInt64, D{Remaining: math.MaxInt64 - 10, RetryAfter: 10, ResetAfter: 10}, 10},
		{"tat far in the past", math.MinInt64, math.MaxInt64 - int64(time.Second), limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 1}, 1, D{Allowed: true, ResetAfter: time.Second}, math.MaxInt64},
		{"new tat past the end of the clock", math.MinInt64, math.MaxInt64, limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 1}, 1, D{Never: true}, math.MinInt64},
		{"tat far in the future", math.MaxInt64, math.MinInt64, limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 1}, 1, D{RetryAfter: math.MaxInt64, ResetAfter: math.MaxInt64}, math.MaxInt64},
		{"cost above burst, no arithmetic", 0, 0, limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Hour}, Burst: 2}, math.MaxInt64, D{Never: true, Remaining: 2}, 0},
	}
	for _, tc := range tests {
		got, tat := Decide(tc.tat, tc.now, tc.l, tc.cost)
		if got != tc.want || tat != tc.wantTat {
			t.Errorf("%s: Decide = %+v, tat %d; want %+v, tat %d", tc.name, got, tat, tc.want, tc.wantTat)
		}
	}
}

// TestValidate: the first bad request is named by its index, with the
// reason, wrapping limiter.ErrInvalidRequest.
func TestValidateAll(t *testing.T) {
	ok := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 1}
	tests := []struct {
		reqs    []limiter.Request
		wantErr string
	}{
		{nil, ""},
		{[]limiter.Request{{Key: "k", Limit: ok, Cost: 1}, {Key: "k", Limit: ok, Cost: 1}}, ""},
		{[]limiter.Request{{Key: "", Limit: ok, Cost: 1}}, "limiter: invalid request: request 0: empty key"},
		{[]limiter.Request{{Key: "k", Limit: ok, Cost: 1}, {Key: "k", Limit: ok, Cost: 0}}, "limiter: invalid request: request 1: cost must be at least 1"},
		{[]limiter.Request{{Key: "k", Limit: ok, Cost: -5}}, "limiter: invalid request: request 0: cost must be at least 1"},
		{[]limiter.Request{{Key: "k", Limit: limiter.Limit{}, Cost: 1}}, "limiter: invalid request: request 0: limiter: invalid limit: rate count 0, want >= 1"},
		{[]limiter.Request{{Key: "k", Limit: ok, Cost: 1}, {Key: "k", Limit: limiter.Limit{MaxInFlight: 2}, Cost: 1}}, ""},
		{[]limiter.Request{{Key: "k", Limit: limiter.Limit{MaxInFlight: 2, Lease: time.Millisecond}, Cost: 1}}, "limiter: invalid request: request 0: limiter: invalid limit: lease 1ms, want 0 (60s) or 1s to 1h0m0s"},
		{[]limiter.Request{{Key: "k", Limit: ok, Cost: 1, Settle: true}, {Key: "k", Limit: limiter.Limit{MaxInFlight: 2}, Cost: 1, Settle: true}}, "limiter: invalid request: request 1: an in-flight cap cannot settle (settle is for token buckets)"},
	}
	for _, tc := range tests {
		err := ValidateAll(tc.reqs)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("ValidateAll(%+v) = %v; want nil", tc.reqs, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.wantErr {
			t.Errorf("ValidateAll(%+v) = %v; want %q", tc.reqs, err, tc.wantErr)
		}
		if !errors.Is(err, limiter.ErrInvalidRequest) {
			t.Errorf("ValidateAll(%+v) = %v; want it to wrap ErrInvalidRequest", tc.reqs, err)
		}
	}
}

// TestDecideAnyShare: DecideAny at a share of n decides exactly as Decide
// (or Acquire) on the Limit that limiter.Limit.Share returns, over limits
// with and without delay shaping, in-flight caps, states from full to deep
// debt and costs up to past the share's burst. DecideAny computes the share
// into scalars (it copies no Limit), so this holds its rounding to Share's.
func TestDecideAnyShare(t *testing.T) {
	rate := func(c int64, per time.Duration) limiter.Rate { return limiter.Rate{Count: c, Per: per} }
	limits := []limiter.Limit{
		{Rate: rate(100, time.Second), Burst: 50},
		{Rate: rate(7, time.Second), Burst: 10, DelayAfter: 4},
		{Rate: rate(7, time.Second), Burst: 10, DelayAfter: 2, MaxDelay: 300 * time.Millisecond},
		{Rate: rate(3, time.Minute), Burst: 9, DelayAfter: 9, MaxDelay: time.Second},
		{Rate: rate(1_000_000_000, time.Second), Burst: 1000},
		{MaxInFlight: 10, Lease: time.Minute},
		{MaxInFlight: 3},
	}
	const now = int64(1_000_000_000_000)
	checked := 0
	for _, l := range limits {
		for _, n := range []int64{1, 2, 3, 7} {
			share, err := l.Share(n)
			if err != nil {
				continue // no share: the store refuses the request first
			}
			for _, state := range []int64{now - int64(time.Hour), now, now + int64(100*time.Millisecond), now + int64(3*time.Second), InFlightBase + 1, InFlightBase + 2} {
				if (l.MaxInFlight != 0) != (state >= InFlightBase) {
					continue
				}
				for cost := int64(1); cost <= 12; cost++ {
					got, gotNext := DecideAny(state, now, &l, cost, n)
					var want limiter.Decision
					var wantNext int64
					if l.MaxInFlight == 0 {
						want, wantNext = Decide(state, now, share, cost)
					} else {
						var held int64
						want, held = Acquire(Held(state), share, cost)
						wantNext = state
						if want.Allowed {
							wantNext = InFlightBase + held
						}
					}
					if got != want || gotNext != wantNext {
						t.Fatalf("%+v share of %d, state %d, cost %d: DecideAny = %+v, %d; Share then decide = %+v, %d", l, n, state, cost, got, gotNext, want, wantNext)
					}
					checked++
				}
			}
		}
	}
	if checked < 500 {
		t.Fatalf("checked %d cases; the table lost its rows", checked)
	}
}

// TestSettle pins the settle rule: a debt is charged unconditionally on
// top of max(TAT, now); a refund moves the TAT back by the part of the
// reservation not yet refilled (reserved - now), never below now, and
// changes nothing on a full bucket or once the reservation has refilled.
func TestSettle(t *testing.T) {
	const s = int64(time.Second)
	tests := []struct {
		name                     string
		tat, now, reserved, diff int64
		want                     int64
		changed                  bool
	}{
		{"debt on a bucket in debt", 10 * s, 4 * s, 10 * s, 5 * s, 15 * s, true},
		{"debt on a full bucket", 2 * s, 4 * s, 3 * s, 5 * s, 9 * s, true},
		{"debt saturates", math.MaxInt64 - 1, 0, 1, 5, math.MaxInt64, true},
		{"refund of a reservation not refilled", 10 * s, 4 * s, 10 * s, -3 * s, 7 * s, true},
		{"refund after another's charge", 12 * s, 4 * s, 10 * s, -3 * s, 9 * s, true},
		{"refund capped by what refilled", 10 * s, 8 * s, 10 * s, -3 * s, 8 * s, true},
		{"refund capped, later charge kept", 12 * s, 8 * s, 10 * s, -3 * s, 10 * s, true},
		{"refund never past full", 10 * s, 9 * s, 12 * s, -3 * s, 9 * s, true},
		{"reservation refilled: nothing", 12 * s, 10 * s, 10 * s, -3 * s, 12 * s, false},
		{"full bucket: nothing", 3 * s, 4 * s, 5 * s, -3 * s, 3 * s, false},
		{"zero: nothing", 10 * s, 4 * s, 10 * s, 0, 10 * s, false},
	}
	for _, tc := range tests {
		got, changed := Settle(tc.tat, tc.now, tc.reserved, tc.diff)
		if got != tc.want || changed != tc.changed {
			t.Errorf("%s: Settle(%d, %d, %d, %d) = %d, %v; want %d, %v", tc.name, tc.tat, tc.now, tc.reserved, tc.diff, got, changed, tc.want, tc.changed)
		}
	}
}

// TestValidateSettle: the change each entry makes, in ns (at a share too);
// mismatched slices, and a reservation on a request that does not settle,
// with a negative actual or one beyond MaxSettle, are refused naming the
// index; entries without a Reservation, or settled at their cost, change
// nothing and are not looked at.
func TestValidateSettle(t *testing.T) {
	perSec := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 5}
	settling := limiter.Request{Key: "k", Limit: perSec, Cost: 2, Settle: true}
	plain := settling
	plain.Settle = false
	reserved := []limiter.Decision{{Allowed: true, Reservation: 1}}
	maxActual := int64(MaxSettle / int64(time.Second))
	tests := []struct {
		name    string
		reqs    []limiter.Request
		ds      []limiter.Decision
		actual  []int64
		n       int64
		wantErr string
		delta   int64 // deltas[0] when valid
	}{
		{"ok", []limiter.Request{settling}, reserved, []int64{7}, 1, "", 5 * int64(time.Second)},
		{"refund", []limiter.Request{settling}, reserved, []int64{0}, 1, "", -2 * int64(time.Second)},
		{"refund at a share", []limiter.Request{settling}, reserved, []int64{1}, 3, "", -3 * int64(time.Second)},
		{"largest", []limiter.Request{settling}, reserved, []int64{maxActual}, 1, "", (maxActual - 2) * int64(time.Second)},
		{"no reservation: not checked", []limiter.Request{{}}, []limiter.Decision{{}}, []int64{-1}, 1, "", 0},
		{"at the reservation: not checked", []limiter.Request{{}}, reserved, []int64{0}, 1, "", 0},
		{"lengths", []limiter.Request{settling}, reserved, nil, 1, "limiter: invalid request: settle of 1 requests with 1 decisions and 0 costs", 0},
		{"not settling", []limiter.Request{plain}, reserved, []int64{1}, 1, "limiter: invalid request: request 0: a reservation for a request that does not settle", 0},
		{"negative", []limiter.Request{settling}, reserved, []int64{-1}, 1, "limiter: invalid request: request 0: actual cost -1 is negative", 0},
		{"too large", []limiter.Request{settling}, reserved, []int64{maxActual + 1}, 1, "limiter: invalid request: request 0: actual cost 9007200 at 1/s exceeds the largest settle (2^53-1 ns of the rate)", 0},
		{"too large at a share", []limiter.Request{settling}, reserved, []int64{maxActual/3 + 1}, 3, "limiter: invalid request: request 0: actual cost 3002400 at 1/s exceeds the largest settle (2^53-1 ns of the rate)", 0},
		{"malformed", []limiter.Request{{Key: "", Limit: perSec, Cost: 1, Settle: true}}, reserved, []int64{2}, 1, "limiter: invalid request: request 0: empty key", 0},
		{"in-flight", []limiter.Request{{Key: "k", Limit: limiter.Limit{MaxInFlight: 2}, Cost: 1, Settle: true}}, reserved, []int64{2}, 1, "limiter: invalid request: request 0: an in-flight cap cannot settle (settle is for token buckets)", 0},
	}
	for _, tc := range tests {
		deltas := make([]int64, len(tc.reqs))
		err := ValidateSettle(tc.reqs, tc.ds, tc.actual, tc.n, deltas)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v; want nil", tc.name, err)
		case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr || !errors.Is(err, limiter.ErrInvalidRequest)):
			t.Errorf("%s: %v; want %q wrapping ErrInvalidRequest", tc.name, err, tc.wantErr)
		case err == nil && deltas[0] != tc.delta:
			t.Errorf("%s: delta %d; want %d", tc.name, deltas[0], tc.delta)
		}
	}
}

func TestWindow(t *testing.T) {
	tests := []struct {
		l    limiter.Limit
		want time.Duration
	}{
		{limiter.Limit{Rate: limiter.Rate{Count: 2, Per: time.Second}, Burst: 3}, 1500 * time.Millisecond},
		{limiter.Limit{Rate: limiter.Rate{Count: 5, Per: time.Second}, Burst: 5}, time.Second},
		{limiter.Limit{Rate: limiter.Rate{Count: 3, Per: time.Second}, Burst: 3}, 1000000002 * time.Nanosecond}, // 3 × 333333334ns
		{limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Hour}, Burst: 24}, 24 * time.Hour},
		{limiter.Limit{Rate: limiter.Rate{Count: 1000, Per: 24 * time.Hour}, Burst: 1000}, 24 * time.Hour}, // a daily quota: 86.4 s per token
		{limiter.Limit{Rate: limiter.Rate{Count: 1000, Per: 24 * time.Hour}, Burst: 50}, 72 * time.Minute},
		{limiter.Limit{Rate: limiter.Rate{Count: 1, Per: math.MaxInt64}, Burst: 2}, math.MaxInt64}, // saturates (invalid limit)
		{limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 0}, 0},
		{limiter.Limit{}, 0},
	}
	for _, tc := range tests {
		if got := Window(tc.l); got != tc.want {
			t.Errorf("Window(%+v) = %v; want %v", tc.l, got, tc.want)
		}
	}
}
