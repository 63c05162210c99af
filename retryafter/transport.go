package retryafter

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Defaults for the zero fields of a [Transport].
const (
	// defaultMaxAttempts is the number of attempts (the first request
	// included) when Transport.MaxAttempts is zero or negative.
	defaultMaxAttempts = 3
	// defaultMaxWait is the longest single wait followed when
	// Transport.MaxWait is zero or negative.
	defaultMaxWait = time.Minute
	// defaultBackoff is the first wait when a retryable response carries no
	// usable Retry-After and Transport.Backoff is zero or negative.
	defaultBackoff = time.Second
)

// drainLimit is how many bytes of a discarded response body are read before
// it is closed, so the connection can be reused without reading an
// attacker-sized body (net/http's Client uses 2 KiB for redirects too).
const drainLimit = 2 << 10

// WaitTooLongError is returned by [Transport.RoundTrip] instead of waiting
// when the delay before the next attempt is at least the time left before
// the request context's deadline, or is longer than Transport.MaxWait. It is
// returned at once, without waiting, and the discarded response's body has
// been closed. Test for it with errors.As.
type WaitTooLongError struct {
	// StatusCode is the status of the response that asked for the wait.
	StatusCode int
	// Wait is the delay the response asked for (its Retry-After, or the
	// default backoff when it had none), counted from its receipt, jitter
	// excluded.
	Wait time.Duration
	// Remaining is the most the transport could wait: the time left before
	// the context deadline when Deadline is true, otherwise MaxWait.
	Remaining time.Duration
	// Deadline reports whether the limit was the context deadline (true) or
	// Transport.MaxWait (false).
	Deadline bool
}

// Error names the status, the requested wait and the limit it exceeds.
func (e *WaitTooLongError) Error() string {
	limit := "the transport's MaxWait of " + e.Remaining.String()
	if e.Deadline {
		limit = "the " + e.Remaining.String() + " left before the context deadline"
	}
	return "retryafter: " + strconv.Itoa(e.StatusCode) + " response asks to wait " + e.Wait.String() +
		", not within " + limit
}

// sleep waits for d on a timer, or returns ctx.Err() as soon as ctx is
// done. It returns nil at once when d <= 0 and ctx is not done.
func sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Transport is an [http.RoundTripper] that retries a request, a bounded
// number of times, when the response has a retryable status, waiting the
// delay the response's Retry-After asks for (RFC 9110 §10.2.3).
//
// A request is retried only if all of these hold:
//   - its method is in Methods (GET and HEAD by default: safe, hence
//     idempotent, methods, RFC 9110 §9.2.2; an empty Method is GET);
//   - its body can be replayed: it has none, or it has GetBody (set by
//     http.NewRequest for bytes, strings and bytes.Buffer readers);
//   - the response status is in Statuses (429 Too Many Requests, RFC 6585
//     §4, and 503 Service Unavailable, RFC 9110 §15.6.4, by default);
//   - fewer than MaxAttempts attempts have been made.
//
// Otherwise the response is returned as is, so once attempts run out the
// caller sees the last 429 or 503 with its body. Errors from Base are
// returned unchanged and never retried.
//
// The wait before the next attempt is the response's Retry-After, counted
// from the moment the response headers arrived (see [FromHeader]); an
// HTTP-date in the past means no wait. A response without a usable
// Retry-After (absent, invalid, or several differing lines) waits
// Backoff·2^(n-1) before retry n instead, capped at MaxWait. Then:
//   - if the request's context has a deadline and the wait is not shorter
//     than the time left before it, or the wait is longer than MaxWait,
//     RoundTrip closes the response and returns a [*WaitTooLongError] at
//     once, without waiting: a retry that cannot happen in time is not
//     attempted;
//   - otherwise a jitter, uniform in [0, MaxJitter], is added after the
//     server's delay (never subtracted; halved when needed so the wait stays
//     short of the deadline), the discarded response's body is drained (at
//     most 2 KiB) and closed, and RoundTrip waits, measuring
//     from the receipt time with the monotonic clock. If the context is
//     done during the wait, RoundTrip returns ctx.Err().
//
// Each attempt sends a clone of the request (Request.Clone with the
// request's context); retries get a fresh body from GetBody. The original
// request is never modified.
//
// A Transport is safe for concurrent use by multiple goroutines once
// configured, provided Base and JitterFunc are; its fields must not be
// changed while it is in use. The zero value is ready to use and retries GET
// and HEAD on 429 and 503 through http.DefaultTransport.
type Transport struct {
	// Base sends each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// Methods lists the request methods that may be retried, compared
	// case-sensitively (RFC 9110 §9.1). Empty means GET and HEAD. Add only
	// idempotent methods (PUT, DELETE, OPTIONS, ...): a POST retried after
	// a 503 may be applied twice.
	Methods []string

	// Statuses lists the response status codes that trigger a retry. Empty
	// means 429 and 503.
	Statuses []int

	// MaxAttempts bounds the number of requests sent, the first included;
	// 1 disables retries. Zero or negative means 3.
	MaxAttempts int

	// MaxWait is the longest single wait the transport follows, jitter
	// excluded; a longer Retry-After fails with a *WaitTooLongError. Zero or
	// negative means 1 minute.
	MaxWait time.Duration

	// Backoff is the wait before the first retry when the response has no
	// usable Retry-After; it doubles for each later retry, capped at
	// MaxWait. Zero or negative means 1 second.
	Backoff time.Duration

	// MaxJitter bounds the random delay added after every wait, to spread
	// out clients that were told the same Retry-After. Zero or negative
	// means no jitter.
	MaxJitter time.Duration

	// JitterFunc returns the jitter for one wait, in [0, max]; results
	// outside that range are clamped into it. Nil means uniform random
	// (math/rand/v2).
	JitterFunc func(max time.Duration) time.Duration
}

var (
	defaultMethods  = []string{http.MethodGet, http.MethodHead}
	defaultStatuses = []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}
)

// RoundTrip implements [http.RoundTripper], retrying as described on
// [Transport]. It returns either a response or an error: the response of the
// last attempt, an error from Base, a *WaitTooLongError, the request
// context's error if it is done while waiting, or an error from GetBody.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	maxAttempts := t.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = defaultMaxAttempts
	}
	maxWait := t.MaxWait
	if maxWait <= 0 {
		maxWait = defaultMaxWait
	}
	ctx := req.Context()
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	if !replayable || !t.retriesMethod(req.Method) {
		maxAttempts = 1
	}
	for attempt := 1; ; attempt++ {
		resp, err := send(base, req, attempt)
		if err != nil {
			return nil, err
		}
		received := time.Now()
		if attempt >= maxAttempts || !t.retriesStatus(resp.StatusCode) {
			return resp, nil
		}
		if err := t.waitToRetry(ctx, resp, received, attempt, maxWait); err != nil {
			return nil, err
		}
	}
}

// send sends attempt n of req through base: a clone of req with its
// context, and from the second attempt on a fresh body from GetBody.
func send(base http.RoundTripper, req *http.Request, attempt int) (*http.Response, error) {
	r := req.Clone(req.Context())
	if attempt > 1 && req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("retryafter: replaying the request body: %w", err)
		}
		r.Body = body
	}
	return base.RoundTrip(r)
}

// waitToRetry waits the delay resp (received at received, the answer to
// attempt n) asks for before the next attempt, plus jitter, after
// discarding its body: or returns a *WaitTooLongError at once when the
// wait is longer than maxWait or does not end before ctx's deadline, or
// ctx.Err() when ctx is done.
func (t *Transport) waitToRetry(ctx context.Context, resp *http.Response, received time.Time, attempt int, maxWait time.Duration) error {
	wait, present, perr := FromHeader(resp.Header, received)
	if !present || perr != nil {
		wait = backoff(t.Backoff, attempt, maxWait)
	}
	if err := ctx.Err(); err != nil {
		discard(resp.Body)
		return err
	}
	now := time.Now()
	left := max(wait-max(now.Sub(received), 0), 0) // what is left of the wait
	limit, byDeadline := maxWait, false
	if dl, ok := ctx.Deadline(); ok {
		if rem := dl.Sub(now); rem <= maxWait {
			limit, byDeadline = rem, true
		}
	}
	if (byDeadline && left >= limit) || (!byDeadline && wait > limit) {
		discard(resp.Body)
		return &WaitTooLongError{StatusCode: resp.StatusCode, Wait: wait, Remaining: limit, Deadline: byDeadline}
	}
	j := t.jitter()
	if byDeadline && j >= limit-left {
		j = (limit - left) / 2 // keep the retry short of the deadline
	}
	total := wait + j
	if total < wait {
		total = maxDelay
	}
	discard(resp.Body)
	if d := time.Until(received.Add(total)); d > 0 {
		return sleep(ctx, d)
	}
	return ctx.Err()
}

// CloseIdleConnections calls CloseIdleConnections on Base (or
// http.DefaultTransport) if it has that method, so http.Client's method of
// the same name reaches the underlying transport.
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) retriesMethod(m string) bool {
	if m == "" {
		m = http.MethodGet
	}
	methods := t.Methods
	if len(methods) == 0 {
		methods = defaultMethods
	}
	return slices.Contains(methods, m)
}

func (t *Transport) retriesStatus(code int) bool {
	statuses := t.Statuses
	if len(statuses) == 0 {
		statuses = defaultStatuses
	}
	return slices.Contains(statuses, code)
}

// jitter returns a value in [0, MaxJitter].
func (t *Transport) jitter() time.Duration {
	m := t.MaxJitter
	if m <= 0 {
		return 0
	}
	var j time.Duration
	if t.JitterFunc != nil {
		j = t.JitterFunc(m)
	} else if m == maxDelay {
		j = time.Duration(rand.Int64N(int64(m)))
	} else {
		j = time.Duration(rand.Int64N(int64(m) + 1))
	}
	return min(max(j, 0), m)
}

// backoff is base·2^(attempt-1), capped at limit.
func backoff(base time.Duration, attempt int, limit time.Duration) time.Duration {
	if base <= 0 {
		base = defaultBackoff
	}
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		if d > limit/2 {
			return limit // doubling would pass the cap (and might overflow)
		}
		d *= 2
	}
	return min(d, limit)
}

// discard drains at most drainLimit bytes of a body it will not return,
// then closes it.
func discard(body io.ReadCloser) {
	if body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, body, drainLimit)
	_ = body.Close()
}
