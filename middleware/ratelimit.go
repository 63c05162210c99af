package middleware

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
)

// RateLimitConfig configures [NewRateLimiter].
type RateLimitConfig struct {
	// Limiter decides and stores budgets (limiter/memory, or any limiter.Limiter). Required.
	Limiter limiter.Limiter
	// Policies are evaluated in order; every applicable one must admit the
	// request (all-or-nothing). Names must be unique.
	Policies []Policy
	// Operation names a request's operation. Required; use
	// [RouteOperation] with the root chi router.
	Operation func(*http.Request) string
	// Custom supplies the values of custom key dimensions by name.
	Custom map[identity.Dimension]DimensionFunc
	// Logger receives one line per non-PASSED decision; nil means slog.Default().
	Logger *slog.Logger
}

// RateLimiter applies a set of policies to requests. It is immutable after
// [NewRateLimiter] and safe for concurrent use.
type RateLimiter struct {
	limiter   limiter.Limiter
	policies  []Policy
	operation func(*http.Request) string
	custom    map[identity.Dimension]DimensionFunc
	logger    *slog.Logger
}

// NewRateLimiter validates cfg and returns a RateLimiter. The error lists
// every problem found (errors.Join), each naming its policy. Policies are
// copied; later changes to cfg have no effect.
func NewRateLimiter(cfg RateLimitConfig) (*RateLimiter, error) {
	var errs []error
	if cfg.Limiter == nil {
		errs = append(errs, errors.New("rate limit: no limiter"))
	}
	if cfg.Operation == nil {
		errs = append(errs, errors.New("rate limit: no operation function (use RouteOperation with the root router)"))
	}
	rl := &RateLimiter{limiter: cfg.Limiter, operation: cfg.Operation, logger: cfg.Logger, custom: map[identity.Dimension]DimensionFunc{}}
	for d, f := range cfg.Custom {
		rl.custom[d] = f
	}
	if rl.logger == nil {
		rl.logger = slog.Default()
	}
	names := map[string]bool{}
	for _, p := range cfg.Policies {
		p.Key = append([]identity.Dimension(nil), p.Key...)
		p.Operations = append([]string(nil), p.Operations...)
		if err := p.validate(rl.custom); err != nil {
			errs = append(errs, err)
		}
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("policy %q: defined twice", p.Name))
		}
		names[p.Name] = true
		rl.policies = append(rl.policies, p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rl, nil
}

// Handler is the middleware: it charges every applicable policy and either
// passes the request on or answers it. Use it with chi's r.Use or r.With
// after [ClientAddress] and [Authenticate].
//
// Responses: the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-10) for every policy that decided;
// on rejection the first rejecting policy's status (429 by default) with
// Retry-After in whole seconds rounded up (RFC 9110 §10.2.3), no
// Retry-After when the cost can never fit, Cache-Control: no-store and an
// RFC 9457 problem naming the policy; 401/403 for a missing dimension whose
// policy rejects; 503 with Retry-After when the limiter fails and the policy
// fails closed.
func (rl *RateLimiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev := rl.Check(r, true)
		rl.log(r, &ev)
		setRateLimitFields(w.Header(), &ev)
		if ev.Allowed {
			next.ServeHTTP(w, r)
			return
		}
		writeRejection(w, &ev)
	})
}

// setRateLimitFields writes RateLimit-Policy and RateLimit as RFC 9651 lists
// with one item per policy that reached the limiter, in policy order:
// q = burst (tokens), w = seconds to refill from empty, r = whole tokens
// left, t = seconds until the bucket is full again (both rounded up).
func setRateLimitFields(h http.Header, ev *Evaluation) {
	var pol, cur strings.Builder
	for i := range ev.Policies {
		res := &ev.Policies[i]
		if res.Decision != DecisionPassed && res.Decision != DecisionRejected || res.Key == "" {
			continue
		}
		if pol.Len() > 0 {
			pol.WriteString(", ")
			cur.WriteString(", ")
		}
		name := strconv.Quote(res.Policy) // names are [A-Za-z0-9._-]: a valid sf-string
		fmt.Fprintf(&pol, "%s;q=%d;w=%d", name, res.Limit.Burst, ceilSeconds(res.Limit.Window()))
		remaining, reset := res.Current(ev.Charged)
		fmt.Fprintf(&cur, "%s;r=%d;t=%d", name, remaining, ceilSeconds(reset))
	}
	if pol.Len() > 0 {
		h.Set("RateLimit-Policy", pol.String())
		h.Set("RateLimit", cur.String())
	}
}

func writeRejection(w http.ResponseWriter, ev *Evaluation) {
	var violated []string
	var first, never *PolicyResult
	var retry time.Duration
	storeErr := false
	var missing *PolicyResult
	for i := range ev.Policies {
		res := &ev.Policies[i]
		switch {
		case res.Decision == DecisionError && res.onStore == OnStoreErrorDeny:
			storeErr = true
		case res.Decision == DecisionRejected && res.Missing != "":
			if missing == nil {
				missing = res
			}
		case res.Decision == DecisionRejected:
			violated = append(violated, res.Policy)
			if first == nil {
				first = res
			}
			if res.Never && never == nil {
				never = res
			}
			retry = max(retry, res.RetryAfter)
		}
	}
	switch {
	case missing != nil:
		p := problem{Type: ProblemMissingDimension, Policy: missing.Policy,
			Detail: fmt.Sprintf("policy %s needs a %s: %s", missing.Policy, missing.Missing, missing.SkippedReason)}
		switch {
		case missing.Missing == identity.DimNetwork:
			p.Status = http.StatusInternalServerError
		case !missing.principal:
			p.Status = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", "Bearer")
		default:
			p.Status = http.StatusForbidden
		}
		writeProblem(w, p)
	case storeErr:
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problem{Type: ProblemStoreUnavailable, Status: http.StatusServiceUnavailable,
			Detail: "the rate limit store cannot decide right now"})
	case never != nil:
		writeProblem(w, problem{Type: ProblemNeverSatisfiable, Status: never.status, Policy: never.Policy, ViolatedPolicies: violated,
			Title:  "Request cost exceeds the burst",
			Detail: fmt.Sprintf("policy %s: a request costing %d tokens can never fit a burst of %d", never.Policy, never.Cost, never.Limit.Burst)})
	default:
		secs := max(ceilSeconds(retry), 1)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		writeProblem(w, problem{Type: ProblemRateLimited, Status: first.status, Policy: first.Policy, ViolatedPolicies: violated,
			Title:  "Rate limit exceeded",
			Detail: fmt.Sprintf("policy %s (burst %d, refill %s) has no room for this request; retry in %d s", first.Policy, first.Limit.Burst, first.Limit.Rate, secs)})
	}
}

// ceilSeconds rounds d up to whole seconds (a client told to come back
// early is refused again; redis-cell issue 56).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++ // computed without d+time.Second-1, which overflows near MaxInt64
	}
	return s
}
