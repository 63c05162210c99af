package engine

import (
	"fmt"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// effective is a policy's limit for some of its requests: its own or an
// override's, completed.
type effective struct {
	name  string // the override's name; "" for the policy's own limit
	limit limiter.Limit
	cost  int64
}

// overrideTable is a policy's Overrides, compiled: one map per kind of
// match in use (nil for the others), each value an index into list.
// byAccount is keyed by the tenant and the account, the tenant "" for an
// account override without one (SingleTenant); anyTenant says there is
// such an entry.
type overrideTable struct {
	byTenant, byPlan map[string]int
	byAccount        map[tenantAccount]int
	anyTenant        bool
	list             []effective
}

// tenantAccount is an account override's match: an account of a tenant
// ("" for any tenant).
type tenantAccount struct{ tenant, account string }

// compileOverrides builds p's table; nil when p has no Overrides. p must
// be valid under rules r.
func compileOverrides(p *policy.Policy, r policy.Rules) *overrideTable {
	if len(p.Overrides) == 0 {
		return nil
	}
	t := &overrideTable{}
	for j := range p.Overrides {
		o := &p.Overrides[j]
		c, _ := p.CheckOverride(*o, r) // completed; valid under r, as Validate checked
		t.list = append(t.list, effective{name: o.String(), limit: c.Limit, cost: c.Cost})
		switch {
		case o.Account != "":
			t.anyTenant = t.anyTenant || o.Tenant == ""
			addMatch(&t.byAccount, tenantAccount{o.Tenant, o.Account}, j)
		case o.Tenant != "":
			addMatch(&t.byTenant, o.Tenant, j)
		case o.Plan != "":
			addMatch(&t.byPlan, o.Plan, j)
		}
	}
	return t
}

// addMatch maps match m to override j in *table (made when nil), unless
// an earlier override has it: the first match wins (validate refuses
// duplicates).
func addMatch[K comparable](table *map[K]int, m K, j int) {
	if *table == nil {
		*table = map[K]int{}
	}
	if _, dup := (*table)[m]; !dup {
		(*table)[m] = j
	}
}

// match returns the first override matching pr, or nil: one map lookup
// per kind of match the policy uses.
func (t *overrideTable) match(pr *limitkey.Principal) *effective {
	best := len(t.list)
	if t.byTenant != nil && pr.Tenant != "" {
		if j, ok := t.byTenant[pr.Tenant]; ok {
			best = j
		}
	}
	if t.byPlan != nil && pr.Plan != "" {
		if j, ok := t.byPlan[pr.Plan]; ok && j < best {
			best = j
		}
	}
	if t.byAccount != nil && pr.Account != "" {
		if j, ok := t.byAccount[tenantAccount{pr.Tenant, pr.Account}]; ok && j < best {
			best = j
		}
		if j, ok := t.byAccount[tenantAccount{"", pr.Account}]; t.anyTenant && ok && j < best {
			best = j
		}
	}
	if best == len(t.list) {
		return nil
	}
	return &t.list[best]
}

// override sets res's limit and cost to those of
// the first of policy i's Overrides matching pr or, when none matches, of
// its OverrideFunc's answer for key. An invalid answer of the function is
// an error (res is then unchanged).
func (st *State[R]) override(i int, res *decide.PolicyResult, pr *limitkey.Principal, key limitkey.Key) error {
	if t := st.ovr[i]; t != nil {
		if e := t.match(pr); e != nil {
			res.Limit, res.Cost, res.Override = e.limit, e.cost, e.name
			return nil
		}
	}
	p := &st.Policies[i]
	if p.OverrideFunc == nil {
		return nil
	}
	o, ok := p.OverrideFunc(key)
	if !ok {
		return nil
	}
	c, err := p.CheckOverride(o, st.rules)
	if err != nil {
		return err
	}
	res.Limit, res.Cost, res.Override = c.Limit, c.Cost, o.String()
	return nil
}

// costOf calls cost function f for r; a cost below 1, or above maxCost
// (a settling policy's, 0 for others), is an error.
func costOf[R any](f func(R) (int64, error), r R, maxCost int64) (int64, error) {
	c, err := f(r)
	switch {
	case err != nil:
		return 0, fmt.Errorf("cost function: %w", err)
	case c < 1:
		return c, fmt.Errorf("cost function returned %d, want at least 1", c)
	case maxCost != 0 && c > maxCost:
		// A settling policy's reservation above what a request may
		// settle: a report would be clamped below it, and none would
		// leave it charged (a fixed cost above max_cost is refused by
		// validation alike).
		return c, fmt.Errorf("cost function returned %d, above max_cost %d (the most a request settles at)", c, maxCost)
	}
	return c, nil
}
