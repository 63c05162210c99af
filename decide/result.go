package decide

import (
	"time"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// PolicyResult is one policy's decision for one request: an [Evaluation]
// holds one per applicable policy, and so does middleware's Record, whose
// JSON (the debug endpoint's answer) encodes each with
// [PolicyResult.MarshalJSON]. It holds the encoded key (secret-free by
// construction) but never a credential. A value: safe for concurrent
// reads.
type PolicyResult struct {
	// Policy is the policy's name.
	Policy string
	// Key is the encoded limitkey.Key, or "" when a dimension was missing.
	Key string
	// Decision is the outcome.
	Decision Decision
	// Cost is the tokens the request spends (or would spend) under this
	// policy: the policy's (or its override's) fixed cost, or what its
	// cost function returned.
	Cost int64
	// Limit is the limit that applied: the policy's, or the override's
	// named by Override; when the store is shared by several processes
	// without a shared store (the memory store's Replicas), this
	// process's share of it ([limiter.Limit.Share]). For an adaptive cap,
	// the policy's bounds with MaxInFlight the limit the request was
	// decided against.
	Limit limiter.Limit
	// Override names the [policy.Override] whose limit applied ("tenant=acme",
	// "plan=pro", "account=alice", "tenant=acme|account=alice", or
	// "function" for an
	// [policy.Policy].OverrideFunc answer naming none); "" for the policy's own.
	Override string
	// Remaining is the whole tokens left after this request (after charging
	// when it was charged).
	Remaining int64
	// RetryAfter is how long until the cost would fit, when rejected by
	// the limit; 0 otherwise. For an in-flight policy (or an adaptive cap),
	// whose store cannot tell when a running request ends, it is the
	// policy's RetryAfter setting (0: none).
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// Never is true when the cost exceeds the burst (or cannot fit within
	// max_delay): no wait helps.
	Never bool
	// Delay is how long the request waits for this policy when DELAYED, or
	// would have waited when DELAYED_DRY_RUN; 0 otherwise.
	Delay time.Duration
	// DryRun reports that the policy (or the whole rate limiter) is in dry
	// run: it is accounted but never rejects or delays.
	DryRun bool
	// Charged reports that this policy's bucket was charged the request's
	// cost (see [limiter.Limiter] for when a dry-run policy is).
	Charged bool
	// Missing is the absent dimension when the key could not be built.
	Missing limitkey.Dimension
	// SkippedReason explains SKIPPED and missing-dimension rejections.
	SkippedReason string
	// Abandoned reports that the request's context ended before the
	// limiter answered (see [Evaluation].Abandoned): Decision is ERROR, Err
	// the store's error, but no fail mode applies (FailMode is "").
	Abandoned bool
	// Err is the limiter error behind DecisionError (or the invalid limit
	// an [policy.Policy].OverrideFunc returned), or the cost function's failure
	// behind a REJECTED answered with urn:ratekey:problem:invalid-cost.
	Err error
	// Store names the limiter store that decided ("memory", "redis", ...:
	// the package of the limiter's implementation), or "process" for an
	// adaptive cap, which the process decides itself.
	Store string
	// Fallback reports that the policy was decided on
	// the configuration's Fallback store (middleware.RateLimitConfig.Fallback) while the store could not decide
	// ([policy.OnStoreErrorLocal]); Store then names the fallback's store and
	// Limit is this process's share on it.
	Fallback bool
	// Cached reports that the store answered this rejection from its
	// local deny cache (limiter.Decision.Cached): no round trip, nothing
	// charged.
	Cached bool
	// Prefetched reports that the store decided this policy from tokens
	// the process had prefetched (limiter.Decision.Prefetched: limiter/redis
	// with Prefetch), without a round trip of its own.
	Prefetched bool
	// HashSlot is 1 + the Redis Cluster slot that decided, 0 when none
	// did (limiter.Decision.HashSlot).
	HashSlot int
	// InFlight is, for an in-flight policy, the slots of the key held
	// after this request when admitted (its cost included, charged or
	// not), now otherwise; more than Limit.MaxInFlight when the cap was
	// lowered while they were held (limiter.Decision.InFlight). 0 for a
	// token bucket.
	InFlight int64
	// Settle reports that the policy settles ([policy.Policy].Settle): Cost is
	// the reservation, charged at admission, which the cost the handler
	// reports (middleware.ReportCost) replaces once it returns.
	Settle bool
	// Settled is, for a settling policy whose reservation was charged
	// and whose handler has returned, the tokens the request finally
	// spent: the cost reported (at most MaxCost) or, with nothing
	// reported, Cost. 0 otherwise (an Evaluation is complete before the
	// handler runs; a Record's copy gets it when the handler returns).
	Settled int64
	// Class is, for an adaptive cap, the request's priority class (see
	// [policy.Priority]); "" for other policies.
	Class policy.Class

	// Returned reports that the handler has returned and a settling
	// policy's reservation was settled: Settled holds what it settled at
	// (which may be 0). false before (the debug endpoint's would-be
	// decisions, a request not admitted).
	Returned bool
	// MaxCost is, for a settling policy, the most a request settles at:
	// the policy's MaxCost, or the burst of the limit that applied when
	// it sets none (see [policy.Policy].Settle); 0 for other policies.
	MaxCost int64
	// Status is the HTTP status a refusal by this policy answers with:
	// the policy's Status (429 by default; see [policy.Policy]).
	Status int
	// OnStoreError is the policy's fail mode, which decides an ERROR
	// (see [PolicyResult.FailMode]).
	OnStoreError policy.OnStoreError
	// Authenticated reports that the request carried a verified principal
	// that is not anonymous: a missing dimension is then the principal's
	// (403 over HTTP), not the lack of one (401).
	Authenticated bool
	// InvalidCost reports that the request's cost function failed or
	// returned a cost out of range (Err says which): the request is
	// malformed for this policy (400, urn:ratekey:problem:invalid-cost,
	// over HTTP).
	InvalidCost bool
	// Index is the policy's position in the configuration's policies
	// (0-based), to find what a transport derived from it once.
	Index int
}

// Evaluation is the combined outcome of every policy that applies to one request.
type Evaluation struct {
	// Operation is the request's operation ("GET /v1/reports/{id}").
	Operation string
	// Policies holds one result per applicable policy, in configuration order.
	Policies []PolicyResult
	// Decision sums the request up: REJECTED (or ERROR, for a store
	// failure failing closed) when it may not proceed; otherwise DELAYED
	// when it must wait, ERROR when a store failure failed open,
	// REJECTED_DRY_RUN or DELAYED_DRY_RUN when a dry-run policy would have
	// acted, PASSED when a policy admitted it, SKIPPED when every policy
	// skipped it, and "" when no policy applies.
	Decision Decision
	// Allowed is true when the request may proceed (after Delay).
	Allowed bool
	// Delay is how long the request must wait before it proceeds: the
	// longest Delay of its DELAYED policies (nginx waits for the longest
	// of its zones' delays). 0 unless Decision is DELAYED. The live HTTP
	// chain evaluates in two phases, middleware's PreAuthHandler policies
	// and then Handler's, each waiting out its own Delay, so a request can
	// wait for the sum of the two (a main-phase bucket refills while the
	// pre-auth wait lasts only if it was in debt); RateLimiter.Check, which
	// evaluates every policy at once, reports the longest.
	Delay time.Duration
	// Abandoned reports that the request's context ended (the client went
	// away, or its deadline passed): before the limiter answered (its
	// policies are then ERROR, with the context's error, but no fail mode
	// applies: Allowed is false, and no store error or fail-open is
	// counted), or, set by the transport (middleware's Handler), during
	// Delay. A client timeout, not a server rejection; a budget already
	// spent stays spent, as in nginx.
	Abandoned bool
	// Charged is true when the request's cost was spent against every
	// enforcing policy (an evaluation that charges, as the live chain's or
	// middleware.RateLimiter.Check's with charge true, and none of them
	// rejected).
	// When false, the Remaining and ResetAfter of admitted results still
	// describe the state as if charged (the would-be decision);
	// [PolicyResult.Current] gives the state now.
	Charged bool
	// RoundTrips is how many round trips to a shared store the limiter
	// call took (limiter.Decision.RoundTrips); 0 for the memory store.
	RoundTrips int
	// Replicas is how many processes share the budgets of the store that
	// decided, each enforcing its share of every limit (the memory store's
	// Replicas; the Fallback's when a policy decided on it): 1 for the
	// whole limit.
	Replicas int
}

// Current returns the whole tokens left and the time until the bucket is
// full as they stand: an admitted result whose cost was not charged (an
// evaluation without charge, or a request another policy rejected) reports the
// would-be state after charging, so the cost is added back. For an
// in-flight policy it returns the free slots (0 when more are held than
// MaxInFlight) and 0.
func (res *PolicyResult) Current() (remaining int64, resetAfter time.Duration) {
	remaining, resetAfter = res.Remaining, res.ResetAfter
	if m := res.Limit.MaxInFlight; m != 0 {
		if res.admitted() && !res.Charged {
			remaining += res.Cost
		}
		return min(max(remaining, 0), m), 0
	}
	if res.admitted() && !res.Charged {
		remaining += res.Cost
		resetAfter -= time.Duration(res.Cost) * res.Limit.Rate.Interval()
	}
	return min(max(remaining, 0), res.Limit.Burst), max(resetAfter, 0)
}

// overMaxDelay reports whether a rejection is due to max_delay: the bucket
// held the cost, but the request would have waited longer than allowed.
func (res *PolicyResult) overMaxDelay() bool {
	return (res.Decision == DecisionRejected || res.Decision == DecisionRejectedDryRun) &&
		res.Limit.MaxDelay > 0 && !res.Never && res.Remaining >= res.Cost
}

// admitted reports whether the limiter admitted the request under this
// policy (possibly with a delay, possibly in dry run).
func (res *PolicyResult) admitted() bool {
	switch res.Decision {
	case DecisionPassed, DecisionDelayed, DecisionDelayedDryRun:
		return true
	}
	return false
}

// dimension returns the value of dimension d for the request, and false when
