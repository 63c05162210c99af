package retryafter

import "time"

// Test-only access to unexported parts of the package, for the external
// tests in package retryafter_test.

// MaxDelay is the saturation value of parse: the largest time.Duration.
const MaxDelay = maxDelay

// Defaults of the zero Transport fields.
const (
	DefaultMaxAttempts = defaultMaxAttempts
	DefaultMaxWait     = defaultMaxWait
	DefaultBackoff     = defaultBackoff
)

// SyntaxError is the error type behind ErrInvalid.
type SyntaxError = syntaxErr

// Parse parses one Retry-After value (see parse).
func Parse(value string, received time.Time) (time.Duration, error) { return parse(value, received) }

// ParseDate parses an HTTP-date (see parseHTTPDate).
func ParseDate(value string, received time.Time) (time.Time, error) {
	return parseHTTPDate(value, received)
}

// Backoff is the wait before retry attempt when a response has no usable
// Retry-After (see backoff).
func Backoff(base time.Duration, attempt int, limit time.Duration) time.Duration {
	return backoff(base, attempt, limit)
}
