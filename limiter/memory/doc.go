// Package memory is an in-process [limiter.Limiter]: GCRA token buckets kept
// in sharded open-addressing tables, bounded in size, on a monotonic clock.
//
// Use it for a single process (or as a per-process first line in front of a
// shared store). Buckets are not shared between processes.
//
// # Algorithm
//
// Each bucket holds one int64: its theoretical arrival time (TAT), the
// instant at which it will be full again (GCRA, the generic cell rate
// algorithm). The rule is the decision rule of package [limiter], with delay_after, max_delay and
// the dry-run rule of the [limiter.Limiter] contract. With T = [limiter.Rate.Interval] and tau = Burst·T (the
// window), a request of cost c at time now is decided as
//
//	tat0   = max(TAT, now)            // an unknown key has TAT = now: a full bucket
//	newTat = tat0 + c·T
//	allowed iff newTat - now <= tau   // c tokens are in the bucket
//
// and, when allowed and charged, TAT becomes newTat; a rejected request
// changes nothing. The bucket holds (tau - (TAT-now))/T tokens, so
//
//	Remaining  = floor((tau - (TAT' - now)) / T)   TAT' = TAT after the request
//	RetryAfter = newTat - tau - now                 (rejected only)
//	ResetAfter = max(TAT' - now, 0)
//
// All arithmetic is in int64 nanoseconds and saturates instead of wrapping.
// A cost above Burst is rejected with Never set before any arithmetic.
//
// # Memory
//
// A tracked bucket costs one 16-byte cell of an open-addressing table: a
// 64-bit keyed hash of its key and limit shape, and one int64. Tables stay
// between 53% and 80% full while buckets are added, so a bucket costs 20 to
// 30 bytes (29.4 at a million buckets, see BenchmarkMemoryPerKey; nginx
// documents 128 bytes per limit_req state). The key string is not kept. At
// most [Options.MaxKeys] buckets are tracked; see [Options] for how the
// bound is enforced and what is evicted.
package memory
