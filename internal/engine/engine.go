// Package engine is ratekey's decision core: from a request's derived
// client, principal and operation to each policy's decision (package
// decide's results), through the limiter stores, adaptive caps, the local
// fallback, overrides and settlement, with the decision log and metrics.
// It knows nothing of the transport that serves the request: a State is
// generic over the transport's request value, which only the caller's
// custom dimensions and cost functions read. middleware.RateLimiter
// renders it as HTTP (and, through it, grpclimit as gRPC).
package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// Config is the transport-neutral part of a rate limiter's configuration;
// middleware.RateLimitConfig documents each field, as users set them
// there. R is the transport's request type.
type Config[R any] struct {
	// Limiter decides and stores budgets. Required.
	Limiter limiter.Limiter
	// Fallback decides the policies whose OnStoreError is local while
	// Limiter cannot; nil without such policies.
	Fallback limiter.Limiter
	// Policies are evaluated in order, all-or-nothing.
	Policies []policy.Policy
	// Custom gives the values of custom key dimensions from the
	// transport's request, and false when it has none.
	Custom map[limitkey.Dimension]func(R) (string, bool)
	// Costs gives, by policy name, each request's cost.
	Costs map[string]func(R) (int64, error)
	// Logger receives the decision log; nil means slog.Default().
	Logger *slog.Logger
	// DryRun puts every policy in dry run.
	DryRun bool
	// Metrics receives decisions, store calls, slots and queues; nil
	// records nothing.
	Metrics Metrics
	// SamplePassed is the fraction (0 to 1) of PASSED decisions logged.
	SamplePassed float64
	// LogEveryDecision writes a line per decision instead of the bounded
	// log.
	LogEveryDecision bool
	// LogInterval is the bounded log's interval; 0 means 1 s.
	LogInterval time.Duration
	// MaxWait bounds a DELAYED request's waits, both phases; 0 means 50 s.
	MaxWait time.Duration
	// SingleTenant declares that every principal carries one tenant.
	SingleTenant bool
}

// State is one immutable, validated configuration (defaults filled in)
// and what is derived from it. Safe for concurrent use.
type State[R any] struct {
	Config[R]
	store string // the limiter store's name, for records, logs and metrics
	// replicas is how many processes share the store's budgets (see
	// replicas.go): 1, or the memory store's Replicas.
	replicas int64
	// With a Fallback (fallback.go): its name and Replicas, the names of
	// the policies that use it, and the store's up/down state.
	fallbackStore    string
	fallbackReplicas int64
	localPolicies    []string
	breaker          *breaker
	// rules are what the policies were validated against (for an
	// OverrideFunc's answers); costs holds each policy's cost function
	// (nil for a fixed cost).
	rules policy.Rules
	costs []func(R) (int64, error)
	// ovr holds each policy's compiled Overrides; nil for a policy without
	// (the hot path then pays one nil check).
	ovr []*overrideTable
	// has reports, per phase, whether any policy is evaluated in it.
	has [PhaseMain + 1]bool
	// adaptive holds, per policy, how an adaptive one runs (its caps, in
	// the store's registry: see capsOf); nil for the others.
	adaptive []*adaptivePolicy

	// Logs is the decision-log sampler, which the transport shares across
	// reloads (set it before the first evaluation).
	Logs *LogSampler
}

// New validates cfg and returns its State, or the problems found, each
// naming its field or policy (see [policy.Validate]); problems of the
// transport's own settings (errs) are listed with them, after the
// limiter's. Policies, Custom and
// Costs are copied.
func New[R any](cfg Config[R], errs ...error) (*State[R], error) {
	st := &State[R]{Config: cfg, store: storeName(cfg.Limiter), replicas: replicasOf(cfg.Limiter),
		fallbackStore: storeName(cfg.Fallback), fallbackReplicas: replicasOf(cfg.Fallback)}
	if cfg.Fallback != nil {
		st.breaker = breakerOf(cfg.Limiter)
	}
	st.Custom = maps.Clone(cfg.Custom)
	st.Costs = maps.Clone(cfg.Costs)
	errs = st.settings(errs)
	st.rules = st.policyRules()
	ps, err := policy.Validate(cfg.Policies, st.rules)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	st.Policies = ps
	st.compile()
	return st, nil
}

// policyRules returns what st's policies are validated against: its
// custom dimensions, cost functions, MaxWait, SingleTenant and the shares
// of its store and Fallback.
func (st *State[R]) policyRules() policy.Rules {
	r := policy.Rules{MaxWait: st.MaxWait, SingleTenant: st.SingleTenant, Replicas: st.replicas}
	if st.Fallback != nil {
		r.FallbackReplicas = st.fallbackReplicas
	}
	for d := range st.Custom {
		r.Custom = append(r.Custom, d)
	}
	for name := range st.Costs {
		r.Costs = append(r.Costs, name)
	}
	slices.Sort(r.Costs)
	return r
}

// settings checks st's settings other than its policies and fills in
// their defaults; the transport's problems (extra) follow the limiter's.
func (st *State[R]) settings(extra []error) []error {
	var errs []error
	if st.Limiter == nil {
		errs = append(errs, errors.New("limiter: required"))
	}
	errs = append(errs, extra...)
	for _, name := range slices.Sorted(maps.Keys(st.Costs)) {
		if st.Costs[name] == nil {
			errs = append(errs, fmt.Errorf("costs[%s]: a nil function", quote.Value(name)))
		}
	}
	for _, d := range slices.Sorted(maps.Keys(st.Custom)) {
		if st.Custom[d] == nil {
			errs = append(errs, fmt.Errorf("custom[%s]: a nil function (every request would lack the dimension)", quote.Value(d)))
		}
	}
	if st.SamplePassed < 0 || st.SamplePassed > 1 || math.IsNaN(st.SamplePassed) {
		errs = append(errs, fmt.Errorf("sample_passed: %v must be between 0 and 1", st.SamplePassed))
	}
	if st.Logger == nil {
		st.Logger = slog.Default()
	}
	if st.LogInterval < 0 {
		errs = append(errs, fmt.Errorf("log_interval: %v must not be negative", st.LogInterval))
	}
	if st.LogInterval <= 0 {
		st.LogInterval = defaultLogInterval
	}
	if st.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("max_wait: %v must not be negative", st.MaxWait))
	}
	return errs
}

// compile builds what valid policies need to decide: their override
// tables and adaptive caps.
func (st *State[R]) compile() {
	var caps *capRegistry
	for i := range st.Policies {
		p := &st.Policies[i]
		for ph := range st.has {
			st.has[ph] = st.has[ph] || Phase(ph).Covers(p)
		}
		if p.OnStoreError == policy.OnStoreErrorLocal {
			st.localPolicies = append(st.localPolicies, p.Name)
		}
		st.costs = append(st.costs, st.Costs[p.Name])
		if p.PreAuth {
			st.rules.PhaseWait = max(st.rules.PhaseWait, p.LongestWait()) // an OverrideFunc's answer waits after it
		}
		st.ovr = append(st.ovr, compileOverrides(p, st.rules))
		var ap *adaptivePolicy
		if p.Limit.MaxInFlightCeiling != 0 {
			if caps == nil {
				caps = capsOf(st.Limiter)
			}
			ap = newAdaptivePolicy(caps, p)
		}
		st.adaptive = append(st.adaptive, ap)
	}
}

// Has reports whether any policy is evaluated in phase ph: a transport
// whose phase has none passes requests on without evaluating.
func (st *State[R]) Has(ph Phase) bool { return st.has[ph] }

// Replicas is how many processes share the store's budgets: 1, or the
// memory store's Replicas.
func (st *State[R]) Replicas() int64 { return st.replicas }

// Share returns this process's share of l (l itself for one process).
func (st *State[R]) Share(l limiter.Limit) limiter.Limit { return st.share(l) }

// storeName names a limiter store after its implementation's package
// ("memory" for *memory.Limiter, "redis" for *redis.Limiter).
func storeName(l limiter.Limiter) string {
	if l == nil {
		return ""
	}
	name := strings.TrimLeft(reflect.TypeOf(l).String(), "*")
	pkg, _, _ := strings.Cut(name, ".")
	return pkg
}
