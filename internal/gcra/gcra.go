// Package gcra is the decision rule every ratekey [limiter.Limiter] store
// shares (limiter/memory, limiter/redis, the reference model of
// limiter/limitertest) and the checks around it: one definition, so the
// stores cannot drift apart. The rule itself is documented for users in the
// limiter package.
package gcra

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// Decide is the GCRA decision every [limiter.Limiter] implements: it
// decides one request of cost tokens against a bucket whose theoretical
// arrival time (TAT) is tat, at time now, both in nanoseconds of the
// store's clock (an untracked key passes tat = now: a full bucket). It
// returns the Decision and the TAT after the request: the new TAT if
// allowed, tat unchanged otherwise. The caller stores the returned TAT only
// when it charges.
//
// The rule, with T = l.Rate.Interval(), tau = Burst·T, debt = max(0, tat-now)
// and charge = cost·T:
//
//   - cost > Burst, or charge > Ceiling(l) (a MaxDelay too short for this
//     cost even from a full bucket): never admitted, Decision.Never.
//   - debt + charge <= Ceiling(l): admitted; the new TAT is now + debt +
//     charge; Delay = max(0, debt + charge - Free(l)) (nginx limit_req's
//     delay: the request is accounted at once, then waits until it
//     conforms).
//   - otherwise rejected, RetryAfter = debt + charge - Ceiling(l).
//
// l must pass [limiter.Limit.Validate] and cost must be >= 1 (see
// [ValidateAll]), so no product overflows. Sums that could overflow (a TAT or
// clock near the int64 limits) saturate, and comparisons are made on
// differences that cannot overflow, so saturation never turns a rejection
// into an admission; a request whose new TAT would exceed math.MaxInt64 is
// refused with Never set. Decide is a pure function, safe for concurrent
// use.
func Decide(tat, now int64, l limiter.Limit, cost int64) (limiter.Decision, int64) {
	return shapeOf(&l, 1).decide(tat, now, cost)
}

// MaxSettle is the largest charge, in ns, that a settle may make or
// refund: actual × interval, and the extra of a debt, at most 2^53-1 (about
// 104 days), so that limiter/redis's Lua arithmetic (doubles) stays exact
// and every store refuses the same settles.
const MaxSettle = 1<<53 - 1

// Window returns the time the bucket of l takes to refill from empty:
// Burst × Interval, in nanoseconds (the "w" of RateLimit-Policy before
// rounding up to seconds). It saturates at the largest Duration for limits
// that limiter.Limit.Validate rejects, and is 0 for a zero rate or burst.
func Window(l limiter.Limit) time.Duration {
	b, t := l.Burst, int64(l.Rate.Interval())
	if b < 1 || t == 0 {
		return 0
	}
	if b > math.MaxInt64/t {
		return math.MaxInt64
	}
	return time.Duration(b * t)
}

// MaxWindow is the largest window ([Window], Burst × Interval)
// limiter/redis accepts: 2^53-1 ns, about 104 days and 6 hours, the bound
// of its Lua arithmetic (doubles); it refuses a larger one with
// limiter.ErrInvalidRequest, and the demo's configuration check refuses
// it at load.
const MaxWindow time.Duration = MaxSettle

// Settle returns the TAT of a bucket whose TAT is tat at now after a settle
// of delta ns (see [ValidateSettle]) of a reservation whose charge left the
// bucket's TAT at reserved (limiter.Decision.Reservation), and whether it
// changed. A debt (delta > 0) is charged unconditionally: max(tat, now) +
// delta, saturating. A refund (delta < 0) moves tat back by r = min(-delta,
// reserved - now), the part of the reservation not yet refilled, and never
// below now (a full bucket): so a bucket is never left fuller than had the
// refunded tokens not been charged (see limiter/redis, "Refunds and the
// bounds they keep"). Pure, safe for concurrent use.
func Settle(tat, now, reserved, delta int64) (int64, bool) {
	if delta > 0 {
		return addSat(max(tat, now), delta), true
	}
	r := min(-delta, subSat(reserved, now))
	if r <= 0 || tat <= now {
		return tat, false // nothing of the reservation left, or a full bucket
	}
	return max(subSat(tat, r), now), true
}

// ValidateSettle checks the arguments of [limiter.Limiter.Settle] for a
// store that decides at the share of n, and sets deltas[i] (deltas holds
// at least len(reqs)) to what settling reqs[i] changes, in ns: (actual[i]
// - Cost) × the share's interval, positive for a debt, negative for a
// refund; 0 for an entry without a Reservation or whose actual equals its
// Cost, which changes nothing and is not checked further. It checks that
// there are as many Decisions and actual costs as requests, and that every
// entry that changes something is a valid settling token bucket whose
// actual is >= 0 and whose actual × interval (at the share) is at most
// [MaxSettle]. The error wraps [limiter.ErrInvalidRequest] and names the
// index, never the key. One pass, no allocation.
func ValidateSettle(reqs []limiter.Request, ds []limiter.Decision, actual []int64, n int64, deltas []int64) error {
	if len(reqs) != len(ds) || len(reqs) != len(actual) {
		return fmt.Errorf("%w: settle of %d requests with %d decisions and %d costs", limiter.ErrInvalidRequest, len(reqs), len(ds), len(actual))
	}
	for i := range reqs {
		deltas[i] = 0
		r := &reqs[i]
		if ds[i].Reservation == 0 || actual[i] == r.Cost {
			continue
		}
		err := validate(*r)
		var t int64
		switch {
		case err != nil:
		case r.Limit.MaxInFlight != 0:
			err = errSettleCap
		case !r.Settle:
			err = errSettle
		case actual[i] < 0:
			err = fmt.Errorf("actual cost %d is negative", actual[i])
		default:
			t = intervalOf(&r.Limit, n)
			if hi, lo := bits.Mul64(uint64(actual[i]), uint64(t)); hi != 0 || lo > MaxSettle {
				err = fmt.Errorf("actual cost %d at %v exceeds the largest settle (2^53-1 ns of the rate)", actual[i], r.Limit.Rate)
			}
		}
		if err != nil {
			return fmt.Errorf("%w: request %d: %w", limiter.ErrInvalidRequest, i, err)
		}
		deltas[i] = (actual[i] - r.Cost) * t
	}
	return nil
}

// intervalOf returns the emission interval of l's share of n, in ns: that
// of the rate Per × n ([limiter.Limit.Share]).
func intervalOf(l *limiter.Limit, n int64) int64 {
	r := l.Rate
	if n > 1 {
		r.Per *= time.Duration(n)
	}
	return int64(r.Interval())
}

// shape is a token bucket's limit in nanoseconds of theoretical arrival
// time: the emission interval t, the burst, Free and Ceiling. It is built
// from a Limit's fields without copying the Limit (see DecideAny).
type shape struct{ t, burst, free, ceiling int64 }

// shapeOf returns the shape of l's share of n (l itself for n <= 1), by
// [limiter.Limit.Share]'s rule: the interval of Per × n, Burst / n, and
// DelayAfter / n but at least 1. l must pass [limiter.Limit.Validate] and
// have a share of n.
func shapeOf(l *limiter.Limit, n int64) shape {
	burst, delay := l.Burst, l.DelayAfter
	if n > 1 {
		burst /= n
		if delay != 0 {
			delay = max(delay/n, 1)
		}
	}
	if delay == 0 {
		delay = burst
	}
	t := intervalOf(l, n)
	ceiling := burst * t // tau; validated: no overflow
	if l.MaxDelay > 0 {
		ceiling = min(ceiling, addSat(delay*t, int64(l.MaxDelay)))
	}
	return shape{t: t, burst: burst, free: delay * t, ceiling: ceiling}
}

// decide is Decide for the shape s.
func (s shape) decide(tat, now, cost int64) (limiter.Decision, int64) {
	t, tau, ceiling := s.t, s.burst*s.t, s.ceiling
	debt := subSat(tat, now)
	if debt < 0 {
		debt = 0 // the bucket is full: tat0 = max(TAT, now)
	}
	charge := cost * t // cost <= burst checked first, so no overflow below
	if cost > s.burst || charge > ceiling {
		// Can never fit: no promise of a retry, nothing charged.
		return limiter.Decision{
			Remaining:  tokens(tau-debt, t, s.burst),
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
			return limiter.Decision{ResetAfter: time.Duration(debt), Never: true}, tat
		}
		return limiter.Decision{
			Allowed:    true,
			Remaining:  tokens(tau-need, t, s.burst),
			ResetAfter: time.Duration(need),
			Delay:      time.Duration(max(0, need-s.free)),
		}, addSat(now, need)
	}
	return limiter.Decision{
		Remaining:  tokens(tau-debt, t, s.burst),
		RetryAfter: time.Duration(subSat(debt, ceiling-charge)), // debt+charge-ceiling
		ResetAfter: time.Duration(debt),
	}, tat
}

// Ceiling returns the largest debt, in nanoseconds of theoretical arrival
// time ahead of now, that an admitted request may leave behind: the bucket
// window Burst × Interval, lowered to DelayAfter × Interval + MaxDelay when
// a MaxDelay is set. A request whose new theoretical arrival time would lie
// further ahead is rejected. l must pass [limiter.Limit.Validate].
func Ceiling(l limiter.Limit) time.Duration {
	return time.Duration(ceilingOf(l, int64(l.Rate.Interval())))
}

// Free returns the debt, in nanoseconds, below which an admitted request
// proceeds at once: DelayAfter × Interval (Burst × Interval when DelayAfter
// is 0). An admitted request leaving a debt d > Free waits d - Free. l must
// pass [limiter.Limit.Validate].
func Free(l limiter.Limit) time.Duration {
	return time.Duration(delayAfter(l) * int64(l.Rate.Interval()))
}

var (
	errEmptyKey  = errors.New("empty key")
	errCost      = errors.New("cost must be at least 1")
	errSettle    = errors.New("a reservation for a request that does not settle")
	errSettleCap = errors.New("an in-flight cap cannot settle (settle is for token buckets)")
)

// ValidateAll checks every request: a non-empty Key, Cost >= 1, a Limit
// that passes [limiter.Limit.Validate] (a token bucket or an in-flight
// cap: every store of this module implements both), and Settle on token
// buckets only. The error
// for the first bad request wraps [limiter.ErrInvalidRequest] and names
// its index (not its key). It is the check every store runs first.
func ValidateAll(reqs []limiter.Request) error {
	for i := range reqs {
		err := validate(reqs[i]) // inlined: keep validate under the budget
		if err == nil && reqs[i].Settle && reqs[i].Limit.MaxInFlight != 0 {
			err = errSettleCap
		}
		if err != nil {
			return fmt.Errorf("%w: request %d: %w", limiter.ErrInvalidRequest, i, err)
		}
	}
	return nil
}

// ValidateRelease checks the arguments of [limiter.Limiter.Release]: as
// many Decisions as requests, and every request holding a Slot a valid
// in-flight request. The error wraps [limiter.ErrInvalidRequest].
func ValidateRelease(reqs []limiter.Request, ds []limiter.Decision) error {
	if len(reqs) != len(ds) {
		return fmt.Errorf("%w: release of %d requests with %d decisions", limiter.ErrInvalidRequest, len(reqs), len(ds))
	}
	for i := range reqs {
		if ds[i].Slot == 0 {
			continue
		}
		err := validate(reqs[i])
		if err == nil && reqs[i].Limit.MaxInFlight == 0 {
			err = errors.New("a slot for a token bucket")
		}
		if err != nil {
			return fmt.Errorf("%w: request %d: %w", limiter.ErrInvalidRequest, i, err)
		}
	}
	return nil
}

// InFlightBase is the value at which a store that keeps in-flight counters
// beside theoretical arrival times (limiter/memory, the reference model)
// stores a counter: InFlightBase + n for n slots held. It lies some 146
// years past any clock's origin, so such a state is never "full again"
// (TAT <= now) and never evicted while slots are held; a counter at 0 is
// stored as any TAT at or below the clock (a full bucket: free to evict).
const InFlightBase = int64(1) << 62

// Held returns the slots an in-flight state holds: state - InFlightBase,
// or 0 for a state below it (untracked, or released to zero).
func Held(state int64) int64 {
	if state <= InFlightBase {
		return 0
	}
	return state - InFlightBase
}

// Acquire is the in-flight decision every store implements (see the
// [limiter] package documentation, "In-flight limits"): it decides a
// request of cost slots against a counter holding held slots and returns
// the Decision and the count after the request (held + cost if allowed,
// held otherwise). Its InFlight is that count too, which exceeds
// l.MaxInFlight when the cap was lowered below the slots held. l.MaxInFlight
// must be valid and cost >= 1. The Slot field is left 0: the store sets it
// when it charges. Pure, safe for concurrent use.
func Acquire(held int64, l limiter.Limit, cost int64) (limiter.Decision, int64) {
	free := max(l.MaxInFlight-held, 0)
	switch {
	case cost > l.MaxInFlight:
		return limiter.Decision{Remaining: free, Never: true, InFlight: held}, held
	case cost <= free:
		return limiter.Decision{Allowed: true, Remaining: free - cost, InFlight: held + cost}, held + cost
	}
	return limiter.Decision{Remaining: free, InFlight: held}, held
}

// DecideAny decides a request of cost under l's share of n (see
// [limiter.Limit.Share]; n <= 1 is the whole of l, and l must have a share
// of n) against a state that is a TAT (token bucket) or an in-flight
// counter stored at [InFlightBase] (see [Held]), at now; an untracked state
// is passed as now. It returns the Decision and the state after the request
// if charged. l is a pointer, and a share is computed into scalars, so that
// a hot caller copies no Limit through memory (a Limit written in 8-byte
// words and read back in 16-byte ones stalls store forwarding: some 15 ns a
// call on an AMD EPYC).
func DecideAny(state, now int64, l *limiter.Limit, cost, n int64) (limiter.Decision, int64) {
	if l.MaxInFlight == 0 {
		return shapeOf(l, n).decide(state, now, cost)
	}
	capacity := l.MaxInFlight
	if n > 1 {
		capacity /= n // Share's rule
	}
	d, held := Acquire(Held(state), limiter.Limit{MaxInFlight: capacity}, cost)
	if !d.Allowed {
		return d, state
	}
	return d, InFlightBase + held
}

// validate checks r and returns a reason, or nil.
func validate(r limiter.Request) error {
	switch {
	case r.Key == "":
		return errEmptyKey
	case r.Cost < 1:
		return errCost
	}
	return r.Limit.Validate()
}

// delayAfter returns DelayAfter with 0 resolved to Burst.
func delayAfter(l limiter.Limit) int64 {
	if l.DelayAfter == 0 {
		return l.Burst
	}
	return l.DelayAfter
}

// ceilingOf is Ceiling in nanoseconds for the emission interval t.
func ceilingOf(l limiter.Limit, t int64) int64 {
	tau := l.Burst * t
	if l.MaxDelay <= 0 {
		return tau
	}
	return min(tau, addSat(delayAfter(l)*t, int64(l.MaxDelay)))
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
