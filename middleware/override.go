package middleware

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/internal/quote"
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
// with the principal's [identity.Principal] fields of those names. Those
// fields come from verified credentials only (an issuer record or an API
// key record vouched for them), so a client cannot claim another limit. The
// rest is optional and falls back to the policy's, field by field:
// Limit.Rate when its Count is 0, Limit.Burst, Limit.DelayAfter and
// Limit.MaxDelay when 0 (so an override cannot remove the policy's
// max_delay: give it its own), Cost when 0. The limit so completed must be
// as valid as a policy's (see [NewRateLimiter]).
//
// Two rules keep one key's requests in one bucket and one account's limit
// to that account ([NewRateLimiter] refuses the rest, naming the field):
//   - Every attribute an override matches on is a dimension of the
//     policy's Key. Otherwise the requests of one key would spend buckets
//     of two shapes, each full to its own burst: with Key [tenant] and an
//     override for plan pro, a tenant holding a pro key and a key without a
//     plan would get both bursts (issue 24: 3 + 5 requests a day). Add the
//     dimension to the key (a bucket per plan of the tenant) or match one
//     the key has. This is how Envoy's rate-limit service reads descriptors:
//     the value an override is set for is part of the key.
//   - An Account names its Tenant unless [RateLimitConfig].SingleTenant
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
	// Tenant when set (see the rules above).
	Account string
	// Limit is the override's limit; zero fields are the policy's.
	Limit limiter.Limit
	// Cost is the tokens one request spends; 0 means the policy's.
	Cost int64
}

// name names o in the debug JSON and the log: "tenant=acme|account=alice"
// for an account of a tenant, else "tenant=acme", "plan=pro" or
// "account=alice" (the first of those set), or "function" for an
// [Policy.OverrideFunc] answer that names none.
func (o *Override) name() string {
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

// effective is a policy's limit for some of its requests: its own or an
// override's, completed.
type effective struct {
	name  string // the override's name; "" for the policy's own limit
	limit limiter.Limit
	cost  int64
	item  string // the RateLimit-Policy list item
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
// be valid. share gives the limit this process states for a limit (its
// share of a store shared by several processes).
func compileOverrides(p *Policy, share func(limiter.Limit) limiter.Limit) *overrideTable {
	if len(p.Overrides) == 0 {
		return nil
	}
	t := &overrideTable{}
	for j := range p.Overrides {
		o := &p.Overrides[j]
		l, cost := p.complete(o)
		t.list = append(t.list, effective{name: o.name(), limit: l, cost: cost, item: policyItem(p.Name, share(l))})
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
func (t *overrideTable) match(pr *identity.Principal) *effective {
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

// validateOverrides checks p's Overrides (p is policy i, its defaults
// filled in), naming each problem as a config file locates it:
// policies[i] ("name").overrides[j].burst: ... singleTenant is
// [RateLimitConfig].SingleTenant.
func (p *Policy) validateOverrides(i int, maxWait time.Duration, singleTenant bool) []error {
	var errs []error
	if len(p.Overrides) == 0 {
		return nil
	}
	if p.PreAuth {
		return []error{fmt.Errorf("%s.overrides: a pre_auth policy runs before any credential is verified, so no tenant, plan or account can match", p.ref(i))}
	}
	seen := map[tenantPlanAccount]int{}
	for j := range p.Overrides {
		o := &p.Overrides[j]
		where := fmt.Sprintf("%s.overrides[%d]", p.ref(i), j)
		if !o.wellFormed() {
			errs = append(errs, fmt.Errorf("%s: set one of tenant, plan or account, or an account with its tenant (the verified attributes it matches)", where))
			continue
		}
		m := tenantPlanAccount{o.Tenant, o.Plan, o.Account}
		if k, dup := seen[m]; dup {
			field, text := "tenant", quote.Value(o.Tenant)
			switch {
			case o.Account != "" && o.Tenant != "":
				field, text = "account", quote.Value(o.Account)+" of tenant "+text
			case o.Account != "":
				field, text = "account", quote.Value(o.Account)
			case o.Plan != "":
				field, text = "plan", quote.Value(o.Plan)
			}
			errs = append(errs, fmt.Errorf("%s.%s: %s is matched by overrides[%d] already (the first match wins, so this one never applies)", where, field, text, k))
			continue
		}
		seen[m] = j
		errs = append(errs, p.matchProblems(where, o, singleTenant)...)
		if o.Cost != 0 && p.CostFunc != nil {
			errs = append(errs, fmt.Errorf("%s.cost: the policy's cost comes from its cost function", where))
			continue
		}
		l, cost := p.complete(o)
		for _, pr := range limitProblems(l, cost, p.DryRun, maxWait, p.CostFunc != nil, true) {
			errs = append(errs, fmt.Errorf("%s.%s: %s", where, pr.field, pr.text))
		}
	}
	return errs
}

// tenantPlanAccount is an override's match, for finding duplicates.
type tenantPlanAccount struct{ tenant, plan, account string }

// matchProblems returns the errors of override o (located at where) whose
// match the policy cannot honour (see [Override]): an attribute that is
// not a dimension of the policy's key, whose requests of one key would
// spend buckets of two shapes, and an account without its tenant, which
// would match that account name in every tenant, unless singleTenant.
func (p *Policy) matchProblems(where string, o *Override, singleTenant bool) []error {
	var errs []error
	if o.Account != "" && o.Tenant == "" && !singleTenant {
		errs = append(errs, fmt.Errorf("%s.account: %s would match the account of that name in every tenant (the credentials may name several tenants, and an account name is unique only per tenant): name its tenant too",
			where, quote.Value(o.Account)))
	}
	for _, d := range o.matchDims() {
		if !slices.Contains(p.Key, d) {
			errs = append(errs, fmt.Errorf("%s.%s: %s is not a dimension of the policy's key %s, so requests of one key with %s %s and without it would spend two buckets, each with its own burst: add %s to the key (a bucket per %s), or match a dimension of the key",
				where, d, d, keyList(p.Key), d, quote.Value(o.value(d)), d, d))
		}
	}
	return errs
}

// keyList writes a policy's key as a config file does: [tenant, plan].
func keyList(key []limitkey.Dimension) string {
	var b strings.Builder
	b.WriteByte('[')
	for k, d := range key {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(d))
	}
	b.WriteByte(']')
	return b.String()
}

// fieldProblem is one problem of a limit: the field, as a config file
// writes it, and what is wrong.
type fieldProblem struct{ field, text string }

// limitProblems checks a limit and its cost as a policy or override would
// use them (cost >= 1, within the burst and within max_delay's room, and
// no wait beyond maxWait unless dry run, which never waits; waits only
// when checkWaits). A dynamic cost (a cost function) is checked against
// max_delay at request time instead.
func limitProblems(l limiter.Limit, cost int64, dryRun bool, maxWait time.Duration, dynamicCost, checkWaits bool) []fieldProblem {
	var out []fieldProblem
	fail := func(field, format string, args ...any) {
		out = append(out, fieldProblem{field, fmt.Sprintf(format, args...)})
	}
	switch {
	case l.Rate.Count < 1 || l.Rate.Per <= 0:
		fail("rate", "%d per %v is not a rate: at least 1 token per positive period", l.Rate.Count, l.Rate.Per)
	case l.Burst < 1:
		fail("burst", "%d must be >= 1 (the bucket capacity in tokens; nginx burst=N is N+1)", l.Burst)
	case l.DelayAfter < 0 || l.DelayAfter > l.Burst:
		fail("delay_after", "%d must be 1 to burst %d (0: nothing is delayed, nginx nodelay)", l.DelayAfter, l.Burst)
	case l.MaxDelay < 0:
		fail("max_delay", "%v must not be negative", l.MaxDelay)
	case l.Validate() != nil:
		fail("burst", "%d at %v takes longer than 292 years to refill", l.Burst, l.Rate)
	}
	switch {
	case cost < 1:
		fail("cost", "%d must be >= 1", cost)
	case l.Burst >= 1 && cost > l.Burst:
		fail("cost", "%d exceeds burst %d, so no request could ever pass", cost, l.Burst)
	case checkWaits && len(out) == 0:
		out = append(out, waitProblems(l, cost, dryRun, maxWait, dynamicCost)...)
	}
	return out
}

// waitProblems refuses a valid limit whose requests could never pass
// because max_delay leaves no room for their cost, or could wait longer
// than maxWait (a delayed request holds its connection while it waits).
func waitProblems(l limiter.Limit, cost int64, dryRun bool, maxWait time.Duration, dynamicCost bool) []fieldProblem {
	if l.MaxDelay > maxWait {
		return []fieldProblem{{"max_delay", fmt.Sprintf("%v exceeds the longest wait allowed, %v (RateLimitConfig.MaxWait)", l.MaxDelay, maxWait)}}
	}
	if l.MaxDelay > 0 && !dynamicCost {
		// Even from a full bucket, the charge beyond delay_after's share
		// must fit within max_delay, or every request is refused.
		if charge := time.Duration(cost) * l.Rate.Interval(); charge > gcra.Ceiling(l) {
			return []fieldProblem{{"max_delay", fmt.Sprintf("%v is too short for cost %d: even from a full bucket a request would wait %v (its cost beyond delay_after's %d tokens), so no request could ever pass",
				l.MaxDelay, cost, (charge - gcra.Free(l)).Round(time.Millisecond), l.DelayAfter)}}
		}
	}
	if d := longestWait(l, dryRun); d > maxWait {
		return []fieldProblem{{"delay_after", fmt.Sprintf("a request may have to wait up to %v (burst beyond delay_after at %v), longer than %v (RateLimitConfig.MaxWait): set max_delay, a larger delay_after or a faster rate",
			d.Round(time.Second), l.Rate, maxWait)}}
	}
	return nil
}

// limitError is limitProblems as one error, for a limit chosen at request
// time ([Policy.OverrideFunc]): "override function: tenant=acme: burst: ...".
func limitError(name string, l limiter.Limit, cost int64, dryRun bool, maxWait time.Duration, dynamicCost bool) error {
	probs := limitProblems(l, cost, dryRun, maxWait, dynamicCost, true)
	if len(probs) == 0 {
		return nil
	}
	var b strings.Builder
	for k, pr := range probs {
		if k > 0 {
			b.WriteString("; ")
		}
		b.WriteString(pr.field + ": " + pr.text)
	}
	return fmt.Errorf("override function: %s: %s", name, b.String())
}

// override sets res's limit, cost and RateLimit-Policy item to those of
// the first of policy i's Overrides matching pr or, when none matches, of
// its OverrideFunc's answer. An invalid answer of the function is an
// error (res is then unchanged).
func (st *rateLimitState) override(i int, res *PolicyResult, pr *identity.Principal) error {
	if t := st.ovr[i]; t != nil {
		if e := t.match(pr); e != nil {
			res.Limit, res.Cost, res.item, res.Override = e.limit, e.cost, e.item, e.name
			return nil
		}
	}
	p := &st.Policies[i]
	if p.OverrideFunc == nil {
		return nil
	}
	o, ok := p.OverrideFunc(*pr)
	if !ok {
		return nil
	}
	name := o.name()
	if o.Cost != 0 && p.CostFunc != nil {
		return fmt.Errorf("override function: %s: cost: the policy's cost comes from its cost function", name)
	}
	l, cost := p.complete(&o)
	if err := limitError(name, l, cost, p.DryRun, st.MaxWait, p.CostFunc != nil); err != nil {
		return err
	}
	if probs := shareProblems(l, cost, st.replicas); len(probs) > 0 {
		return fmt.Errorf("override function: %s: %s: %s", name, probs[0].field, probs[0].text)
	}
	res.Limit, res.Cost, res.Override = l, cost, name
	if l != p.Limit {
		res.item = policyItem(p.Name, st.share(l))
	}
	return nil
}

// costOf calls p's cost function for r; a cost below 1, or above maxCost
// (a settling policy's, 0 for others), is an error.
func costOf(p *Policy, r *http.Request, maxCost int64) (int64, error) {
	c, err := p.CostFunc(r)
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

// overridesText renders p's Overrides, completed, for [DiffPolicies]:
// [tenant=acme 100/s burst 200 cost 1, plan=pro ...]. A reload that changes
// an override's rate or burst gives its tenants fresh buckets (see
// [Override]); the policy's other buckets are kept.
func (p *Policy) overridesText() string {
	var b strings.Builder
	b.WriteByte('[')
	for j := range p.Overrides {
		o := &p.Overrides[j]
		l, cost := p.complete(o)
		if j > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v burst %d cost %d", quote.Value(o.name()), l.Rate, l.Burst, cost)
		if l.DelayAfter != 0 {
			fmt.Fprintf(&b, " delay_after %d", l.DelayAfter)
		}
		if l.MaxDelay != 0 {
			fmt.Fprintf(&b, " max_delay %v", l.MaxDelay)
		}
	}
	b.WriteByte(']')
	return b.String()
}
