package middleware

import (
	"time"

	"github.com/ratekey/ratekey/internal/engine"
)

// ProbeInterval is the fallback's probe interval (engine.ProbeInterval),
// for the fallback tests.
const ProbeInterval = engine.ProbeInterval

// SetLogClock makes rl's decision-log sampler read now instead of the real
// clock, and hand the timers that end its intervals to after (which may run
// them when it likes, or never) instead of time.AfterFunc. Call it before
// the first request.
func SetLogClock(rl *RateLimiter, now func() time.Time, after func(time.Duration, func())) {
	rl.state.Load().eng.Logs.SetClock(now, after)
}

// LogSamplerSize returns what rl's decision-log sampler holds: entries
// logged individually, key hashes, and aggregates.
func LogSamplerSize(rl *RateLimiter) (entries, hashes, aggregates int) {
	return rl.state.Load().eng.Logs.Size()
}
