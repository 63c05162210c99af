package memory

import "time"

// Clock is the limiter's source of time: Now returns the time elapsed since
// an arbitrary, fixed origin, in nanoseconds. It must be monotonic (never
// jump with the wall clock: go-limiter issue 57) and safe for concurrent
// use. A clock that goes backwards makes decisions stricter, never looser.
// Readings below math.MinInt64+3 ns (some 292 years before the origin) are
// read as that value: the three lowest int64 values mark table cells.
type Clock interface {
	Now() time.Duration
}

// monotonic is the default Clock: the monotonic reading of time.Since.
type monotonic struct{ start time.Time }

func (m monotonic) Now() time.Duration { return time.Since(m.start) }
