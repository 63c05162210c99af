package policy

import (
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
)

// Override gives some of a policy's requests another limit: those whose
// verified principal has the override's tenant, plan or account (Envoy's
// rate-limit service sets limits per descriptor value, Kong per consumer
// group). The key is the policy's, so an overridden tenant still has its
// own buckets; only their shape changes.
//
// In [Policy.Overrides], one of Tenant, Plan and Account is set, or Tenant
// and Account together (that tenant's account): the match, compared exactly
// with the principal's limitkey.Principal fields of those names. Those
// fields come from verified credentials only (an issuer record or an API
// key record vouched for them), so a client cannot claim another limit. The
// rest is optional and falls back to the policy's, field by field:
// Limit.Rate when its Count is 0, Limit.Burst, Limit.DelayAfter and
// Limit.MaxDelay when 0 (so an override cannot remove the policy's
// max_delay: give it its own), Cost when 0. The limit so completed must be
// as valid as a policy's (see [Validate]).
//
// Two rules keep one key's requests in one bucket and one account's limit
// to that account ([Validate] refuses the rest, naming the field):
//   - Every attribute an override matches on is a dimension of the
//     policy's Key. Otherwise the requests of one key would spend buckets
//     of two shapes, each full to its own burst: with Key [tenant] and an
//     override for plan pro, a tenant holding a pro key and a key without a
//     plan would get both bursts (issue 24: 3 + 5 requests a day). Add the
//     dimension to the key (a bucket per plan of the tenant) or match one
//     the key has. This is how Envoy's rate-limit service reads descriptors:
//     the value an override is set for is part of the key. A request
//     without that attribute (a credential without a plan) then lacks a
//     dimension of the key and gets the policy's OnMissing (reject, the
//     default: 403): give every credential one ("free", say) when all of
//     them should pass.
//   - An Account names its Tenant unless [Rules].SingleTenant
//     says every principal has the same tenant: an account name is unique
//     only per tenant, so "vip" alone would match the vip of every tenant.
//
// The effective limit is what the response fields (RateLimit-Policy's q
// and w), the problem body, the decision log and the debug JSON show; the
// latter two name the override ("override": "tenant=acme"). A bucket is
// named by its key and the shape of its limit (see [limiter.Request]), so
// a tenant whose override changes rate or burst (on a reload, or when
// [Policy.OverrideFunc] answers otherwise) starts from a full bucket of
// the new shape, as any changed limit does.
type Override struct {
	// Tenant matches the principal's verified tenant.
	Tenant string
	// Plan matches the principal's verified plan.
	Plan string
	// Account matches the principal's verified account (subject), of
	// Tenant when set (see the rules in the type's documentation).
	Account string
	// Limit is the override's limit; zero fields are the policy's.
	Limit limiter.Limit
	// Cost is the tokens one request spends; 0 means the policy's.
	Cost int64
}

// String names o as the debug JSON ("override") and the log do:
// "tenant=acme|account=alice" for an account of a tenant, else
// "tenant=acme", "plan=pro" or "account=alice" (the first of those set),
// or "function" for a [Policy].OverrideFunc answer that names none.
// Safe for concurrent use.
func (o Override) String() string {
	switch {
	case o.Tenant != "" && o.Account != "":
		return "tenant=" + o.Tenant + "|account=" + o.Account
	case o.Tenant != "":
		return "tenant=" + o.Tenant
	case o.Plan != "":
		return "plan=" + o.Plan
	case o.Account != "":
		return "account=" + o.Account
	}
	return "function"
}

// matchDims returns the dimensions o matches on, those of Tenant, Plan and
// Account that are set, in that order.
func (o *Override) matchDims() []limitkey.Dimension {
	var ds []limitkey.Dimension
	for _, m := range [...]struct {
		d limitkey.Dimension
		v string
	}{{limitkey.DimTenant, o.Tenant}, {limitkey.DimPlan, o.Plan}, {limitkey.DimAccount, o.Account}} {
		if m.v != "" {
			ds = append(ds, m.d)
		}
	}
	return ds
}

// wellFormed reports whether o matches on one of Tenant, Plan and Account,
// or on Tenant and Account together.
func (o *Override) wellFormed() bool {
	n := len(o.matchDims())
	return n == 1 || n == 2 && o.Tenant != "" && o.Account != ""
}

// value returns o's match value for dimension d.
func (o *Override) value(d limitkey.Dimension) string {
	switch d {
	case limitkey.DimTenant:
		return o.Tenant
	case limitkey.DimPlan:
		return o.Plan
	}
	return o.Account
}

// complete returns o's limit and cost with unset fields taken from p,
// whose defaults are filled in.
func (p *Policy) complete(o *Override) (limiter.Limit, int64) {
	l := o.Limit
	if l.Rate.Count == 0 {
		l.Rate = p.Limit.Rate
	}
	if l.Burst == 0 {
		l.Burst = p.Limit.Burst
	}
	if l.DelayAfter == 0 {
		l.DelayAfter = p.Limit.DelayAfter
	}
	if l.MaxDelay == 0 {
		l.MaxDelay = p.Limit.MaxDelay
	}
	cost := o.Cost
	if cost == 0 {
		cost = p.Cost
	}
	return l, cost
}
