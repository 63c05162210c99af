package engine

import (
	"context"
	"log/slog"
	"math"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/adaptive"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// Adaptive caps (a Limit with MaxInFlightCeiling: the demo's max_in_flight:
// auto) are decided here, in the process, never by a store: their limit
// moves with the latency this process observes (package
// internal/adaptive has the algorithm), and latency is a local fact. With
// a Redis store, each process caps itself. A policy's caps live in the
// registry of its store (see capsOf), by policy name and operation, so a
// reload, even one that builds a new RateLimiter on the same store (the
// demo does), keeps their limits, estimates and slots held.

// storeProcess is the Store of an adaptive cap's results: the process
// decided, no store did.
const storeProcess = "process"

// adaptiveCaps holds the caps of each store with adaptive policies, so
// that every RateLimiter on it shares them. It holds the store weakly: an
// entry goes when its store is collected (a program that builds a new
// ratekey.New, and with it a new memory store, on every configuration
// change leaks neither).
var adaptiveCaps sync.Map // weak.Pointer[byte] to the store -> *capRegistry

// capRegistry is a store's adaptive caps, by policy name.
type capRegistry struct {
	mu       sync.Mutex
	byPolicy map[string]*policyCaps
}

// capsOf returns store l's registry: shared when l is a pointer to a
// value of some size (every store of this module is), else one of its
// own.
func capsOf(l limiter.Limiter) *capRegistry {
	v := reflect.ValueOf(l)
	if l == nil || v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().Size() == 0 {
		return &capRegistry{}
	}
	p := (*byte)(v.UnsafePointer())
	key := weak.Make(p)
	r, loaded := adaptiveCaps.LoadOrStore(key, &capRegistry{})
	if !loaded {
		runtime.AddCleanup(p, func(k weak.Pointer[byte]) { adaptiveCaps.Delete(k) }, key)
	}
	return r.(*capRegistry)
}

// policy returns the caps of the adaptive policy named name.
func (r *capRegistry) policy(name string) *policyCaps {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byPolicy == nil {
		r.byPolicy = map[string]*policyCaps{}
	}
	pc := r.byPolicy[name]
	if pc == nil {
		pc = &policyCaps{single: newCapEntry()}
		r.byPolicy[name] = pc
	}
	return pc
}

// policyCaps is one adaptive policy's caps: one when it is keyed on
// nothing, one per operation when it is keyed on operation (operations
// are the router's route templates and UNMATCHED: a bounded set).
type policyCaps struct {
	single *capEntry
	byOp   sync.Map // operation -> *capEntry
}

// capEntry is one cap and the limit its log line last reported.
type capEntry struct {
	cap    *adaptive.Cap
	logged atomic.Int64 // 0: none yet (the cap started at min_in_flight)
}

func newCapEntry() *capEntry { return &capEntry{cap: adaptive.New()} }

// adaptivePolicy is an adaptive policy as a configuration runs it.
type adaptivePolicy struct {
	caps      *policyCaps
	set       adaptive.Settings
	byOp      bool // keyed on operation: a cap per operation
	logFactor float64
}

// newAdaptivePolicy returns how the state runs adaptive policy p (valid,
// defaults filled) with the caps of registry r.
func newAdaptivePolicy(r *capRegistry, p *policy.Policy) *adaptivePolicy {
	return &adaptivePolicy{caps: r.policy(p.Name), byOp: len(p.Key) > 0, logFactor: p.LimitLogFactor,
		set: adaptive.Settings{Min: p.Limit.MinInFlight, Ceiling: p.Limit.MaxInFlightCeiling, Reserve: int64(math.Round(p.Reserved * 1000))}}
}

// entry returns the cap of a request of operation op.
func (ap *adaptivePolicy) entry(op string) *capEntry {
	if !ap.byOp {
		return ap.caps.single
	}
	if e, ok := ap.caps.byOp.Load(op); ok {
		return e.(*capEntry)
	}
	e, _ := ap.caps.byOp.LoadOrStore(strings.Clone(op), newCapEntry()) // op may live in an arena
	return e.(*capEntry)
}

// heldCap is an adaptive policy's cap in one evaluation: which result it
// fills, whether it took a slot (to release, once), and the request's
// timing sample.
type heldCap struct {
	e        *capEntry
	ap       *adaptivePolicy
	idx      int // into decide.Evaluation.Policies
	critical bool
	taken    bool
	sample   bool  // the request is timed (adaptive.Cap.Sample)
	started  int64 // when its handler started (cap.Now), 0 before
	start    int64 // started, once the handler's answer counts (countTiming); 0 before
}

// classify returns the class of a request of principal p (the zero
// Principal when it has none) and operation op under priorities ps: the
// first entry whose Tenant, Plan and Operation (each when set) match, else
// sheddable (see [policy.Priority]).
func classify(ps []policy.Priority, p *limitkey.Principal, op string) policy.Class {
	for i := range ps {
		pr := &ps[i]
		if (pr.Tenant == "" || pr.Tenant == p.Tenant) && (pr.Plan == "" || pr.Plan == p.Plan) &&
			(pr.Operation == "" || pr.Operation == op) {
			return pr.Class
		}
	}
	return policy.ClassSheddable
}

// classify fills the result res of adaptive policy ap for a request of
// principal p (the zero Principal when it has none) and operation op, and
// notes its cap in sc, for decideAdaptive.
func (sc *Scratch) classify(res *decide.PolicyResult, idx int, ap *adaptivePolicy, pol *policy.Policy, p *limitkey.Principal, op string) {
	res.Class = classify(pol.Priorities, p, op)
	res.Store = storeProcess
	sc.caps = append(sc.caps, heldCap{e: ap.entry(op), ap: ap, idx: idx, critical: res.Class == policy.ClassCritical})
}

// decideAdaptive decides the adaptive caps sc noted, taking their slots
// when charge (else peeking), and returns whether the store may still
// charge the other policies: not when an enforcing cap refused (the
// request is refused: all-or-nothing), and then no cap keeps a slot.
func (st *State[R]) decideAdaptive(sc *Scratch, ev *decide.Evaluation, charge bool) bool {
	refused := false
	for j := range sc.caps {
		h := &sc.caps[j]
		res := &ev.Policies[h.idx]
		var ok bool
		var held, lim int64
		if charge {
			ok, held, lim = h.e.cap.Acquire(&h.ap.set, h.critical)
			h.taken, res.Charged = ok, ok
			h.sample = ok && h.e.cap.Sample()
		} else if ok, held, lim = h.e.cap.Peek(&h.ap.set, h.critical); ok {
			held++ // as if admitted (see decide.PolicyResult.InFlight)
		}
		res.Limit.MaxInFlight, res.InFlight, res.Remaining = lim, held, max(lim-held, 0)
		switch {
		case ok:
			res.Decision = decide.DecisionPassed
		case res.DryRun:
			res.Decision = decide.DecisionRejectedDryRun
		default:
			res.Decision, refused = decide.DecisionRejected, true
		}
		if !ok {
			res.RetryAfter = st.Policies[res.Index].RetryAfter // the cap's retry_after: 1 s by default
		}
	}
	if refused {
		st.releaseAdaptive(context.Background(), sc, ev, false)
	}
	return charge && !refused
}

// StartTiming starts the timing of the request whose slots sc holds: its
// handler runs from now. It reports whether an adaptive cap times it (the
// transport then calls CountTiming when the handler's answer says how
// fast the service is).
func (sc *Scratch) StartTiming() bool {
	timed := false
	for j := range sc.caps {
		if h := &sc.caps[j]; h.taken && h.sample {
			h.started, timed = max(h.e.cap.Now(), 1), true
		}
	}
	return timed
}

// CountTiming ends the timing StartTiming started, when the handler's
// answer counts (counts false: the client went away): the latency is then
// offered to the caps at release. A request whose timing never ends this
// way (a client error, a panic) offers none.
func (sc *Scratch) CountTiming(counts bool) {
	if !counts {
		return
	}
	for j := range sc.caps {
		h := &sc.caps[j]
		h.start = h.started
	}
}

// releaseAdaptive releases the adaptive slots sc holds, once, offering
// the latency of each timed request whose handler ran (startAdaptive); a
// window that closes reports its limit (metrics, log, on ctx). served is
// false when the request was refused after its caps had admitted it (by
// a store, or another cap): their results are then no longer Charged.
func (st *State[R]) releaseAdaptive(ctx context.Context, sc *Scratch, ev *decide.Evaluation, served bool) {
	for j := range sc.caps {
		h := &sc.caps[j]
		if !h.taken {
			continue
		}
		h.taken = false
		timed := served && h.start != 0
		var now int64
		if timed {
			now = h.e.cap.Now()
		}
		u, closed := h.e.cap.Release(&h.ap.set, h.critical, timed, h.start, now)
		if !served {
			ev.Policies[h.idx].Charged = false // refused after all: the slot went back
		}
		if closed {
			st.reportAdaptive(ctx, h, ev.Policies[h.idx].Policy, ev.Operation, u)
		}
	}
}

// reportAdaptive reports a window's update of a cap: its limit and
// estimates to the metrics, and a log line when the limit has moved by
// more than the policy's factor since the last line (or since the start,
// at min_in_flight).
func (st *State[R]) reportAdaptive(ctx context.Context, h *heldCap, policy, op string, u adaptive.Update) {
	if !h.ap.byOp {
		op = ""
	}
	if st.Metrics != nil {
		st.Metrics.Adaptive(policy, op, u.Limit, u.Baseline, u.Latency)
	}
	last := h.e.logged.Load()
	if last == 0 {
		last = h.ap.set.Min
	}
	ratio := float64(u.Limit) / float64(last)
	if ratio <= h.ap.logFactor && 1/ratio <= h.ap.logFactor || !h.e.logged.CompareAndSwap(h.e.logged.Load(), u.Limit) {
		return
	}
	level := slog.LevelInfo
	if ratio < 1 {
		level = slog.LevelWarn // falling: the service slows down or loses capacity
	}
	attrs := []slog.Attr{slog.String("policy", policy), slog.Int64("limit", u.Limit), slog.Int64("previous", last),
		slog.Float64("baseline_seconds", u.Baseline.Seconds()), slog.Float64("latency_seconds", u.Latency.Seconds())}
	if op != "" {
		attrs = append(attrs, slog.String("operation", op))
	}
	st.Logger.LogAttrs(context.WithoutCancel(ctx), level, "ratekey adaptive limit moved", attrs...)
}
