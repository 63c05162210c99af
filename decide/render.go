package decide

import (
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/ratekey/ratekey/internal/delayseconds"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/policy"
)

// One policy outcome, rendered. Each value derived from a PolicyResult
// (its fail mode, its Retry-After, its error text, its delay, how its
// decision ranks) is computed here, once; the debug JSON (MarshalJSON),
// the decision log line (AppendLogAttrs), the decision core's metrics and
// summary, and every transport's refusal (middleware's problem bodies,
// grpclimit's status) read it from here.

// outcomeClientTimeout is the outcome of a request whose context ended
// before the limiter answered or during its delay: the Record's "outcome"
// and the log line's.
const outcomeClientTimeout = "client_timeout"

// failModeDryRun is the fail mode of a dry-run policy's ERROR: it never
// fails a request.
const failModeDryRun = "dry_run"

// FailMode returns the path a store error took: "deny" (the request is
// refused: 503 over HTTP), "allow" (let through, and counted) or "dry_run"
// (a dry-run policy never fails a request); "" unless Decision is ERROR,
// and for an ERROR of an abandoned request (no fail mode applies). A
// policy whose OnStoreError is local reaches ERROR only when its fallback
// failed too (a full local store): "deny". The strings are the debug
// JSON's "fail_mode".
func (res *PolicyResult) FailMode() string {
	switch {
	case res.Decision != DecisionError || res.Abandoned:
		return ""
	case res.DryRun:
		return failModeDryRun
	case res.OnStoreError == policy.OnStoreErrorLocal:
		// Its fallback failed too (a full local store): fail closed.
		return string(policy.OnStoreErrorDeny)
	}
	return string(res.OnStoreError)
}

// RetryAfterSeconds returns the Retry-After, in whole seconds rounded up
// (at least 1; RFC 9110 §10.2.3), of the answer the decision calls for:
// for REJECTED and REJECTED_DRY_RUN of a limit, when the cost would fit
// (of an in-flight cap, when the policy sets RetryAfter); for an ERROR
// failing closed, when a full store can next track the key
// ([limiter.CapacityError]), else 1 (a store that is down says nothing of
// when it is back). ok is false otherwise: passed, failing open, missing
// a dimension, an invalid cost, or never satisfiable (a promise that could
// never be kept); secs is then 0. The debug JSON's "retry_after_seconds".
func (res *PolicyResult) RetryAfterSeconds() (secs int64, ok bool) {
	rejected := (res.Decision == DecisionRejected || res.Decision == DecisionRejectedDryRun) && res.Missing == "" && !res.Never && !res.InvalidCost
	switch {
	case rejected && res.Limit.MaxInFlight != 0:
		// No store can tell when a running request ends: only the
		// policy's own retry_after (RetryAfter) is a Retry-After.
		if res.RetryAfter <= 0 {
			return 0, false
		}
		return max(delayseconds.Ceil(res.RetryAfter), 1), true
	case rejected:
		return max(delayseconds.Ceil(res.RetryAfter), 1), true
	case res.FailMode() == string(policy.OnStoreErrorDeny):
		return storeRetryAfter(res.Err), true
	}
	return 0, false
}

// storeRetryAfter returns the Retry-After, in whole seconds, of a 503 for
// the store error err: when a full store can next track the key (a
// [limiter.CapacityError]), rounded up, or 1 for any other error (a
// store that is down says nothing of when it is back).
func storeRetryAfter(err error) int64 {
	var ce *limiter.CapacityError
	if errors.As(err, &ce) {
		return max(delayseconds.Ceil(ce.RetryAfter), 1)
	}
	return 1
}

// errorText renders the limiter error behind ERROR; "" when there is none.
// Limiter errors carry keys at most (secret-free by construction), never
// credentials.
func (res *PolicyResult) errorText() string {
	switch {
	case res.Err == nil:
		return ""
	case errors.Is(res.Err, limiter.ErrCapacity):
		return "store full: no state could be evicted"
	}
	return res.Err.Error()
}

// delaySeconds returns how long the request waits (DELAYED) or would wait
// (DELAYED_DRY_RUN) under this policy, in seconds; ok is false otherwise.
func (res *PolicyResult) delaySeconds() (secs float64, ok bool) {
	return res.Delay.Seconds(), res.Delay > 0
}

// remaining returns the whole tokens left, never below 0.
func (res *PolicyResult) remaining() int64 { return max(res.Remaining, 0) }

// AppendLogAttrs appends to attrs what ratekey's decision log line
// ("ratekey decision") says of res beyond its policy, decision, key,
// operation, cost, remaining tokens, store and client: what the policy is
// beyond a bucket (dry_run, reserved and settled, override, class and
// adaptive_limit), then why it decided as it did (skipped_reason; error
// and fail_mode; retry_after_seconds; max_delay_seconds; delay_seconds;
// outcome "client_timeout" when abandoned, the evaluation's
// [Evaluation.Abandoned]). The names are those of the debug JSON and a
// public contract; no value holds a credential. Safe for concurrent use.
func (res *PolicyResult) AppendLogAttrs(attrs []slog.Attr, abandoned bool) []slog.Attr {
	if res.DryRun {
		attrs = append(attrs, slog.Bool("dry_run", true))
	}
	if res.Settle {
		attrs = append(attrs, slog.Int64("reserved", res.Cost))
		if res.Returned {
			attrs = append(attrs, slog.Int64("settled", res.Settled))
		}
	}
	if res.Override != "" {
		attrs = append(attrs, slog.String("override", res.Override))
	}
	if res.Class != "" {
		attrs = append(attrs, slog.String("class", string(res.Class)), slog.Int64("adaptive_limit", res.Limit.MaxInFlight))
	}
	return res.outcomeAttrs(attrs, abandoned)
}

// outcomeAttrs appends why res decided as it did: the skipped reason, the
// error and fail mode, the Retry-After (as in the debug JSON and the
// response), the delay, or the client's timeout (abandoned: the request
// ended first).
func (res *PolicyResult) outcomeAttrs(attrs []slog.Attr, abandoned bool) []slog.Attr {
	retry, hasRetry := res.RetryAfterSeconds()
	switch delay, delayed := res.delaySeconds(); {
	case res.SkippedReason != "":
		attrs = append(attrs, slog.String("skipped_reason", res.SkippedReason))
	case res.InvalidCost:
		attrs = append(attrs, slog.String("error", res.errorText()))
	case res.Err != nil && abandoned:
		// No fail mode applies: the request ended, the store did not fail.
		attrs = append(attrs, slog.String("error", "the request ended before the limiter answered"), slog.String("outcome", outcomeClientTimeout))
	case res.Err != nil:
		attrs = append(attrs, slog.String("error", res.errorText()), slog.String("fail_mode", res.FailMode()))
		if hasRetry {
			attrs = append(attrs, slog.Int64("retry_after_seconds", retry)) // failing closed: the 503's
		}
	case res.Never && res.Cost <= res.Limit.Burst:
		attrs = append(attrs, slog.String("error", "cost exceeds what max_delay allows"), slog.Float64("max_delay_seconds", res.Limit.MaxDelay.Seconds()))
	case res.Never:
		attrs = append(attrs, slog.String("error", "cost exceeds burst"))
	case hasRetry: // REJECTED or REJECTED_DRY_RUN by the limit
		attrs = append(attrs, slog.Int64("retry_after_seconds", retry))
		if res.overMaxDelay() {
			attrs = append(attrs, slog.String("error", "the wait would exceed max_delay"), slog.Float64("max_delay_seconds", res.Limit.MaxDelay.Seconds()))
		}
	case delayed:
		attrs = append(attrs, slog.Float64("delay_seconds", delay))
		if res.Decision == DecisionDelayed && abandoned {
			attrs = append(attrs, slog.String("outcome", outcomeClientTimeout))
		}
	}
	return attrs
}

// policyJSON is a PolicyResult as the Record's JSON (the debug endpoint's
// answer) and its HTML page show it. Field names and order are a public
// contract.
type policyJSON struct {
	Name              string        `json:"name"`
	Key               *string       `json:"key"` // null when a dimension is missing
	Decision          Decision      `json:"decision"`
	DryRun            bool          `json:"dry_run"`
	Cost              int64         `json:"cost"`
	Rate              *string       `json:"rate"`  // "5/s"; null for an in-flight policy
	Burst             *int64        `json:"burst"` // null for an in-flight policy
	Remaining         int64         `json:"remaining"`
	RetryAfterSeconds *int64        `json:"retry_after_seconds"`
	Store             string        `json:"store"`
	FailMode          *string       `json:"fail_mode"`
	DelayAfter        *int64        `json:"delay_after"` // null for an in-flight policy
	DelaySeconds      *float64      `json:"delay_seconds"`
	SkippedReason     *string       `json:"skipped_reason"`
	Error             *string       `json:"error"`
	Override          *string       `json:"override"`       // null when the policy's own limit applied
	MaxInFlight       *int64        `json:"max_in_flight"`  // null for a token bucket
	InFlight          *int64        `json:"in_flight"`      // null for a token bucket
	Cached            bool          `json:"cached"`         // answered by the store's local deny cache
	Slot              *int          `json:"slot"`           // the Redis Cluster slot that decided; null for other stores
	Fallback          bool          `json:"fallback"`       // decided on the local fallback while the store could not
	Prefetched        bool          `json:"prefetched"`     // decided from tokens the process prefetched from Redis
	Reserved          *int64        `json:"reserved"`       // a settling policy's reservation (its cost); null otherwise
	Settled           *int64        `json:"settled"`        // what it settled at once the handler returned; null otherwise
	AdaptiveLimit     *int64        `json:"adaptive_limit"` // an adaptive cap's limit in force; null for other policies
	Class             *policy.Class `json:"class"`          // the request's class under an adaptive cap; null for other policies
}

// held returns the slots of an in-flight policy's key held now: InFlight,
// less this request's cost when it was admitted but not charged (a Check
// that charges nothing holds nothing). A store that leaves InFlight 0 (one
// outside this module) shows what its free slots tell, MaxInFlight less
// Current's, as before InFlight existed.
func (res *PolicyResult) held() int64 {
	h := res.InFlight
	if res.admitted() && !res.Charged {
		h -= res.Cost
	}
	free, _ := res.Current()
	return max(h, res.Limit.MaxInFlight-free, 0)
}

// view renders res for the Record's JSON and HTML.
func (res *PolicyResult) view() policyJSON {
	v := policyJSON{Name: res.Policy, Decision: res.Decision, DryRun: res.DryRun, Cost: res.Cost,
		Remaining: res.remaining(), Store: res.Store}
	if m := res.Limit.MaxInFlight; m != 0 {
		held := res.held()
		v.MaxInFlight, v.InFlight = &m, &held
	} else {
		rate, burst, da := res.Limit.Rate.String(), res.Limit.Burst, res.Limit.DelayAfter
		if da == 0 { // the whole burst, as nginx limit_req's default
			da = burst
		}
		v.Rate, v.Burst, v.DelayAfter = &rate, &burst, &da
	}
	if res.Key != "" {
		v.Key = &res.Key
	}
	if s, ok := res.RetryAfterSeconds(); ok {
		v.RetryAfterSeconds = &s
	}
	if m := res.FailMode(); m != "" {
		v.FailMode = &m
	}
	if s, ok := res.delaySeconds(); ok {
		v.DelaySeconds = &s
	}
	if res.SkippedReason != "" {
		v.SkippedReason = &res.SkippedReason
	}
	if e := res.errorText(); e != "" {
		v.Error = &e
	}
	if res.Override != "" {
		v.Override = &res.Override
	}
	v.Cached = res.Cached
	if res.HashSlot > 0 {
		slot := res.HashSlot - 1
		v.Slot = &slot
	}
	v.Fallback = res.Fallback
	v.Prefetched = res.Prefetched
	if res.Settle {
		v.Reserved = &res.Cost
		if res.Returned {
			v.Settled = &res.Settled
		}
	}
	if res.Limit.MaxInFlightCeiling != 0 {
		v.AdaptiveLimit, v.Class = v.MaxInFlight, &res.Class
	}
	return v
}

// MarshalJSON encodes res as the debug endpoint shows a policy (and
// middleware's Record holds it): {"name", "key", "decision", "dry_run", "cost",
// "rate", "burst", "remaining", "retry_after_seconds", "store",
// "fail_mode", "delay_after", "delay_seconds", "skipped_reason",
// "error", "override", "max_in_flight", "in_flight", "cached", "slot",
// "fallback", "prefetched", "reserved", "settled", "adaptive_limit", "class"},
// in that order. For a
// token bucket, max_in_flight and in_flight are null; for an in-flight
// policy, rate, burst and delay_after are null, max_in_flight is its cap,
// in_flight the key's slots held now (this request's included when it
// holds them; more than max_in_flight when the cap was lowered while they
// were held),
// remaining the free slots, and retry_after_seconds its RetryAfter when
// rejected (null when it sets none). cost, rate, burst and delay_after
// are the limit that applied: the policy's, or the override's named by
// override ("tenant=acme", "plan=pro", "account=alice",
// "tenant=acme|account=alice", "function"; null
// when none matched; see [policy.Override]). Durations are in seconds (Retry-After in whole
// seconds rounded up, at least 1; null when no Retry-After applies);
// fail_mode is "deny", "allow" or "dry_run" for ERROR, null otherwise;
// key, skipped_reason and error are null when empty; cached is true for a
// rejection the store answered from its local deny cache (limiter/redis),
// without a round trip; slot is the Redis Cluster hash slot whose master
// decided, null for the memory store and a single Redis server; fallback
// is true for a decision taken on the local fallback store while the
// store could not decide (on_store_error local; store then names the
// fallback's, and rate, burst and max_in_flight are its share);
// prefetched is true for a decision taken from tokens the process had
// prefetched from Redis (limiter/redis Prefetch), without its own round
// trip; reserved is a settling policy's reservation ([policy.Policy].Settle: its
// cost, charged at admission) and settled the tokens the request finally
// spent under it once its handler returned (the cost reported, at most
// max_cost, or the reservation when nothing was), both null for a policy
// that does not settle, and settled null until the handler has returned
// (the debug endpoint's would-be decisions, a request not admitted);
// adaptive_limit is, for an adaptive cap (max_in_flight: auto), the
// limit it decided against (max_in_flight too), and class the request's
// class under it ("critical" or "sheddable"), both null for other
// policies; an adaptive cap's store is "process" (the process decides it,
// no store does). The names and values are a public contract; no field
// holds a credential.
func (res PolicyResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(res.view())
}
