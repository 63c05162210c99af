package memory

import "time"

// defaultMaxKeys is the number of tracked keys when [Options.MaxKeys] is 0.
const defaultMaxKeys = 1_000_000

// Options configures [New]. The zero value is usable: one million keys on
// the process's monotonic clock.
type Options struct {
	// MaxKeys bounds the number of tracked keys (bucket states); 0 means
	// 1 000 000 (at 20 to 30 bytes per tracked bucket, see
	// BenchmarkMemoryPerKey, at most about 30 MB); negative is a
	// programming error (New panics).
	//
	// The bound is exact: Len never exceeds MaxKeys. When a call must
	// track new keys and the store is full, states whose bucket is full
	// again are evicted (they carry no information: an unknown key is a
	// full bucket), first in the shards the call holds, then, if that is
	// not enough, in every shard that may hold one. (The store is split
	// into up to 256 shards, one per 1024 keys of MaxKeys, each with its
	// own lock; a shard whose earliest possible refill is still in the
	// future is skipped without being visited.) A state still refilling,
	// i.e. a client in debt, is never evicted: that would hand it a fresh
	// bucket (the Envoy local-rate-limit failure). If nothing can be
	// evicted, the call fails with [limiter.ErrCapacity] and charges
	// nothing; the error is a [*limiter.CapacityError] saying when enough
	// states are full again (see [Limiter.Take]). Finding that time, for a
	// call needing one slot, costs one load per shard while each shard's
	// earliest state is unchanged since it was last found, and at most one
	// visit of every cell otherwise; calls that succeed never pay for it.
	//
	// Eviction happens only then, never in the background: a sweep visits
	// a whole shard and evicts every full state in it at once, so its cost
	// is shared by the new keys it makes room for. Memory therefore grows
	// to about MaxKeys states and stays there.
	MaxKeys int
	// Replicas is the number of processes that share every budget this
	// store is given, each with a store of its own (no shared store): the
	// store enforces each request's [limiter.Limit.Share] of Replicas, so
	// that the processes together never admit more than the limit (the
	// rounding rule is Share's). 0 means 1 (the whole limit); negative is a
	// programming error (New panics). A request whose share rounds below
	// one token or one slot fails with [limiter.ErrInvalidRequest]; the
	// middleware refuses such a policy when it is built. Decisions state
	// the share (Remaining, RetryAfter and ResetAfter are of the share's
	// bucket). A store rebuilt with another count keeps no state;
	// [Limiter.WithReplicas] changes the count and keeps every bucket's
	// debt in time (a share's window is never longer than the limit's, so
	// a bucket in debt stays in debt). Replicas 1 costs nothing per
	// decision; more costs a copy of each request and its share
	// (BenchmarkReplicas).
	Replicas int
	// Now is the time source, as golang-jwt's WithTimeFunc: nil means
	// time.Now. The store reads time as the duration since Now's reading
	// at New, so with time.Now it follows the monotonic clock and a
	// wall-clock jump moves no bucket (go-limiter issue 57). It must be
	// safe for concurrent use; a reading that goes backwards makes
	// decisions stricter, never looser. Elapsed readings below
	// math.MinInt64+3 ns are read as that value (the three lowest int64
	// values mark table cells). Tests pass a clock that moves only when
	// told to.
	Now func() time.Time
}
