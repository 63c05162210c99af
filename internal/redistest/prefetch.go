package redistest

import rkredis "github.com/ratekey/ratekey/limiter/redis"

// AddPrefetch returns the field-by-field sum of a and b: the prefetch
// books of several Limiters (several processes) taken together.
func AddPrefetch(a, b rkredis.PrefetchStats) rkredis.PrefetchStats {
	return rkredis.PrefetchStats{
		Fetches: a.Fetches + b.Fetches, Charged: a.Charged + b.Charged, Admitted: a.Admitted + b.Admitted,
		Held: a.Held + b.Held, Pending: a.Pending + b.Pending, Expired: a.Expired + b.Expired,
		SentBack: a.SentBack + b.SentBack, RefundedNs: a.RefundedNs + b.RefundedNs,
		Lost: a.Lost + b.Lost, Dropped: a.Dropped + b.Dropped,
	}
}
