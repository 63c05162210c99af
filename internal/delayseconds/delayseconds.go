// Package delayseconds rounds durations to the whole seconds of HTTP's
// delay-seconds (RFC 9110 §10.2.3: Retry-After; the RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-10), always up: a client told to
// come back early is refused again (redis-cell issue 56).
package delayseconds

import "time"

// Ceil rounds d up to whole seconds; 0 for d <= 0.
func Ceil(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++ // computed without d+time.Second-1, which overflows near MaxInt64
	}
	return s
}
