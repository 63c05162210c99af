package middleware

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/delayseconds"
	"github.com/ratekey/ratekey/internal/engine"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// RateLimitConfig configures [NewRateLimiter] and [RateLimiter.Reload].
type RateLimitConfig struct {
	// Limiter decides and stores budgets (limiter/memory, limiter/redis, or
	// any limiter.Limiter). Required.
	Limiter limiter.Limiter
	// Fallback is the store of this process that the policies whose
	// OnStoreError is [policy.OnStoreErrorLocal] decide on while Limiter cannot
	// (see below): typically a memory store whose Replicas is
	// the number of processes sharing Limiter, so that the fleet stays
	// within every limit (each process at its share, which the policies
	// must keep: NewRateLimiter checks). Required by such a policy; nil
	// otherwise. With a Fallback, a store error leaves Limiter unasked for
	// 1 s but for one probe call, and so on each second until a probe
	// succeeds.
	Fallback limiter.Limiter
	// Policies are evaluated in order; every applicable enforcing one must
	// admit the request (all-or-nothing). Names must be unique.
	Policies []policy.Policy
	// Operation names a request's operation. Required; use
	// [RouteOperation] with the root chi router.
	Operation func(*http.Request) string
	// Custom supplies the values of custom key dimensions by name: a
	// function returns a request's value, and false when the request has
	// none. It must derive the value from verified or server-side data
	// only (never a header the client writes freely), must never return a
	// secret, and must be safe for concurrent use.
	Custom map[limitkey.Dimension]func(r *http.Request) (value string, ok bool)
	// Costs gives, by policy name, a function that returns each request's
	// cost instead of the policy's fixed Cost (which must then be 0), e.g.
	// the number of items in a batch call. A function is called once per
	// request its policy applies to (after the key is built), must be fast
	// and safe for concurrent use, and must not consume the request body
	// unless it restores it. A cost it returns that is below 1, or an
	// error, refuses the request with 400 and the problem
	// urn:ratekey:problem:invalid-cost naming the policy (the error text
	// goes to the log and the debug JSON, never to the client), and so
	// does a settling policy's cost above its max_cost (the most a
	// request settles at); a cost above the burst (or beyond max_delay's
	// room) is the never-satisfiable answer, 429 without Retry-After, as
	// for a fixed cost. A dry-run policy reports either as
	// REJECTED_DRY_RUN and lets the request through. Token-bucket policies
	// only; every name must be a policy's. The policy model
	// ([policy.Policy]) holds no function of an *http.Request: the
	// transport supplies the cost, as Envoy's HTTP filter supplies a
	// descriptor's hits_addend.
	Costs map[string]func(r *http.Request) (int64, error)
	// Logger receives the decision log (see LogEveryDecision); nil means
	// slog.Default().
	Logger *slog.Logger
	// DryRun puts every policy in dry run (nginx limit_req_dry_run on):
	// budgets are accounted exactly as in enforcing mode, but no request is
	// rejected or delayed; decisions read REJECTED_DRY_RUN and
	// DELAYED_DRY_RUN.
	DryRun bool
	// DecisionHeader adds the response field "RateLimit-Decision: <the
	// request's Decision>" (PASSED, DELAYED, REJECTED, ...), the analogue of
	// nginx's $limit_req_status. Off by default: it tells clients how close
	// they are to a limit only as much as RateLimit already does, but it is
	// one more field on every response.
	DecisionHeader bool
	// Metrics receives decisions, store latencies and errors, and fail-open
	// counts (package github.com/ratekey/ratekey/metrics implements it for
	// Prometheus); nil records nothing.
	Metrics Metrics
	// SamplePassed is the fraction (0 to 1) of requests whose PASSED
	// decisions are logged too, at Info level with the same fields as the
	// others; 0 (the default) logs none of them.
	SamplePassed float64
	// LogEveryDecision writes one line per REJECTED, DELAYED, dry-run and
	// ERROR decision, as nginx does for limit_req. Off by default, because
	// a client that can be rejected at will could then fill the disk (745 000
	// rejections wrote 210 MB). By default the log is bounded, per
	// LogInterval: the first decision of each (policy, decision, key) gets
	// its "ratekey decision" line, for at most 10 such keys per interval;
	// the rest of the interval's decisions of those keys are counted into one
	// "ratekey decisions summarised" line per key (policy, decision, key,
	// count), and those of other keys into one "ratekey decisions
	// suppressed" line per policy and decision (count, and keys: how many
	// distinct keys, exact up to 4096). The first lines plus the counts add
	// up exactly to the decisions; a flood over any number of keys writes a
	// few KB a second, and the sampler's memory stays bounded. Summaries are
	// written when the interval ends (or at [RateLimiter.FlushLog]). PASSED
	// (see SamplePassed) and SKIPPED (Debug) lines are not sampled. Metrics
	// count every decision either way.
	LogEveryDecision bool
	// LogInterval is the decision log's interval (see LogEveryDecision);
	// 0 means 1 s. After Reload, the interval under
	// way keeps its length, and its summaries go to the new Logger.
	LogInterval time.Duration
	// Deny, when set, answers a request the rate limiter refuses instead
	// of the default RFC 9457 problem+json body, as net/http's
	// CrossOriginProtection.SetDenyHandler does. It is called with the
	// status the default would send (429 or the policy's Status; 503 when
	// the store cannot decide; 401 or 403 for a missing key dimension, 500
	// for a missing client address, a wiring fault: no ClientAddress in
	// front; 400 for an invalid cost) and the request's
	// [decide.Evaluation] (read-only, valid during the call). The
	// response's header already holds what the default sends beside the
	// body: RateLimit and RateLimit-Policy, Retry-After when there is an
	// honest one, WWW-Authenticate for a missing principal, and
	// Cache-Control: no-store. Deny writes the status and the body; it
	// must not call the next handler. nil sends the problem body. It must be
	// safe for concurrent use.
	//
	// ev holds the policies of the phase that refused: Handler's, or
	// PreAuthHandler's (a request Handler refuses passed PreAuthHandler's
	// policies, which the RateLimit fields list and a Record holds). A
	// policy refuses when its Decision is REJECTED, or ERROR with
	// [decide.PolicyResult.FailMode] "deny"; the Retry-After field is the
	// longest of the rejecting policies' [decide.PolicyResult.RetryAfterSeconds],
	// set only when each of them has one (an in-flight cap without
	// retry_after has none; a cost that never fits gives none).
	Deny func(w http.ResponseWriter, r *http.Request, status int, ev *decide.Evaluation)
	// MaxWait is the longest a DELAYED request may wait, both phases
	// (PreAuthHandler's and Handler's) together: NewRateLimiter refuses a
	// policy whose max_delay, or whose longest delay without one (its burst
	// beyond delay_after, at its rate), exceeds it, and pre-auth and main
	// policies whose longest delays do together. A waiting request holds
	// its connection and a goroutine, and a proxy in front gives up at its
	// read timeout (nginx proxy_read_timeout: 60 s), after the budget was
	// spent. 0 means 50 s.
	MaxWait time.Duration
	// SingleTenant declares that every verified principal carries one and
	// the same tenant (one issuer record with a fixed tenant, say), so that
	// an account name names one account: an [policy.Override] may then match an
	// Account without its Tenant. false, the default, is the safe reading:
	// the credentials may name several tenants, an account name is unique
	// only per tenant, and such an override (which would give that account
	// name's limit in every tenant) is refused. ratekey.New sets it when the
	// Authenticator lists its tenants and they are one; the demo when it
	// has one issuer, of a fixed tenant (or a one-entry list), and no API
	// keys.
	SingleTenant bool
}

// RateLimiter applies a set of policies to requests. Its configuration is
// replaced atomically by [RateLimiter.Reload]; a request is evaluated
// entirely under the configuration current when it started. Safe for
// concurrent use.
type RateLimiter struct {
	state atomic.Pointer[rateLimitState]
}

// rateLimitState is one immutable configuration of a RateLimiter: the
// decision core's state (eng: the validated policies, custom dimensions,
// cost functions and logger, defaults filled in: read them there, not in
// the embedded config, which is the caller's as given) and what the HTTP
// side derives from it (Operation, DecisionHeader and Deny are read from
// the config).
type rateLimitState struct {
	RateLimitConfig
	eng *engine.State[*http.Request]
	// items holds each policy's RateLimit-Policy list item (see
	// policyItem) at its own limit, "" for an in-flight policy; ovrItems,
	// per policy, those of its Overrides' limits.
	items    []string
	ovrItems [][]effectiveItem
	// fields holds, per phase, the RateLimit-Policy value of a request
	// that every token bucket of the phase decided with its own limit.
	fields [engine.PhaseMain + 1]policyField
}

// effectiveItem is the RateLimit-Policy list item of an override: its
// name and the limit this process states for it.
type effectiveItem struct {
	name  string
	limit limiter.Limit
	item  string
}

// NewRateLimiter validates cfg and returns a RateLimiter. The error lists
// every problem found (errors.Join), each naming its policy. Policies are
// copied; later changes to cfg have no effect.
func NewRateLimiter(cfg RateLimitConfig) (*RateLimiter, error) {
	st, err := newRateLimitState(cfg)
	if err != nil {
		return nil, err
	}
	rl := &RateLimiter{}
	st.eng.Logs = engine.NewLogSampler()
	rl.state.Store(st)
	return rl, nil
}

func newRateLimitState(cfg RateLimitConfig) (*rateLimitState, error) {
	var opErr error
	if cfg.Operation == nil {
		opErr = errors.New("operation: required (use RouteOperation with the root router)")
	}
	eng, err := engine.New(engine.Config[*http.Request]{Limiter: cfg.Limiter, Fallback: cfg.Fallback,
		Policies: cfg.Policies, Custom: cfg.Custom, Costs: cfg.Costs, Logger: cfg.Logger, DryRun: cfg.DryRun,
		Metrics: cfg.Metrics, SamplePassed: cfg.SamplePassed, LogEveryDecision: cfg.LogEveryDecision,
		LogInterval: cfg.LogInterval, MaxWait: cfg.MaxWait, SingleTenant: cfg.SingleTenant}, opErr)
	if err != nil {
		return nil, err
	}
	st := &rateLimitState{RateLimitConfig: cfg, eng: eng}
	st.compile()
	return st, nil
}

// compile derives each policy's RateLimit-Policy items (its own limit's
// and its overrides') and each phase's RateLimit-Policy field.
func (st *rateLimitState) compile() {
	for i := range st.eng.Policies {
		p := &st.eng.Policies[i]
		item := ""
		if p.Limit.MaxInFlight == 0 && p.Limit.MaxInFlightCeiling == 0 { // draft-10 fields cover quotas only
			item = policyItem(p.Name, st.eng.Share(p.Limit))
		}
		st.items = append(st.items, item)
		var ovr []effectiveItem
		for j := range p.Overrides {
			o := &p.Overrides[j]
			c, _ := p.CheckOverride(*o, policy.Rules{}) // completed; valid, as Validate checked
			l := st.eng.Share(c.Limit)
			ovr = append(ovr, effectiveItem{name: o.String(), limit: l, item: policyItem(p.Name, l)})
		}
		st.ovrItems = append(st.ovrItems, ovr)
	}
	for ph := range st.fields {
		f := &st.fields[ph]
		for i := range st.eng.Policies {
			if p := &st.eng.Policies[i]; engine.Phase(ph).Covers(p) && st.items[i] != "" && !p.DryRun && !st.DryRun {
				f.items = append(f.items, st.items[i])
			}
		}
		f.value = strings.Join(f.items, ", ")
	}
}

// itemOf returns res's RateLimit-Policy list item: its policy's at the
// limit it stated (its own, an override's, or its share on the Fallback).
func (st *rateLimitState) itemOf(res *decide.PolicyResult) string {
	switch {
	case res.Fallback:
	case res.Override == "":
		return st.items[res.Index]
	default:
		for _, e := range st.ovrItems[res.Index] {
			if e.name == res.Override && e.limit == res.Limit {
				return e.item
			}
		}
	}
	return policyItem(res.Policy, res.Limit) // an OverrideFunc's answer, the Fallback's share
}

// Policies returns a copy of the current policies, defaults filled in.
// Safe for concurrent use.
func (rl *RateLimiter) Policies() []policy.Policy {
	return slices.Clone(rl.state.Load().eng.Policies)
}

// Reload validates cfg and, if it is valid, makes it the configuration of
// every request that starts from now on, atomically; requests in flight
// finish under the old one. An invalid cfg returns the same errors as
// [NewRateLimiter] and changes nothing.
//
// Budgets live in cfg.Limiter's store, named by policy name, key and limit
// shape (see [limiter.Request]). So, as nginx keeps its zones across a
// reload, a policy whose name, rate and burst are unchanged keeps its
// budgets when cfg.Limiter is the same store, and a policy whose rate or
// burst changed starts from full buckets. Reload logs one line per policy
// added, removed or changed (at Info, on the new configuration's logger)
// and returns the same list (see [policy.Diff]).
func (rl *RateLimiter) Reload(cfg RateLimitConfig) ([]policy.Change, error) {
	st, err := newRateLimitState(cfg)
	if err != nil {
		return nil, err
	}
	st.eng.Logs = rl.state.Load().eng.Logs
	old := rl.state.Swap(st)
	changes := policy.Diff(old.eng.Policies, st.eng.Policies)
	if old.Limiter != st.Limiter {
		st.eng.Logger.Info("ratekey reload: new limiter store, every budget starts fresh")
	}
	for _, c := range changes {
		st.eng.Logger.Info("ratekey reload", slog.String("policy", c.Policy), slog.String("change", c.Change), slog.String("detail", c.Detail))
	}
	return changes, nil
}

// Handler is the middleware: it charges every applicable policy and either
// passes the request on (after its delay, if DELAYED) or answers it. Use it
// with chi's r.Use or r.With after [ClientAddress] and [Authenticate].
//
// In-flight policies: the request's slots are taken in the same limiter
// call that spends its tokens (an adaptive cap's, in the process, just
// before it: a cap that refuses leaves the store uncharged, a store that
// refuses gives the cap's slot back), before the handler runs, and released when
// next.ServeHTTP returns or panics (the panic goes on), on a context that
// outlives the request's. A client that goes away ends the slot when the
// handler notices its cancelled context and returns: a handler that keeps
// working holds its slot, which is what the cap is for. A DELAYED request
// (by a token bucket of the same phase) holds its slots while it waits:
// taking them after the wait would need a second limiter call, which
// could refuse the request after its tokens were spent. A request that
// does not go on (rejected by a later phase, abandoned during its delay)
// releases them at once. An adaptive cap times the handler, from when it
// starts (after any delay) to when it returns: that latency moves its
// limit.
//
// Settling policies ([policy.Policy].Settle): their reservations are charged in
// the same limiter call, and the handler reports actual costs with
// [ReportCost] on the request's context. When next.ServeHTTP returns or
// panics, each reservation is settled once, on a context that outlives
// the request's (a client that went away still owes what it used): at the
// cost reported, clamped to MaxCost, or kept when nothing was reported; a
// report after that is an error. The RateLimit fields, written before the
// handler runs, describe the reservation; the request's decision log
// line is written after the settle, with "reserved" and "settled". A
// request that does not go on keeps its reservation (a DELAYED request
// abandoned during its wait spent its tokens, as in nginx).
//
// Responses: the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-10) for every enforcing policy that
// decided; RateLimit-Decision when configured; on rejection the first
// rejecting policy's status (429 by default) with Retry-After in whole
// seconds rounded up (RFC 9110 §10.2.3), no Retry-After when the cost can
// never fit, Cache-Control: no-store and an RFC 9457 problem naming the
// policy; 401/403 for a missing dimension whose policy rejects; 503 with
// Retry-After when the limiter fails and the policy fails closed. A DELAYED
// request waits on its context; if the context ends first (the client went
// away, or its deadline passed), the request is recorded as abandoned (a
// client timeout), is not served, and gets a 503 problem if anyone is still
// listening.
func (rl *RateLimiter) Handler(next http.Handler) http.Handler {
	return rl.handler(next, engine.PhaseMain)
}

// PreAuthHandler is [RateLimiter.Handler] for the policies marked PreAuth
// only (Handler then skips them); a pre-auth in-flight policy's slot is
// held while the rest of the chain runs. Mount it after [ClientAddress] and before
// [Authenticate]: a flood of bad credentials is then limited by network
// before any signature check or key-set fetch, and every request, with a
// good credential or not, spends the pre-auth budget. Safe for concurrent
// use.
func (rl *RateLimiter) PreAuthHandler(next http.Handler) http.Handler {
	return rl.handler(next, engine.PhasePreAuth)
}

func (rl *RateLimiter) handler(next http.Handler, ph engine.Phase) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := rl.state.Load()
		rs := stateFrom(r.Context())
		if !st.eng.Has(ph) {
			// No policy to evaluate (PreAuthHandler without PreAuth
			// policies): the evaluation would decide, write and count
			// nothing. A Record still learns that the limiter ran, and the
			// operation, as it would from that empty evaluation.
			if rs != nil && rs.record != nil {
				ev := decide.Evaluation{Operation: rs.operation(st, r), Allowed: true, Replicas: int(st.eng.Replicas())}
				st.record(rs, &ev)
			}
			next.ServeHTTP(w, r)
			return
		}
		out := claimArena(rs)
		sc := getScratch(out)
		in := inputOf(r, rs, rs.operation(st, r))
		ev := st.eng.Evaluate(&in, true, ph, &sc.Scratch)
		st.eng.CountSlots(&sc.Scratch, &ev, +1)
		if ev.Delay > 0 {
			st.eng.Delay(r.Context(), &ev)
		}
		pass := ev.Allowed && !ev.Abandoned
		settles := pass && sc.Reserved()
		if settles {
			// The handler reports costs on r's request state; its
			// decision line waits for them (see settle).
			r, rs = openSettle(r, rs, sc, &ev)
			in.Context = r.Context()
		} else {
			st.eng.Log(&in, &ev)
		}
		st.eng.Observe(&ev)
		base := st.record(rs, &ev)
		st.respond(w, r, &ev, sc, out, ph)
		if !sc.Held() {
			sc.release(out)
			out.release()
			if pass {
				next.ServeHTTP(w, r)
			}
			return
		}
		// The request holds in-flight slots or reservations: sc keeps the
		// requests naming them until they are released and settled, once,
		// when the handler returns or panics (or at once if the request
		// does not go on). The arena keeps the bytes handed out so far,
		// for a next phase to append to.
		out.keep(sc.B)
		out.release()
		defer func() {
			if settles {
				st.settle(r, rs, sc, &ev, base)
				st.eng.Log(&in, &ev)
			}
			st.eng.ReleaseSlots(r.Context(), &sc.Scratch, &ev, true)
			sc.drop()
		}()
		if pass {
			serveTimed(next, w, r, sc)
		}
	})
}

// serveTimed runs next for a request whose slots sc holds; when an
// adaptive cap times it (from here: the handler, not the wait), its
// latency becomes a sample only if the handler returned an answer that
// says how fast the service is: not a client error (4xx: input checks,
// not found, often answered at once whatever the load), not for a client
// that went away, not a panic (Netflix concurrency-limits' onIgnore).
// Otherwise a client could lower the baseline, and so the cap, for
// everyone with requests refused in microseconds.
func serveTimed(next http.Handler, w http.ResponseWriter, r *http.Request, sc *scratch) {
	if !sc.StartTiming() {
		next.ServeHTTP(w, r)
		return
	}
	sc.answer = statusWriter{ResponseWriter: w}
	next.ServeHTTP(&sc.answer, r)
	if st := sc.answer.status; st < 400 || st >= 500 { // 0: nothing written, 200
		sc.CountTiming(r.Context().Err() == nil)
	}
	sc.answer = statusWriter{}
}

// record adds ev to the request's Record, if it has one, and returns the
// index of ev's first policy in the Record's Policies (-1: no Record).
func (st *rateLimitState) record(rs *requestState, ev *decide.Evaluation) int {
	if rs == nil || rs.record == nil {
		return -1
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	base := len(rs.record.Policies)
	rs.record.recordEvaluation(ev)
	return base
}

// respond writes what the response carries of ev, the evaluation in sc:
// the RateLimit fields and, when configured, RateLimit-Decision; and, for
// a request that does not go on, the refusal (a problem, or Deny).
func (st *rateLimitState) respond(w http.ResponseWriter, r *http.Request, ev *decide.Evaluation, sc *scratch, out *arena, ph engine.Phase) {
	h := w.Header()
	st.setRateLimitFields(h, ev, &sc.Scratch, out, &st.fields[ph])
	if st.DecisionHeader && ev.Decision.Rank(!ev.Allowed) > decide.Decision(h.Get("RateLimit-Decision")).Rank(false) {
		// After PreAuthHandler, the weightier of the two decisions
		// (PreAuthHandler's let the request through).
		delete(h, "Ratelimit-Decision")
		addField(h, "Ratelimit-Decision", string(ev.Decision), out.field(fieldDecision))
	}
	switch {
	case ev.Abandoned && ev.Delay > 0:
		writeProblem(w, problem{Type: problemDelayAbandoned, Status: http.StatusServiceUnavailable,
			Detail: "the request ended while it waited out its rate limit delay"})
	case ev.Abandoned:
		writeProblem(w, problem{Type: problemDelayAbandoned, Status: http.StatusServiceUnavailable,
			Detail: "the request ended before its rate limit was decided"})
	case !ev.Allowed:
		p := rejection(h, ev)
		if st.Deny == nil {
			writeProblem(w, p)
			break
		}
		h.Set("Cache-Control", "no-store")
		deny := *ev // a copy: only a refusal pays for handing it to Deny
		st.Deny(w, r, p.Status, &deny)
	}
}

// policyField is a RateLimit-Policy value known from the configuration:
// the items of a phase's enforcing token buckets, each with its policy's
// own limit, in policy order.
type policyField struct {
	items []string
	value string // items joined with ", "
}

// setRateLimitFields writes RateLimit-Policy and RateLimit as RFC 9651 lists
// with one item per enforcing policy that the limiter decided, in policy
// order (a dry-run policy limits nothing, so clients are not told about it):
// q = burst (tokens), w = seconds to refill from empty, r = whole tokens
// left, t = seconds until the bucket is full again (both rounded up). When
// the items are those of known (every token bucket of the phase decided,
// none with an override's limit), RateLimit-Policy is known's value, and
// takes no bytes.
func (st *rateLimitState) setRateLimitFields(h http.Header, ev *decide.Evaluation, sc *engine.Scratch, out *arena, known *policyField) {
	n, same := 0, true
	for i := range ev.Policies {
		if res := &ev.Policies[i]; advertised(res) {
			same = same && n < len(known.items) && st.itemOf(res) == known.items[n]
			n++
		}
	}
	if n == 0 {
		return
	}
	pol := known.value
	if !same || n != len(known.items) {
		pol = st.joinItems(ev, sc)
	}
	curStart := len(sc.B)
	n = 0
	for i := range ev.Policies {
		res := &ev.Policies[i]
		if !advertised(res) {
			continue
		}
		if n > 0 {
			sc.B = append(sc.B, ", "...)
		}
		n++
		remaining, reset := res.Current()
		sc.B = append(append(append(sc.B, '"'), res.Policy...), `";r=`...)
		sc.B = strconv.AppendInt(sc.B, remaining, 10)
		sc.B = append(sc.B, ";t="...)
		// The real time to full, rounded up: never early. It can pass w by
		// a second where the interval is not a whole number of ns (3/s,
		// burst 3: 1.000000002 s from empty, w=1, t=2); a client trusting
		// t then never finds the bucket short (Retry-After <= t).
		sc.B = strconv.AppendInt(sc.B, delayseconds.Ceil(reset), 10)
	}
	// Added, not set: after PreAuthHandler each field's list goes on with
	// this phase's policies.
	addField(h, "Ratelimit-Policy", pol, out.field(fieldPolicy))
	addField(h, "Ratelimit", sc.Str(curStart), out.field(fieldRateLimit))
}

// joinItems returns the RateLimit-Policy value of ev's advertised policies,
// appended to sc's bytes when there are several.
func (st *rateLimitState) joinItems(ev *decide.Evaluation, sc *engine.Scratch) string {
	var pol string // the value while it is one item
	start := len(sc.B)
	n := 0
	for i := range ev.Policies {
		res := &ev.Policies[i]
		if !advertised(res) {
			continue
		}
		switch n++; n {
		case 1:
			pol = st.itemOf(res) // as it is: no bytes to append for one policy
		case 2:
			sc.B = append(append(append(sc.B, pol...), ", "...), st.itemOf(res)...)
		default:
			sc.B = append(append(sc.B, ", "...), st.itemOf(res)...)
		}
	}
	if n > 1 {
		pol = sc.Str(start)
	}
	return pol
}

// advertised reports whether the response fields list the policy: it is
// enforcing, a token bucket (draft-ietf-httpapi-ratelimit-headers-10
// describes quotas only, not in-flight caps) and the limiter decided it.
func advertised(res *decide.PolicyResult) bool {
	return !res.DryRun && res.Key != "" && !res.InvalidCost && res.Limit.MaxInFlight == 0 && (res.Decision == decide.DecisionPassed || res.Decision == decide.DecisionDelayed || res.Decision == decide.DecisionRejected)
}

// policyItem returns the RateLimit-Policy list item of policy name with
// limit l (its own or an override's), which depends on the configuration
// only: "name";q=<burst>;w=<seconds to refill from empty>. Names are
// [A-Za-z0-9._-]: a valid sf-string as they are.
func policyItem(name string, l limiter.Limit) string {
	b := append(append([]byte{'"'}, name...), `";q=`...)
	b = strconv.AppendInt(b, l.Burst, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, windowSeconds(l), 10)
	return string(b)
}

// windowSeconds returns the "w" of l's RateLimit-Policy item: the time an
// empty bucket takes to refill, Burst ÷ Rate computed exactly (Burst × Per
// ÷ Count), rounded up to whole seconds. Not Burst × [limiter.Rate.Interval]:
// the interval is rounded up to whole nanoseconds, which would advertise
// 3/s with burst 3 as w=2 (1.000000002 s) instead of w=1.
func windowSeconds(l limiter.Limit) int64 {
	if l.Burst < 1 || l.Rate.Count < 1 || l.Rate.Per <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(l.Burst), uint64(l.Rate.Per))
	if hi >= uint64(l.Rate.Count) { // over 2⁶⁴ ns: only for limits Validate rejects
		return delayseconds.Ceil(math.MaxInt64)
	}
	ns, rem := bits.Div64(hi, lo, uint64(l.Rate.Count))
	if rem != 0 {
		ns++
	}
	return delayseconds.Ceil(time.Duration(min(ns, math.MaxInt64)))
}

// refusal is what the policies of a refused request say, gathered for its
// problem: the first policy of each kind of refusal, the rejecting
// policies, and their Retry-After in seconds.
type refusal struct {
	violated         []string
	first, never     *decide.PolicyResult
	missing, badCost *decide.PolicyResult
	retry            int64                // the Retry-After of the rejecting policies
	longest          *decide.PolicyResult // the first rejecting policy with that wait
	honest           bool                 // every rejecting policy has one (an in-flight cap may not)
	storeErr         bool
	storeRetry       int64
}

// refusalOf gathers ev's refusal.
func refusalOf(ev *decide.Evaluation) refusal {
	f := refusal{honest: true}
	for i := range ev.Policies {
		res := &ev.Policies[i]
		secs, ok := res.RetryAfterSeconds()
		switch {
		case res.Decision == decide.DecisionRejected && res.InvalidCost:
			f.badCost = cmp.Or(f.badCost, res)
		case res.FailMode() == string(policy.OnStoreErrorDeny):
			f.storeErr, f.storeRetry = true, max(f.storeRetry, secs)
		case res.Decision == decide.DecisionRejected && res.Missing != "":
			f.missing = cmp.Or(f.missing, res)
		case res.Decision == decide.DecisionRejected:
			f.violated = append(f.violated, res.Policy)
			f.first = cmp.Or(f.first, res)
			if res.Never {
				f.never = cmp.Or(f.never, res)
			}
			if f.longest == nil || secs > f.retry {
				f.retry, f.longest = secs, res
			}
			f.honest = f.honest && (ok || res.Never)
		}
	}
	return f
}

// rejection returns the RFC 9457 problem answering ev, a refused request,
// and sets its Retry-After (or WWW-Authenticate) field on h.
func rejection(h http.Header, ev *decide.Evaluation) problem {
	f := refusalOf(ev)
	switch {
	case f.missing != nil:
		return missingProblem(h, f.missing)
	case f.badCost != nil:
		// The caller's cost function failed or returned less than 1: the
		// request is malformed for this policy (a batch without items,
		// say). Its error stays in the log and the debug JSON.
		bound := "at least 1"
		if f.badCost.MaxCost > 0 { // a settling policy's reservation: at most what a request settles at
			bound = fmt.Sprintf("from 1 to its max_cost, %d", f.badCost.MaxCost)
		}
		return problem{Type: problemInvalidCost, Status: http.StatusBadRequest, Policy: f.badCost.Policy,
			Title:  "Request cost cannot be determined",
			Detail: fmt.Sprintf("policy %s cannot determine this request's cost (a whole number of tokens, %s)", f.badCost.Policy, bound)}
	case f.storeErr:
		h.Set("Retry-After", strconv.FormatInt(f.storeRetry, 10))
		return problem{Type: problemStoreUnavailable, Status: http.StatusServiceUnavailable,
			Detail: "the rate limit store cannot decide right now"}
	case f.never != nil:
		return neverProblem(f.never, f.violated)
	}
	return limitedProblem(h, &f)
}

// missingProblem is the problem of a request without a dimension that
// policy res needs: 401 (with a Bearer challenge) without a principal,
// 403 with one, 500 without a network (a server fault).
func missingProblem(h http.Header, res *decide.PolicyResult) problem {
	p := problem{Type: problemMissingDimension, Policy: res.Policy,
		Detail: fmt.Sprintf("policy %s needs a %s: %s", res.Policy, res.Missing, res.SkippedReason)}
	switch {
	case res.Missing == limitkey.DimNetwork:
		p.Status = http.StatusInternalServerError
	case !res.Authenticated:
		p.Status = http.StatusUnauthorized
		h.Set("WWW-Authenticate", "Bearer")
	default:
		p.Status = http.StatusForbidden
	}
	return p
}

// neverProblem is the problem of a cost that policy never can never
// admit (no Retry-After: no wait helps).
func neverProblem(never *decide.PolicyResult, violated []string) problem {
	if never.Cost <= never.Limit.Burst {
		// It fits the burst, but even a full bucket would make it wait
		// longer than max_delay (see the decision rule of package limiter).
		return problem{Type: problemNeverSatisfiable, Status: never.Status, Policy: never.Policy, ViolatedPolicies: violated,
			Title:  "Request cost exceeds what max_delay allows",
			Detail: fmt.Sprintf("policy %s: a request costing %d tokens would wait longer than its max_delay of %v even from a full bucket", never.Policy, never.Cost, never.Limit.MaxDelay)}
	}
	return problem{Type: problemNeverSatisfiable, Status: never.Status, Policy: never.Policy, ViolatedPolicies: violated,
		Title:  "Request cost exceeds the burst",
		Detail: fmt.Sprintf("policy %s: a request costing %d tokens can never fit a burst of %d", never.Policy, never.Cost, never.Limit.Burst)}
}

// limitedProblem is the problem of a request its first rejecting policy
// refused for now: an adaptive cap (overloaded), an in-flight cap or a
// token bucket; Retry-After only when every rejecting policy has one.
func limitedProblem(h http.Header, f *refusal) problem {
	first, retry := f.first, f.retry
	p := problem{Status: first.Status, Policy: first.Policy, ViolatedPolicies: f.violated}
	switch {
	case first.Limit.MaxInFlightCeiling != 0:
		// The service is saturated, not the client over its budget: an
		// adaptive cap always has a Retry-After (its retry_after, 1 s by
		// default), unless a fixed cap refused too without one.
		p.Type, p.Title = problemOverloaded, "Service overloaded"
		p.Detail = fmt.Sprintf("policy %s: the service runs as many requests as it can take now (adaptive limit %d)", first.Policy, first.Limit.MaxInFlight)
	case first.Limit.MaxInFlight != 0:
		// An in-flight cap's Retry-After comes from its retry_after, if set.
		p.Type, p.Title = problemConcurrencyLimited, "Concurrency limit exceeded"
		p.Detail = fmt.Sprintf("policy %s (max_in_flight %d) has as many requests running as it allows", first.Policy, first.Limit.MaxInFlight)
	default:
		// No policy here is never satisfiable: each has a Retry-After.
		p.Type, p.Title = problemRateLimited, "Rate limit exceeded"
		p.Detail = fmt.Sprintf("policy %s (burst %d, refill %s) has no room for this request; retry in %d s", first.Policy, first.Limit.Burst, first.Limit.Rate, retry)
		if overMaxDelay(first) {
			p.Detail = fmt.Sprintf("policy %s would make this request wait longer than its max_delay of %v; retry in %d s", first.Policy, first.Limit.MaxDelay, retry)
		}
		if f.longest != first {
			// Another rejecting policy sets the wait (a settling policy
			// in debt, say): say whose it is.
			p.Detail += fmt.Sprintf(", the wait of policy %s", f.longest.Policy)
		}
		if f.honest {
			h.Set("Retry-After", strconv.FormatInt(retry, 10))
		}
		return p
	}
	if f.honest {
		h.Set("Retry-After", strconv.FormatInt(retry, 10))
		p.Detail += fmt.Sprintf("; retry in %d s", retry)
	}
	return p
}

// overMaxDelay reports whether res, a rejection, is due to max_delay:
// the bucket held the cost, but the request would have waited longer
// than allowed (the log line's "the wait would exceed max_delay").
func overMaxDelay(res *decide.PolicyResult) bool {
	return res.Limit.MaxDelay > 0 && !res.Never && res.Remaining >= res.Cost
}

// FlushLog writes at once the summary lines of the decision log's interval
// under way (see [RateLimitConfig.LogEveryDecision]), instead of when the
// interval ends; call it on shutdown so that no count is lost. A key that
// got its line in that interval gets one again at its next sampled
// decision. Safe for concurrent use.
func (rl *RateLimiter) FlushLog() { rl.state.Load().eng.Logs.Flush() }
