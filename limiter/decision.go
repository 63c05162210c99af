package limiter

import "time"

// Decision is a [Limiter]'s verdict on one [Request].
//
// A Take and a Peek of the same requests against the same state return the
// same Decisions; Take then charges every bucket if and only if every
// Decision is Allowed. So the fields that describe "after this request"
// (Remaining, ResetAfter of an allowed request) show the state as it is after
// the charge, or as it would be had the call been charged.
//
// Durations are nanoseconds of the limiter's clock. HTTP headers round them
// up to whole seconds (RFC 9110 §10.2.3: a Retry-After rounded down sends
// clients back too early).
type Decision struct {
	// Allowed reports whether this request alone fits this policy's bucket
	// now: the bucket holds at least Cost tokens (with a MaxDelay, few
	// enough are missing that Delay <= MaxDelay). For a dry-run request it
	// says what enforcing mode would decide.
	Allowed bool
	// Never reports that Cost exceeds Burst, or that Cost × interval
	// exceeds the ceiling of the package's decision rule (a MaxDelay too
	// short for this cost even from a full bucket): the request can never be admitted, so no
	// RetryAfter is promised (throttled PR 82). Allowed is false and nothing
	// is charged.
	Never bool
	// Cached reports that the store answered this rejection from a local
	// cache instead of its shared state (limiter/redis's deny cache: a
	// bucket known to be in debt until a computed instant), so no round
	// trip was made and nothing was charged. Only a rejected Decision
	// (Allowed false, Never false) can be Cached; its other fields are the
	// rejection the shared store would return at the same instant for the
	// state the cache knows, except that a rejection of a prefetched bucket
	// left dry (limiter/redis, "Prefetch": a fetch came back short) has
	// the RetryAfter of the process's next fetch, which may be later. The
	// memory store never sets it.
	Cached bool
	// Prefetched reports that the store admitted this request from tokens
	// the process had already taken, and paid for, from the shared store
	// (limiter/redis with Options.Prefetch), without a round trip. Only an
	// Allowed Decision can be Prefetched; its Remaining is the tokens the
	// process still holds for the bucket and its ResetAfter the time until
	// the bucket is full again as of this process's last fetch: lower
	// bounds of the shared bucket's (other processes may hold tokens too,
	// or have spent some since). Delay and RetryAfter are 0. The memory
	// store never sets it.
	Prefetched bool
	// Delay is, when Allowed, how long the request must wait before it
	// proceeds because it dips below the DelayAfter part of the burst
	// (nginx limit_req without nodelay); 0 otherwise. The bucket is charged
	// at once; the caller does the waiting (or, for dry run, does not).
	Delay time.Duration
	// Remaining is the number of whole tokens in the bucket after this
	// request (if Allowed; the current request is counted), or now (if
	// rejected). 0 <= Remaining <= Burst.
	Remaining int64
	// RetryAfter is, when rejected, the time until Cost tokens will be in
	// the bucket (assuming nothing else spends them). It is 0 when Allowed,
	// and 0 when Never is set.
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again: after charging
	// this request if Allowed, from the current state if rejected. >= 0.
	ResetAfter time.Duration
	// Slot is non-zero when this Take took in-flight slots for the request
	// (its Limit has MaxInFlight, and the call charged it): the caller
	// holds them until it hands this Decision, with its Request, to
	// [Limiter.Release], exactly once, when the work ends. Its value
	// belongs to the store (limiter/memory sets 1; a shared store puts its
	// lease's identity there); callers only test it against 0. It is 0
	// for token buckets, for Peek, and for requests the call did not
	// charge.
	//
	// For an in-flight cap the other fields read: Remaining is the free
	// slots (MaxInFlight minus the slots held, after this request if
	// Allowed; 0 when more are held than a lowered MaxInFlight allows);
	// Never is Cost > MaxInFlight; Delay, RetryAfter and ResetAfter are 0
	// (no store can tell when a running request will end).
	Slot uint64
	// Reservation is non-zero when this Take charged a settling request
	// ([Request].Settle): the caller may hand this Decision, with its
	// Request and the actual cost, to [Limiter.Settle], once, when the
	// work ends. Its value belongs to the store (the memory and Redis
	// stores put there the bucket's theoretical arrival time right after
	// the charge, in ns of their clock, which caps a refund); callers only
	// test it against 0. It is 0 for every other request, for Peek, and
	// for requests the call did not charge.
	Reservation int64
	// InFlight is, for an in-flight cap, the slots held: after this
	// request if Allowed (its Cost included, whether or not the call
	// charged it, as for Remaining), now otherwise. It may exceed
	// MaxInFlight: a cap lowered while slots are held leaves the requests
	// already running their slots. 0 for token buckets. A diagnostic for
	// the debug view (its in_flight): the decision reads Remaining.
	InFlight int64
	// HashSlot is 1 + the Redis Cluster hash slot (the Redis Cluster
	// specification's CRC16 of the key's hash tag, mod 16384) whose master
	// decided the request, so 1 to 16384; 0 when no Cluster slot did (the
	// memory store, one Redis server). A diagnostic for the debug view:
	// it does not affect the decision.
	HashSlot int
	// RoundTrips is how many round trips to a shared store the call that
	// returned this Decision took (the same on every Decision of the
	// call): 0 for the memory store and for a call a local cache answered
	// whole; 1 for a call within one Redis slot; 2, or 3 with a refund, for
	// a call across Cluster slots (see limiter/redis). A diagnostic for
	// the debug view: it does not affect the decision.
	RoundTrips int
}
