package middleware

import (
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// Decision is the outcome of one policy for one request (and, in
// [Evaluation.Decision], of the whole request), in nginx limit_req's
// vocabulary ($limit_req_status) plus ratekey's own SKIPPED and ERROR. The
// strings are a public contract: they appear in the debug JSON, the logs
// and the optional RateLimit-Decision response field.
type Decision string

const (
	// DecisionPassed: the bucket had room; the request spends its cost and
	// proceeds at once.
	DecisionPassed Decision = "PASSED"
	// DecisionDelayed: the bucket had room, but the request dips below the
	// policy's delay_after part of the burst: it spends its cost at once and
	// waits until it conforms to the rate (nginx limit_req without nodelay).
	DecisionDelayed Decision = "DELAYED"
	// DecisionRejected: no room now (or never, or a required dimension is
	// missing); nothing is charged.
	DecisionRejected Decision = "REJECTED"
	// DecisionDelayedDryRun: a dry-run policy would have delayed the
	// request; it proceeds at once, and the policy's bucket is charged as
	// in enforcing mode.
	DecisionDelayedDryRun Decision = "DELAYED_DRY_RUN"
	// DecisionRejectedDryRun: a dry-run policy would have rejected the
	// request; it proceeds, and the policy's bucket is not charged (as in
	// enforcing mode, where a rejection charges nothing).
	DecisionRejectedDryRun Decision = "REJECTED_DRY_RUN"
	// DecisionSkipped: the request lacks a key dimension and the policy's
	// on_missing is skip; SkippedReason says which.
	DecisionSkipped Decision = "SKIPPED"
	// DecisionError: the limiter could not decide; the policy's
	// on_store_error chose the outcome.
	DecisionError Decision = "ERROR"
)

// DimensionFunc supplies the value of a custom key dimension for a request,
// and false when the request has none. It must derive the value from
// verified or server-side data only (never a header the client writes
// freely), and must never return a secret. It must be safe for concurrent use.
type DimensionFunc func(r *http.Request) (value string, ok bool)

// PolicyResult is one policy's decision for one request: an [Evaluation]
// holds one per applicable policy, and so does a [Record], whose JSON (the
// debug endpoint's answer) encodes each with [PolicyResult.MarshalJSON]. It
// holds the encoded key (secret-free by construction) but never a
// credential.
type PolicyResult struct {
	// Policy is the policy's name.
	Policy string
	// Key is the encoded limitkey.Key, or "" when a dimension was missing.
	Key string
	// Decision is the outcome.
	Decision Decision
	// Cost is the tokens the request spends (or would spend) under this
	// policy: the policy's (or its override's) fixed cost, or what its
	// cost function returned.
	Cost int64
	// Limit is the limit that applied: the policy's, or the override's
	// named by Override; when the store is shared by several processes
	// without a shared store (the memory store's Replicas), this
	// process's share of it ([limiter.Limit.Share]). For an adaptive cap,
	// the policy's bounds with MaxInFlight the limit the request was
	// decided against.
	Limit limiter.Limit
	// limit is the configured limit, the one the store is given (it
	// names the bucket; a shared store decides at its share, Limit).
	limit limiter.Limit
	// Override names the [policy.Override] whose limit applied ("tenant=acme",
	// "plan=pro", "account=alice", "tenant=acme|account=alice", or
	// "function" for an
	// [policy.Policy].OverrideFunc answer naming none); "" for the policy's own.
	Override string
	// Remaining is the whole tokens left after this request (after charging
	// when it was charged).
	Remaining int64
	// RetryAfter is how long until the cost would fit, when rejected; 0 otherwise.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// Never is true when the cost exceeds the burst (or cannot fit within
	// max_delay): no wait helps.
	Never bool
	// Delay is how long the request waits for this policy when DELAYED, or
	// would have waited when DELAYED_DRY_RUN; 0 otherwise.
	Delay time.Duration
	// DryRun reports that the policy (or the whole rate limiter) is in dry
	// run: it is accounted but never rejects or delays.
	DryRun bool
	// Charged reports that this policy's bucket was charged the request's
	// cost (see [limiter.Limiter] for when a dry-run policy is).
	Charged bool
	// Missing is the absent dimension when the key could not be built.
	Missing limitkey.Dimension
	// SkippedReason explains SKIPPED and missing-dimension rejections.
	SkippedReason string
	// Err is the limiter error behind DecisionError (or the invalid limit
	// an [policy.Policy].OverrideFunc returned), or the cost function's failure
	// behind a REJECTED answered with urn:ratekey:problem:invalid-cost.
	Err error
	// Store names the limiter store that decided ("memory", "redis", ...:
	// the package of the limiter's implementation), or "process" for an
	// adaptive cap, which the process decides itself.
	Store string
	// Fallback reports that the policy was decided on
	// [RateLimitConfig].Fallback while the store could not decide
	// ([policy.OnStoreErrorLocal]); Store then names the fallback's store and
	// Limit is this process's share on it.
	Fallback bool
	// Cached reports that the store answered this rejection from its
	// local deny cache (limiter.Decision.Cached): no round trip, nothing
	// charged.
	Cached bool
	// Prefetched reports that the store decided this policy from tokens
	// the process had prefetched (limiter.Decision.Prefetched: limiter/redis
	// with Prefetch), without a round trip of its own.
	Prefetched bool
	// HashSlot is 1 + the Redis Cluster slot that decided, 0 when none
	// did (limiter.Decision.HashSlot).
	HashSlot int
	// InFlight is, for an in-flight policy, the slots of the key held
	// after this request when admitted (its cost included, charged or
	// not), now otherwise; more than Limit.MaxInFlight when the cap was
	// lowered while they were held (limiter.Decision.InFlight). 0 for a
	// token bucket.
	InFlight int64
	// Settle reports that the policy settles ([policy.Policy].Settle): Cost is
	// the reservation, charged at admission, which the cost the handler
	// reports ([ReportCost]) replaces once it returns.
	Settle bool
	// Settled is, for a settling policy whose reservation was charged
	// and whose handler has returned, the tokens the request finally
	// spent: the cost reported (at most MaxCost) or, with nothing
	// reported, Cost. 0 otherwise (an Evaluation is complete before the
	// handler runs; a Record's copy gets it when the handler returns).
	Settled int64
	// Class is, for an adaptive cap, the request's priority class (see
	// [policy.Priority]); "" for other policies.
	Class policy.Class

	settled    bool  // Settled is set (the debug JSON's "settled" is not null)
	maxCost    int64 // the most a report settles at: MaxCost, or the burst of the limit that applied
	status     int
	retryAfter time.Duration // an in-flight policy's RetryAfter
	onStore    policy.OnStoreError
	principal  bool   // a principal (not anonymous) was present
	item       string // the policy's RateLimit-Policy list item
	badCost    bool   // the cost function failed or returned < 1 (Err says which)
}

// Evaluation is the combined outcome of every policy that applies to one request.
type Evaluation struct {
	// Operation is the request's operation ("GET /v1/reports/{id}").
	Operation string
	// Policies holds one result per applicable policy, in configuration order.
	Policies []PolicyResult
	// Decision sums the request up: REJECTED (or ERROR, for a store
	// failure failing closed) when it may not proceed; otherwise DELAYED
	// when it must wait, ERROR when a store failure failed open,
	// REJECTED_DRY_RUN or DELAYED_DRY_RUN when a dry-run policy would have
	// acted, PASSED when a policy admitted it, SKIPPED when every policy
	// skipped it, and "" when no policy applies.
	Decision Decision
	// Allowed is true when the request may proceed (after Delay).
	Allowed bool
	// Delay is how long the request must wait before it proceeds: the
	// longest Delay of its DELAYED policies (nginx waits for the longest
	// of its zones' delays). 0 unless Decision is DELAYED. The live chain
	// evaluates in two phases, PreAuthHandler's policies and then
	// Handler's, each waiting out its own Delay, so a request can wait
	// for the sum of the two (a main-phase bucket refills while the
	// pre-auth wait lasts only if it was in debt); Check, which evaluates
	// every policy at once, reports the longest.
	Delay time.Duration
	// Abandoned reports that the request's context ended (the client went
	// away, or its deadline passed): before the limiter answered (its
	// policies are then ERROR, with the context's error, but no fail mode
	// applies: Allowed is false, and no store error or fail-open is
	// counted), or, set by the Handler, during Delay. A client timeout, not
	// a server rejection; a budget already spent stays spent, as in nginx.
	Abandoned bool
	// Charged is true when the request's cost was spent against every
	// enforcing policy (Check with charge true and none of them rejected).
	// When false, the Remaining and ResetAfter of admitted results still
	// describe the state as if charged (the would-be decision);
	// [PolicyResult.Current] gives the state now.
	Charged bool
	// RoundTrips is how many round trips to a shared store the limiter
	// call took (limiter.Decision.RoundTrips); 0 for the memory store.
	RoundTrips int
	// Replicas is how many processes share the budgets of the store that
	// decided, each enforcing its share of every limit (the memory store's
	// Replicas; the Fallback's when a policy decided on it): 1 for the
	// whole limit.
	Replicas int
}

// Check evaluates every policy that applies to r. With charge true, the
// request's cost is spent all-or-nothing (if any enforcing policy rejects,
// none is charged; dry-run policies follow the [limiter.Limiter] rule);
// with charge false nothing is spent (the debug endpoint's would-be
// decision). An in-flight policy's slot is taken and released again before
// Check returns: only the Handler holds slots, while the handler runs; a
// settling policy's reservation stands as the cost (only the Handler
// settles, when the handler returns). Check neither waits nor writes: the
// Handler does. It reads the
// client address and principal that [ClientAddress] and [Authenticate]
// stored in r's context, and the configuration current when it starts
// (see [RateLimiter.Reload]). Safe for concurrent use.
func (rl *RateLimiter) Check(r *http.Request, charge bool) Evaluation {
	st := rl.state.Load()
	sc := newScratch()
	rs := stateFrom(r.Context())
	ev := st.evaluate(r, rs, st.fixedOr(rs, r), charge, phaseAll, sc)
	st.releaseSlots(r, sc, &ev, false)
	return ev
}

// check is Check without charging, for phase ph (the debug endpoint's
// would-be decisions): it takes no slot.
func (st *rateLimitState) check(r *http.Request, ph phase) Evaluation {
	rs := stateFrom(r.Context())
	return st.evaluate(r, rs, st.fixedOr(rs, r), false, ph, newScratch())
}

// fixedOr returns the operation [WithOperation] fixed in rs (which may be
// nil), or else the one st names for r, without keeping it in rs.
func (st *rateLimitState) fixedOr(rs *requestState, r *http.Request) string {
	if rs != nil {
		rs.mu.Lock()
		op, fixed := rs.op, rs.opFixed
		rs.mu.Unlock()
		if fixed {
			return op
		}
	}
	return st.Operation(r)
}

// phase selects the policies an evaluation covers.
type phase int

const (
	phaseAll     phase = iota // every policy (Check, the debug endpoint)
	phasePreAuth              // PreAuth policies only (RateLimiter.PreAuthHandler)
	phaseMain                 // the others (RateLimiter.Handler)
)

// covers reports whether policy p is evaluated in phase ph.
func (ph phase) covers(p *policy.Policy) bool {
	switch ph {
	case phasePreAuth:
		return p.PreAuth
	case phaseMain:
		return !p.PreAuth
	}
	return true
}

// evaluate is check, with r's request state rs (nil when r has none) and
// operation op, in the working memory sc, where the Evaluation's policy
// results live.
func (st *rateLimitState) evaluate(r *http.Request, rs *requestState, op string, charge bool, ph phase, sc *scratch) Evaluation {
	ev := Evaluation{Operation: op, Allowed: true, Policies: sc.policies[:0], Replicas: int(st.replicas)}
	who := subjectOf(rs)
	reqs := sc.reqs[:0]
	idx := sc.idx[:0] // index into ev.Policies for each request
	missingReject := false
	for i := range st.Policies {
		p := &st.Policies[i]
		if !ph.covers(p) || !p.AppliesTo(op) {
			continue
		}
		// The policy's result, filled in place: every path below leaves
		// it in ev.Policies (no 320-byte copy).
		ev.Policies = append(ev.Policies, PolicyResult{})
		j := len(ev.Policies) - 1
		req, asks, refuses := st.prepare(r, sc, i, &ev.Policies[j], j, &who, op)
		missingReject = missingReject || refuses
		if asks {
			idx = append(idx, j)
			reqs = append(reqs, req)
		}
	}
	if missingReject {
		// The request is refused anyway: charge nothing, but still say what
		// the other policies would decide.
		charge = false
	}
	if len(sc.caps) > 0 {
		charge = st.decideAdaptive(sc, &ev, charge)
		ev.Charged = charge // the caps took their slots; the store says for the others
	}
	if len(reqs) > 0 {
		st.decideAll(r, sc, &ev, idx, reqs, charge)
	}
	ev.Decision = summarise(&ev)
	if ev.Abandoned {
		ev.Allowed = false
	}
	if !ev.Allowed {
		ev.Delay = 0
		ev.Charged = false
		st.releaseAdaptive(nil, sc, &ev) // a store refused: the caps' slots go back
	}
	return ev
}

// subject is who a request is, from its request state: the principal and
// the client address, when known.
type subject struct {
	principal     limitkey.Principal
	client        *trustedproxy.Result
	authenticated bool // a principal that is not anonymous
}

// subjectOf returns rs's subject (rs may be nil).
func subjectOf(rs *requestState) subject {
	var who subject
	hasPrincipal := false
	if rs != nil {
		who.principal, hasPrincipal = rs.principal, rs.hasPrincipal
		if rs.hasClient {
			who.client = &rs.client
		}
	}
	who.authenticated = hasPrincipal && who.principal.Method != limitkey.MethodAnonymous
	return who
}

// prepare fills res, the result of policy i (ev.Policies[j]) for r, up to
// its limiter request: asks reports that the store must decide req;
// refuses, that res already refuses the request (a missing dimension, an
// invalid override or cost). A policy without its key, an adaptive cap
// (decided in the process) and a failed override or cost are decided here.
func (st *rateLimitState) prepare(r *http.Request, sc *scratch, i int, res *PolicyResult, j int, who *subject, op string) (req limiter.Request, asks, refuses bool) {
	p := &st.Policies[i]
	res.Policy, res.Cost, res.Limit, res.DryRun, res.Store = p.Name, p.Cost, p.Limit, p.DryRun || st.DryRun, st.store
	res.status, res.retryAfter, res.onStore, res.principal, res.item = p.Status, p.RetryAfter, p.OnStoreError, who.authenticated, st.items[i]
	key, ok := st.keyOf(r, sc, p, res, who, op)
	if !ok {
		return req, false, res.Decision == DecisionRejected
	}
	if ap := st.adaptive[i]; ap != nil { // decided later, in the process
		sc.classify(res, j, ap, p, &who.principal, op)
		return req, false, false
	}
	if who.authenticated && (st.ovr[i] != nil || p.OverrideFunc != nil) {
		if err := st.override(i, res, &who.principal, key); err != nil {
			// An invalid limit from the caller's function: no silent
			// fallback; the policy's fail mode decides.
			res.Decision, res.Err = DecisionError, err
			res.Limit = st.share(res.Limit)
			return req, false, res.refuses()
		}
	}
	res.limit = res.Limit
	res.Settle, res.maxCost = p.Settle, maxCost(p, res.limit)
	if st.replicas > 1 {
		res.Limit = st.share(res.Limit)
	}
	if f := st.costs[i]; f != nil {
		if res.Cost, res.Err = costOf(f, r, res.maxCost); res.Err != nil {
			res.badCost = true
			res.Decision = DecisionRejected
			if res.DryRun {
				res.Decision = DecisionRejectedDryRun
			}
			return req, false, !res.DryRun
		}
	}
	return limiter.Request{Key: res.Key, Limit: res.limit, Cost: res.Cost, DryRun: res.DryRun, Settle: p.Settle}, true, false
}

// keyOf derives policy p's key for r, encoded into res.Key, and returns
// it (its Parts in sc, valid until the next keyOf) and true, or, when r
// lacks one of its dimensions, decides res by the policy's on_missing and
// reports false.
func (st *rateLimitState) keyOf(r *http.Request, sc *scratch, p *policy.Policy, res *PolicyResult, who *subject, op string) (limitkey.Key, bool) {
	key := limitkey.Key{Policy: p.Name, Parts: sc.parts[:0]}
	for _, d := range p.Key {
		v, ok := st.dimension(r, sc, d, op, &who.principal, who.client)
		if !ok {
			res.Missing = d
			break
		}
		key.Parts = append(key.Parts, limitkey.Part{Dimension: d, Value: v})
	}
	if res.Missing == "" {
		start := len(sc.b)
		sc.b = key.AppendTo(sc.b)
		res.Key = sc.str(start)
		return key, true
	}
	res.Limit = st.share(res.Limit) // the limit this process states
	res.SkippedReason = missingReason(res.Missing, who.authenticated)
	switch {
	case p.OnMissing == policy.OnMissingSkip:
		res.Decision = DecisionSkipped
	case res.DryRun:
		res.Decision = DecisionRejectedDryRun
	default:
		res.Decision = DecisionRejected
	}
	return key, false
}

// summarise sets ev.Allowed from the enforcing policies' decisions and
// returns the request's Decision (see [Evaluation.Decision]): its
// policies' of highest rank.
func summarise(ev *Evaluation) Decision {
	var d Decision
	best := 0
	ev.Allowed = true
	for i := range ev.Policies {
		res := &ev.Policies[i]
		refuses := res.refuses()
		if refuses {
			ev.Allowed = false
		}
		if r := rank(res.Decision, refuses); r > best {
			best, d = r, res.Decision
		}
	}
	return d
}

// Current returns the whole tokens left and the time until the bucket is
// full as they stand: an admitted result whose cost was not charged (a
// Check without charge, or a request another policy rejected) reports the
// would-be state after charging, so the cost is added back. For an
// in-flight policy it returns the free slots (0 when more are held than
// MaxInFlight) and 0.
func (res *PolicyResult) Current() (remaining int64, resetAfter time.Duration) {
	remaining, resetAfter = res.Remaining, res.ResetAfter
	if m := res.Limit.MaxInFlight; m != 0 {
		if res.admitted() && !res.Charged {
			remaining += res.Cost
		}
		return min(max(remaining, 0), m), 0
	}
	if res.admitted() && !res.Charged {
		remaining += res.Cost
		resetAfter -= time.Duration(res.Cost) * res.Limit.Rate.Interval()
	}
	return min(max(remaining, 0), res.Limit.Burst), max(resetAfter, 0)
}

// overMaxDelay reports whether a rejection is due to max_delay: the bucket
// held the cost, but the request would have waited longer than allowed.
func (res *PolicyResult) overMaxDelay() bool {
	return (res.Decision == DecisionRejected || res.Decision == DecisionRejectedDryRun) &&
		res.Limit.MaxDelay > 0 && !res.Never && res.Remaining >= res.Cost
}

// admitted reports whether the limiter admitted the request under this
// policy (possibly with a delay, possibly in dry run).
func (res *PolicyResult) admitted() bool {
	switch res.Decision {
	case DecisionPassed, DecisionDelayed, DecisionDelayedDryRun:
		return true
	}
	return false
}

// dimension returns the value of dimension d for the request, and false when
// the request does not carry it. Only verified principal fields and the
// resolved client network are used; an empty value counts as missing (p is
// the zero Principal when no principal was established, so its fields are).
func (st *rateLimitState) dimension(r *http.Request, sc *scratch, d limitkey.Dimension, op string, p *limitkey.Principal, c *trustedproxy.Result) (string, bool) {
	var v string
	switch d {
	case limitkey.DimOperation:
		v = op
	case limitkey.DimNetwork:
		if c == nil || !c.Network.IsValid() {
			return "", false
		}
		start := len(sc.b)
		sc.b = c.Network.AppendTo(sc.b)
		v = sc.str(start)
	case limitkey.DimTenant:
		v = p.Tenant
	case limitkey.DimAccount:
		v = p.Account
	case limitkey.DimCredential:
		v = p.CredentialID
	case limitkey.DimPlan:
		v = p.Plan
	default:
		f := st.Custom[d]
		if f == nil {
			return "", false
		}
		var ok bool
		if v, ok = f(r); !ok {
			return "", false
		}
	}
	return v, v != ""
}

func missingReason(d limitkey.Dimension, authenticated bool) string {
	switch {
	case d == limitkey.DimNetwork:
		return "no client address was resolved"
	case d == limitkey.DimTenant && !authenticated:
		return "no verified principal carries a tenant"
	case d == limitkey.DimTenant:
		return "the verified principal carries no tenant"
	case d == limitkey.DimAccount && !authenticated:
		return "no verified principal carries an account"
	case d == limitkey.DimAccount:
		return "the verified principal carries no account"
	case d == limitkey.DimCredential && !authenticated:
		return "no verified principal carries a credential"
	case d == limitkey.DimCredential:
		return "the verified principal carries no credential"
	case d == limitkey.DimPlan && !authenticated:
		return "no verified principal carries a plan"
	case d == limitkey.DimPlan:
		return "the verified principal carries no plan"
	}
	return "the request carries no " + string(d)
}

// log writes a line per non-PASSED decision of the request: REJECTED,
// DELAYED, the dry-run decisions and ERROR at Info or Warn (bounded per
// interval unless LogEveryDecision: see logLine), SKIPPED at Debug. Field
// names match the debug JSON.
func (st *rateLimitState) log(r *http.Request, ev *Evaluation) {
	sampled := st.SamplePassed > 0 && rand.Float64() < st.SamplePassed
	for i := range ev.Policies {
		res := &ev.Policies[i]
		level, logged := logLevel(res, ev, sampled)
		if !logged || !st.Logger.Enabled(r.Context(), level) || !st.logLine(res, level) {
			continue
		}
		attrs := []slog.Attr{
			slog.String("policy", res.Policy),
			slog.String("decision", string(res.Decision)),
			slog.String("key", res.Key),
			slog.String("operation", ev.Operation),
			slog.Int64("cost", res.Cost),
			slog.Int64("remaining", res.remaining()),
			slog.String("store", res.Store),
		}
		attrs = res.shapeAttrs(attrs)
		if c, ok := ClientFrom(r.Context()); ok && c.Network.IsValid() {
			attrs = append(attrs, slog.String("client", c.Client.String()), slog.String("network", c.Network.String()))
		}
		attrs = res.outcomeAttrs(attrs, ev.Abandoned)
		st.Logger.LogAttrs(r.Context(), level, "ratekey decision", attrs...)
	}
}

// logLevel returns the level of res's decision line, and whether it is
// written at all (a PASSED line only when sampled).
func logLevel(res *PolicyResult, ev *Evaluation, sampled bool) (slog.Level, bool) {
	switch {
	case res.Decision == DecisionPassed:
		return slog.LevelInfo, sampled
	case res.Decision == DecisionSkipped:
		return slog.LevelDebug, true
	case res.Decision == DecisionError && !ev.Abandoned:
		return slog.LevelWarn, true
	case res.Missing == limitkey.DimNetwork:
		return slog.LevelError, true // ClientAddress is not mounted in front: a wiring bug
	}
	return slog.LevelInfo, true
}

// shapeAttrs appends what res's policy is beyond a bucket: dry run,
// reservation and settlement, override, adaptive class and limit.
func (res *PolicyResult) shapeAttrs(attrs []slog.Attr) []slog.Attr {
	if res.DryRun {
		attrs = append(attrs, slog.Bool("dry_run", true))
	}
	if res.Settle {
		attrs = append(attrs, slog.Int64("reserved", res.Cost))
		if res.settled {
			attrs = append(attrs, slog.Int64("settled", res.Settled))
		}
	}
	if res.Override != "" {
		attrs = append(attrs, slog.String("override", res.Override))
	}
	if res.Class != "" {
		attrs = append(attrs, slog.String("class", string(res.Class)), slog.Int64("adaptive_limit", res.Limit.MaxInFlight))
	}
	return attrs
}

// outcomeAttrs appends why res decided as it did: the skipped reason, the
// error and fail mode, the Retry-After (as in the debug JSON and the
// response), the delay, or the client's timeout (abandoned: the request
// ended first).
func (res *PolicyResult) outcomeAttrs(attrs []slog.Attr, abandoned bool) []slog.Attr {
	retry, hasRetry := res.retryAfterSeconds()
	switch delay, delayed := res.delaySeconds(); {
	case res.SkippedReason != "":
		attrs = append(attrs, slog.String("skipped_reason", res.SkippedReason))
	case res.badCost:
		attrs = append(attrs, slog.String("error", res.errorText()))
	case res.Err != nil && abandoned:
		// No fail mode applies: the request ended, the store did not fail.
		attrs = append(attrs, slog.String("error", "the request ended before the limiter answered"), slog.String("outcome", outcomeClientTimeout))
	case res.Err != nil:
		attrs = append(attrs, slog.String("error", res.errorText()), slog.String("fail_mode", res.failMode()))
		if hasRetry {
			attrs = append(attrs, slog.Int64("retry_after_seconds", retry)) // failing closed: the 503's
		}
	case res.Never && res.Cost <= res.Limit.Burst:
		attrs = append(attrs, slog.String("error", "cost exceeds what max_delay allows"), slog.Float64("max_delay_seconds", res.Limit.MaxDelay.Seconds()))
	case res.Never:
		attrs = append(attrs, slog.String("error", "cost exceeds burst"))
	case hasRetry: // REJECTED or REJECTED_DRY_RUN by the limit
		attrs = append(attrs, slog.Int64("retry_after_seconds", retry))
		if res.overMaxDelay() {
			attrs = append(attrs, slog.String("error", "the wait would exceed max_delay"), slog.Float64("max_delay_seconds", res.Limit.MaxDelay.Seconds()))
		}
	case delayed:
		attrs = append(attrs, slog.Float64("delay_seconds", delay))
		if res.Decision == DecisionDelayed && abandoned {
			attrs = append(attrs, slog.String("outcome", outcomeClientTimeout))
		}
	}
	return attrs
}

// held reports whether the evaluation in sc took in-flight slots (of a
// store or of an adaptive cap) or reserved tokens (they must be released
// and settled when the handler returns: see releaseSlots and settle).
func (sc *scratch) held() bool { return sc.heldDecs != nil || sc.capsTaken() }

// capsTaken reports whether the evaluation in sc took a slot of an
// adaptive cap.
func (sc *scratch) capsTaken() bool {
	for j := range sc.caps {
		if sc.caps[j].taken {
			return true
		}
	}
	return false
}

// countSlots adds delta to the in-flight gauge of each policy whose slot
// the evaluation in sc holds.
func (st *rateLimitState) countSlots(sc *scratch, ev *Evaluation, delta int) {
	if st.Metrics == nil {
		return
	}
	for j, i := range sc.heldIdx {
		if sc.slots && sc.heldDecs[j].Slot != 0 {
			st.Metrics.InFlight(ev.Policies[i].Policy, delta)
		}
	}
	for j := range sc.caps {
		if sc.caps[j].taken {
			st.Metrics.InFlight(ev.Policies[sc.caps[j].idx].Policy, delta)
		}
	}
}

// releaseSlots releases the in-flight slots the evaluation in sc holds,
// once (it forgets them), on a context that outlives r's: the client may
// be gone, and the slot must be freed all the same. counted says whether
// the in-flight gauge counted them. A failed release is logged and
// reported as a store error; it is not retried (a retry could free a slot
// another request holds: see [limiter.Limiter]); a shared store's lease
// frees it.
func (st *rateLimitState) releaseSlots(r *http.Request, sc *scratch, ev *Evaluation, counted bool) {
	if !sc.slots && !sc.capsTaken() {
		return
	}
	if counted {
		st.countSlots(sc, ev, -1)
	}
	st.releaseAdaptive(r, sc, ev)
	if !sc.slots {
		return
	}
	var start time.Time
	if st.Metrics != nil {
		start = time.Now()
	}
	ctx := sc.detach(r.Context())
	err := sc.heldStore.Release(ctx, sc.heldReqs, sc.heldDecs)
	if st.Metrics != nil {
		name := st.store
		if sc.heldStore != st.Limiter {
			name = st.fallbackStore
		}
		st.Metrics.StoreCall(name, "release", time.Since(start), err)
	}
	if err != nil {
		st.Logger.LogAttrs(ctx, slog.LevelWarn, "ratekey in-flight release failed",
			slog.String("operation", ev.Operation), slog.String("store", st.store), slog.String("error", err.Error()))
	}
	sc.slots = false
}

// observe counts ev's decisions, and its fail-open store errors, in the
// metrics.
func (st *rateLimitState) observe(ev *Evaluation) {
	if st.Metrics == nil {
		return
	}
	for i := range ev.Policies {
		res := &ev.Policies[i]
		st.Metrics.Decision(res.Policy, string(res.Decision))
		if res.Cached {
			st.Metrics.CachedRejection(res.Policy)
		}
		if res.failMode() == string(policy.OnStoreErrorAllow) && !ev.Abandoned {
			st.Metrics.FailOpen(res.Policy)
		}
	}
}
