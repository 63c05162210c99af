package limiter

import "errors"

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
var ErrCapacity = errors.New("limiter: store full, no state evictable")
