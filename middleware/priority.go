package middleware

import (
	"fmt"
	"slices"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/quote"
)

// Class is the priority of a request under an adaptive cap (see
// [Priority]). The strings are a public contract: they appear in the
// debug JSON ("class"), the log and the demo's config.
type Class string

const (
	// ClassCritical: admitted while fewer requests than the cap's limit
	// run; refused only when the whole limit is held.
	ClassCritical Class = "critical"
	// ClassSheddable: the default class, refused first. Its requests may
	// hold the limit less the reserve ([Policy].Reserved) less what
	// critical work needed lately (the most critical requests in flight
	// at once over the last window or two of the cap).
	ClassSheddable Class = "sheddable"
)

// Priority sorts some of an adaptive policy's requests into a Class: those
// whose verified principal has the Tenant and the Plan, and whose
// operation is the Operation, of the entry (each when set; at least one
// is). The first entry of [Policy.Priorities] that matches gives the
// class; a request no entry matches is [ClassSheddable]. Tenant and Plan
// come from verified credentials only (an issuer record or an API key
// record vouched for them), so a client cannot make itself critical; a
// request without a principal (anonymous, or a PreAuth policy) matches on
// the operation only. The demo writes `priorities: [{plan: pro, class:
// critical}]`.
type Priority struct {
	// Tenant matches the principal's verified tenant.
	Tenant string
	// Plan matches the principal's verified plan.
	Plan string
	// Operation matches the request's operation ("GET /v1/reports/{id}").
	Operation string
	// Class is the class of the requests the entry matches.
	Class Class
}

// matches reports whether pr covers a request of principal p (the zero
// Principal when it has none) and operation op.
func (pr *Priority) matches(p *identity.Principal, op string) bool {
	return (pr.Tenant == "" || pr.Tenant == p.Tenant) &&
		(pr.Plan == "" || pr.Plan == p.Plan) &&
		(pr.Operation == "" || pr.Operation == op)
}

// classify returns the class of a request of principal p and operation op
// under priorities ps: the first match's, else sheddable.
func classify(ps []Priority, p *identity.Principal, op string) Class {
	for i := range ps {
		if ps[i].matches(p, op) {
			return ps[i].Class
		}
	}
	return ClassSheddable
}

// validatePriorities checks p's priorities and reserve, reporting each
// problem to fail(field, format, args...): every entry matches on
// something and names a class; a PreAuth policy matches on the operation
// only (nothing is verified yet); an operation is one the policy applies
// to; a reserve needs a critical class to keep it for.
func (p *Policy) validatePriorities(fail func(field, format string, args ...any)) {
	critical := false
	for j := range p.Priorities {
		pr := &p.Priorities[j]
		field := fmt.Sprintf("priorities[%d]", j)
		switch {
		case pr.Tenant == "" && pr.Plan == "" && pr.Operation == "":
			fail(field, "matches every request: set tenant, plan or operation (a request no entry matches is sheddable)")
		case p.PreAuth && (pr.Tenant != "" || pr.Plan != ""):
			fail(field, "a pre_auth policy runs before credentials are verified: match on operation only")
		case pr.Operation != "" && len(p.Operations) > 0 && !slices.Contains(p.Operations, pr.Operation):
			fail(field+".operation", "%s is not one of the policy's operations: the entry never matches", quote.Value(pr.Operation))
		}
		switch pr.Class {
		case ClassCritical:
			critical = true
		case ClassSheddable:
		default:
			fail(field+".class", "%s must be critical or sheddable", quote.Value(pr.Class))
		}
	}
	switch {
	case p.Reserved < 0 || p.Reserved > 0.99 || p.Reserved != p.Reserved:
		fail("reserved", "%v must be a share of the limit from 0 to 0.99 (the demo writes 20%%)", p.Reserved)
	case p.Reserved > 0 && !critical:
		fail("reserved", "%v of the limit is kept for critical requests, but no priorities entry makes any request critical", p.Reserved)
	}
}
