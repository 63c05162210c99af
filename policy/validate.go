package policy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratekey/ratekey/internal/adaptive"
	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
)

// Rules is what [Validate] checks policies against besides the policies
// themselves: what the program around them supplies. The zero value is a
// program with no custom dimension, no cost function, one process on its
// store, no fallback store, and the default longest wait. Validate and
// CheckOverride only read it: one Rules may serve concurrent calls.
type Rules struct {
	// Custom lists the custom key dimensions the program supplies a value
	// for (middleware.RateLimitConfig.Custom); a policy's Key may name
	// them besides the built-in ones.
	Custom []limitkey.Dimension
	// Costs names the policies whose cost a function gives per request
	// (middleware.RateLimitConfig.Costs): their fixed Cost must be 0, and
	// their cost is checked against the burst and max_delay when each
	// request is decided instead.
	Costs []string
	// MaxWait is the longest a request may be made to wait, in every
	// phase together; 0 means 50 s (under the 60 s read timeouts of
	// common proxies and servers).
	MaxWait time.Duration
	// SingleTenant says every principal has the same tenant, so an
	// account override need not name its tenant (see [Override]).
	SingleTenant bool
	// Replicas is how many processes share the budgets of the store, each
	// enforcing its share ([limiter.Limit.Share]); 0 or 1 means one.
	Replicas int64
	// FallbackReplicas is the same for the local fallback store of
	// OnStoreErrorLocal policies; 0 means there is none (no policy may
	// then use OnStoreErrorLocal).
	FallbackReplicas int64
	// PhaseWait is, for [Policy.CheckOverride], the longest a request may
	// have waited in the phase before the policy's (the pre-auth
	// policies' longest [Policy.LongestWait]): an override's waits must
	// fit MaxWait less it, as Validate checks the two phases together.
	// Validate ignores it.
	PhaseWait time.Duration
}

// Validate checks policies against r and returns copies of them with
// their defaults filled in (cost 1, status 429, on_missing reject,
// on_store_error deny; for an adaptive cap, min_in_flight 1, status 503,
// retry_after 1 s, limit_log_factor 2), in order. It reports every
// problem found (errors.Join), each naming its field as a config file
// writes it (policies[1] ("per-account").max_delay: ...), and refuses what
// can only be a mistake: a name defined twice, a cost above the burst or
// one that max_delay leaves no room for (no request could ever pass), a
// wait longer than MaxWait (each phase's longest delay added up, as a
// request waits out the pre-auth phase and then the main one), a share
// below one token or slot per process, and an override whose match the
// key cannot honour. Neither policies nor r is modified. Safe for
// concurrent use.
func Validate(policies []Policy, r Rules) ([]Policy, error) {
	v := newValidator(r)
	errs := r.errors(policies)
	out := make([]Policy, 0, len(policies))
	names := map[string]bool{}
	for i, p := range policies {
		p.Key = slices.Clone(p.Key)
		p.Operations = slices.Clone(p.Operations)
		p.Overrides = slices.Clone(p.Overrides)
		p.Priorities = slices.Clone(p.Priorities)
		errs = append(errs, v.policyErrors(i, &p)...)
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("%s.name: defined twice", p.ref(i)))
		}
		names[p.Name] = true
		out = append(out, p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := checkPhases(out, v.MaxWait); err != nil {
		return nil, err
	}
	return out, nil
}

// errors refuses rules that cannot describe a program: a negative count
// of replicas, a cost function named for no policy of ps (renamed or
// removed: it would silently do nothing).
func (r *Rules) errors(ps []Policy) []error {
	var errs []error
	if r.Replicas < 0 {
		errs = append(errs, fmt.Errorf("replicas: %d must not be negative (0 or 1: one process)", r.Replicas))
	}
	if r.FallbackReplicas < 0 {
		errs = append(errs, fmt.Errorf("fallback replicas: %d must not be negative (0: no fallback store)", r.FallbackReplicas))
	}
	for _, name := range r.Costs {
		if !slices.ContainsFunc(ps, func(p Policy) bool { return p.Name == name }) {
			errs = append(errs, fmt.Errorf("costs[%s]: no policy has that name", quote.Value(name)))
		}
	}
	return errs
}

// validator is [Rules] as Validate uses them: defaults filled, lists as
// sets.
type validator struct {
	Rules
	custom  map[limitkey.Dimension]bool
	dynamic map[string]bool
}

func newValidator(r Rules) *validator {
	v := &validator{Rules: r, custom: map[limitkey.Dimension]bool{}, dynamic: map[string]bool{}}
	if v.MaxWait <= 0 {
		v.MaxWait = defaultMaxWait
	}
	v.Replicas = max(v.Replicas, 1)
	for _, d := range r.Custom {
		v.custom[d] = true
	}
	for _, name := range r.Costs {
		v.dynamic[name] = true
	}
	return v
}

// policyErrors checks policy i, p (filling its defaults), and its shares
// of the store and of the local fallback.
func (v *validator) policyErrors(i int, p *Policy) []error {
	if err := v.validate(i, p); err != nil {
		return []error{err}
	}
	if p.Limit.MaxInFlightCeiling != 0 { // an adaptive cap is this process's: no share
		return nil
	}
	errs := v.sharesErrors(i, p, v.Replicas)
	if p.OnStoreError == OnStoreErrorLocal {
		if v.FallbackReplicas == 0 {
			errs = append(errs, fmt.Errorf("%s.on_store_error: local needs a fallback store (RateLimitConfig.Fallback: a memory store of this process)", p.ref(i)))
		} else {
			errs = append(errs, v.sharesErrors(i, p, v.FallbackReplicas)...)
		}
	}
	return errs
}

// CheckOverride returns o completed from p (its unset fields taken from
// p: Limit.Rate when its Count is 0, Limit.Burst, Limit.DelayAfter and
// Limit.MaxDelay when 0, Cost when 0) and checks the limit so completed
// as [Validate] checks an entry of p.Overrides (the limit and cost, the
// waits within MaxWait less PhaseWait, a settling policy's largest
// settle, the shares of the store and of the fallback): for an override
// chosen at request time ([Policy].OverrideFunc's answer), or to see the
// limit an entry of p.Overrides applies. p must be a policy Validate
// returned, with the same r. The error lists every problem: "override
// function: tenant=acme: burst: ...; max_cost: ..."; the override is
// completed either way. It allocates only for an error. Safe for
// concurrent use.
func (p *Policy) CheckOverride(o Override, r Rules) (Override, error) {
	dynamic := slices.Contains(r.Costs, p.Name)
	c := o
	c.Limit, c.Cost = p.complete(&o)
	if o.Cost != 0 && dynamic {
		return c, fmt.Errorf("override function: %s: cost: the policy's cost comes from its cost function", o.String())
	}
	v := validator{Rules: r}
	v.MaxWait = max(cmp.Or(max(r.MaxWait, 0), defaultMaxWait)-max(r.PhaseWait, 0), 0)
	probs := limitProblems(c.Limit, c.Cost, p.DryRun, v.MaxWait, dynamic, true)
	if len(probs) == 0 {
		probs = append(probs, p.settleProblems(c.Limit, c.Cost, dynamic, "")...)
		probs = append(probs, v.shareProblems(p, c.Limit, c.Cost, max(r.Replicas, 1), dynamic)...)
		if p.OnStoreError == OnStoreErrorLocal && r.FallbackReplicas > 0 {
			probs = append(probs, v.shareProblems(p, c.Limit, c.Cost, r.FallbackReplicas, dynamic)...)
		}
	}
	if len(probs) > 0 {
		return c, overrideError(o.String(), probs)
	}
	return c, nil
}

// validate checks p, policy i, and fills its defaults. It returns every
// problem found, each naming its field as a config file writes it
// (policies[1] ("per-account").max_delay: ...), and refuses what can only
// be a mistake: a cost above the burst or one that max_delay leaves no room
// for (no request could ever pass), a wait longer than maxWait, and an
// override whose match the key cannot honour (see [Override];
// the rules are v's).
func (v *validator) validate(i int, p *Policy) error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", p.ref(i), field, fmt.Sprintf(format, args...)))
	}
	if !policyNameRE.MatchString(p.Name) {
		fail("name", "%s must be 1-64 letters, digits, '.', '_' or '-'", quote.Value(p.Name))
	}
	p.validateKey(v.custom, fail)
	if p.PreAuth && p.OverrideFunc != nil {
		fail("overrides", "a pre_auth policy runs before any credential is verified, so its OverrideFunc would never be asked")
	}
	if v.dynamic[p.Name] && p.Cost != 0 {
		fail("cost", "%d is fixed, but the policy has a cost function: set one or the other", p.Cost)
	}
	if p.Limit.MaxInFlightCeiling != 0 || p.Limit.MinInFlight != 0 {
		p.validateAdaptive(v.dynamic[p.Name], fail)
		p.fillDefaults()
		return errors.Join(append(errs, p.validateModes(i)...)...)
	}
	if len(p.Priorities) > 0 || p.Reserved != 0 || p.LimitLogFactor != 0 {
		fail("priorities", "priorities, reserved and limit_log_factor are for adaptive caps (max_in_flight: auto); a fixed cap of this process that sheds by class is one with min_in_flight = max_in_flight_ceiling")
	}
	if p.Limit.MaxInFlight != 0 {
		p.validateInFlight(v.dynamic[p.Name], fail)
		p.fillDefaults()
		return errors.Join(append(errs, p.validateModes(i)...)...)
	}
	if p.RetryAfter != 0 {
		fail("retry_after", "%v is for max_in_flight policies (a token bucket computes its Retry-After)", p.RetryAfter)
	}
	others := len(errs) > 0
	p.fillDefaults()
	// Waits are checked only when nothing else of the policy is wrong.
	probs := limitProblems(p.Limit, p.Cost, p.DryRun, v.MaxWait, v.dynamic[p.Name], !others)
	for _, pr := range probs {
		fail(pr.field, "%s", pr.text)
	}
	if len(probs) == 0 {
		errs = append(errs, v.validateOverrides(i, p)...)
		if len(errs) == 0 {
			errs = append(errs, p.validateSettle(i, v.dynamic[p.Name])...)
		}
	}
	return errors.Join(append(errs, p.validateModes(i)...)...)
}

// validateKey checks p's key: each dimension once, a valid name, built in
// or custom, and known before authentication for a pre_auth policy.
func (p *Policy) validateKey(custom map[limitkey.Dimension]bool, fail func(field, format string, args ...any)) {
	seen := map[limitkey.Dimension]bool{}
	for _, d := range p.Key {
		if seen[d] {
			fail("key", "dimension %s listed twice", quote.Value(d))
		}
		seen[d] = true
		if _, err := limitkey.ParseDimension(string(d)); err != nil {
			fail("key", "%v", err)
			continue
		}
		if !d.Builtin() && !custom[d] {
			fail("key", "unknown dimension %s (built-in: tenant, account, credential, operation, network, plan)", quote.Value(d))
		}
		if p.PreAuth && d != limitkey.DimNetwork && d != limitkey.DimOperation {
			fail("pre_auth", "dimension %s is not known before authentication (network and operation are)", quote.Value(d))
		}
	}
}

// validateSettle checks the settle fields of p, policy i, a token bucket
// whose limits (its own and its overrides') are valid: max_cost only with
// settle, not negative, not below a fixed cost, and within the largest
// settle (gcra.MaxSettle) for every limit.
func (p *Policy) validateSettle(i int, dynamic bool) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.max_cost: %s", p.ref(i), fmt.Sprintf(format, args...)))
	}
	switch {
	case p.MaxCost < 0:
		fail("%d must not be negative (0: the burst)", p.MaxCost)
		return errs
	case p.MaxCost != 0 && !p.Settle:
		fail("%d is for settling policies (settle: true)", p.MaxCost)
		return errs
	case !p.Settle:
		return nil
	}
	for _, pr := range p.settleProblems(p.Limit, p.Cost, dynamic, "") {
		errs = append(errs, fmt.Errorf("%s.%s: %s", p.ref(i), pr.field, pr.text))
	}
	for j := range p.Overrides {
		l, cost := p.complete(&p.Overrides[j])
		for _, pr := range p.settleProblems(l, cost, dynamic, fmt.Sprintf(" (overrides[%d])", j)) {
			errs = append(errs, fmt.Errorf("%s.%s: %s", p.ref(i), pr.field, pr.text))
		}
	}
	return errs
}

// settleProblems checks what a settling policy p's request settles at
// under limit l with fixed cost (dynamic: a cost function's): max_cost
// (or the burst) at least the cost reserved, and within the largest
// settle (gcra.MaxSettle) at l's rate; where follows the limit's numbers
// in the text (" (overrides[1])"). nil for a policy that does not settle.
func (p *Policy) settleProblems(l limiter.Limit, cost int64, dynamic bool, where string) []fieldProblem {
	if !p.Settle {
		return nil
	}
	var out []fieldProblem
	m := p.MaxCost
	if m == 0 {
		m = l.Burst
	} else if !dynamic && cost > m {
		out = append(out, fieldProblem{"max_cost", fmt.Sprintf("%d is below the cost %d reserved%s: no request could settle at its own reservation", m, cost, where)})
	}
	if t := int64(l.Rate.Interval()); t > 0 && m > gcra.MaxSettle/t {
		out = append(out, fieldProblem{"max_cost", fmt.Sprintf("%d tokens at %v%s exceed the largest settle, 2^53-1 ns of the rate (about 104 days): lower max_cost", m, l.Rate, where)})
	}
	return out
}

// validateInFlight checks the fields of an in-flight policy, reporting
// each problem to fail(field, format, args...).
func (p *Policy) validateInFlight(dynamic bool, fail func(field, format string, args ...any)) {
	l := p.Limit
	switch {
	case l.MaxInFlight < 1 || l.MaxInFlight > 1_000_000_000:
		fail("max_in_flight", "%d must be 1 to 1000000000 (requests of one key running at once)", l.MaxInFlight)
	case l.Lease != 0 && (l.Lease < time.Second || l.Lease > time.Hour):
		fail("lease", "%v must be between 1s and 1h (0: 60s)", l.Lease)
	}
	if l.Rate != (limiter.Rate{}) || l.Burst != 0 {
		fail("max_in_flight", "a policy has rate and burst (a token bucket) or max_in_flight (an in-flight cap), not both")
	}
	if l.DelayAfter != 0 || l.MaxDelay != 0 {
		fail("max_in_flight", "delay_after and max_delay are token-bucket settings: an in-flight cap never delays")
	}
	if p.Cost > 1 || dynamic {
		fail("cost", "an in-flight policy's request holds one slot: no cost or cost function")
	}
	if len(p.Overrides) > 0 || p.OverrideFunc != nil {
		fail("overrides", "overrides are for token-bucket policies")
	}
	if p.Settle || p.MaxCost != 0 {
		fail("settle", "an in-flight policy's request holds one slot: nothing to settle (settle and max_cost are for token buckets)")
	}
	if p.RetryAfter < 0 || p.RetryAfter > time.Hour {
		fail("retry_after", "%v must be 0 (no Retry-After) to 1h", p.RetryAfter)
	}
}

// validateModes checks p's status and fail modes, defaults filled in.
func (p *Policy) validateModes(i int) []error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", p.ref(i), field, fmt.Sprintf(format, args...)))
	}
	if p.Status < 400 || p.Status > 599 {
		fail("status", "%d is not a 4xx or 5xx code", p.Status)
	}
	switch p.OnMissing {
	case OnMissingReject, OnMissingSkip:
	default:
		fail("on_missing", "%s must be reject or skip", quote.Value(p.OnMissing))
	}
	switch p.OnStoreError {
	case OnStoreErrorDeny, OnStoreErrorAllow, OnStoreErrorLocal:
	default:
		fail("on_store_error", "%s must be deny, allow or local", quote.Value(p.OnStoreError))
	}
	return errs
}

// checkPhases refuses policies whose pre-auth and main phases together may
// make a request wait longer than maxWait: it waits out the pre-auth
// phase's longest delay, then the main phase's (nginx waits for the
// longest of its zones'). The policies must be valid.
func checkPhases(ps []Policy, maxWait time.Duration) error {
	var longest [2]time.Duration // pre_auth, main
	var which [2]int
	for i := range ps {
		ph := 1
		if ps[i].PreAuth {
			ph = 0
		}
		if d := ps[i].LongestWait(); d > longest[ph] {
			longest[ph], which[ph] = d, i
		}
	}
	if sum := longest[0] + longest[1]; longest[0] > 0 && longest[1] > 0 && sum > maxWait {
		return fmt.Errorf("%s (pre_auth) and %s: a request may wait up to %v before authentication and %v after it, %v in all, longer than %v (RateLimitConfig.MaxWait): lower their max_delay or delay_after's share",
			ps[which[0]].ref(which[0]), ps[which[1]].ref(which[1]), longest[0].Round(time.Second), longest[1].Round(time.Second), sum.Round(time.Second), maxWait)
	}
	return nil
}

// validateAdaptive checks the fields of an adaptive policy, reporting each
// problem to fail(field, format, args...).
func (p *Policy) validateAdaptive(dynamic bool, fail func(field, format string, args ...any)) {
	l := p.Limit
	switch {
	case l.MaxInFlightCeiling < 1 || l.MaxInFlightCeiling > adaptive.MaxCeiling:
		fail("max_in_flight_ceiling", "%d must be 1 to %d (the most requests this process runs at once, whatever latency says)", l.MaxInFlightCeiling, adaptive.MaxCeiling)
	case l.MinInFlight < 0 || l.MinInFlight > l.MaxInFlightCeiling:
		fail("min_in_flight", "%d must be 1 to max_in_flight_ceiling %d (0: 1)", l.MinInFlight, l.MaxInFlightCeiling)
	}
	if l.MaxInFlight != 0 {
		fail("max_in_flight", "%d is a fixed cap; an adaptive one (max_in_flight: auto) moves between min_in_flight and max_in_flight_ceiling", l.MaxInFlight)
	}
	if l.Rate != (limiter.Rate{}) || l.Burst != 0 || l.DelayAfter != 0 || l.MaxDelay != 0 || l.Lease != 0 {
		fail("max_in_flight", "an adaptive cap has no rate, burst, delay_after, max_delay or lease (it is this process's, never a store's)")
	}
	p.validateAdaptiveUse(dynamic, fail)
	p.validatePriorities(fail)
}

// validateAdaptiveUse checks what an adaptive cap p does not take (a cost,
// overrides, a key other than operation, a store fail mode) and the
// ranges of its retry_after and limit_log_factor.
func (p *Policy) validateAdaptiveUse(dynamic bool, fail func(field, format string, args ...any)) {
	if p.Cost > 1 || dynamic {
		fail("cost", "an in-flight policy's request holds one slot: no cost or cost function")
	}
	if len(p.Overrides) > 0 || p.OverrideFunc != nil {
		fail("overrides", "overrides are for token-bucket policies (an adaptive cap sorts requests with priorities)")
	}
	for _, d := range p.Key {
		if d != limitkey.DimOperation {
			fail("key", "an adaptive cap moves with this process's latency, which every client's requests share: key it on nothing ([]) or on operation (a cap per route); %s would split one protection into many that each see the same latency (a per-client cap is a fixed max_in_flight)", quote.Value(d))
		}
	}
	if p.RetryAfter < 0 || p.RetryAfter > time.Hour {
		fail("retry_after", "%v must be 0 (1s) to 1h", p.RetryAfter)
	}
	if p.OnStoreError != "" && p.OnStoreError != OnStoreErrorDeny {
		fail("on_store_error", "%s: an adaptive cap is decided in this process and never asks a store", quote.Value(p.OnStoreError))
	}
	if f := p.LimitLogFactor; f != 0 && (f <= 1 || f > 1000 || f != f) {
		fail("limit_log_factor", "%v must be above 1 and at most 1000 (0: 2): the log reports a limit that moved by more than this factor", f)
	}
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

// validateOverrides checks p's Overrides (p is policy i, its defaults
// filled in), naming each problem as a config file locates it:
// policies[i] ("name").overrides[j].burst: ... singleTenant is
// v.SingleTenant.
func (v *validator) validateOverrides(i int, p *Policy) []error {
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
		errs = append(errs, p.matchProblems(where, o, v.SingleTenant)...)
		if o.Cost != 0 && v.dynamic[p.Name] {
			errs = append(errs, fmt.Errorf("%s.cost: the policy's cost comes from its cost function", where))
			continue
		}
		l, cost := p.complete(o)
		for _, pr := range limitProblems(l, cost, p.DryRun, v.MaxWait, v.dynamic[p.Name], true) {
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
			errs = append(errs, fmt.Errorf("%s.%s: %s is not a dimension of the policy's key %s, so requests of one key with %s %s and without it would spend two buckets, each with its own burst: add %s to the key (a bucket per %s; a request without one then meets on_missing), or match a dimension of the key",
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
		field, text := limitField(l.Validate())
		fail(field, "%s", text)
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

// limitField names the field of limit error err (limiter.Limit.Validate's
// for a limit whose rate, burst, delay_after and max_delay are each in
// range) as a config file writes it, and its text without the package's
// prefix.
func limitField(err error) (field, text string) {
	text = strings.TrimPrefix(err.Error(), "limiter: invalid limit: ")
	switch {
	case strings.Contains(text, "adaptive"):
		return "max_in_flight_ceiling", text
	case strings.HasPrefix(text, "lease"):
		return "lease", text
	case strings.HasPrefix(text, "max_in_flight"):
		return "max_in_flight", text
	}
	return "burst", text
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

// overrideError is an override function's answer's problems as one
// error: "override function: tenant=acme: burst: ...; max_delay: ...".
func overrideError(name string, probs []fieldProblem) error {
	var b strings.Builder
	for k, pr := range probs {
		if k > 0 {
			b.WriteString("; ")
		}
		b.WriteString(pr.field + ": " + pr.text)
	}
	return fmt.Errorf("override function: %s: %s", name, b.String())
}

// shareProblems checks that limit l, with fixed cost (0 for a cost
// function), keeps at least one token or slot per process when n share
// it, and that the cost fits the share (else no request could ever pass).
func shareProblems(l limiter.Limit, cost, n int64) []fieldProblem {
	if n <= 1 {
		return nil
	}
	field, whole := "burst", l.Burst
	if l.MaxInFlight != 0 {
		field, whole = "max_in_flight", l.MaxInFlight
	}
	s, err := l.Share(n)
	switch {
	case err != nil && whole < n:
		return []fieldProblem{{field, fmt.Sprintf("%d shared by %d replicas is %d per process, below one: raise it to at least %d or run fewer replicas", whole, n, whole/n, n)}}
	case err != nil:
		return []fieldProblem{{"rate", fmt.Sprintf("%v shared by %d replicas does not fit a period", l.Rate, n)}}
	}
	per := s.Burst
	if l.MaxInFlight != 0 {
		per = s.MaxInFlight
	}
	if cost > per {
		return []fieldProblem{{"cost", fmt.Sprintf("%d exceeds the %s of %d per process (%d shared by %d replicas), so no request could ever pass", cost, field, per, whole, n)}}
	}
	return nil
}

// sharesErrors checks every limit of policy i (its own, and each
// override's) against n replicas (the store's, or the Fallback's): each keeps a share (shareProblems),
// and the share's waits stay within MaxWait (a share refills N times
// slower, so its delays are N times longer: waitProblems on the share).
// nil when they all pass.
func (v *validator) sharesErrors(i int, p *Policy, n int64) []error {
	var errs []error
	for _, pr := range v.shareProblems(p, p.Limit, p.Cost, n, v.dynamic[p.Name]) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", p.ref(i), pr.field, pr.text))
	}
	for j := range p.Overrides {
		l, cost := p.complete(&p.Overrides[j])
		for _, pr := range v.shareProblems(p, l, cost, n, v.dynamic[p.Name]) {
			errs = append(errs, fmt.Errorf("%s.overrides[%d].%s: %s", p.ref(i), j, pr.field, pr.text))
		}
	}
	return errs
}

// shareProblems checks limit l of policy p, with fixed cost, against n
// replicas: it keeps a share (shareProblems), and the share's waits stay
// within MaxWait (a share refills n times slower, so its delays are n
// times longer: waitProblems on the share).
func (v *validator) shareProblems(p *Policy, l limiter.Limit, cost, n int64, dynamic bool) []fieldProblem {
	probs := shareProblems(l, cost, n)
	if len(probs) == 0 && n > 1 && l.MaxInFlight == 0 {
		s, _ := l.Share(n)
		for _, pr := range waitProblems(s, max(cost, 1), p.DryRun, v.MaxWait, dynamic) {
			pr.text = fmt.Sprintf("its share over %d replicas (%v, burst %d): %s", n, s.Rate, s.Burst, pr.text)
			probs = append(probs, pr)
		}
	}
	return probs
}
