package limiter

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Limit is one policy's limit, of one of two kinds:
//
//   - a token bucket (Rate, Burst, DelayAfter, MaxDelay): how fast work is
//     admitted (nginx limit_req);
//   - an in-flight cap (MaxInFlight, Lease): how much of it runs at once
//     (nginx limit_conn, Stripe's concurrent-requests limiter). A token
//     bucket keeps refilling while slow requests run, so it does not cap
//     concurrency; see "In-flight limits" in the package documentation.
//
// MaxInFlight > 0 selects the second kind; the bucket fields must then be
// zero. The zero Limit is invalid; see [Limit.Validate]. Limit is a plain
// value, safe to copy and to share between goroutines. It travels with
// every [Request], so stores keep no per-key configuration.
//
// A third kind is a policy's, never a store's: an adaptive in-flight cap
// (MaxInFlightCeiling > 0; the demo's max_in_flight: auto), whose limit
// the process moves between MinInFlight and MaxInFlightCeiling from the
// latency of the requests it admits (ratekey's decision core decides it,
// in the process: latency is a local fact). Stores refuse it.
type Limit struct {
	// Rate is how fast the bucket refills.
	Rate Rate
	// Burst is the bucket capacity B in tokens, >= 1: the largest cost
	// admitted at once, and what a full bucket holds. nginx limit_req
	// burst=N is Burst N+1 (nginx counts the burst in excess of the
	// request being served; throttled does the same, while x/time/rate and
	// redis_rate count capacity like this package).
	Burst int64
	// DelayAfter is how many tokens of the burst are admitted at once; a
	// request that leaves the bucket holding fewer than Burst-DelayAfter
	// tokens is admitted but must wait ([Decision.Delay]) until it conforms
	// to the rate. 0 means Burst: nothing is delayed (nginx nodelay).
	// 1 <= DelayAfter <= Burst otherwise. nginx limit_req mapping (burst=N
	// is Burst N+1): burst=N is DelayAfter 1; burst=N nodelay is DelayAfter
	// 0 (or N+1); burst=N delay=D is DelayAfter D+1; no burst is Burst 1.
	DelayAfter int64
	// MaxDelay bounds [Decision.Delay]: a request that would have to wait
	// longer is rejected up front instead (and charges nothing), with a
	// RetryAfter after which it would be admitted with at most MaxDelay of
	// delay. 0 means no bound other than the burst. nginx has no
	// equivalent. Nanoseconds; >= 0.
	MaxDelay time.Duration
	// MaxInFlight, when > 0, makes the Limit an in-flight cap instead of a
	// token bucket: at most MaxInFlight slots of a key are held at once
	// (a request holds [Request].Cost slots from the Take that admits it
	// until its [Limiter.Release]). 1 <= MaxInFlight <= 1 000 000 000;
	// Rate, Burst, DelayAfter and MaxDelay are then zero. nginx limit_conn
	// zone N is MaxInFlight N.
	MaxInFlight int64
	// Lease is, for an in-flight cap, how long a shared store keeps a slot
	// whose holder stopped renewing it (its process died mid-request)
	// before freeing it, on the store's clock; the store renews the slots
	// it holds while their requests run. 0 means 60 s; otherwise 1 s to
	// 1 h. The memory store ignores it (a process that dies takes its
	// slots with it). Zero for a token bucket.
	Lease time.Duration
	// MaxInFlightCeiling, when > 0, makes the Limit an adaptive in-flight
	// cap (the demo's max_in_flight: auto): the most requests the process
	// runs at once, whatever latency says, 1 to 1 000 000. The cap's limit
	// starts at MinInFlight and moves between the two with the latency of
	// the requests it admits (see policy.Policy, "Adaptive caps").
	// MaxInFlight is then 0 in a policy, and the limit in force in a
	// decide.PolicyResult; every other field is zero. No store
	// decides it: [Limit.Validate] refuses it.
	MaxInFlightCeiling int64
	// MinInFlight is, for an adaptive cap, the least its limit may fall
	// to, 1 to MaxInFlightCeiling; 0 means 1. It is also where the cap
	// starts, so its first latency window runs with few requests at once:
	// set it no higher than the concurrency the service surely takes.
	MinInFlight int64
}

// MaxInFlight bounds and the Lease range: see [Limit].
const (
	maxInFlight = 1_000_000_000
	minLease    = time.Second
	maxLease    = time.Hour
)

// Validate reports whether l can be used: Rate.Count >= 1, Rate.Per > 0,
// Burst >= 1, 0 <= DelayAfter <= Burst, MaxDelay >= 0, and Burst ×
// [Rate.Interval] (the window, the time a bucket takes to refill from
// empty) fits in an int64 count of
// nanoseconds (about 292 years), so the arithmetic of every store stays
// exact. The error names the offending field and value; it wraps
// no sentinel (stores wrap it in [ErrInvalidRequest]).
//
// For an in-flight cap (MaxInFlight != 0) it reports instead whether
// 1 <= MaxInFlight <= 1 000 000 000, Lease is 0 or between 1 s and 1 h,
// and Rate, Burst, DelayAfter and MaxDelay are zero.
//
// An adaptive cap (MaxInFlightCeiling or MinInFlight set) is always
// refused: the process decides it, never a store.
func (l Limit) Validate() error {
	if l.MaxInFlightCeiling != 0 || l.MinInFlight != 0 {
		return errors.New("limiter: invalid limit: an adaptive in-flight cap (max_in_flight_ceiling, min_in_flight) is decided in the process by package middleware, never by a store")
	}
	if l.MaxInFlight != 0 {
		return l.validateInFlight()
	}
	if l.Lease != 0 {
		return fmt.Errorf("limiter: invalid limit: lease %v on a token bucket, want 0 (lease is for max_in_flight)", l.Lease)
	}
	switch {
	case l.Rate.Count < 1:
		return fmt.Errorf("limiter: invalid limit: rate count %d, want >= 1", l.Rate.Count)
	case l.Rate.Per <= 0:
		return fmt.Errorf("limiter: invalid limit: rate period %v, want > 0", l.Rate.Per)
	case l.Burst < 1:
		return fmt.Errorf("limiter: invalid limit: burst %d, want >= 1", l.Burst)
	case l.DelayAfter < 0 || l.DelayAfter > l.Burst:
		return fmt.Errorf("limiter: invalid limit: delay_after %d, want 0 (= burst) to burst %d", l.DelayAfter, l.Burst)
	case l.MaxDelay < 0:
		return fmt.Errorf("limiter: invalid limit: max_delay %v, want >= 0", l.MaxDelay)
	}
	if t := int64(l.Rate.Interval()); l.Burst > math.MaxInt64/t {
		return fmt.Errorf("limiter: invalid limit: burst %d at %v takes longer than 292 years to refill", l.Burst, l.Rate)
	}
	return nil
}

// validateInFlight is Validate for an in-flight cap.
func (l Limit) validateInFlight() error {
	switch {
	case l.MaxInFlight < 1 || l.MaxInFlight > maxInFlight:
		return fmt.Errorf("limiter: invalid limit: max_in_flight %d, want 1 to %d", l.MaxInFlight, maxInFlight)
	case l.Lease != 0 && (l.Lease < minLease || l.Lease > maxLease):
		return fmt.Errorf("limiter: invalid limit: lease %v, want 0 (60s) or %v to %v", l.Lease, minLease, maxLease)
	case l.Rate != Rate{} || l.Burst != 0 || l.DelayAfter != 0 || l.MaxDelay != 0:
		return errors.New("limiter: invalid limit: max_in_flight with rate, burst, delay_after or max_delay, want one kind of limit")
	}
	return nil
}

// Share returns the part of l that each of n processes enforces when n
// processes share l's budget without a shared store (the memory store's
// Options.Replicas), rounded so that the n shares together never admit
// more than l does:
//
//   - a token bucket: Rate divided by n exactly (Per × n), Burst divided by
//     n rounded down, DelayAfter divided by n rounded down but at least 1
//     (0 stays 0: the whole burst at once), MaxDelay unchanged. Over any
//     interval t each process admits at most Burst/n + rate·t/n, so the n
//     together at most Burst + rate·t; the share's window (Burst × Interval) is at
//     most l's, so a bucket's state (its debt in time) means the same
//     fill under either, and a bucket in debt stays in debt when n
//     changes.
//   - an in-flight cap: MaxInFlight divided by n rounded down; Lease
//     unchanged. The n processes hold at most MaxInFlight slots together.
//
// An adaptive cap (MaxInFlightCeiling set) is returned unchanged: each
// process caps itself from its own latency.
//
// n <= 1 returns l unchanged. Share fails, wrapping no sentinel, when a
// share rounds below one token (Burst < n) or one slot (MaxInFlight < n),
// or the period Per × n overflows; the error gives the numbers. It does
// not validate l otherwise (see [Limit.Validate]).
func (l Limit) Share(n int64) (Limit, error) {
	if n <= 1 || l.MaxInFlightCeiling != 0 {
		return l, nil
	}
	if l.MaxInFlight != 0 {
		if l.MaxInFlight < n {
			return l, fmt.Errorf("limiter: max_in_flight %d shared by %d replicas is below one slot per replica", l.MaxInFlight, n)
		}
		l.MaxInFlight /= n
		return l, nil
	}
	if l.Burst < n {
		return l, fmt.Errorf("limiter: burst %d shared by %d replicas is below one token per replica", l.Burst, n)
	}
	if l.Rate.Per > time.Duration(math.MaxInt64/n) {
		return l, fmt.Errorf("limiter: rate %v shared by %d replicas: the period overflows", l.Rate, n)
	}
	l.Rate.Per *= time.Duration(n)
	l.Burst /= n
	if l.DelayAfter != 0 {
		l.DelayAfter = max(l.DelayAfter/n, 1)
	}
	return l, nil
}
