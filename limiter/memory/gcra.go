package memory

import (
	"math"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// gcra decides one request of cost tokens against a bucket whose theoretical
// arrival time is tat, at time now (both nanoseconds on the limiter's clock;
// an unknown key passes tat = now). It returns the decision and the bucket's
// TAT after the request: newTat if allowed, tat unchanged otherwise. The
// caller stores the returned TAT only if it charges.
//
// l must have passed Limit.Validate and cost must be >= 1, so T >= 1 and
// tau = Burst·T and cost·T do not overflow. Sums that could overflow
// (a TAT or clock near the int64 limits) saturate; comparisons are made on
// differences that cannot overflow, so saturation never turns a rejection
// into an admission.
func gcra(tat, now int64, l limiter.Limit, cost int64) (limiter.Decision, int64) {
	t := int64(l.Rate.Interval())
	tau := l.Burst * t // validated: no overflow
	debt := subSat(tat, now)
	if debt < 0 {
		debt = 0 // the bucket is full: tat0 = max(TAT, now)
	}
	if cost > l.Burst {
		// Can never fit: no promise of a retry, nothing charged.
		return limiter.Decision{
			Remaining:  tokens(tau-debt, t, l.Burst),
			ResetAfter: time.Duration(debt),
			Never:      true,
		}, tat
	}
	free := tau - debt // room in the bucket, ns; no overflow: both >= 0
	charge := cost * t // cost <= Burst, so charge <= tau: no overflow
	if charge <= free {
		need := debt + charge // newTat - now <= tau
		return limiter.Decision{
			Allowed:    true,
			Remaining:  tokens(tau-need, t, l.Burst),
			ResetAfter: time.Duration(need),
		}, addSat(now, need)
	}
	return limiter.Decision{
		Remaining:  tokens(free, t, l.Burst),
		RetryAfter: time.Duration(subSat(charge, free)), // newTat - tau - now
		ResetAfter: time.Duration(debt),
	}, tat
}

// tokens returns the whole tokens in a bucket with free nanoseconds of room
// (tau minus debt), clamped to [0, burst]: a debt left by an earlier, larger
// limit can exceed tau.
func tokens(free, t, burst int64) int64 {
	if free <= 0 {
		return 0
	}
	return min(free/t, burst)
}

// addSat returns a+b saturated to the int64 range.
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// subSat returns a-b saturated to the int64 range.
func subSat(a, b int64) int64 {
	s := a - b
	switch {
	case a >= 0 && b < 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b > 0 && s >= 0:
		return math.MinInt64
	}
	return s
}
