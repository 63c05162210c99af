package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
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
	// OnStoreErrorLocal decides on [RateLimitConfig].Fallback, a store of
	// this process, while the store cannot decide (probed once a second):
	// with a memory store whose Replicas is the number of processes, the
	// fleet stays within the limit. A policy with it needs a Fallback; if
	// the Fallback fails too, it fails closed (503).
	OnStoreErrorLocal OnStoreError = "local"
)

// Policy is one named limit: which dimensions form its key, how fast its
// buckets refill (or how many of its requests may run at once), and what
// it does in the corner cases.
//
// A policy is of one of three kinds, chosen by its Limit (see
// [limiter.Limit]): a token bucket (Rate and Burst: nginx limit_req), an
// in-flight cap (MaxInFlight: nginx limit_conn), or an adaptive cap
// (MaxInFlightCeiling; below). An in-flight policy's
// request holds a slot from the moment the policy admits it, before the
// handler runs, until the handler returns, panics, or gives up because the
// client went away ([RateLimiter.Handler]); its decisions are PASSED,
// REJECTED and REJECTED_DRY_RUN. It takes the same Key, Operations,
// Status, OnMissing, OnStoreError, DryRun and PreAuth as a token bucket,
// and its RetryAfter; not Cost (one slot per request), CostFunc, Overrides
// or OverrideFunc. The policies of one phase (PreAuth or not) are decided
// together, all-or-nothing across both kinds: a request a token bucket
// rejects takes no slot, and a request refused a slot spends no tokens.
//
// # Adaptive caps
//
// An adaptive cap (Limit.MaxInFlightCeiling > 0, and MinInFlight; the
// demo's max_in_flight: auto) protects the service itself: it caps the
// requests this process runs at once, and moves that limit between
// MinInFlight and MaxInFlightCeiling with the latency of the requests it
// admits: a latency gradient in windows of at least 100 ms, a baseline
// measured from the traffic without pinning it, cuts of at most a quarter
// per window, growth by a sixteenth (see docs/operating.md, "Adaptive
// caps", for the algorithm and its measurements). Its acquire is one
// compare-and-swap of the limit and the counts together, so no limit
// update lets a request pass the limit it was decided against. It is
// decided in the process, never by the store (with Redis, each process
// caps itself: latency is a local fact, and the store is not asked), and
// keys on nothing (one cap for the policy's requests) or on operation (a
// cap per route) only: NewRateLimiter refuses other keys. Its requests
// are sorted into classes by Priorities, with Reserved kept for critical
// ones. A refusal is 503 (Status) with Retry-After (RetryAfter, 1 s by
// default) and the problem [problemOverloaded]: the service is saturated,
// not the client over its budget. Its decisions are PASSED, REJECTED and
// REJECTED_DRY_RUN; its results carry the limit in force
// (Limit.MaxInFlight), the slots held (InFlight) and the Class. It takes
// Key, Operations, Status, RetryAfter, DryRun and PreAuth; not Cost,
// CostFunc, Overrides, OverrideFunc, or an OnStoreError other than deny.
// A fixed cap of this process that sheds by class is an adaptive one with
// MinInFlight = MaxInFlightCeiling.
type Policy struct {
	// Name identifies the policy in keys, headers, logs and problem bodies.
	// Letters, digits, '.', '_' and '-' only, at most 64 bytes.
	Name string
	// Key lists the dimensions of the key in order, e.g. tenant then account.
	// An empty list means one bucket for every request the policy applies to.
	Key []limitkey.Dimension
	// Limit is the token-bucket rate, burst (capacity, tokens), delay_after
	// and max_delay (see [limiter.Limit] for the nginx limit_req mapping),
	// or the in-flight cap: MaxInFlight and, for a shared store, Lease.
	Limit limiter.Limit
	// RetryAfter is, for an in-flight policy, the Retry-After its
	// rejections send (rounded up to whole seconds, at least 1); 0 sends
	// none, since nobody can tell when a running request ends (an adaptive
	// cap's 0 is 1 s: an overloaded service recovers within its latency
	// windows). Only for in-flight policies (a token bucket's Retry-After
	// is computed); >= 0, at most 1 h.
	RetryAfter time.Duration
	// Priorities sort an adaptive cap's requests into classes by verified
	// tenant or plan, or operation: the first entry that matches gives
	// the class; the others are [ClassSheddable] (see [Priority]).
	// Sheddable requests are refused first: they may hold the limit less
	// Reserved less what critical work needed lately; a critical request
	// is refused only when the whole limit is held. Only for adaptive
	// caps.
	Priorities []Priority
	// Reserved is the share of an adaptive cap's limit kept for critical
	// requests beyond what they held lately (0.2 is the demo's 20%),
	// rounded to the nearest slot; 0 to 0.99. It needs a Priorities entry
	// of class critical.
	Reserved float64
	// LimitLogFactor: an adaptive cap logs a line ("ratekey adaptive
	// limit moved", at Warn when falling) when its limit has moved by
	// more than this factor, up or down, since the last line (at first,
	// since MinInFlight, where it starts). Above 1, at most 1000; 0 means
	// 2. Only for adaptive caps.
	LimitLogFactor float64
	// Cost is the tokens one request spends, >= 1; 0 means 1 (or, with
	// CostFunc, that the function decides).
	Cost int64
	// CostFunc, when set, gives each request's cost instead of Cost, e.g.
	// the number of items in a batch call. It is called once per request
	// the policy applies to (after the key is built), must be fast and safe
	// for concurrent use, and must not consume the request body unless it
	// restores it. A cost it returns that is below 1, or an error, refuses
	// the request with 400 and the problem
	// urn:ratekey:problem:invalid-cost naming the policy (the error text
	// goes to the log and the debug JSON, never to the client); a cost above the burst (or beyond max_delay's room) is the
	// never-satisfiable answer, 429 without Retry-After, as for a fixed cost.
	// A dry-run policy reports either as REJECTED_DRY_RUN and lets the
	// request through. Set Cost or CostFunc, not both.
	CostFunc func(r *http.Request) (int64, error)
	// Overrides give some tenants, plans or accounts (of a tenant) another
	// limit; the first whose match equals the request's verified
	// principal's applies (see [Override]). A request without a verified
	// principal uses the policy's own limit. Each match appears once, and
	// matches only on dimensions of Key (an account names its tenant unless
	// [RateLimitConfig].SingleTenant).
	Overrides []Override
	// OverrideFunc, when set, is asked for a limit for each request with a
	// verified principal that no entry of Overrides matched: a lookup in
	// the caller's own database, say. It is called on every such request,
	// on the request's goroutine, so it must be fast (an in-memory map, a
	// cache; never a network call per request) and safe for concurrent
	// use. ok false keeps the policy's limit. The Override it returns is
	// completed from the policy like the entries of Overrides; its
	// Tenant, Plan or Account, when set, only name it in the log and the
	// debug JSON ("tenant=acme", else "function"), so set the one it was
	// chosen by. Its answer must be the same for every principal of one key
	// (a function of the key's dimensions: with Key [tenant], of the tenant
	// alone), or the key's requests spend buckets of two shapes, each full
	// to its own burst; NewRateLimiter cannot check a function, as it
	// checks Overrides. A limit that completed is invalid (see
	// [NewRateLimiter]) makes the policy's decision ERROR, with the
	// policy's on_store_error outcome, rather than a silent fallback.
	OverrideFunc func(p identity.Principal) (o Override, ok bool)
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
	// Settle makes the request's cost (Cost, an override's, or CostFunc's
	// answer: the estimate) a reservation, for costs known only after the
	// response (an LLM's tokens, a query's rows, a download's bytes): it
	// is charged at admission as any cost, all-or-nothing with the other
	// policies, and when the handler returns it is replaced by the cost
	// the handler reported with [ReportCost] (Envoy's
	// apply_on_stream_done, Kong's response-ratelimiting). Above the
	// reservation the difference is charged unconditionally (the bucket
	// may go into debt: later requests are refused, with a Retry-After,
	// or delayed until it is repaid at the rate); below it the difference
	// is refunded, never past a full bucket nor past another request's
	// charge (package limiter, "Reserve, then settle"); with nothing
	// reported the reservation stands. Token buckets only. Overrides,
	// plans and N/d rates apply as to any policy: "free: 100 000 tokens a
	// day, pro: 5 000 000" is one settling policy with a plan override.
	Settle bool
	// MaxCost bounds what one request settles at, in tokens: a reported
	// cost above it is clamped to it and logged (at Warn) as a defect of
	// the handler. 0 means the burst of the limit that applied (the
	// policy's or its override's). Only with Settle; not below a fixed
	// Cost (the reservation); and MaxCost × the rate's interval at most
	// 2^53-1 ns (about 104 days of the rate).
	MaxCost int64
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
	// max_delay, dry_run, status, operations, fail modes, overrides,
	// settle, max_cost);
	// budgets are kept. A changed key list names other buckets: they start
	// full; so do the buckets of an override whose rate or burst changed
	// (its tenants, plans or accounts only).
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
		note("max_in_flight", o.Limit.MaxInFlight, n.Limit.MaxInFlight)
		note("lease", o.Limit.Lease, n.Limit.Lease)
		note("min_in_flight", o.Limit.MinInFlight, n.Limit.MinInFlight)
		note("max_in_flight_ceiling", o.Limit.MaxInFlightCeiling, n.Limit.MaxInFlightCeiling)
		note("priorities", o.Priorities, n.Priorities)
		note("reserved", o.Reserved, n.Reserved)
		note("limit_log_factor", o.LimitLogFactor, n.LimitLogFactor)
		note("retry_after", o.RetryAfter, n.RetryAfter)
		kind := PolicyUpdated
		if o.Limit.Rate.Interval() != n.Limit.Rate.Interval() || o.Limit.Burst != n.Limit.Burst {
			kind = PolicyRestarted
		}
		if ot, nt := o.overridesText(), n.overridesText(); ot != nt {
			diffs = append(diffs, fmt.Sprintf("overrides %s -> %s", ot, nt))
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
		note("settle", o.Settle, n.Settle)
		note("max_cost", o.MaxCost, n.MaxCost)
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

// defaultMaxWait is RateLimitConfig.MaxWait when 0: under the 60 s read
// timeouts of common proxies and servers.
const defaultMaxWait = 50 * time.Second

var policyNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ref names policy i in an error as a config file locates it:
// policies[i] ("name"), or policies[i] alone when the name is not a valid
// one (it could be anything).
func (p *Policy) ref(i int) string {
	if policyNameRE.MatchString(p.Name) {
		return fmt.Sprintf("policies[%d] (%q)", i, p.Name)
	}
	return fmt.Sprintf("policies[%d]", i)
}

// validate checks p, policy i, and fills its defaults. It returns every
// problem found, each naming its field as a config file writes it
// (policies[1] ("per-account").max_delay: ...), and refuses what can only
// be a mistake: a cost above the burst or one that max_delay leaves no room
// for (no request could ever pass), a wait longer than maxWait, and an
// override whose match the key cannot honour (see [Override];
// singleTenant is [RateLimitConfig].SingleTenant).
func (p *Policy) validate(i int, custom map[limitkey.Dimension]DimensionFunc, maxWait time.Duration, singleTenant bool) error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", p.ref(i), field, fmt.Sprintf(format, args...)))
	}
	if !policyNameRE.MatchString(p.Name) {
		fail("name", "%s must be 1-64 letters, digits, '.', '_' or '-'", quote.Value(p.Name))
	}
	p.validateKey(custom, fail)
	if p.CostFunc != nil && p.Cost != 0 {
		fail("cost", "%d is fixed, but the policy has a cost function: set one or the other", p.Cost)
	}
	if p.Limit.MaxInFlightCeiling != 0 || p.Limit.MinInFlight != 0 {
		p.validateAdaptive(fail)
		p.fillDefaults()
		return errors.Join(append(errs, p.validateModes(i)...)...)
	}
	if len(p.Priorities) > 0 || p.Reserved != 0 || p.LimitLogFactor != 0 {
		fail("priorities", "priorities, reserved and limit_log_factor are for adaptive caps (max_in_flight: auto); a fixed cap of this process that sheds by class is one with min_in_flight = max_in_flight_ceiling")
	}
	if p.Limit.MaxInFlight != 0 {
		p.validateInFlight(fail)
		p.fillDefaults()
		return errors.Join(append(errs, p.validateModes(i)...)...)
	}
	if p.RetryAfter != 0 {
		fail("retry_after", "%v is for max_in_flight policies (a token bucket computes its Retry-After)", p.RetryAfter)
	}
	others := len(errs) > 0
	p.fillDefaults()
	// Waits are checked only when nothing else of the policy is wrong.
	probs := limitProblems(p.Limit, p.Cost, p.DryRun, maxWait, p.CostFunc != nil, !others)
	for _, pr := range probs {
		fail(pr.field, "%s", pr.text)
	}
	if len(probs) == 0 {
		errs = append(errs, p.validateOverrides(i, maxWait, singleTenant)...)
		if len(errs) == 0 {
			errs = append(errs, p.validateSettle(i)...)
		}
	}
	return errors.Join(append(errs, p.validateModes(i)...)...)
}

// validateKey checks p's key: each dimension once, a valid name, built in
// or custom, and known before authentication for a pre_auth policy.
func (p *Policy) validateKey(custom map[limitkey.Dimension]DimensionFunc, fail func(field, format string, args ...any)) {
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
		if !d.Builtin() && custom[d] == nil {
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
func (p *Policy) validateSettle(i int) []error {
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
	check := func(l limiter.Limit, cost int64, where string) {
		m := p.MaxCost
		if m == 0 {
			m = l.Burst
		} else if p.CostFunc == nil && cost > m {
			fail("%d is below the cost %d reserved%s: no request could settle at its own reservation", m, cost, where)
		}
		if t := int64(l.Rate.Interval()); m > gcra.MaxSettle/t {
			fail("%d tokens at %v%s exceed the largest settle, 2^53-1 ns of the rate (about 104 days): lower max_cost", m, l.Rate, where)
		}
	}
	check(p.Limit, p.Cost, "")
	for j := range p.Overrides {
		l, cost := p.complete(&p.Overrides[j])
		check(l, cost, fmt.Sprintf(" (overrides[%d])", j))
	}
	return errs
}

// validateInFlight checks the fields of an in-flight policy, reporting
// each problem to fail(field, format, args...).
func (p *Policy) validateInFlight(fail func(field, format string, args ...any)) {
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
	if p.Cost > 1 || p.CostFunc != nil {
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

// longestWait is the longest a request may wait for the policy, under its
// own limit or any of its overrides'. The policy must be valid.
func (p *Policy) longestWait() time.Duration {
	d := longestWait(p.Limit, p.DryRun)
	for j := range p.Overrides {
		l, _ := p.complete(&p.Overrides[j])
		d = max(d, longestWait(l, p.DryRun))
	}
	return d
}

// longestWait is the longest a request may wait for limit l: the bucket's
// ceiling less its delay_after part; 0 in dry run, which never delays. l
// must be valid.
func longestWait(l limiter.Limit, dryRun bool) time.Duration {
	if dryRun || l.MaxInFlight != 0 || l.MaxInFlightCeiling != 0 { // an in-flight cap never delays
		return 0
	}
	return gcra.Ceiling(l) - gcra.Free(l)
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
		if d := ps[i].longestWait(); d > longest[ph] {
			longest[ph], which[ph] = d, i
		}
	}
	if sum := longest[0] + longest[1]; longest[0] > 0 && longest[1] > 0 && sum > maxWait {
		return fmt.Errorf("%s (pre_auth) and %s: a request may wait up to %v before authentication and %v after it, %v in all, longer than %v (RateLimitConfig.MaxWait): lower their max_delay or delay_after's share",
			ps[which[0]].ref(which[0]), ps[which[1]].ref(which[1]), longest[0].Round(time.Second), longest[1].Round(time.Second), sum.Round(time.Second), maxWait)
	}
	return nil
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
// status 429, on_missing reject, on_store_error deny; for an adaptive cap,
// min_in_flight 1, status 503, retry_after 1 s and limit_log_factor 2.
func (p *Policy) fillDefaults() {
	if p.Cost == 0 {
		p.Cost = 1
	}
	if p.Limit.MaxInFlightCeiling != 0 {
		// An adaptive cap: the service is saturated, 503 with a
		// Retry-After; it starts at 1 slot unless told otherwise.
		p.Limit.MinInFlight = max(p.Limit.MinInFlight, 1)
		if p.Status == 0 {
			p.Status = http.StatusServiceUnavailable
		}
		if p.RetryAfter == 0 {
			p.RetryAfter = time.Second
		}
		if p.LimitLogFactor == 0 {
			p.LimitLogFactor = defaultLimitLogFactor
		}
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
