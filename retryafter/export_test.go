package retryafter

import "time"

// Test-only access to unexported parts of the package, for the external
// tests in package retryafter_test.

// MaxDelay is the saturation value of Parse: the largest time.Duration.
const MaxDelay = maxDelay

// Defaults of the zero Transport fields.
const (
	DefaultMaxAttempts = defaultMaxAttempts
	DefaultMaxWait     = defaultMaxWait
	DefaultBackoff     = defaultBackoff
)

// SyntaxError is the error type behind ErrInvalid.
type SyntaxError = syntaxErr

// SystemClock is the clock a Transport uses by default.
type SystemClock = systemClock

// Clock is the time source a test injects with WithClock.
type Clock = clock

// Parse parses one Retry-After value (see parse).
func Parse(value string, received time.Time) (time.Duration, error) { return parse(value, received) }

// ParseDate parses an HTTP-date (see parseHTTPDate).
func ParseDate(value string, received time.Time) (time.Time, error) {
	return parseHTTPDate(value, received)
}

// WithClock sets t's clock and returns t.
func WithClock(t *Transport, c Clock) *Transport {
	t.clock = c
	return t
}
