package limiter

import (
	"fmt"
	"math"
	"time"
)

// Limit is one policy's token bucket: a refill [Rate] and a capacity.
//
// The zero Limit is invalid; see [Limit.Validate]. Limit is a plain value,
// safe to copy and to share between goroutines. It travels with every
// [Request], so stores keep no per-key configuration.
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
}

// Validate reports whether l can be used: Rate.Count >= 1, Rate.Per > 0,
// Burst >= 1, 0 <= DelayAfter <= Burst, MaxDelay >= 0, and Burst ×
// [Rate.Interval] (the [Limit.Window]) fits in an int64 count of
// nanoseconds (about 292 years), so the arithmetic of every store stays
// exact. The error names the offending field and value; it wraps
// no sentinel (stores wrap it in [ErrInvalidRequest]).
func (l Limit) Validate() error {
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

// Window returns the time a bucket takes to refill from empty:
// Burst × [Rate.Interval], in nanoseconds. It is the "w" parameter of the
// RateLimit-Policy field (draft-ietf-httpapi-ratelimit-headers, rounded up
// to whole seconds by the caller). Window saturates at the largest Duration
// for limits that [Limit.Validate] rejects, and is 0 for a zero rate.
func (l Limit) Window() time.Duration {
	if l.Burst < 1 {
		return 0
	}
	return time.Duration(mulSat(l.Burst, int64(l.Rate.Interval())))
}
