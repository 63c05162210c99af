package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"

	"github.com/ratekey/ratekey/identity"
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
	// OnStoreErrorDeny fails closed with 503 and a short Retry-After (default).
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
	// Limit is the token-bucket rate and burst (capacity, tokens).
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
}

var policyNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// validate checks p and fills its defaults; it returns every problem found.
func (p *Policy) validate(custom map[identity.Dimension]DimensionFunc) error {
	var errs []error
	if !policyNameRE.MatchString(p.Name) {
		errs = append(errs, fmt.Errorf("policy %q: name must be 1-64 letters, digits, '.', '_' or '-'", p.Name))
	}
	seen := map[identity.Dimension]bool{}
	for _, d := range p.Key {
		if seen[d] {
			errs = append(errs, fmt.Errorf("policy %q: dimension %q listed twice", p.Name, d))
		}
		seen[d] = true
		if _, err := identity.ParseDimension(string(d)); err != nil {
			errs = append(errs, fmt.Errorf("policy %q: %w", p.Name, err))
			continue
		}
		if !d.Builtin() && custom[d] == nil {
			errs = append(errs, fmt.Errorf("policy %q: unknown dimension %q (built-in: tenant, account, credential, operation, network)", p.Name, d))
		}
	}
	if err := p.Limit.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("policy %q: %w", p.Name, err))
	}
	if p.Cost == 0 {
		p.Cost = 1
	}
	if p.Cost < 0 {
		errs = append(errs, fmt.Errorf("policy %q: cost %d must be >= 1", p.Name, p.Cost))
	}
	if p.Status == 0 {
		p.Status = http.StatusTooManyRequests
	}
	if p.Status < 400 || p.Status > 599 {
		errs = append(errs, fmt.Errorf("policy %q: status %d is not a 4xx or 5xx code", p.Name, p.Status))
	}
	switch p.OnMissing {
	case "":
		p.OnMissing = OnMissingReject
	case OnMissingReject, OnMissingSkip:
	default:
		errs = append(errs, fmt.Errorf("policy %q: on_missing %q must be reject or skip", p.Name, p.OnMissing))
	}
	switch p.OnStoreError {
	case "":
		p.OnStoreError = OnStoreErrorDeny
	case OnStoreErrorDeny, OnStoreErrorAllow:
	default:
		errs = append(errs, fmt.Errorf("policy %q: on_store_error %q must be deny or allow", p.Name, p.OnStoreError))
	}
	return errors.Join(errs...)
}

// appliesTo reports whether the policy covers operation op.
func (p *Policy) appliesTo(op string) bool {
	return len(p.Operations) == 0 || slices.Contains(p.Operations, op)
}
