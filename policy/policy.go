package policy

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/ratekey/ratekey/internal/gcra"
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
	// OnStoreErrorLocal decides on middleware.RateLimitConfig.Fallback, a store of
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
// client went away (middleware.RateLimiter.Handler); its decisions are PASSED,
// REJECTED and REJECTED_DRY_RUN. It takes the same Key, Operations,
// Status, OnMissing, OnStoreError, DryRun and PreAuth as a token bucket,
// and its RetryAfter; not Cost (one slot per request), a cost function, Overrides
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
// cap per route) only: [Validate] refuses other keys. Its requests
// are sorted into classes by Priorities, with Reserved kept for critical
// ones. A refusal is 503 (Status) with Retry-After (RetryAfter, 1 s by
// default) and the problem urn:ratekey:problem:overloaded: the service is saturated,
// not the client over its budget. Its decisions are PASSED, REJECTED and
// REJECTED_DRY_RUN; its results carry the limit in force
// (Limit.MaxInFlight), the slots held (InFlight) and the Class. It takes
// Key, Operations, Status, RetryAfter, DryRun and PreAuth; not Cost,
// a cost function, Overrides, OverrideFunc, or an OnStoreError other than deny.
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
	// Cost is the tokens one request spends, >= 1; 0 means 1 (or, for a
	// policy whose cost a function gives per request, that the function
	// decides: middleware.RateLimitConfig.Costs, [Rules].Costs).
	Cost int64
	// Overrides give some tenants, plans or accounts (of a tenant) another
	// limit; the first whose match equals the request's verified
	// principal's applies (see [Override]). A request without a verified
	// principal uses the policy's own limit. Each match appears once, and
	// matches only on dimensions of Key (an account names its tenant unless
	// [Rules].SingleTenant).
	Overrides []Override
	// OverrideFunc, when set, is asked for a limit for each request with a
	// verified principal that no entry of Overrides matched: a lookup in
	// the caller's own database, say. It is given the request's key (the
	// policy's dimensions with their values; its Parts are valid only
	// during the call), so its answer is a function of the key, as an
	// override's must be: the requests of one key spend one bucket. It is
	// called on every such request, on the request's goroutine, so it must
	// be fast (an in-memory map, a cache; never a network call per
	// request) and safe for concurrent use. ok false keeps the policy's
	// limit. The Override it returns is completed from the policy like the
	// entries of Overrides ([Policy.CheckOverride]); its Tenant, Plan or
	// Account, when set, only name it in the log and the debug JSON
	// ("tenant=acme", else "function"), so set the one it was chosen by. A
	// limit that completed is invalid ([Policy.CheckOverride]) makes the
	// policy's decision ERROR, with the policy's on_store_error outcome,
	// rather than a silent fallback.
	OverrideFunc func(k limitkey.Key) (o Override, ok bool)
	// Operations, when non-empty, restricts the policy to these operations
	// ("GET /v1/reports/{id}", or UNMATCHED for a request no route
	// serves); empty means all.
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
	// PreAuth evaluates the policy in middleware.RateLimiter.PreAuthHandler, before
	// credentials are verified, instead of in middleware.RateLimiter.Handler. Its
	// key may hold only network and operation: nothing verified exists yet.
	PreAuth bool
	// Settle makes the request's cost (Cost, an override's, or its cost function's
	// answer: the estimate) a reservation, for costs known only after the
	// response (an LLM's tokens, a query's rows, a download's bytes): it
	// is charged at admission as any cost, all-or-nothing with the other
	// policies, and when the handler returns it is replaced by the cost
	// the handler reported with middleware.ReportCost (Envoy's
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

// defaultMaxWait is Rules.MaxWait when 0: under the 60 s read timeouts of
// common proxies and servers.
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
			p.Status = 503 // Service Unavailable, RFC 9110 §15.6.4
		}
		if p.RetryAfter == 0 {
			p.RetryAfter = time.Second
		}
		if p.LimitLogFactor == 0 {
			p.LimitLogFactor = defaultLimitLogFactor
		}
	}
	if p.Status == 0 {
		p.Status = 429 // Too Many Requests, RFC 6585 §4
	}
	if p.OnMissing == "" {
		p.OnMissing = OnMissingReject
	}
	if p.OnStoreError == "" {
		p.OnStoreError = OnStoreErrorDeny
	}
}

// AppliesTo reports whether the policy covers operation op: Operations
// is empty or lists op. Safe for concurrent use.
func (p *Policy) AppliesTo(op string) bool {
	return len(p.Operations) == 0 || slices.Contains(p.Operations, op)
}

// LongestWait is the longest a request may be delayed under the policy,
// under its own limit or any of its overrides' (the burst beyond
// delay_after at the rate, or max_delay); 0 for a dry-run policy and an
// in-flight cap, which never delay. The policy must be one [Validate]
// returned. Safe for concurrent use.
func (p *Policy) LongestWait() time.Duration {
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

// delayAfter returns the tokens of l's burst admitted without delay: its
// DelayAfter, where 0 means the whole burst (nginx limit_req's default).
func delayAfter(l limiter.Limit) int64 {
	if l.DelayAfter == 0 {
		return l.Burst
	}
	return l.DelayAfter
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

// defaultLimitLogFactor is a Policy's LimitLogFactor when 0.
const defaultLimitLogFactor = 2
