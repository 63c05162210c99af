package memory

import (
	"sync/atomic"
	"time"
)

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

// ManualClock is a [Clock] that moves only when told to, for tests (of this
// package and of others that inject time into a [Limiter]). The zero value
// reads 0; so does a new one. Safe for concurrent use.
type ManualClock struct {
	ns atomic.Int64
}

// NewManualClock returns a ManualClock reading 0.
func NewManualClock() *ManualClock { return &ManualClock{} }

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Duration { return time.Duration(c.ns.Load()) }

// Advance moves the clock forward by d (backward if d is negative).
func (c *ManualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Set moves the clock to read d.
func (c *ManualClock) Set(d time.Duration) { c.ns.Store(int64(d)) }
