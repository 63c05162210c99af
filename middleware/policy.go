package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limiter"
)

// OnMissing is what a policy does with a request that lacks one of its key's
// dimensions (no principal for an account policy, no credential id for a
// credential policy). There is deliberately no silent choice: nginx skips
// empty keys and Kong falls back to the IP without saying so.
type OnMissing string

const (
	// OnMissingReject refuses the request (the default): 401 when there is no
	// principal at all, 403 when the principal lacks the dimension.
	OnMissingReject OnMissing = "reject"
	// OnMissingSkip lets the request through unlimited by this policy; the
	// decision is recorded as SKIPPED with the reason.
	OnMissingSkip OnMissing = "skip"
)

// OnStoreError is what a policy does when the limiter cannot decide (store
// unreachable, full, timed out). An error is never read as "allowed" by
// accident: the choice is the policy's.
type OnStoreError string

const (
	// OnStoreErrorDeny fails closed with 503 (default). Its Retry-After is,
	// for a full store ([limiter.CapacityError]), the time until the store
	// can next take the key, rounded up to whole seconds; 1 for any other
	// store error.
	OnStoreErrorDeny OnStoreError = "deny"
	// OnStoreErrorAllow fails open: the request proceeds and the error is logged.
	OnStoreErrorAllow OnStoreError = "allow"
)

// Policy is one named limit: which dimensions form its key, how fast its
// buckets refill, and what it does in the corner cases.
type Policy struct {
	// Name identifies the policy in keys, headers, logs and problem bodies.
	// Letters, digits, '.', '_' and '-' only, at most 64 bytes.
	Name string
	// Key lists the dimensions of the key in order, e.g. tenant then account.
	// An empty list means one bucket for every request the policy applies to.
	Key []identity.Dimension
	// Limit is the token-bucket rate, burst (capacity, tokens), delay_after
	// and max_delay; see [limiter.Limit] for the nginx limit_req mapping.
	Limit limiter.Limit
	// Cost is the tokens one request spends, >= 1; 0 means 1.
	Cost int64
	// Operations, when non-empty, restricts the policy to these operations
	// ("GET /v1/reports/{id}" or [UnmatchedOperation]); empty means all.
	Operations []string
	// Status is the HTTP status of a rejection, 429 (RFC 6585 §4) when 0.
	// nginx's limit_req answers 503 by default; set it to match.
	Status int
	// OnMissing is the outcome for a request lacking a key dimension;
	// empty means [OnMissingReject].
	OnMissing OnMissing
	// OnStoreError is the fail mode; empty means [OnStoreErrorDeny].
	OnStoreError OnStoreError
	// DryRun accounts the policy exactly as in enforcing mode but never
	// rejects or delays on it (nginx limit_req_dry_run, per policy here):
	// its decisions read REJECTED_DRY_RUN and DELAYED_DRY_RUN, a store
	// error never fails the request closed, and clients are not sent its
	// RateLimit fields.
	DryRun bool
	// PreAuth evaluates the policy in [RateLimiter.PreAuthHandler], before
	// credentials are verified, instead of in [RateLimiter.Handler]. Its
	// key may hold only network and operation: nothing verified exists yet.
	PreAuth bool
}

// PolicyChangeKind says how a reload changed a policy.
type PolicyChangeKind string

const (
	// PolicyAdded: a policy of that name is new; its buckets start full.
	PolicyAdded PolicyChangeKind = "added"
	// PolicyRemoved: the policy is gone; its states expire or are evicted.
	PolicyRemoved PolicyChangeKind = "removed"
	// PolicyRestarted: the rate or burst changed, so the buckets have a new
	// shape and start full (the old states are left to expire).
	PolicyRestarted PolicyChangeKind = "restarted"
	// PolicyUpdated: other settings changed (key, cost, delay_after,
	// max_delay, dry_run, status, operations, fail modes); budgets are
	// kept. A changed key list names other buckets: they start full.
	PolicyUpdated PolicyChangeKind = "updated"
)

// PolicyChange is one line of [DiffPolicies]' report.
type PolicyChange struct {
	// Policy is the policy's name.
	Policy string
	// Change is what happened to it.
	Change PolicyChangeKind
	// Detail names the changed settings, e.g. "burst 3 -> 5".
	Detail string
}

// DiffPolicies compares two policy lists by name and returns one change per
// policy added, removed, restarted or updated, in the order old then new;
// unchanged policies (which keep their budgets) are not listed.
func DiffPolicies(old, new []Policy) []PolicyChange {
	var out []PolicyChange
	old, new = withDefaults(old), withDefaults(new)
	byName := map[string]*Policy{}
	for i := range new {
		byName[new[i].Name] = &new[i]
	}
	seen := map[string]bool{}
	for i := range old {
		o := &old[i]
		seen[o.Name] = true
		n := byName[o.Name]
		if n == nil {
			out = append(out, PolicyChange{Policy: o.Name, Change: PolicyRemoved})
			continue
		}
		var diffs []string
		note := func(field string, a, b any) {
			if fmt.Sprint(a) != fmt.Sprint(b) {
				diffs = append(diffs, fmt.Sprintf("%s %v -> %v", field, a, b))
			}
		}
		note("rate", o.Limit.Rate, n.Limit.Rate)
		note("burst", o.Limit.Burst, n.Limit.Burst)
		kind := PolicyUpdated
		if o.Limit.Rate.Interval() != n.Limit.Rate.Interval() || o.Limit.Burst != n.Limit.Burst {
			kind = PolicyRestarted
		}
		note("key", o.Key, n.Key)
		note("cost", o.Cost, n.Cost)
		if o.Limit.DelayAfter != n.Limit.DelayAfter { // shown as tokens: 0 means the whole burst
			diffs = append(diffs, fmt.Sprintf("delay_after %d -> %d", delayAfter(o.Limit), delayAfter(n.Limit)))
		}
		note("max_delay", o.Limit.MaxDelay, n.Limit.MaxDelay)
		note("dry_run", o.DryRun, n.DryRun)
		note("pre_auth", o.PreAuth, n.PreAuth)
		note("status", o.Status, n.Status)
		note("operations", o.Operations, n.Operations)
		note("on_missing", o.OnMissing, n.OnMissing)
		note("on_store_error", o.OnStoreError, n.OnStoreError)
		if len(diffs) > 0 {
			out = append(out, PolicyChange{Policy: o.Name, Change: kind, Detail: strings.Join(diffs, ", ")})
		}
	}
	for i := range new {
		if !seen[new[i].Name] {
			out = append(out, PolicyChange{Policy: new[i].Name, Change: PolicyAdded})
		}
	}
	return out
}

// delayAfter returns the tokens of l's burst admitted without delay: its
// DelayAfter, where 0 means the whole burst (nginx limit_req's default).
func delayAfter(l limiter.Limit) int64 {
	if l.DelayAfter == 0 {
		return l.Burst
	}
	return l.DelayAfter
}

var policyNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// validate checks p and fills its defaults; it returns every problem found.
func (p *Policy) validate(custom map[identity.Dimension]DimensionFunc) error {
	var errs []error
	if !policyNameRE.MatchString(p.Name) {
		errs = append(errs, fmt.Errorf("policy %s: name must be 1-64 letters, digits, '.', '_' or '-'", quote.Value(p.Name)))
	}
	seen := map[identity.Dimension]bool{}
	for _, d := range p.Key {
		if seen[d] {
			errs = append(errs, fmt.Errorf("policy %s: dimension %s listed twice", quote.Value(p.Name), quote.Value(d)))
		}
		seen[d] = true
		if _, err := identity.ParseDimension(string(d)); err != nil {
			errs = append(errs, fmt.Errorf("policy %s: %w", quote.Value(p.Name), err))
			continue
		}
		if !d.Builtin() && custom[d] == nil {
			errs = append(errs, fmt.Errorf("policy %s: unknown dimension %s (built-in: tenant, account, credential, operation, network)", quote.Value(p.Name), quote.Value(d)))
		}
	}
	if p.PreAuth {
		for _, d := range p.Key {
			if d != identity.DimNetwork && d != identity.DimOperation {
				errs = append(errs, fmt.Errorf("policy %s: pre_auth: dimension %s is not known before authentication (network and operation are)", quote.Value(p.Name), quote.Value(d)))
			}
		}
	}
	if err := p.Limit.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("policy %s: %w", quote.Value(p.Name), err))
	}
	p.fillDefaults()
	if p.Cost < 0 {
		errs = append(errs, fmt.Errorf("policy %s: cost %d must be >= 1", quote.Value(p.Name), p.Cost))
	}
	if p.Status < 400 || p.Status > 599 {
		errs = append(errs, fmt.Errorf("policy %s: status %d is not a 4xx or 5xx code", quote.Value(p.Name), p.Status))
	}
	switch p.OnMissing {
	case OnMissingReject, OnMissingSkip:
	default:
		errs = append(errs, fmt.Errorf("policy %s: on_missing %s must be reject or skip", quote.Value(p.Name), quote.Value(p.OnMissing)))
	}
	switch p.OnStoreError {
	case OnStoreErrorDeny, OnStoreErrorAllow:
	default:
		errs = append(errs, fmt.Errorf("policy %s: on_store_error %s must be deny or allow", quote.Value(p.Name), quote.Value(p.OnStoreError)))
	}
	return errors.Join(errs...)
}

// withDefaults returns copies of ps with unset fields as they run (cost 1,
// status 429, on_missing reject, on_store_error deny), so that a change
// from a default to its own value is no change.
func withDefaults(ps []Policy) []Policy {
	out := slices.Clone(ps)
	for i := range out {
		out[i].fillDefaults()
	}
	return out
}

// fillDefaults sets unset fields to the values they run with: cost 1,
// status 429, on_missing reject, on_store_error deny.
func (p *Policy) fillDefaults() {
	if p.Cost == 0 {
		p.Cost = 1
	}
	if p.Status == 0 {
		p.Status = http.StatusTooManyRequests
	}
	if p.OnMissing == "" {
		p.OnMissing = OnMissingReject
	}
	if p.OnStoreError == "" {
		p.OnStoreError = OnStoreErrorDeny
	}
}

// appliesTo reports whether the policy covers operation op.
func (p *Policy) appliesTo(op string) bool {
	return len(p.Operations) == 0 || slices.Contains(p.Operations, op)
}
