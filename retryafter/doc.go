// Package retryafter is the client side of ratekey's 429 and 503 answers: a
// strict parser for the Retry-After field ([FromHeader]) and a bounded retrying [http.RoundTripper] ([Transport]) that
// honours it.
//
// # Parsing (RFC 9110 §10.2.3 and §5.6.7)
//
//	Retry-After   = HTTP-date / delay-seconds
//	delay-seconds = 1*DIGIT
//	HTTP-date     = IMF-fixdate / obs-date      ; obs-date = rfc850-date / asctime-date
//
// delay-seconds is a non-negative decimal integer: no sign, fraction,
// exponent or inner space. Leading zeros are digits like any other, so "007"
// is seven seconds. A value too large for a [time.Duration] saturates to the
// largest Duration, math.MaxInt64 nanoseconds (as RFC 9111 §1.2.2 has caches do for delta-seconds) instead of
// failing or wrapping around.
//
// An HTTP-date is accepted in exactly the three forms of RFC 9110 §5.6.7, in
// the case and spacing of its grammar:
//
//	Sun, 06 Nov 1994 08:49:37 GMT    ; IMF-fixdate
//	Sunday, 06-Nov-94 08:49:37 GMT   ; obsolete RFC 850 form
//	Sun Nov  6 08:49:37 1994         ; obsolete asctime form (UTC)
//
// The wait is the date minus the time the response was received; a date in
// the past means zero. Such a wait is only as good as the agreement between
// the client's wall clock and the server's; delay-seconds does not depend on
// either clock. A two-digit RFC 850 year is placed in the century that
// puts the timestamp no more than 50 years after the receipt time (§5.6.7);
// net/http's ParseTime instead fixes the pivot at 1969, so it is not used.
// ParseTime is also more lenient than the grammar (any-case names, one-digit
// hours, a fractional second, an unchecked weekday) and refuses the leap
// second 60 that the grammar allows; this package follows the grammar.
//
// Deliberate decisions, each pinned by a test:
//   - Leading and trailing spaces and tabs are trimmed first: they are not
//     part of a field value (RFC 9110 §5.5) and net/http already strips them.
//   - Day and month names are case-sensitive (%s"..." in the grammar), and
//     "GMT" is required where the grammar has it.
//   - A weekday that contradicts the date makes the value invalid: RFC 9110
//     gives these fields RFC 5322 §3.3 semantics, where the day of the week
//     MUST be the one the date implies, and a client cannot tell which half
//     of a contradictory date is wrong.
//   - Second 60 (a leap second, allowed by the grammar) is accepted and
//     counts as second 0 of the next minute.
//   - A field with several differing lines is invalid ([FromHeader]):
//     Retry-After is a singleton, and a date contains a comma, so lines
//     cannot be split or merged safely.
//
// Invalid input is reported as an error wrapping [ErrInvalid]; the error
// quotes at most the first 64 bytes of the value, escaped.
//
// # Retrying
//
// [Transport] resends a request whose response has a retryable status (429,
// RFC 6585 §4, and 503, RFC 9110 §15.6.4, by default) after the delay the
// server asked for, only for idempotent methods (GET and HEAD by default, RFC
// 9110 §9.2.2) whose body can be replayed, for a bounded number of attempts.
// It never starts a wait that would outlast the request's context deadline:
// it fails at once with a [*WaitTooLongError] instead. Jitter is only ever
// added to the server's delay, never subtracted from it.
package retryafter
