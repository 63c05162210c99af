package limiter

import (
	"context"
	"errors"
	"fmt"
)

// Limiter decides requests ([Request]) against token buckets held in a
// store (process memory, Redis, ...).
//
// Contract, which every implementation keeps and its tests check:
//
//   - Safe for concurrent use by multiple goroutines.
//   - Take decides all reqs in one atomic step, all-or-nothing: a Decision is
//     computed for every request; the bucket of every request is charged
//     only if ALL of them are Allowed; if any is rejected (including Never),
//     no bucket is charged. No other call observes a partial charge.
//   - Requests are decided in order within that step: when two requests
//     name the same Key, the second sees the bucket as the first leaves it
//     (charged if the first is Allowed).
//   - Peek computes exactly the Decisions Take would return, in the same
//     way, and charges nothing, creates no state and evicts nothing. The
//     debug endpoint uses it to show would-be decisions. Where Take would
//     fail with [ErrCapacity], Peek does too.
//   - On success the returned slice has len(reqs) Decisions in request order
//     (an empty, non-nil slice for no requests).
//   - A non-nil error means the outcome is UNKNOWN: never read it as
//     "allowed" (nor as an empty bucket). The returned slice is nil. The
//     caller applies its fail mode (on_store_error). Errors wrap
//     [ErrInvalidRequest] for malformed requests (nothing charged),
//     [ErrCapacity] when a bounded store cannot track a new key (nothing
//     charged), ctx.Err() when ctx is done before the decision is made, or a
//     store-specific error (after which a remote store may or may not have
//     charged: the outcome is unknown).
//
// Take and Peek validate every request with [ValidateRequests] before
// looking at the store.
type Limiter interface {
	// Take decides reqs and, if every decision is Allowed, charges every
	// bucket; see the Limiter contract.
	Take(ctx context.Context, reqs []Request) ([]Decision, error)
	// Peek returns the decisions Take would return, charging nothing; see
	// the Limiter contract.
	Peek(ctx context.Context, reqs []Request) ([]Decision, error)
}

var (
	errEmptyKey = errors.New("empty key")
	errCost     = errors.New("cost must be at least 1")
)

// ValidateRequests checks every request: a non-empty Key, Cost >= 1 and a
// Limit that passes [Limit.Validate]. The error for the first bad request
// wraps [ErrInvalidRequest] and names its index (not its key). It is the
// check every [Limiter] implementation runs first.
func ValidateRequests(reqs []Request) error {
	for i := range reqs {
		if err := reqs[i].validate(); err != nil {
			return fmt.Errorf("%w: request %d: %w", ErrInvalidRequest, i, err)
		}
	}
	return nil
}
