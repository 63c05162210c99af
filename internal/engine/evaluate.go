package engine

import (
	"context"
	"net/netip"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// Input is what the engine knows of one request: its transport's value
// (for custom dimensions and cost functions), its context, its operation
// and who it is, as the transport derived them before (the client from
// the TCP peer and trusted proxies, the principal from a verified
// credential).
type Input[R any] struct {
	// Request is the transport's request, handed to Custom and Costs.
	Request R
	// Context is the request's context: limiter calls run on it (and on
	// a detached copy once the handler returns), log lines get it.
	Context context.Context
	// Operation is the request's operation ("GET /v1/reports/{id}").
	Operation string
	// Principal is the verified principal; nil when none was established.
	Principal *limitkey.Principal
	// Client and Network are the derived client address and its network
	// key; invalid when no client address was resolved.
	Client  netip.Addr
	Network netip.Prefix
}

// Phase selects the policies an evaluation covers.
type Phase int

const (
	PhaseAll     Phase = iota // every policy (Check, the debug endpoint)
	PhasePreAuth              // PreAuth policies only (RateLimiter.PreAuthHandler)
	PhaseMain                 // the others (RateLimiter.Handler)
)

// Covers reports whether policy p is evaluated in phase ph.
func (ph Phase) Covers(p *policy.Policy) bool {
	switch ph {
	case PhasePreAuth:
		return p.PreAuth
	case PhaseMain:
		return !p.PreAuth
	}
	return true
}

// Evaluate evaluates the policies of phase ph that apply to in, in the
// working memory sc, where the Evaluation's policy results live (valid
// until sc is released). With charge true, the request's cost is spent
// all-or-nothing (if any enforcing policy rejects, none is charged;
// dry-run policies follow the [limiter.Limiter] rule), and in-flight
// slots and reservations are held in sc (see Held); with charge false
// nothing is spent (the debug endpoint's would-be decision). It neither
// waits nor logs. Safe for concurrent use (with its own sc).
func (st *State[R]) Evaluate(in *Input[R], charge bool, ph Phase, sc *Scratch) decide.Evaluation {
	ev := decide.Evaluation{Operation: in.Operation, Allowed: true, Policies: sc.policies[:0], Replicas: int(st.replicas)}
	who := subjectOf(in)
	reqs := sc.reqs[:0]
	idx := sc.idx[:0] // index into ev.Policies for each request
	missingReject := false
	for i := range st.Policies {
		p := &st.Policies[i]
		if !ph.Covers(p) || !p.AppliesTo(in.Operation) {
			continue
		}
		// The policy's result, filled in place: every path below leaves
		// it in ev.Policies (no copy of its 376 bytes).
		ev.Policies = append(ev.Policies, decide.PolicyResult{})
		j := len(ev.Policies) - 1
		req, asks, refuses := st.prepare(in, sc, i, &ev.Policies[j], j, &who)
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
		st.decideAll(in.Context, sc, &ev, idx, reqs, charge)
	}
	ev.Decision = summarise(&ev)
	if ev.Abandoned {
		ev.Allowed = false
	}
	if !ev.Allowed {
		ev.Delay = 0
		ev.Charged = false
		st.releaseAdaptive(in.Context, sc, &ev, false) // a store refused: the caps' slots go back
	}
	return ev
}

// subject is who a request is: its principal (the zero Principal when
// none was established) and whether it is authenticated.
type subject struct {
	principal     limitkey.Principal
	authenticated bool // a principal that is not anonymous
}

// subjectOf returns in's subject.
func subjectOf[R any](in *Input[R]) subject {
	var who subject
	if in.Principal != nil {
		who.principal = *in.Principal
		who.authenticated = who.principal.Method != limitkey.MethodAnonymous
	}
	return who
}

// prepare fills res, the result of policy i (ev.Policies[j]) for in, up to
// its limiter request: asks reports that the store must decide req;
// refused, that res already refuses the request (a missing dimension, an
// invalid override or cost). A policy without its key, an adaptive cap
// (decided in the process) and a failed override or cost are decided here.
func (st *State[R]) prepare(in *Input[R], sc *Scratch, i int, res *decide.PolicyResult, j int, who *subject) (req limiter.Request, asks, refused bool) {
	p := &st.Policies[i]
	op := in.Operation
	res.Policy, res.Index, res.Cost, res.Limit, res.DryRun, res.Store = p.Name, i, p.Cost, p.Limit, p.DryRun || st.DryRun, st.store
	res.Status, res.OnStoreError, res.Authenticated = p.Status, p.OnStoreError, who.authenticated
	key, ok := st.keyOf(in, sc, p, res, who)
	if !ok {
		return req, false, res.Decision == decide.DecisionRejected
	}
	if ap := st.adaptive[i]; ap != nil { // decided later, in the process
		sc.classify(res, j, ap, p, &who.principal, op)
		return req, false, false
	}
	if who.authenticated && (st.ovr[i] != nil || p.OverrideFunc != nil) {
		if err := st.override(i, res, &who.principal, key); err != nil {
			// An invalid limit from the caller's function: no silent
			// fallback; the policy's fail mode decides.
			res.Decision, res.Err = decide.DecisionError, err
			res.Limit = st.share(res.Limit)
			return req, false, refuses(res)
		}
	}
	limit := res.Limit // the configured limit, which names the bucket; Limit becomes the share
	res.Settle, res.MaxCost = p.Settle, maxCost(p, limit)
	if st.replicas > 1 {
		res.Limit = st.share(res.Limit)
	}
	if f := st.costs[i]; f != nil {
		if res.Cost, res.Err = costOf(f, in.Request, res.MaxCost); res.Err != nil {
			res.InvalidCost = true
			res.Decision = decide.DecisionRejected
			if res.DryRun {
				res.Decision = decide.DecisionRejectedDryRun
			}
			return req, false, !res.DryRun
		}
	}
	return limiter.Request{Key: res.Key, Limit: limit, Cost: res.Cost, DryRun: res.DryRun, Settle: p.Settle}, true, false
}

// keyOf derives policy p's key for r, encoded into res.Key, and returns
// it (its Parts in sc, valid until the next keyOf) and true, or, when r
// lacks one of its dimensions, decides res by the policy's on_missing and
// reports false.
func (st *State[R]) keyOf(in *Input[R], sc *Scratch, p *policy.Policy, res *decide.PolicyResult, who *subject) (limitkey.Key, bool) {
	key := limitkey.Key{Policy: p.Name, Parts: sc.parts[:0]}
	for _, d := range p.Key {
		v, ok := st.dimension(in, sc, d, &who.principal)
		if !ok {
			res.Missing = d
			break
		}
		key.Parts = append(key.Parts, limitkey.Part{Dimension: d, Value: v})
	}
	if res.Missing == "" {
		start := len(sc.B)
		sc.B = key.AppendTo(sc.B)
		res.Key = sc.Str(start)
		return key, true
	}
	res.Limit = st.share(res.Limit) // the limit this process states
	res.SkippedReason = missingReason(res.Missing, who.authenticated)
	switch {
	case p.OnMissing == policy.OnMissingSkip:
		res.Decision = decide.DecisionSkipped
	case res.DryRun:
		res.Decision = decide.DecisionRejectedDryRun
	default:
		res.Decision = decide.DecisionRejected
	}
	return key, false
}

// refuses reports whether res refuses the request: REJECTED, or an ERROR
// failing closed.
func refuses(res *decide.PolicyResult) bool {
	return res.Decision == decide.DecisionRejected || res.FailMode() == string(policy.OnStoreErrorDeny)
}

// summarise sets ev.Allowed from the enforcing policies' decisions and
// returns the request's decide.Decision (see [decide.Evaluation.Decision]): its
// policies' of highest rank.
func summarise(ev *decide.Evaluation) decide.Decision {
	var d decide.Decision
	best := 0
	ev.Allowed = true
	for i := range ev.Policies {
		res := &ev.Policies[i]
		refused := refuses(res)
		if refused {
			ev.Allowed = false
		}
		if r := res.Decision.Rank(refused); r > best {
			best, d = r, res.Decision
		}
	}
	return d
}

// dimension returns the value of dimension d for the request, and false when
// the request does not carry it. Only verified principal fields and the
// resolved client network are used; an empty value counts as missing (p is
// the zero Principal when no principal was established, so its fields are).
func (st *State[R]) dimension(in *Input[R], sc *Scratch, d limitkey.Dimension, p *limitkey.Principal) (string, bool) {
	var v string
	switch d {
	case limitkey.DimOperation:
		v = in.Operation
	case limitkey.DimNetwork:
		if !in.Network.IsValid() {
			return "", false
		}
		start := len(sc.B)
		sc.B = in.Network.AppendTo(sc.B)
		v = sc.Str(start)
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
		if v, ok = f(in.Request); !ok {
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
