// Package limiter defines what a rate limiter decides and the contract every
// store implements: the [Rate], [Limit], [Request] and [Decision] value types
// and the [Limiter] interface.
//
// # Model
//
// A limit is a token bucket in GCRA form (the generic cell rate algorithm,
// ITU-T I.371, which tracks one "theoretical arrival time" per key instead of
// a token count). A [Limit] has a rate (tokens per period) and a burst: the
// bucket capacity B in tokens, at least 1. A bucket starts full. A request of
// cost c (tokens, at least 1) is admitted when c tokens are in the bucket; a
// rejected request consumes nothing. Over any interval of length t the
// admitted cost is therefore at most B + rate·t. A cost above B can never
// fit: it is rejected with [Decision.Never] set and no retry delay, because a
// Retry-After would be a promise that can never be kept.
//
// Time is integer nanoseconds. The emission interval (the time one token
// takes to come back, see [Rate.Interval]) is rounded up to a whole
// nanosecond, so a limiter never admits more than its configured rate.
//
// # Decision rule
//
// Every [Limiter] decides a request of cost c against its bucket with the
// same rule. With T = [Rate.Interval], tau = Burst·T (the window),
// debt = how far the bucket's theoretical arrival time lies ahead of now (0
// for a full or untracked bucket), charge = c·T, free = DelayAfter·T (tau
// when DelayAfter is 0), and ceiling = tau, lowered to free + MaxDelay when
// MaxDelay is set:
//
//   - c > Burst, or charge > ceiling (a MaxDelay too short for this cost
//     even from a full bucket): never admitted, [Decision.Never].
//   - debt + charge <= ceiling: admitted, the debt becomes debt + charge,
//     and Delay = max(0, debt + charge - free) (nginx limit_req's delay:
//     the request is accounted at once, then waits until it conforms).
//   - otherwise rejected, RetryAfter = debt + charge - ceiling.
//
// # nginx
//
// nginx limit_req counts its burst=N in excess of the request being served:
// nginx burst=N is Burst N+1 here (see
// https://nginx.org/en/docs/http/ngx_http_limit_req_module.html). nginx rates
// "10r/s" and "30r/m" are accepted by [ParseRate].
//
// # Delay and dry run
//
// A [Limit] may admit only DelayAfter tokens of its burst at once: a request
// that digs deeper is admitted and charged, but [Decision.Delay] tells the
// caller to hold it until it conforms to the rate (nginx limit_req without
// nodelay, or with delay=). MaxDelay turns a longer wait into a rejection.
// A [Request] may be DryRun: decided and accounted as if enforced, never
// acted upon by the caller (nginx limit_req_dry_run).
//
// nginx mapping, with nginx's burst=N being Burst N+1 here:
//
//	limit_req ... burst=N            Burst N+1, DelayAfter 1
//	limit_req ... burst=N nodelay    Burst N+1 (DelayAfter 0)
//	limit_req ... burst=N delay=D    Burst N+1, DelayAfter D+1
//	limit_req ... (no burst)         Burst 1
//
// # In-flight limits
//
// A [Limit] with MaxInFlight > 0 caps how many requests of a key run at
// once instead of how fast they arrive (nginx limit_conn; Stripe's
// concurrent-requests limiter). A token bucket keeps refilling while slow
// requests run, so it cannot protect a worker pool or a database from one
// key's slow requests; a cap can. Its rule, with held = the slots the
// key's requests hold now and c the request's Cost:
//
//   - c > MaxInFlight: never admitted, [Decision.Never].
//   - held + c <= MaxInFlight: admitted; Take holds c more slots, until
//     [Limiter.Release].
//   - otherwise rejected, with no RetryAfter: nobody can tell when a
//     running request ends.
//
// A shared store keeps slots as leases ([Limit].Lease) that it renews while
// they are held, so slots of a process that dies are freed within one lease.
// nginx mapping: limit_conn zone N is MaxInFlight N (Cost 1);
// limit_conn_dry_run is a DryRun request.
//
// # Reserve, then settle
//
// Some costs are known only after the work: the tokens a language model
// generated, the rows a query scanned, the bytes a download streamed. A
// settling request ([Request].Settle) reserves its Cost (an estimate) at
// admission, under the decision rule above, and [Limiter.Settle] replaces
// the reservation with the actual cost a when the work is done. With c the
// reserved Cost, T the interval, TAT1 the theoretical arrival time the
// reservation's charge left and debt the bucket's debt now:
//
//   - a > c: the difference is charged unconditionally (the work is done):
//     the debt becomes debt + (a-c)·T, beyond the window if need be, so the
//     bucket may be in debt; later requests are rejected (or delayed) until
//     it is repaid at the rate, and their RetryAfter is exactly the time
//     the repayment takes (Envoy's apply_on_stream_done, gubernator's
//     DRAIN_OVER_LIMIT).
//   - a < c: the difference is refunded, capped: the debt shrinks by
//     r = min((c-a)·T, TAT1 - now), the part of the reservation not yet
//     refilled, and never below 0 (a full bucket). So a refund never
//     fills a bucket past full and never gives back tokens another
//     request's later charge took (the same rule as the refunds across
//     Redis Cluster slots, limiter/redis "Refunds and the bounds they
//     keep"): the bucket is never fuller than had the reservation been a
//     from the start.
//   - a = c, or no Settle at all: the reservation stands as the cost.
//
// While the bucket does not refill to full between a reservation and its
// settle, the tokens it spends are exactly the sum of the settled costs.
//
// # Several limits per request
//
// A [Limiter] decides every [Request] of one call atomically and
// all-or-nothing: if any request is rejected, no bucket is charged and no
// in-flight slot taken. nginx
// behaves the same way across limit_req zones; Envoy's rate-limit service does
// not (a narrow limit's rejection still charges the broad one).
package limiter
