package limiter

import (
	"math"
	"time"
)

// Decide is the GCRA decision every [Limiter] implements, exported so that
// stores and their tests share one definition: it decides one request of
// cost tokens against a bucket whose theoretical arrival time (TAT) is tat,
// at time now, both in nanoseconds of the store's clock (an untracked key
// passes tat = now: a full bucket). It returns the Decision and the TAT
// after the request: the new TAT if allowed, tat unchanged otherwise. The
// caller stores the returned TAT only when it charges.
//
// The rule, with T = l.Rate.Interval(), tau = Burst·T, debt = max(0, tat-now)
// and charge = cost·T:
//
//   - cost > Burst, or charge > l.Ceiling() (a MaxDelay too short for this
//     cost even from a full bucket): never admitted, Decision.Never.
//   - debt + charge <= l.Ceiling(): admitted; the new TAT is now + debt +
//     charge; Delay = max(0, debt + charge - l.Free()) (nginx limit_req's
//     delay: the request is accounted at once, then waits until it
//     conforms).
//   - otherwise rejected, RetryAfter = debt + charge - l.Ceiling().
//
// l must pass [Limit.Validate] and cost must be >= 1 (see
// [ValidateRequests]), so no product overflows. Sums that could overflow
// (a TAT or clock near the int64 limits) saturate, and comparisons are made
// on differences that cannot overflow, so saturation never turns a rejection
// into an admission; a request whose new TAT would exceed math.MaxInt64 is
// refused with Never set. Decide is a pure function, safe for concurrent use.
func Decide(tat, now int64, l Limit, cost int64) (Decision, int64) {
	t := int64(l.Rate.Interval())
	tau := l.Burst * t // validated: no overflow
	ceiling := l.ceiling(t)
	debt := subSat(tat, now)
	if debt < 0 {
		debt = 0 // the bucket is full: tat0 = max(TAT, now)
	}
	charge := cost * t // cost <= Burst checked first, so no overflow below
	if cost > l.Burst || charge > ceiling {
		// Can never fit: no promise of a retry, nothing charged.
		return Decision{
			Remaining:  tokens(tau-debt, t, l.Burst),
			ResetAfter: time.Duration(debt),
			Never:      true,
		}, tat
	}
	if debt <= ceiling-charge { // debt + charge <= ceiling, without overflow
		need := debt + charge // <= ceiling <= tau
		if now > math.MaxInt64-need {
			// The new TAT would not fit in an int64 (a clock some 292
			// years past its origin): saturating it would stop the debt
			// from growing and admit everything after, so refuse.
			return Decision{ResetAfter: time.Duration(debt), Never: true}, tat
		}
		return Decision{
			Allowed:    true,
			Remaining:  tokens(tau-need, t, l.Burst),
			ResetAfter: time.Duration(need),
			Delay:      time.Duration(max(0, need-l.delayAfter()*t)), // need - Free()
		}, addSat(now, need)
	}
	return Decision{
		Remaining:  tokens(tau-debt, t, l.Burst),
		RetryAfter: time.Duration(subSat(debt, ceiling-charge)), // debt+charge-ceiling
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
