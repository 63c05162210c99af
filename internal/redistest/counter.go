package redistest

import (
	"context"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// Calls is a go-redis hook that counts the round trips a client makes: each
// command and each pipeline is one. Add it with client.AddHook; N reads the
// count. Safe for concurrent use.
type Calls struct{ n atomic.Int64 }

// N returns the round trips counted so far.
func (c *Calls) N() int64 { return c.n.Load() }

// DialHook implements goredis.Hook: dials are not counted.
func (*Calls) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook: one command, one round trip.
func (c *Calls) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook: one pipeline, one round
// trip.
func (c *Calls) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}
