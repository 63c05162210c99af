// Package clocktest holds the manual clock the tests of ratekey's packages
// inject into limiter/memory (its Options.Now) and limiter/redis (its test
// hook), and that the conformance suite of limiter/limitertest runs on.
package clocktest

import (
	"sync/atomic"
	"time"
)

// ManualClock is a clock that moves only when told to: Now returns the
// reading in nanoseconds since an arbitrary origin. The zero value reads 0;
// so does a new one. Safe for concurrent use.
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

// Time returns the reading as a time.Time: the Unix epoch plus the reading
// (any int64 of nanoseconds is one). Its method value is the Now func of
// limiter/memory's Options, limiter/redis's test hook and the conformance
// suite: a store created while the clock reads 0 sees exactly the readings.
func (c *ManualClock) Time() time.Time { return time.Unix(0, c.ns.Load()) }
