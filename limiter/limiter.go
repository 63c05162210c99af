package limiter

import "context"

// Limiter decides requests ([Request]) against token buckets and in-flight
// counters held in a store (process memory, Redis, ...).
//
// Contract, which every implementation keeps and its tests check:
//
//   - Safe for concurrent use by multiple goroutines.
//   - Take decides all reqs in one atomic step with the rule of the package
//     documentation (section "Decision rule"), all-or-nothing:
//     a Decision is computed for every request; the bucket of every request
//     is charged only if ALL of them are Allowed; if any is rejected
//     (including Never), no bucket is charged. No other call observes a
//     partial charge.
//   - Requests are decided in order within that step: when two requests
//     name the same bucket (Key and limit shape, see [Request]), the second
//     sees the bucket as the first leaves it (charged if the first is
//     Allowed).
//   - Dry run: when some requests have DryRun set and the call is not
//     all Allowed, the enforcing requests are decided again on their own
//     (as if the dry-run ones were absent) and, if all of those are
//     Allowed, they alone are charged. The Decisions returned for enforcing
//     requests are then those of that second pass; dry-run requests keep
//     their first-pass Decisions. So a dry-run policy's buckets evolve
//     exactly as they would in enforcing mode, and adding one never changes
//     what the enforcing policies decide or charge (nginx limit_req_dry_run
//     applies to a whole location, where this distinction cannot arise).
//   - Peek computes exactly the Decisions Take would return, in the same
//     way, and charges nothing, creates no state and evicts nothing. The
//     debug endpoint uses it to show would-be decisions. Where Take would
//     fail with [ErrCapacity], Peek does too.
//   - On success the returned slice is dst with len(reqs) Decisions
//     appended in request order (non-nil even for no requests). A caller
//     that passes a dst with room (dst[:0] of a reused buffer) makes the
//     call allocation-free in the memory store.
//   - A non-nil error means the outcome is UNKNOWN: never read it as
//     "allowed" (nor as an empty bucket). The returned slice is nil. The
//     caller applies its fail mode (on_store_error); the contents of dst's
//     spare capacity are unspecified. Errors wrap
//     [ErrInvalidRequest] for malformed requests (nothing charged),
//     [ErrCapacity] when a bounded store cannot track a new key (nothing
//     charged; a [*CapacityError] says when it can), ctx.Err() when ctx is done before the decision is made, or a
//     store-specific error (after which a remote store may or may not have
//     charged: the outcome is unknown).
//
// Take and Peek check every request before looking at the store: a
// non-empty Key, Cost >= 1 and a Limit that passes [Limit.Validate]. The
// error for the first bad request wraps [ErrInvalidRequest] and names its
// index (not its key).
//
// In-flight caps (Limit.MaxInFlight > 0) take part in the same atomic,
// all-or-nothing step as token buckets, decided by the rule of the package
// documentation (section "In-flight limits"): a call that charges takes
// the slots of its in-flight requests (each such Decision gets a non-zero
// Slot) and spends the tokens of its buckets together, or does neither.
// The dry-run rule is the same: a dry-run in-flight request holds its
// slots exactly when enforcing mode would (nginx limit_conn_dry_run still
// counts). Slots taken are held until Release:
//
//   - Release(ctx, reqs, ds) frees the slots of every request reqs[i]
//     whose Decision ds[i] has a non-zero Slot: the requests of one Take
//     call and the Decisions it returned, whole or in part (the other
//     entries are ignored), len(ds) == len(reqs). Each Decision with a
//     Slot is released exactly once: a second Release of it may free
//     slots that other requests hold (a store cannot always tell), and
//     counters never go below zero.
//   - Release must not be skipped: callers release in a deferred call,
//     so that a panic or an abandoned request frees its slots too. It
//     needs a context that outlives the request (context.WithoutCancel):
//     a cancelled ctx may make a remote store give up. A non-nil error
//     means the outcome is unknown; the caller does not retry it (a retry
//     could free another request's slot). A store whose slots are leases
//     (Limit.Lease) renews them while they are held, so a slot whose
//     release failed, or whose process died, is freed when its lease
//     expires on the store's clock. Errors wrap [ErrInvalidRequest] for
//     mismatched slices or malformed requests (nothing released).
//   - A store that implements token buckets only fails every call that
//     holds an in-flight request with an error wrapping
//     errors.ErrUnsupported (and ErrInvalidRequest), before touching its
//     state. It never sets a Slot, and its Release, given none, frees
//     nothing and returns nil.
//
// A token-bucket request may settle ([Request].Settle): its Cost is a
// reservation, an estimate charged by Take like any cost, which Settle
// replaces with the actual cost once the work is done (an LLM's tokens, a
// query's rows, a download's bytes: costs known only afterwards). See the
// package documentation ("Reserve, then settle") for the rule:
//
//   - A Take that charges a settling request sets its Decision's
//     Reservation (non-zero, the store's record of the charge; 0 for
//     every other request, for Peek, and for requests the call did not
//     charge).
//   - Settle(ctx, reqs, ds, actual) settles every reqs[i] whose ds[i] has
//     a non-zero Reservation at actual[i] tokens (>= 0): the requests of
//     one Take call and the Decisions it returned, whole or in part (the
//     other entries are ignored), len(ds) == len(reqs) == len(actual). An
//     actual equal to Cost changes nothing and costs no store call. Each
//     Decision with a Reservation is settled at most once: a second
//     Settle of it charges or refunds again (a store cannot tell), so
//     callers settle once, after the work, and a missing Settle keeps the
//     reservation as the cost.
//   - Settle needs a context that outlives the request
//     (context.WithoutCancel). A non-nil error means the outcome is
//     unknown; the caller never retries it (a resend would settle twice).
//     Errors wrap [ErrInvalidRequest] for mismatched slices and, for an
//     entry that would change something (a Reservation and an actual other
//     than Cost), a negative actual, an actual whose charge (actual ×
//     interval) exceeds 2^53-1 ns (about 104 days of the rate), or a
//     malformed, in-flight or non-settling request (nothing settled).
type Limiter interface {
	// Take decides reqs, appends their Decisions to dst and, if every
	// decision is Allowed, charges every bucket; see the Limiter contract.
	Take(ctx context.Context, dst []Decision, reqs []Request) ([]Decision, error)
	// Peek appends the decisions Take would return to dst, charging
	// nothing; see the Limiter contract.
	Peek(ctx context.Context, dst []Decision, reqs []Request) ([]Decision, error)
	// Release frees the in-flight slots that a Take took (the Decisions
	// with a non-zero Slot); see the Limiter contract.
	Release(ctx context.Context, reqs []Request, ds []Decision) error
	// Settle replaces the reservations a Take charged (the Decisions with
	// a non-zero Reservation) by the actual costs; see the Limiter
	// contract.
	Settle(ctx context.Context, reqs []Request, ds []Decision, actual []int64) error
}
