package redis

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// errInFlight is the failure of an in-flight cap in this store, until its
// slots are implemented as leases on the server's clock.
var errInFlight = fmt.Errorf("limiter/redis: in-flight policies need part 2 (slots as leases), not implemented yet: %w", errors.ErrUnsupported)

// Release is the [limiter.Limiter] method that frees in-flight slots. This
// store does not implement in-flight caps yet: Take and Peek refuse an
// in-flight request with an error wrapping [limiter.ErrInvalidRequest] and
// errors.ErrUnsupported, so no Decision of this store holds a Slot, and
// Release of Decisions without one frees nothing and returns nil. Given a
// Slot (which this store never gives) it fails with an error wrapping
// errors.ErrUnsupported; mismatched slices wrap
// [limiter.ErrInvalidRequest]. Safe for concurrent use.
func (l *Limiter) Release(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	if err := gcra.ValidateRelease(reqs, ds); err != nil {
		return err
	}
	for i := range ds {
		if ds[i].Slot != 0 {
			return errInFlight
		}
	}
	return nil
}
