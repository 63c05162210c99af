package redis_test

import (
	"context"

	"github.com/ratekey/ratekey/limiter"
)

// Release completes uncache's limiter.Limiter: it passes through.
func (u uncache) Release(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	return u.l.Release(ctx, reqs, ds)
}
