package ratekey

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// Policy is one named limit: its key dimensions, token bucket (rate and
// burst), in-flight cap (max_in_flight) or adaptive cap (max_in_flight:
// auto, with priorities), and corner cases. See [policy.Policy] for
// every field.
type Policy = policy.Policy

// Override is a policy's own limit for the requests of one tenant, plan
// or account, matched on verified fields only (the first matching
// override of Policy.Overrides applies). See [policy.Override] for the
// rules New checks.
type Override = policy.Override

// Config configures [New]. Only Router and Policies are required; the zero
// value of every other field is the safe default.
type Config struct {
	// Router is the router the middleware is mounted on: a chi router
	// (chi.Routes, such as *chi.Mux) or a Go 1.22+ *http.ServeMux. The
	// operation of a request is the template of the route that will serve
	// it ("GET /v1/reports/{id}"), never its raw path. With chi, the
	// operation is looked up in the whole tree the request is routed
	// through (the root in chi's routing context), so mounting on a
	// sub-router works too; register every chi route before serving. A
	// ServeMux must be the one the middleware wraps (for a mux mounted
	// under another with http.StripPrefix, wrap the inner mux and give it
	// here). Required.
	Router http.Handler
	// Proxies says which TCP peers are trusted proxies and which forwarding
	// header each writes. The zero value trusts nobody: every client is
	// its TCP peer, and a forged X-Forwarded-For is never read. New loads
	// the file and URL sources of its rules once (as nginx reads
	// set_real_ip_from at start-up); to re-read them while serving, build
	// the Resolver yourself and give it as Resolver instead.
	Proxies trustedproxy.Config
	// Resolver, instead of Proxies (New refuses both), is a resolver you
	// built with trustedproxy.New and keep: you then call its Refresh from
	// a ticker (it re-reads the rules' file and URL sources, such as a
	// CDN's published ranges, swapping each set atomically and keeping the
	// last good one when a load fails) and may
	// share it with other admin endpoints (middleware.AdminOnly). nil:
	// New builds one from Proxies.
	Resolver *trustedproxy.Resolver
	// Authenticator verifies credentials (identity.NewJWTAuthenticator,
	// identity.NewAPIKeyAuthenticator, or both combined). nil reads no
	// credential; policies keyed by tenant, account or credential are then
	// refused by New.
	Authenticator identity.Authenticator
	// Anonymous admits a request that carries no credential at all as the
	// anonymous principal; a policy keyed by account then applies its
	// OnMissing. Default false: 401 with a bare `WWW-Authenticate: Bearer`
	// challenge (RFC 6750 §3.1). An invalid credential is never anonymous.
	Anonymous bool
	// Policies are the limits, evaluated in order. Those with PreAuth run
	// before the credential is verified (keys of network and operation
	// only), the others after it; the policies of one phase are
	// all-or-nothing. Required: at least one.
	Policies []Policy
	// Limiter stores the buckets. nil means an in-memory store bounded to
	// 1 000 000 tracked keys (limiter/memory); use limiter/redis to share
	// budgets between processes. Adaptive caps never use it: each process
	// decides its own, from its own latency.
	Limiter limiter.Limiter
	// Fallback is the store of this process that policies with
	// OnStoreError "local" decide on while Limiter cannot (see
	// middleware.RateLimitConfig.Fallback): typically
	// memory.New(memory.Options{Replicas: N}) for N processes sharing a
	// Redis Limiter. nil: no policy may use "local".
	Fallback limiter.Limiter
	// Logger receives the bounded decision log; nil means slog.Default().
	Logger *slog.Logger
	// Metrics receives every decision, store call, fail-open, refused
	// credential and trusted-proxy anomaly (metrics.New is the Prometheus
	// implementation); nil records nothing. Labels never carry keys.
	Metrics middleware.Metrics
	// Deny, when set, writes the response to a request a policy refuses
	// (429, or the policy's status; 503 when the store cannot decide; 401
	// or 403 for a missing key dimension; 400 for an invalid cost; 500 for
	// a missing client address, which the front door always resolves) instead
	// of the RFC 9457 problem body; the RateLimit fields and Retry-After
	// are set already. A request refused before the policies (a bad
	// credential: 401, 400 or 503; a malformed forwarding chain: 400)
	// keeps its problem body. See [middleware.RateLimitConfig].Deny for
	// what ev holds.
	Deny func(w http.ResponseWriter, r *http.Request, status int, ev *decide.Evaluation)
	// DryRun accounts every policy but rejects and delays nothing (nginx
	// limit_req_dry_run).
	DryRun bool
	// DecisionHeader adds the RateLimit-Decision response field (PASSED,
	// DELAYED, REJECTED, ...; nginx's $limit_req_status).
	DecisionHeader bool
	// DebugAllow lists the admin networks (CIDRs or addresses) that may
	// read [Middleware.Debug]; empty answers everyone 404.
	DebugAllow []string
	// DebugLimited reports whether Handler is mounted in front of the
	// route that serves r (r carries the method and path the debug
	// endpoint describes), when only some routes are behind it (a
	// sub-router such as /v1, with /healthz outside). nil means every
	// route. The debug endpoint shows the routes it excludes as "limited":
	// false, with no policies and the authentication outcome
	// "not_reached", so it never claims a limit or a 401 the route would
	// not answer. Check, which describes r as Handler would decide it,
	// does not consult it. Must be safe for concurrent use.
	DebugLimited func(r *http.Request) bool
	// Custom supplies the values of custom key dimensions by name (see
	// [middleware.RateLimitConfig].Custom): a policy's Key may then name
	// them beside the built-in ones.
	Custom map[limitkey.Dimension]func(*http.Request) (string, bool)
	// Costs gives, by policy name, a function that returns each request's
	// cost instead of the policy's fixed Cost (which must then be 0), e.g.
	// the items of a batch call: see [middleware.RateLimitConfig].Costs
	// for how a failing or oversized answer is refused. Token-bucket
	// policies only; every name must be a policy's.
	Costs map[string]func(r *http.Request) (int64, error)
	// SamplePassed is the fraction (0 to 1) of requests whose PASSED
	// decisions are logged too; 0 (the default) logs none of them.
	SamplePassed float64
	// LogEveryDecision writes a line for every non-PASSED decision instead
	// of the bounded log (a key's first lines per interval, then a summary
	// per policy and decision): see
	// [middleware.RateLimitConfig].LogEveryDecision.
	LogEveryDecision bool
	// LogInterval is the bounded decision log's interval; 0 means 1 s.
	LogInterval time.Duration
	// MaxWait is the longest a DELAYED request may wait, both phases
	// together; New refuses a policy whose delays could exceed it. 0 means
	// 50 s (under a proxy's usual 60 s read timeout).
	MaxWait time.Duration
}

// Middleware runs ratekey's whole chain in front of a handler. Build it
// with [New]; it is immutable and safe for concurrent use.
type Middleware struct {
	resolver *trustedproxy.Resolver
	proxyOpt middleware.ClientAddressOptions
	limiter  *middleware.RateLimiter
	authn    identity.Authenticator
	auth     middleware.AuthOptions
	debug    middleware.DebugConfig
	// debugScope is Config.DebugLimited: the debug endpoint's, never
	// Check's.
	debugScope func(r *http.Request) bool
	// debugHandler is middleware.Debug(debugConfig()).
	debugHandler http.Handler
	preAuth      bool            // some policy is PreAuth: the pre-auth phase runs
	ops          *operationCheck // nil: no policy names an operation
}

// New validates cfg and returns its Middleware, or every problem found,
// joined, each naming its field: "policies[1] ("per-account").max_delay:
// ...". It refuses what can only be a mistake: no router or no policy, a
// policy keyed by a verified dimension without an Authenticator, a cost
// above the burst, a wait longer than the policy allows (see
// [policy.Policy]), an adaptive cap (max_in_flight: auto) keyed on
// anything but the operation (it moves with this process's latency, which
// every client shares), a priority on a tenant or plan without an
// Authenticator, an override matching on a dimension its policy's
// key lacks, an account override without its tenant unless the
// Authenticator lists exactly one tenant (see [policy.Override]), an
// override or priority on a tenant the Authenticator's complete list of
// tenants lacks (it could never match; a list that is not complete, as
// with API keys or an issuer resolver, refuses nothing), an
// untrusted-everyone proxy range, a Resolver beside Proxies, an operation the router can never name
// ("/v1/reports/{id}" without its method) in a policy's operations or its
// priorities. Whether a route serves each
// operation a policy names is known only once the routes are registered
// (with chi, after New): the first request through Handler checks it
// ([middleware.ServesOperation]) and logs an error per operation no route
// serves, naming its field. A gRPC full method name ("/pkg.Service/Method")
// is an operation too, of the calls package grpclimit runs through
// Handler; grpclimit checks it against the gRPC server's services.
func New(cfg Config) (*Middleware, error) {
	var errs []error
	op, err := operation(cfg.Router)
	if err != nil {
		errs = append(errs, err)
	}
	res, rerrs := resolver(cfg)
	errs = append(errs, rerrs...)
	if cfg.Authenticator != nil && isNil(cfg.Authenticator) {
		errs = append(errs, fmt.Errorf("authenticator: a nil %T (was the error of its constructor ignored?)", cfg.Authenticator))
		cfg.Authenticator = nil
	}
	errs = append(errs, tenantlessKeys(cfg.Authenticator, cfg.Policies)...)
	errs = append(errs, unknownTenants(cfg.Authenticator, cfg.Policies)...)
	if cfg.Authenticator == nil {
		errs = append(errs, unauthenticatedKeys(cfg.Policies)...)
	}
	if len(cfg.Policies) == 0 {
		errs = append(errs, errors.New("policies: at least one policy is required"))
	}
	if _, err := trustedproxy.ParseSet(cfg.DebugAllow); err != nil {
		errs = append(errs, prefixed("debug_allow", err)...)
	}
	store := cfg.Limiter
	if store == nil {
		store = memory.New(memory.Options{})
	}
	var rl *middleware.RateLimiter
	if op != nil {
		rl, err = middleware.NewRateLimiter(middleware.RateLimitConfig{
			Limiter:          store,
			Fallback:         cfg.Fallback,
			Policies:         cfg.Policies,
			Operation:        op,
			Logger:           cfg.Logger,
			DryRun:           cfg.DryRun,
			DecisionHeader:   cfg.DecisionHeader,
			Metrics:          cfg.Metrics,
			Deny:             cfg.Deny,
			SingleTenant:     singleTenant(cfg.Authenticator),
			Custom:           cfg.Custom,
			Costs:            cfg.Costs,
			SamplePassed:     cfg.SamplePassed,
			MaxWait:          cfg.MaxWait,
			LogEveryDecision: cfg.LogEveryDecision,
			LogInterval:      cfg.LogInterval,
		})
		if err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, malformedOperations(cfg.Router, cfg.Policies)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m := &Middleware{resolver: res, limiter: rl, authn: cfg.Authenticator,
		proxyOpt: middleware.ClientAddressOptions{Metrics: cfg.Metrics},
		auth:     middleware.AuthOptions{Anonymous: cfg.Anonymous, Metrics: cfg.Metrics}}
	m.preAuth = slices.ContainsFunc(cfg.Policies, func(p Policy) bool { return p.PreAuth })
	m.ops = newOperationCheck(cfg)
	m.debug = middleware.DebugConfig{Resolver: res, Authenticator: cfg.Authenticator, Auth: m.auth, RateLimiter: rl, Allow: cfg.DebugAllow}
	m.debugScope = cfg.DebugLimited
	if m.debugHandler, err = middleware.Debug(m.debugConfig()); err != nil {
		return nil, err // checked above: cannot happen
	}
	return m, nil
}

// resolver returns cfg.Resolver, or the resolver of cfg.Proxies, or the
// errors of either, each naming its field.
func resolver(cfg Config) (*trustedproxy.Resolver, []error) {
	if cfg.Resolver != nil {
		if !reflect.ValueOf(cfg.Proxies).IsZero() {
			return nil, []error{errors.New("resolver: set Resolver or Proxies, not both (Resolver is built from a trustedproxy.Config already)")}
		}
		return cfg.Resolver, nil
	}
	res, err := trustedproxy.New(cfg.Proxies)
	if err != nil {
		return nil, prefixed("proxies.", err)
	}
	return res, nil
}

// debugConfig is the debug endpoint's configuration: Check's, scoped to
// the routes Config.DebugLimited says Handler is in front of.
func (m *Middleware) debugConfig() middleware.DebugConfig {
	dc := m.debug
	dc.Limited, dc.Authenticated = m.debugScope, m.debugScope
	return dc
}

// unauthenticatedKeys reports, for a chain without an Authenticator, the
// policies whose key or priorities need a verified credential.
func unauthenticatedKeys(policies []Policy) []error {
	var errs []error
	for i, p := range policies {
		for _, d := range p.Key {
			if d == limitkey.DimTenant || d == limitkey.DimAccount || d == limitkey.DimCredential {
				errs = append(errs, fmt.Errorf("%s.key: dimension %s comes from a verified credential, but no Authenticator is configured", policyRef(i, p.Name), d))
			}
		}
		for j, pr := range p.Priorities {
			if pr.Tenant != "" || pr.Plan != "" {
				errs = append(errs, fmt.Errorf("%s.priorities[%d]: a tenant or plan comes from a verified credential, but no Authenticator is configured", policyRef(i, p.Name), j))
			}
		}
	}
	return errs
}

// tenantLister is implemented by the authenticators that can list every
// tenant their principals may carry (identity.JWTAuthenticator,
// identity.CombinedAuthenticator).
type tenantLister interface {
	Tenants() (tenants []string, complete bool)
}

// singleTenant reports whether every principal a verifies carries one and
// the same tenant, as far as a can tell: its complete list of tenants has
// one entry (middleware.RateLimitConfig.SingleTenant). An authenticator
// that cannot list them (API keys, a resolver, one of the caller's) may
// span tenants.
func singleTenant(a identity.Authenticator) bool {
	ts, complete := listedTenants(a)
	return complete && len(ts) == 1
}

// listedTenants returns every tenant a's principals may carry and true,
// or false when a cannot tell (it is nil, lists no tenants, or its list
// is not complete: API keys, an issuer resolver).
func listedTenants(a identity.Authenticator) (tenants []string, complete bool) {
	l, ok := a.(tenantLister)
	if !ok || isNil(a) {
		return nil, false
	}
	return l.Tenants()
}

// unknownTenants refuses an override or a priority on a tenant that a's
// complete list of tenants lacks: no verified credential can carry it, so
// it would silently never match (a typo, or an issuer left out; demo check
// refuses the same). An authenticator that cannot list its tenants, or
// whose list is not complete, is not refused.
func unknownTenants(a identity.Authenticator, policies []Policy) []error {
	ts, complete := listedTenants(a)
	if !complete {
		return nil
	}
	never := func(where, tenant string) error {
		return fmt.Errorf("%s.tenant: %s is none of the %d tenants the Authenticator names, so it never matches", where, quote.Value(tenant), len(ts))
	}
	var errs []error
	for i, p := range policies {
		for j, o := range p.Overrides {
			if o.Tenant != "" && !slices.Contains(ts, o.Tenant) {
				errs = append(errs, never(fmt.Sprintf("%s.overrides[%d]", policyRef(i, p.Name), j), o.Tenant))
			}
		}
		for j, pr := range p.Priorities {
			if pr.Tenant != "" && !slices.Contains(ts, pr.Tenant) {
				errs = append(errs, never(fmt.Sprintf("%s.priorities[%d]", policyRef(i, p.Name), j), pr.Tenant))
			}
		}
	}
	return errs
}

// tenantlessKeys refuses a policy keyed by account or credential without
// tenant when a's complete list of tenants has several: account names
// and credential ids are unique only per tenant, so one tenant's "alice"
// would spend another's budget (a lock-out; the demo's check refuses the
// same). An authenticator that cannot list its tenants is not refused.
func tenantlessKeys(a identity.Authenticator, policies []Policy) []error {
	ts, complete := listedTenants(a)
	if !complete || len(ts) < 2 {
		return nil
	}
	var errs []error
	for i, p := range policies {
		if !slices.Contains(p.Key, limitkey.DimTenant) &&
			(slices.Contains(p.Key, limitkey.DimAccount) || slices.Contains(p.Key, limitkey.DimCredential)) {
			errs = append(errs, fmt.Errorf("%s.key: account and credential are unique only per tenant, and the Authenticator names %d tenants: add tenant to the key", policyRef(i, p.Name), len(ts)))
		}
	}
	return errs
}

// operation returns the operation namer of a chi router or a ServeMux.
func operation(router http.Handler) (func(*http.Request) string, error) {
	if isNil(router) {
		return nil, errors.New("router: required (a chi router or an *http.ServeMux): operations are named by its route templates")
	}
	switch r := router.(type) {
	case *http.ServeMux:
		return middleware.MuxOperation(r), nil
	case chi.Routes:
		return chiOperation(r), nil
	default:
		return nil, fmt.Errorf("router: a %T is neither a chi router nor an *http.ServeMux", router)
	}
}

// chiOperation names operations by the chi router tree the request is
// routed through: the root chi put in the routing context when the
// middleware runs inside a router (r.Use, r.With, on the root or on a
// sub-router), else router (the middleware wraps it from outside). A
// sub-router given as router would otherwise name every request
// UNMATCHED: it sees the full path, which only the root can route. A
// request outside any routing context (Check, the debug endpoint) is named
// by the root live requests came through, once one has.
func chiOperation(router chi.Routes) func(*http.Request) string {
	own := middleware.RouteOperation(router)
	type tree struct {
		root chi.Routes
		op   func(*http.Request) string
	}
	var seen atomic.Pointer[tree] // the root of the last live request, when not router
	return func(r *http.Request) string {
		rc := chi.RouteContext(r.Context())
		switch {
		case rc != nil && rc.Routes != nil && rc.Routes != router:
			t := seen.Load()
			if t == nil || t.root != rc.Routes {
				t = &tree{rc.Routes, middleware.RouteOperation(rc.Routes)}
				seen.Store(t)
			}
			return t.op(r)
		case rc == nil:
			if t := seen.Load(); t != nil {
				return t.op(r)
			}
		}
		return own(r)
	}
}

// isNil reports whether v is nil or holds a nil pointer, map, func or
// interface (a *chi.Mux or *identity.JWTAuthenticator left nil after an
// ignored error), which would panic on the first request.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Interface, reflect.Slice, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// prefixed splits err into its joined errors, each prefixed with path
// (the library's errors start with their own field path: "proxies." +
// "rules[0].from[1] ...", "debug_allow" + "[0] ...").
func prefixed(path string, err error) []error {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			list = append(list, prefixed(path, e)...)
		}
		return list
	}
	return []error{fmt.Errorf("%s%w", path, err)}
}

// Handler returns next behind the whole chain: the client address
// (400 for a malformed forwarding chain from a trusted proxy), the pre-auth
// policies, the credential (400/401/503 per RFC 6750 §3.1, when an
// Authenticator is configured), then the other policies. A refused request
// never reaches next: it gets 429 (or the policy's Status) with
// Retry-After rounded up to whole seconds (RFC 9110 §10.2.3), the RateLimit
// and RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers-10)
// and an RFC 9457 problem body naming the policy, never its key. Mount it
// on the Router given to New (r.Use(m.Handler) for chi, or
// http.ListenAndServe(addr, m.Handler(mux))). Safe for concurrent use.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	h := m.limiter.Handler(next)
	if m.authn != nil {
		h = middleware.Authenticate(m.authn, m.auth)(h)
	}
	if m.preAuth {
		h = m.limiter.PreAuthHandler(h)
	}
	h = middleware.ClientAddress(m.resolver, m.proxyOpt)(h)
	if m.ops != nil {
		h = m.ops.wrap(h)
	}
	return h
}

// Check returns what the chain would decide for r without spending any
// budget: the client address and its derivation, the principal, the
// operation and each policy's key and would-be decision (the debug
// endpoint's JSON). The decision is separate from the wrapper, as in
// net/http's CrossOriginProtection. Safe for concurrent use.
func (m *Middleware) Check(r *http.Request) *middleware.Record {
	return m.debug.Explain(r)
}

// Policies returns a copy of the policies, defaults filled in, as the
// chain applies them (package grpclimit reads which operations they
// name); their slices are copies too. Safe for concurrent use.
func (m *Middleware) Policies() []Policy {
	ps := m.limiter.Policies()
	for i := range ps {
		p := &ps[i]
		p.Key, p.Operations = slices.Clone(p.Key), slices.Clone(p.Operations)
		p.Overrides, p.Priorities = slices.Clone(p.Overrides), slices.Clone(p.Priorities)
	}
	return ps
}

// FlushLog writes at once the summary lines of the bounded decision log's
// interval under way (see Config.LogEveryDecision), instead of when the
// interval ends: call it when the Middleware is replaced (a reload) or
// the process stops, so that no count is lost. Requests still in flight
// on m may add to a new interval, written by its timer. Safe for
// concurrent use.
func (m *Middleware) FlushLog() {
	m.limiter.FlushLog()
}

// Debug returns the operators' debug endpoint (see [middleware.Debug]):
// [Middleware.Check] of the request it receives, or of one described in a
// POST, as JSON or HTML, for the networks in Config.DebugAllow only;
// everyone else gets 404. Mount it outside Handler, so that failed
// derivations can be shown. Safe for concurrent use.
func (m *Middleware) Debug() http.Handler {
	return m.debugHandler
}

// DebugGRPC is [Middleware.Debug] that also describes gRPC calls: GET
// ?grpc=/pkg.Service/Method answers with describe's Record of a call of
// that method from the debug request's peer, header fields (as metadata)
// and credential; pass grpclimit's Limiter.Describe for the Limiter built
// on m. The admin networks and everything else are Debug's. Safe for
// concurrent use if describe is.
func (m *Middleware) DebugGRPC(describe func(r *http.Request, fullMethod string) *middleware.Record) http.Handler {
	cfg := m.debugConfig()
	cfg.GRPC = describe
	h, _ := middleware.Debug(cfg) // the same config as Debug's, which New checked
	return h
}
