package middleware

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/trustedproxy"
)

// Decision is the outcome of one policy for one request, in nginx's
// limit_req vocabulary ($limit_req_status) plus ratekey's own outcomes.
type Decision string

const (
	// DecisionPassed: the bucket had room; the request spends its cost.
	DecisionPassed Decision = "PASSED"
	// DecisionRejected: no room now (or never, or a required dimension is missing).
	DecisionRejected Decision = "REJECTED"
	// DecisionSkipped: the request lacks a key dimension and the policy's
	// on_missing is skip; SkippedReason says which.
	DecisionSkipped Decision = "SKIPPED"
	// DecisionError: the limiter could not decide; the policy's
	// on_store_error chose the outcome.
	DecisionError Decision = "ERROR"
)

// DimensionFunc supplies the value of a custom key dimension for a request,
// and false when the request has none. It must derive the value from
// verified or server-side data only (never a header the client writes
// freely), and must never return a secret. It must be safe for concurrent use.
type DimensionFunc func(r *http.Request) (value string, ok bool)

// PolicyResult is one policy's decision for one request. It holds the
// encoded key (secret-free by construction) but never a credential.
type PolicyResult struct {
	// Policy is the policy's name.
	Policy string
	// Key is the encoded identity.Key, or "" when a dimension was missing.
	Key string
	// Decision is the outcome.
	Decision Decision
	// Cost is the tokens the request spends (or would spend) under this policy.
	Cost int64
	// Limit is the policy's rate and burst.
	Limit limiter.Limit
	// Remaining is the whole tokens left after this request (after charging
	// when it was charged).
	Remaining int64
	// RetryAfter is how long until the cost would fit, when rejected; 0 otherwise.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// Never is true when the cost exceeds the burst: no wait helps.
	Never bool
	// Missing is the absent dimension when the key could not be built.
	Missing identity.Dimension
	// SkippedReason explains SKIPPED and missing-dimension rejections.
	SkippedReason string
	// Err is the limiter error behind DecisionError.
	Err error

	status    int
	onStore   OnStoreError
	principal bool // a principal (not anonymous) was present
}

// Evaluation is the combined outcome of every policy that applies to one request.
type Evaluation struct {
	// Operation is the request's operation ("GET /v1/reports/{id}").
	Operation string
	// Policies holds one result per applicable policy, in configuration order.
	Policies []PolicyResult
	// Allowed is true when the request may proceed.
	Allowed bool
	// Charged is true when the request's cost was spent (Check with charge
	// true and every policy admitted it). When false, the Remaining and
	// ResetAfter of PASSED results still describe the state as if charged
	// (the would-be decision); [PolicyResult.Current] gives the state now.
	Charged bool
}

// Check evaluates every policy that applies to r. With charge true, the
// request's cost is spent all-or-nothing (if any policy rejects, none is
// charged); with charge false nothing is spent (the debug endpoint's
// would-be decision). Check reads the client address and principal that
// [ClientAddress] and [Authenticate] stored in r's context. Safe for
// concurrent use.
func (rl *RateLimiter) Check(r *http.Request, charge bool) Evaluation {
	op := rl.operation(r)
	ev := Evaluation{Operation: op, Allowed: true}
	principal, hasPrincipal := PrincipalFrom(r.Context())
	client, hasClient := ClientFrom(r.Context())
	authenticated := hasPrincipal && principal.Method != identity.MethodAnonymous

	var reqs []limiter.Request
	var idx []int // index into ev.Policies for each request
	missingReject := false
	for i := range rl.policies {
		p := &rl.policies[i]
		if !p.appliesTo(op) {
			continue
		}
		res := PolicyResult{Policy: p.Name, Cost: p.Cost, Limit: p.Limit, status: p.Status, onStore: p.OnStoreError, principal: authenticated}
		key := identity.Key{Policy: p.Name, Parts: make([]identity.Part, 0, len(p.Key))}
		for _, d := range p.Key {
			v, ok := rl.dimension(r, d, op, principal, client, hasClient)
			if !ok {
				res.Missing = d
				break
			}
			key.Parts = append(key.Parts, identity.Part{Dimension: d, Value: v})
		}
		if res.Missing != "" {
			res.SkippedReason = missingReason(res.Missing, authenticated)
			if p.OnMissing == OnMissingSkip {
				res.Decision = DecisionSkipped
			} else {
				res.Decision = DecisionRejected
				missingReject = true
			}
			ev.Policies = append(ev.Policies, res)
			continue
		}
		res.Key = key.String()
		ev.Policies = append(ev.Policies, res)
		idx = append(idx, len(ev.Policies)-1)
		reqs = append(reqs, limiter.Request{Key: res.Key, Limit: p.Limit, Cost: p.Cost})
	}
	if missingReject {
		// The request is refused anyway: charge nothing, but still say what
		// the other policies would decide.
		charge = false
	}
	if len(reqs) > 0 {
		var decs []limiter.Decision
		var err error
		if charge {
			decs, err = rl.limiter.Take(r.Context(), nil, reqs)
		} else {
			decs, err = rl.limiter.Peek(r.Context(), nil, reqs)
		}
		// Take charges iff every decision is Allowed; a rejection below
		// clears this again.
		ev.Charged = charge && err == nil
		for j, i := range idx {
			res := &ev.Policies[i]
			if err != nil {
				res.Decision = DecisionError
				res.Err = err
				continue
			}
			d := decs[j]
			res.Remaining, res.RetryAfter, res.ResetAfter, res.Never = d.Remaining, d.RetryAfter, d.ResetAfter, d.Never
			if d.Allowed {
				res.Decision = DecisionPassed
			} else {
				res.Decision = DecisionRejected
			}
		}
	}
	for i := range ev.Policies {
		res := &ev.Policies[i]
		switch res.Decision {
		case DecisionRejected:
			ev.Allowed = false
			ev.Charged = false
		case DecisionError:
			if res.onStore == OnStoreErrorDeny {
				ev.Allowed = false
			}
		}
	}
	return ev
}

// Current returns the whole tokens left and the time until the bucket is
// full as they stand, given whether the request's cost was charged: a PASSED
// result of an uncharged request reports the would-be state after charging,
// so the cost is added back.
func (res *PolicyResult) Current(charged bool) (remaining int64, resetAfter time.Duration) {
	remaining, resetAfter = res.Remaining, res.ResetAfter
	if res.Decision == DecisionPassed && !charged {
		remaining += res.Cost
		resetAfter -= time.Duration(res.Cost) * res.Limit.Rate.Interval()
	}
	return min(max(remaining, 0), res.Limit.Burst), max(resetAfter, 0)
}

// dimension returns the value of dimension d for the request, and false when
// the request does not carry it. Only verified principal fields and the
// resolved client network are used; an empty value counts as missing (p is
// the zero Principal when no principal was established, so its fields are).
func (rl *RateLimiter) dimension(r *http.Request, d identity.Dimension, op string, p identity.Principal, c trustedproxy.Result, hasC bool) (string, bool) {
	var v string
	switch d {
	case identity.DimOperation:
		v = op
	case identity.DimNetwork:
		if !hasC || !c.Network.IsValid() {
			return "", false
		}
		v = c.Network.String()
	case identity.DimTenant:
		v = p.Tenant
	case identity.DimAccount:
		v = p.Account
	case identity.DimCredential:
		v = p.CredentialID
	default:
		f := rl.custom[d]
		if f == nil {
			return "", false
		}
		var ok bool
		if v, ok = f(r); !ok {
			return "", false
		}
	}
	return v, v != ""
}

func missingReason(d identity.Dimension, authenticated bool) string {
	switch d {
	case identity.DimNetwork:
		return "no client address was resolved"
	case identity.DimTenant, identity.DimAccount, identity.DimCredential:
		if !authenticated {
			return fmt.Sprintf("no verified principal carries a %s", d)
		}
		return fmt.Sprintf("the verified principal carries no %s", d)
	}
	return fmt.Sprintf("the request carries no %s", d)
}

func (rl *RateLimiter) log(r *http.Request, ev *Evaluation) {
	for i := range ev.Policies {
		res := &ev.Policies[i]
		if res.Decision != DecisionRejected && res.Decision != DecisionError {
			continue // one line per rejected or errored decision only
		}
		level := slog.LevelInfo
		switch {
		case res.Decision == DecisionError:
			level = slog.LevelWarn
		case res.Missing == identity.DimNetwork:
			level = slog.LevelError // ClientAddress is not mounted in front: a wiring bug
		}
		attrs := []slog.Attr{
			slog.String("policy", res.Policy),
			slog.String("decision", string(res.Decision)),
			slog.String("key", res.Key),
			slog.String("operation", ev.Operation),
		}
		if c, ok := ClientFrom(r.Context()); ok && c.Network.IsValid() {
			attrs = append(attrs, slog.String("network", c.Network.String()))
		}
		switch {
		case res.SkippedReason != "":
			attrs = append(attrs, slog.String("reason", res.SkippedReason))
		case res.Err != nil:
			attrs = append(attrs, slog.String("reason", "limiter error"), slog.String("error", safeError(res.Err)))
		case res.Never:
			attrs = append(attrs, slog.String("reason", "cost exceeds burst"))
		case res.Decision == DecisionRejected:
			attrs = append(attrs, slog.Float64("retry_after_seconds", res.RetryAfter.Seconds()))
		}
		rl.logger.LogAttrs(r.Context(), level, "ratekey decision", attrs...)
	}
}

// safeError renders a limiter error for logs. Limiter errors carry keys at
// most (secret-free by construction), never credentials.
func safeError(err error) string {
	if errors.Is(err, limiter.ErrCapacity) {
		return "store full: no state could be evicted"
	}
	return err.Error()
}
