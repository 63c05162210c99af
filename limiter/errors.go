package limiter

import (
	"errors"
	"time"
)

// ErrInvalidRequest is wrapped by the error a [Limiter] returns when a
// [Request] is malformed: an empty Key, a Cost below 1, or a Limit that
// [Limit.Validate] rejects. It is a programming or configuration error, not
// a decision: nothing is charged and no decision is returned. Test with
// errors.Is.
var ErrInvalidRequest = errors.New("limiter: invalid request")

// ErrCapacity is wrapped by the error a [Limiter] returns when it must start
// tracking a new key but its store is full and no state could be evicted
// (every tracked bucket is still refilling, so evicting one would hand its
// owner a fresh, full bucket). Nothing is charged; the caller applies its
// fail mode (the policy's on_store_error: deny or allow). Test with errors.Is.
// A store that knows when it will have room again returns a [*CapacityError],
// which wraps ErrCapacity.
var ErrCapacity = errors.New("limiter: store full, no state evictable")

// CapacityError is the error (possibly wrapped further) that a bounded store
// returns when it fails with [ErrCapacity] and knows when it can next track
// the new keys: errors.Is(err, ErrCapacity) holds for it, and
//
//	var ce *limiter.CapacityError
//	if errors.As(err, &ce) {
//		wait := ce.RetryAfter
//	}
//
// gives the wait. A store returns a new CapacityError per failed call and
// never changes it, so it may be read from any goroutine.
type CapacityError struct {
	// RetryAfter is the time, in nanoseconds of the store's clock, from
	// the failed call until the store could track the call's new keys:
	// until enough tracked states are full again to be evicted, assuming
	// nobody charges them meanwhile (like [Decision.RetryAfter], it is the
	// earliest time, not a reservation: other new keys may take the room
	// first). It is never earlier than that time as of the call; a store
	// that cannot tell exactly reports a later time and documents it. 0
	// means no wait can be promised: the store had room again by the time
	// the error was made, or the call needs more room than the store will
	// ever have. An HTTP Retry-After rounds it up to whole seconds (RFC
	// 9110 §10.2.3).
	RetryAfter time.Duration
}

// Error returns the text of [ErrCapacity] followed by the wait.
func (e *CapacityError) Error() string {
	return ErrCapacity.Error() + ": retry after " + e.RetryAfter.String()
}

// Unwrap returns [ErrCapacity], so that errors.Is(err, ErrCapacity) holds.
func (e *CapacityError) Unwrap() error { return ErrCapacity }
