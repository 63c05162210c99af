package middleware

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limiter"
)

// Override gives some of a policy's requests another limit: those whose
// verified principal has the override's tenant, plan or account (Envoy's
// rate-limit service sets limits per descriptor value, Kong per consumer
// group). The key is the policy's, so an overridden tenant still has its
// own buckets; only their shape changes.
//
// In [Policy.Overrides], exactly one of Tenant, Plan and Account is set: the
// match, compared exactly with the principal's [identity.Principal] field
// of that name. Those fields come from verified credentials only (an issuer
// record or an API key record vouched for them), so a client cannot claim
// another limit. The rest is optional and falls back to the policy's, field
// by field: Limit.Rate when its Count is 0, Limit.Burst, Limit.DelayAfter
// and Limit.MaxDelay when 0 (so an override cannot remove the policy's
// max_delay: give it its own), Cost when 0. The limit so completed must be
// as valid as a policy's (see [NewRateLimiter]).
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
	// Account matches the principal's verified account (subject).
	Account string
	// Limit is the override's limit; zero fields are the policy's.
	Limit limiter.Limit
	// Cost is the tokens one request spends; 0 means the policy's.
	Cost int64
}

// name names o in the debug JSON and the log: "tenant=acme", "plan=pro" or
// "account=alice" (the first of those set), or "function" for an
// [Policy.OverrideFunc] answer that names none.
func (o *Override) name() string {
	switch {
	case o.Tenant != "":
		return "tenant=" + o.Tenant
	case o.Plan != "":
		return "plan=" + o.Plan
	case o.Account != "":
		return "account=" + o.Account
	}
	return "function"
}

// matches returns how many of Tenant, Plan and Account are set.
func (o *Override) matches() int {
	n := 0
	for _, s := range [...]string{o.Tenant, o.Plan, o.Account} {
		if s != "" {
			n++
		}
	}
	return n
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
type overrideTable struct {
	byTenant, byPlan, byAccount map[string]int
	list                        []effective
}

// compileOverrides builds p's table; nil when p has no Overrides. p must
// be valid.
func compileOverrides(p *Policy) *overrideTable {
	if len(p.Overrides) == 0 {
		return nil
	}
	t := &overrideTable{}
	add := func(m *map[string]int, v string, j int) {
		if *m == nil {
			*m = map[string]int{}
		}
		if _, dup := (*m)[v]; !dup { // first match wins (validate refuses duplicates)
			(*m)[v] = j
		}
	}
	for j := range p.Overrides {
		o := &p.Overrides[j]
		l, cost := p.complete(o)
		t.list = append(t.list, effective{name: o.name(), limit: l, cost: cost, item: policyItem(p.Name, l)})
		switch {
		case o.Tenant != "":
			add(&t.byTenant, o.Tenant, j)
		case o.Plan != "":
			add(&t.byPlan, o.Plan, j)
		case o.Account != "":
			add(&t.byAccount, o.Account, j)
		}
	}
	return t
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
		if j, ok := t.byAccount[pr.Account]; ok && j < best {
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
// policies[i] ("name").overrides[j].burst: ...
func (p *Policy) validateOverrides(i int, maxWait time.Duration) []error {
	var errs []error
	if len(p.Overrides) == 0 {
		return nil
	}
	if p.PreAuth {
		return []error{fmt.Errorf("%s.overrides: a pre_auth policy runs before any credential is verified, so no tenant, plan or account can match", p.ref(i))}
	}
	type match struct{ dim, value string }
	seen := map[match]int{}
	for j := range p.Overrides {
		o := &p.Overrides[j]
		where := fmt.Sprintf("%s.overrides[%d]", p.ref(i), j)
		if o.matches() != 1 {
			errs = append(errs, fmt.Errorf("%s: set exactly one of tenant, plan or account (the verified attribute it matches)", where))
			continue
		}
		m := match{"tenant", o.Tenant}
		switch {
		case o.Plan != "":
			m = match{"plan", o.Plan}
		case o.Account != "":
			m = match{"account", o.Account}
		}
		if k, dup := seen[m]; dup {
			errs = append(errs, fmt.Errorf("%s.%s: %s is matched by overrides[%d] already (the first match wins, so this one never applies)", where, m.dim, quote.Value(m.value), k))
			continue
		}
		seen[m] = j
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
	res.Limit, res.Cost, res.Override = l, cost, name
	if l != p.Limit {
		res.item = policyItem(p.Name, l)
	}
	return nil
}

// costOf calls p's cost function for r; a cost below 1 is an error.
func costOf(p *Policy, r *http.Request) (int64, error) {
	c, err := p.CostFunc(r)
	switch {
	case err != nil:
		return 0, fmt.Errorf("cost function: %w", err)
	case c < 1:
		return c, fmt.Errorf("cost function returned %d, want at least 1", c)
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
