package middleware

import "time"

// ProbeInterval is probeInterval, for the fallback tests.
const ProbeInterval = probeInterval

// SetLogClock makes rl's decision-log sampler read now instead of the real
// clock, and hand the timers that end its intervals to after (which may run
// them when it likes, or never) instead of time.AfterFunc. Call it before
// the first request.
func SetLogClock(rl *RateLimiter, now func() time.Time, after func(time.Duration, func())) {
	s := rl.state.Load().logs
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now, s.after = now, after
}

// LogSamplerSize returns what rl's decision-log sampler holds: entries
// logged individually, key hashes, and aggregates.
func LogSamplerSize(rl *RateLimiter) (entries, hashes, aggregates int) {
	s := rl.state.Load().logs
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ents), len(s.seen), len(s.aggs)
}
