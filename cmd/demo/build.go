package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/grpc"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/internal/workload"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/metrics"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// app is a validated, wired configuration.
type app struct {
	cfg         *Config
	resolver    *trustedproxy.Resolver
	auth        authSetup     // authn nil when no issuer and no API key is configured
	anonymous   bool          // auth.anonymous: allow
	store       store         // kept across reloads
	refresh     time.Duration // how often rules' file and URL sources are re-read; 0: never
	limiter     limiter.Limiter
	policies    []ratekey.Policy
	logInterval time.Duration // the decision log's interval; 0: the library's default
	// front is the chain (ratekey.New) of the router built last (nil
	// before): its pending log summaries are flushed when the app is
	// replaced or stops.
	front *ratekey.Middleware
	// registry and metrics live as long as the process: a reload keeps them.
	// metrics is package metrics' collectors, or package otelmetrics'
	// instruments (exporter otlp; registry is nil then).
	registry *prometheus.Registry
	metrics  middleware.Metrics
	// otel is the OpenTelemetry SDK's provider when metrics go to an OTLP
	// collector (metrics.exporter: otlp; registry is nil then), nil
	// otherwise; it too lives as long as the process.
	otel *sdkmetric.MeterProvider
	// work is GET /v1/work's simulated resource; a reload keeps it (and
	// the requests it serves).
	work *workload.Resource
	// grpcSrv is the demo's gRPC server, nil when it serves no gRPC; grpc
	// is this app's side of it, built with the router (grpc.go).
	grpcSrv *grpc.Server
	grpc    *grpcSide
}

// build validates cfg and returns the wired app, or every error found. When
// prev is not nil (a reload), the app keeps prev's limiter store, and so the
// budgets of unchanged policies; the store's own settings cannot change
// without a restart.
func build(cfg *Config, logger *slog.Logger, prev *app) (*app, error) {
	a := &app{cfg: cfg}
	errs := checkListen("listen", cfg.Listen)
	if cfg.GRPC.Listen != "" {
		errs = append(errs, checkListen("grpc.listen", cfg.GRPC.Listen)...)
	}
	res, refresh, rerrs := buildResolver(cfg.TrustedProxies, cfg.path)
	errs = append(errs, rerrs...)
	a.resolver, a.refresh = res, refresh
	errs = append(errs, a.buildAnonymous()...)
	errs = append(errs, a.buildPolicies()...)
	errs = append(errs, a.attachStore(prev, logger)...)
	errs = append(errs, a.attachMetrics(prev, logger)...)
	// After the metrics: key-set fetches are counted.
	if auth, err := buildAuth(cfg, logger, a.metrics); err != nil {
		errs = append(errs, err...)
	} else {
		a.auth = auth
	}
	errs = append(errs, a.buildMetricsEndpoint()...)
	errs = append(errs, a.buildLog()...)
	errs = append(errs, a.buildDebugEndpoint()...)
	errs = append(errs, a.checkAll(logger, len(errs) == 0)...)
	if err := errors.Join(errs...); err != nil {
		a.auth.close()
		if prev == nil && a.store.close != nil {
			a.store.close()
		}
		if prev == nil {
			discardOTLP(a.otel)
		}
		return nil, err
	}
	return a, nil
}

// checkListen checks the listen address. A port that is not a number
// would reach net.Listen as a service name, and its error would print it
// raw (a terminal escape, a fake log line after a CR LF).
func checkListen(field, listen string) []error {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || !validPort(port) || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return []error{fmt.Errorf("%s: %s is not host:port with a port of 0 to 65535 (e.g. 127.0.0.1:8080)", field, shown(listen))}
	}
	return nil
}

// buildAnonymous reads auth.anonymous into the authentication options.
func (a *app) buildAnonymous() []error {
	var errs []error
	switch a.cfg.Auth.Anonymous {
	case "", "reject":
	case "allow":
		a.anonymous = true
	default:
		errs = append(errs, fmt.Errorf("auth.anonymous: %s must be allow or reject", shown(a.cfg.Auth.Anonymous)))
	}
	if a.cfg.Auth.Anonymous == "reject" && len(a.cfg.Auth.Issuers) == 0 && a.cfg.Auth.APIKeys == nil {
		errs = append(errs, errors.New("auth.anonymous: reject needs auth.issuers or auth.api_keys (without them no credential is checked)"))
	}
	return errs
}

// sourcesOf says what cfg's credentials can vouch for.
func sourcesOf(cfg *Config) principalSources {
	src := principalSources{credentials: len(cfg.Auth.Issuers) > 0 || cfg.Auth.APIKeys != nil}
	// Accounts and credential ids are unique only per tenant. Credentials
	// span several tenants with several issuers, with API keys (each key
	// names its own tenant), or with an issuer taking the tenant from a
	// claim.
	src.tenants = len(cfg.Auth.Issuers) > 1 || cfg.Auth.APIKeys != nil
	for _, ic := range cfg.Auth.Issuers {
		src.tenants = src.tenants || ic.TenantClaim != "" && len(ic.Tenants) != 1
		src.plans = src.plans || ic.Plan != "" || ic.PlanClaim != ""
	}
	// An API key file may give keys plans; checkOverrides knows once it
	// is loaded.
	src.plans = src.plans || cfg.Auth.APIKeys != nil
	return src
}

// buildPolicies builds the policies section. ratekey.New refuses none
// (an empty file, or one that is only "---": see yamlError).
func (a *app) buildPolicies() []error {
	var errs []error
	src := sourcesOf(a.cfg)
	for i, pc := range a.cfg.Policies {
		p, perrs := buildPolicy(i, pc, src)
		errs = append(errs, perrs...)
		a.policies = append(a.policies, p)
	}
	return errs
}

// attachStore builds the limiter store, or on a reload (prev not nil)
// keeps prev's, and so the budgets of unchanged policies, at the new
// number of replicas; the store's own settings cannot change without a
// restart.
func (a *app) attachStore(prev *app, logger *slog.Logger) []error {
	var errs []error
	switch lc := a.cfg.Limiter; {
	case prev != nil && !sameStore(lc, prev.cfg.Limiter):
		errs = append(errs, errors.New("limiter: the store settings changed; a reload keeps the running store and its budgets, so restart the demo to apply them"))
	case prev != nil:
		if err := checkReplicas(lc); err != nil {
			errs = append(errs, err)
		}
		a.store = prev.store.withReplicas(int(lc.Replicas))
	default:
		st, serrs := buildStore(lc, a.cfg.path, logger)
		errs = append(errs, serrs...)
		a.store = st
	}
	a.limiter = a.store.limiter
	return errs
}

// attachMetrics makes the metrics (the Prometheus registry and
// collectors, or with metrics.exporter otlp the OpenTelemetry instruments
// and their exporting provider), or on a reload keeps prev's: they live as
// long as the process.
func (a *app) attachMetrics(prev *app, logger *slog.Logger) []error {
	if prev != nil {
		a.registry, a.metrics, a.otel, a.work = prev.registry, prev.metrics, prev.otel, prev.work
		if metricsNeedRestart(prev.cfg.Metrics, a.cfg.Metrics) {
			return []error{errors.New("metrics: the otlp exporter was turned on or off or its endpoint changed; a reload keeps the running metrics, so restart the demo to apply it")}
		}
		return nil
	}
	a.work = workload.NewResource(workCapacity, workCapacity, workUnit, workQueue)
	var err error
	mc := a.cfg.Metrics
	if endpoint, eerr := otlpEndpoint(mc.Endpoint); mc.Enabled && mc.Exporter == exporterOTLP && eerr == nil {
		var m middleware.Metrics
		if m, a.otel, err = newOTLPMetrics(endpoint, logger); err == nil {
			a.metrics = m
		}
	} else { // an invalid endpoint: checkExporter reports it
		a.registry = prometheus.NewRegistry()
		a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		a.metrics, err = metrics.New(a.registry)
	}
	if err != nil {
		return []error{err}
	}
	return nil
}

// buildMetricsEndpoint checks the metrics section.
func (a *app) buildMetricsEndpoint() []error {
	mc := a.cfg.Metrics
	errs := checkExporter(mc)
	if !mc.Enabled || mc.Exporter != "" && mc.Exporter != exporterPrometheus {
		return errs // otlp serves nothing; an unknown exporter is reported
	}
	if err := checkDebugPath("metrics.path", mc.Path); err != nil {
		errs = append(errs, err)
	}
	if a.cfg.Debug.Enabled && mc.Path == a.cfg.Debug.Path {
		errs = append(errs, fmt.Errorf("metrics.path: %s is also debug.path", shown(mc.Path)))
	}
	if _, err := trustedproxy.ParseSet(mc.Allow); err != nil {
		errs = append(errs, indexedErrors("metrics.allow", err)...)
	}
	if len(mc.Allow) == 0 {
		errs = append(errs, errors.New("metrics.allow: list the admin networks that may scrape the metrics"))
	}
	return errs
}

// buildLog checks the log section.
func (a *app) buildLog() []error {
	var errs []error
	lc := a.cfg.Log
	if !validSample(lc.SamplePassed) {
		errs = append(errs, fmt.Errorf("log.sample_passed: %v must be between 0 and 1", lc.SamplePassed))
	}
	if lc.Interval != "" {
		d, err := time.ParseDuration(lc.Interval)
		if err != nil || d <= 0 || d > time.Hour {
			errs = append(errs, fmt.Errorf("log.interval: %s is not a duration from 1ns to 1h such as 1s", shown(lc.Interval)))
		}
		a.logInterval = max(d, 0)
	}
	return errs
}

// buildDebugEndpoint checks the debug section.
func (a *app) buildDebugEndpoint() []error {
	dc := a.cfg.Debug
	if !dc.Enabled {
		return nil
	}
	var errs []error
	if err := checkDebugPath("debug.path", dc.Path); err != nil {
		errs = append(errs, err)
	}
	// ratekey.New checks each entry (Config.DebugAllow; see yamlError).
	if len(dc.Allow) == 0 {
		errs = append(errs, errors.New("debug.allow: list the admin networks that may use the debug endpoint"))
	}
	return errs
}

// checkAll runs the checks that need the whole app: ratekey.New's (names,
// keys, cost against burst and max_delay, waits against the demo's 50 s
// bound, debug.allow; its errors mapped onto the YAML's fields by
// yamlError), the operations against the demo's router (only when valid
// so far: the router needs a valid config), Redis windows, fallbacks and,
// when nothing else is wrong, overrides against the credentials.
func (a *app) checkAll(logger *slog.Logger, valid bool) []error {
	var errs []error
	if a.limiter == nil { // already reported; stand in so the policies are still checked
		a.limiter = memory.New(memory.Options{})
		a.store.fallback = memory.New(memory.Options{}) // (not "local needs a fallback" too)
	}
	if a.auth.authn == nil && sourcesOf(a.cfg).credentials {
		a.auth.authn = unbuiltAuth{} // auth's errors are reported; not "no Authenticator" too
	}
	m, yaml, ferr := a.newFront(chi.NewRouter(), logger)
	if m == nil {
		errs = append(errs, yaml...)
	} else if valid {
		errs = append(errs, a.checkOperations(logger)...)
	}
	errs = append(errs, checkWindows(a.cfg.Limiter, a.policies)...)
	errs = append(errs, checkFallback(a.cfg.Limiter, a.policies)...)
	if valid && len(errs) == 0 {
		errs = append(errs, checkOverrides(a.cfg, a.auth, a.policies)...)
	}
	if m == nil && valid && len(errs) == 0 {
		// yamlError dropped New's errors as the demo's to say, and it
		// said none: never a config New refuses.
		errs = splitErrors(ferr)
	}
	return errs
}

// buildResolver maps the trusted_proxies section onto trustedproxy.Config:
// the v0 form (cidrs + header) is one rule, rules are evaluated in order.
// Rules' file and URL sources are loaded once here (a failed first load is
// an error) and then every refresh.
func buildResolver(tp TrustedProxiesConfig, path func(string) string) (*trustedproxy.Resolver, time.Duration, []error) {
	tpc := trustedproxy.Config{IPv4Prefix: int(tp.IPv4Prefix), IPv6Prefix: int(tp.IPv6Prefix), AllowAll: tp.AllowAll}
	errs := resolverModes(tp, &tpc)
	switch {
	case (len(tp.CIDRs) > 0 || tp.Header != "") && len(tp.Rules) > 0:
		errs = append(errs, errors.New("trusted_proxies: rules and the v0 form (cidrs, header) cannot be combined: write the v0 form as one more rule"))
	case len(tp.CIDRs) > 0 || tp.Header != "":
		// The v0 form is exactly one rule. Its errors must name cidrs and
		// header, which the library's (rules[0].from, rules[0].header) do
		// not: check them here, and hand the rule over only when they
		// pass (the library then checks it again).
		if v0errs := checkV0(tp); len(v0errs) > 0 {
			errs = append(errs, v0errs...)
		} else if len(tp.CIDRs) > 0 {
			tpc.Rules = []trustedproxy.Rule{{From: tp.CIDRs, Header: tp.Header}}
		}
	}
	sources := false
	for _, rc := range tp.Rules {
		rule := trustedproxy.Rule{From: rc.From, Header: rc.Header, Hops: int(rc.Hops)}
		for _, f := range rc.Files {
			rule.Sources = append(rule.Sources, trustedproxy.FileSource{Path: path(f)}) // relative to the config file
		}
		for _, u := range rc.URLs {
			rule.Sources = append(rule.Sources, trustedproxy.URLSource{URL: u})
		}
		sources = sources || len(rule.Sources) > 0
		tpc.Rules = append(tpc.Rules, rule)
	}
	refresh, err := sourceRefresh(tp.Refresh, sources)
	if err != nil {
		errs = append(errs, err)
	}
	// trustedproxy names fields as the YAML does (rules[1].from[2], ...),
	// so its errors are only prefixed with the section. It loads file and
	// URL sources once (URLSource has its own timeout).
	res, err := trustedproxy.New(tpc)
	if err != nil {
		errs = append(errs, fieldErrors("trusted_proxies", err)...)
	}
	return res, refresh, errs
}

// resolverModes reads missing_header and aliases into tpc.
func resolverModes(tp TrustedProxiesConfig, tpc *trustedproxy.Config) []error {
	var errs []error
	switch tp.MissingHeader {
	case "", "peer":
	case "reject":
		tpc.RejectMissingHeader = true
	default:
		errs = append(errs, fmt.Errorf("trusted_proxies: missing_header %s is not \"peer\" or \"reject\"", quote.Value(tp.MissingHeader)))
	}
	switch tp.Aliases {
	case "", "ignore":
	case "reject":
		tpc.RejectAliases = true
	default:
		errs = append(errs, fmt.Errorf("trusted_proxies: aliases %s is not \"ignore\" or \"reject\"", quote.Value(tp.Aliases)))
	}
	return errs
}

// sourceRefresh returns how often rules' file and URL sources are re-read:
// trusted_proxies.refresh, 5 minutes by default, 0 without sources.
func sourceRefresh(value string, sources bool) (time.Duration, error) {
	var refresh time.Duration
	var err error
	if value != "" {
		d, perr := time.ParseDuration(value)
		if perr != nil || d < time.Second {
			err = fmt.Errorf("trusted_proxies.refresh: %s is not a duration of at least 1s such as 5m", shown(value))
		}
		refresh = d
	} else if sources {
		refresh = 5 * time.Minute
	}
	if !sources {
		refresh = 0
	}
	return refresh, err
}

// allV4, allV6 are every IPv4 and every IPv6 address.
var allV4, allV6 = netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")

// checkV0 checks the v0 form (cidrs, header) as the library checks rule 0,
// naming cidrs[i] and header: every entry parses (trustedproxy.ParseSet),
// no entry and not their union trusts every IPv4 or IPv6 address unless
// allow_all, and the header is a valid header name (also without cidrs: a
// header with nobody trusted is never read, but still checked).
func checkV0(tp TrustedProxiesConfig) []error {
	var errs []error
	covers := func(entries []string) bool {
		set, err := trustedproxy.ParseSet(entries)
		return err == nil && (set.ContainsPrefix(allV4) || set.ContainsPrefix(allV6))
	}
	_, perr := trustedproxy.ParseSet(tp.CIDRs)
	if perr != nil {
		errs = append(errs, fieldErrors("trusted_proxies.cidrs", perr)...)
	}
	if !tp.AllowAll {
		whole := false
		for i, c := range tp.CIDRs {
			if covers([]string{c}) { // false for an entry ParseSet refused
				whole = true
				errs = append(errs, fmt.Errorf("trusted_proxies.cidrs[%d] %s: trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it", i, quote.Value(c)))
			}
		}
		if !whole && perr == nil && covers(tp.CIDRs) {
			errs = append(errs, fmt.Errorf("trusted_proxies.cidrs: the union of the %d entries trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it", len(tp.CIDRs)))
		}
	}
	if tp.Header != "" && !httpguts.ValidHeaderFieldName(tp.Header) {
		errs = append(errs, fmt.Errorf("trusted_proxies.header: %s is not a valid header name", quote.Value(tp.Header)))
	}
	return errs
}

// checkOperations refuses policy operations that no rate-limited demo
// route serves (middleware.ServesOperation, as ratekey.New checks them, and
// under /v1, the only routes behind the limiter): such a policy would
// silently never apply.
func (a *app) checkOperations(logger *slog.Logger) []error {
	h, err := a.router(logger)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for i, p := range a.policies {
		for _, f := range policyOperations(p) {
			_, path, _ := strings.Cut(f.op, " ")
			limited := f.op == middleware.UnmatchedOperation || path == "/v1" || strings.HasPrefix(path, "/v1/")
			if grpcLimitedMethods[f.op] {
				continue // a method of the demo's gRPC service
			}
			if !limited || !middleware.ServesOperation(h, f.op) {
				errs = append(errs, fmt.Errorf("%s.%s: %s is not a rate-limited route of the demo (operations are \"METHOD /route/{template}\", e.g. \"GET /v1/reports/{id}\", a method of the demo's gRPC service, e.g. \"%s\", or %s)", policyRef(i, p.Name), f.field, shown(f.op), workDo, middleware.UnmatchedOperation))
			}
		}
	}
	return errs
}

// policyOperations returns the operations policy p names, with their
// fields: operations[j], and priorities[j].operation.
func policyOperations(p ratekey.Policy) []struct{ field, op string } {
	var fs []struct{ field, op string }
	for j, op := range p.Operations {
		fs = append(fs, struct{ field, op string }{fmt.Sprintf("operations[%d]", j), op})
	}
	for j, pr := range p.Priorities {
		if pr.Operation != "" {
			fs = append(fs, struct{ field, op string }{fmt.Sprintf("priorities[%d].operation", j), pr.Operation})
		}
	}
	return fs
}

// validPort reports whether p is a decimal port number, 0 to 65535.
func validPort(p string) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && strconv.FormatUint(n, 10) == p
}

// validSample reports whether f is a sampling fraction: 0 to 1, not NaN.
func validSample(f float64) bool { return f >= 0 && f <= 1 }

// newFront builds the /v1 chain for the demo's router root with
// ratekey.New. When New fails, m is nil, err is its error and yaml its
// errors mapped onto the YAML's fields (yamlError), without those the
// demo reports in its own words: yaml may be empty.
func (a *app) newFront(root chi.Router, logger *slog.Logger) (m *ratekey.Middleware, yaml []error, err error) {
	m, err = ratekey.New(a.frontConfig(root, logger))
	if err != nil {
		for _, e := range splitErrors(err) {
			if e = a.yamlError(e); e != nil {
				yaml = append(yaml, e)
			}
		}
	}
	return m, yaml, err
}

// frontConfig is the app as ratekey.Config, for the demo's router root.
func (a *app) frontConfig(root chi.Router, logger *slog.Logger) ratekey.Config {
	sample := a.cfg.Log.SamplePassed
	if !validSample(sample) {
		sample = 0 // out of range (or NaN): reported by build
	}
	cfg := ratekey.Config{
		Router:         root,
		Resolver:       a.resolver, // nil when trusted_proxies is invalid (reported)
		Authenticator:  a.auth.authn,
		Anonymous:      a.anonymous,
		Policies:       a.policies,
		Limiter:        a.limiter,
		Fallback:       a.fallback(),
		Logger:         logger,
		Metrics:        a.metrics,
		DryRun:         a.cfg.DryRun,
		DecisionHeader: a.cfg.DecisionHeader,
		// Only /v1 is behind the chain: the debug endpoint says so of
		// /healthz and its own path.
		DebugLimited: underV1,
		SamplePassed: sample,
		// Bounded by default: a client that is rejected at will must not
		// fill the operator's disk (log.every_decision turns it off).
		LogEveryDecision: a.cfg.Log.EveryDecision,
		LogInterval:      min(a.logInterval, time.Hour),
		// Under the server's 60 s write timeout: a longer wait would be
		// charged and then cut off.
		MaxWait: 50 * time.Second,
	}
	if a.cfg.Debug.Enabled {
		cfg.DebugAllow = a.cfg.Debug.Allow
	}
	return cfg
}

// The errors of ratekey.New that name a Go field or word the YAML spells
// otherwise (see yamlError).
var (
	libNoPolicy      = regexp.MustCompile(`^policies: at least one policy is required$`)
	libUnverifiedKey = regexp.MustCompile(`^policies\[(\d+)\][^:]*\.key: dimension (\S+) comes from a verified credential, but no Authenticator is configured$`)
	libUnverifiedPri = regexp.MustCompile(`^policies\[(\d+)\][^:]*\.priorities\[(\d+)\]: a tenant or plan comes from a verified credential, but no Authenticator is configured$`)
	libTenantless    = regexp.MustCompile(`^policies\[\d+\][^:]*\.key: account and credential are unique only per tenant, and the Authenticator names \d+ tenants: add tenant to the key$`)
	libNoFallback    = regexp.MustCompile(`^policies\[\d+\][^:]*\.on_store_error: local needs a fallback store \(RateLimitConfig\.Fallback`)
	libEveryTenant   = regexp.MustCompile(`^policies\[\d+\][^:]*\.overrides\[\d+\]\.account: .* would match the account of that name in every tenant \(`)
	libUnknownTenant = regexp.MustCompile(`^policies\[\d+\][^:]*\.(overrides|priorities)\[\d+\]\.tenant: .* is none of the \d+ tenants the Authenticator names, so it never matches$`)
)

// yamlError maps an error of ratekey.New onto the YAML: most already name
// the YAML's field (policies[0] ("p").rate: ...); "debug_allow[0]" is
// debug.allow[0], and "no Authenticator" is no auth.issuers nor
// auth.api_keys. nil drops an error the demo reports in its own words
// already: a key without tenant beside account or credential, which
// buildKey refuses whenever the credentials may name several tenants
// (API keys too, which ratekey.New cannot list), and, with no
// credentials at all, an account override without its tenant (there is
// no tenant: checkOverrides says no credential is checked), and "local
// needs a fallback store", which the demo gives every Redis store
// (checkFallback says local needs limiter.store: redis), and an override
// or priority on a tenant no issuer names (checkOverrides says so, naming
// the YAML's fields, API keys' tenants included).
func (a *app) yamlError(err error) error {
	msg := err.Error()
	ref := func(i string) string {
		n, _ := strconv.Atoi(i)
		if n < 0 || n >= len(a.cfg.Policies) {
			return "policies[" + i + "]"
		}
		return policyRef(n, a.cfg.Policies[n].Name)
	}
	const noCredentials = "but neither auth.issuers nor auth.api_keys is configured"
	switch {
	case libNoPolicy.MatchString(msg):
		// An empty file, or one that is only "---", decodes to no
		// policies: a demo that would limit nothing is a mistake.
		return errors.New("policies: at least one policy is required (none is configured, so nothing would be limited)")
	case libUnverifiedKey.MatchString(msg):
		m := libUnverifiedKey.FindStringSubmatch(msg)
		return fmt.Errorf("%s.key: dimension %s comes from a verified credential, %s", ref(m[1]), quote.Value(m[2]), noCredentials)
	case libUnverifiedPri.MatchString(msg):
		m := libUnverifiedPri.FindStringSubmatch(msg)
		return fmt.Errorf("%s.priorities[%s]: tenant and plan come from a verified credential, %s", ref(m[1]), m[2], noCredentials)
	case libTenantless.MatchString(msg), libNoFallback.MatchString(msg), libUnknownTenant.MatchString(msg),
		libEveryTenant.MatchString(msg) && !sourcesOf(a.cfg).credentials:
		return nil
	case strings.HasPrefix(msg, "debug_allow"):
		return fmt.Errorf("debug.allow%s", strings.TrimPrefix(msg, "debug_allow"))
	}
	return err
}

// unbuiltAuth stands in for the authenticator while the auth section has
// errors (reported), so that ratekey.New checks the policies as it will
// once the credentials load.
type unbuiltAuth struct{}

func (unbuiltAuth) Authenticate(*http.Request) (limitkey.Principal, error) {
	return limitkey.Principal{}, errors.New("demo: the auth section is invalid")
}

// sameStore reports whether a and b configure the same store, replicas
// aside: a reload applies a new limiter.replicas to a view of the kept
// store (store.withReplicas).
func sameStore(a, b LimiterConfig) bool {
	a.Replicas, b.Replicas = 0, 0
	return a == b
}

// fallback returns the store's local fallback when a policy has
// on_store_error local (nil otherwise: without such a policy every call
// asks the store, as before).
func (a *app) fallback() limiter.Limiter {
	for _, p := range a.policies {
		if p.OnStoreError == policy.OnStoreErrorLocal {
			return a.store.fallback
		}
	}
	return nil
}

// checkFallback checks limiter.replicas and on_store_error local against
// the store: local needs a shared store (Redis), and with Redis,
// replicas is the local fallback's share, so it needs a local policy.
func checkFallback(lc LimiterConfig, policies []ratekey.Policy) []error {
	var errs []error
	local := false
	for i, p := range policies {
		if p.OnStoreError != policy.OnStoreErrorLocal {
			continue
		}
		local = true
		if lc.Store != "redis" {
			errs = append(errs, fmt.Errorf("policies[%d].on_store_error: local decides on this process's memory while a shared store cannot; it needs limiter.store: redis", i))
		}
	}
	if lc.Store == "redis" && lc.Replicas > 1 && !local {
		errs = append(errs, errors.New("limiter.replicas: with store redis it is the share of the local fallback (on_store_error: local), and no policy has it"))
	}
	return errs
}

// principalSources says what the configured credentials can vouch for.
type principalSources struct {
	credentials bool // some credential is checked (issuers or API keys)
	tenants     bool // the credentials may name several tenants
	plans       bool // some credential may carry a plan
}

// buildPolicy turns the YAML of policy i into a ratekey.Policy: it
// parses what YAML writes as text (rate, max_delay, the key's names) and
// checks what only the config can say (a missing key, an explicit
// delay_after of 0, a verified dimension without credentials). Everything
// else (name, burst, cost, waits) the rate limiter checks itself; its
// errors name the field the same way: policies[i] ("name").field.
func buildPolicy(i int, pc PolicyConfig, src principalSources) (ratekey.Policy, []error) {
	ref := policyRef(i, pc.Name)
	p := ratekey.Policy{Name: pc.Name, Cost: int64(pc.Cost), Operations: pc.Operations, Status: int(pc.Status),
		OnMissing: policy.OnMissing(pc.OnMissing), OnStoreError: policy.OnStoreError(pc.OnStoreError),
		DryRun: pc.DryRun, PreAuth: pc.PreAuth, Settle: pc.Settle, MaxCost: int64(pc.MaxCost)}
	errs := buildKey(ref, &pc, &p, src)
	if pc.Operations != nil && len(pc.Operations) == 0 {
		// In the library, no operations means every one: an explicit
		// empty list is more likely a list emptied by mistake.
		errs = append(errs, fmt.Errorf("%s.operations: an empty list would apply the policy to every operation: list them, or omit the field to mean every operation", ref))
	}
	if pc.RetryAfter != "" {
		d, err := time.ParseDuration(pc.RetryAfter)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s.retry_after: %s is not a positive duration such as 2s", ref, shown(pc.RetryAfter)))
		}
		p.RetryAfter = max(d, 0)
	}
	if pc.MaxInFlight != nil && pc.MaxInFlight.auto {
		return p, append(errs, buildAdaptive(ref, pc, &p)...)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"min_in_flight", pc.MinInFlight != 0}, {"max_in_flight_ceiling", pc.MaxInFlightCeiling != 0}} {
		if f.set {
			errs = append(errs, fmt.Errorf("%s.%s: bounds an adaptive cap: set max_in_flight: auto", ref, f.name))
		}
	}
	// priorities, reserved and limit_log_factor: passed on, and refused by
	// the rate limiter on anything but an adaptive cap, naming the field.
	p.Priorities, p.LimitLogFactor = priorities(pc.Priorities), pc.LimitLogFactor
	if pc.Reserved != nil {
		p.Reserved = float64(*pc.Reserved)
	}
	if pc.MaxInFlight != nil {
		return p, append(errs, buildInFlight(ref, pc, &p)...)
	}
	return p, append(errs, buildBucket(ref, pc, &p)...)
}

// buildKey reads policy ref's key into p: built-in dimensions only, those
// of a credential only when credentials are configured, and tenant beside
// account or credential when several tenants exist.
func buildKey(ref string, pc *PolicyConfig, p *ratekey.Policy, src principalSources) []error {
	var errs []error
	if pc.Key == nil {
		errs = append(errs, fmt.Errorf("%s.key: required: list the dimensions (e.g. [network]); [] means one bucket shared by every request", ref))
		pc.Key = &[]string{}
	}
	for _, k := range *pc.Key {
		d, err := limitkey.ParseDimension(k)
		if err != nil || !d.Builtin() {
			errs = append(errs, fmt.Errorf("%s.key: unknown dimension %s (tenant, account, credential, operation, network, plan)", ref, shown(k)))
			continue
		}
		// ratekey.New refuses tenant, account and credential without
		// credentials (see yamlError); plan is the demo's to check.
		switch {
		case !src.credentials && d == limitkey.DimPlan:
			errs = append(errs, fmt.Errorf("%s.key: dimension %s comes from a verified credential, but neither auth.issuers nor auth.api_keys is configured", ref, quote.Value(k)))
		case !src.plans && d == limitkey.DimPlan:
			errs = append(errs, fmt.Errorf("%s.key: dimension \"plan\" comes from an issuer's plan or plan_claim or an API key's plan, and no issuer has one (nor are API keys configured)", ref))
		}
		p.Key = append(p.Key, d)
	}
	if src.tenants && !slices.Contains(p.Key, limitkey.DimTenant) &&
		(slices.Contains(p.Key, limitkey.DimAccount) || slices.Contains(p.Key, limitkey.DimCredential)) {
		errs = append(errs, fmt.Errorf("%s.key: account and credential are unique only per tenant, and the configured credentials name several tenants (several issuers, API keys, or a tenant_claim): add tenant to the key", ref))
	}
	return errs
}

// buildBucket completes p, policy ref, as a token bucket: rate, burst,
// delay_after, max_delay and overrides.
func buildBucket(ref string, pc PolicyConfig, p *ratekey.Policy) []error {
	var errs []error
	if pc.Lease != "" {
		// A token bucket with a lease: one error, and the bucket is still
		// built and checked as written.
		errs = append(errs, fmt.Errorf("%s.lease: is for max_in_flight policies", ref))
	}
	rate, err := limiter.ParseRate(pc.Rate)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s.rate: %v", ref, err))
		rate = limiter.Rate{Count: 1, Per: time.Second} // reported; the rest is still checked
	}
	p.Limit = limiter.Limit{Rate: rate, Burst: int64(pc.Burst)}
	if pc.DelayAfter != nil {
		if *pc.DelayAfter < 1 {
			// Omitted means burst (nodelay); the library reads 0 so too.
			errs = append(errs, fmt.Errorf("%s.delay_after: %d must be 1 to burst %d (1 delays everything after the first request, like nginx burst=N; omit it for nodelay)", ref, *pc.DelayAfter, pc.Burst))
		}
		p.Limit.DelayAfter = max(int64(*pc.DelayAfter), 0)
	}
	if pc.MaxDelay != "" {
		d, err := time.ParseDuration(pc.MaxDelay)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s.max_delay: %s is not a positive duration such as 2s", ref, shown(pc.MaxDelay)))
		}
		p.Limit.MaxDelay = max(d, 0)
	}
	for j, oc := range pc.Overrides {
		o, oerrs := buildOverride(fmt.Sprintf("%s.overrides[%d]", ref, j), oc)
		errs = append(errs, oerrs...)
		p.Overrides = append(p.Overrides, o)
	}
	return errs
}

// buildInFlight completes p, policy ref, as an in-flight cap: max_in_flight
// (set) >= 1, lease (default 60s) between 1s and 1h, and none of the token
// bucket's fields beside them.
func buildInFlight(ref string, pc PolicyConfig, p *ratekey.Policy) []error {
	var errs []error
	if pc.MaxInFlight.n < 1 {
		errs = append(errs, fmt.Errorf("%s.max_in_flight: %d must be >= 1 (requests of one key running at once)", ref, pc.MaxInFlight.n))
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"rate", pc.Rate != ""}, {"burst", pc.Burst != 0}, {"cost", pc.Cost != 0}, {"delay_after", pc.DelayAfter != nil}, {"max_delay", pc.MaxDelay != ""}} {
		if f.set {
			errs = append(errs, fmt.Errorf("%s.%s: a max_in_flight policy caps requests running at once and has no %s (a token bucket's; make it a policy of its own)", ref, f.name, f.name))
		}
	}
	lease := time.Duration(0) // the library's default, 60s
	if pc.Lease != "" {
		d, err := time.ParseDuration(pc.Lease)
		if err != nil || d < time.Second || d > time.Hour {
			errs = append(errs, fmt.Errorf("%s.lease: %s must be a duration from 1s to 1h (default 60s)", ref, shown(pc.Lease)))
		} else {
			lease = d
		}
	}
	p.Cost = 0
	p.Limit = limiter.Limit{MaxInFlight: max(int64(pc.MaxInFlight.n), 1), Lease: lease}
	for j, oc := range pc.Overrides {
		o, oerrs := buildOverride(fmt.Sprintf("%s.overrides[%d]", ref, j), oc)
		errs = append(errs, oerrs...)
		p.Overrides = append(p.Overrides, o) // refused by the rate limiter, naming the field
	}
	return errs
}

// buildAdaptive completes p, policy ref, as an adaptive cap (max_in_flight:
// auto): max_in_flight_ceiling (required), min_in_flight, priorities,
// reserved and limit_log_factor, and none of a token bucket's fields or a
// lease (it is this process's: no store keeps it). ratekey.New checks the
// rest (the key, the bounds, the classes, a priority on a tenant or a plan
// without credentials), naming the fields.
func buildAdaptive(ref string, pc PolicyConfig, p *ratekey.Policy) []error {
	var errs []error
	for _, f := range []struct {
		name string
		set  bool
	}{{"rate", pc.Rate != ""}, {"burst", pc.Burst != 0}, {"cost", pc.Cost != 0}, {"delay_after", pc.DelayAfter != nil}, {"max_delay", pc.MaxDelay != ""}, {"lease", pc.Lease != ""}} {
		if f.set {
			errs = append(errs, fmt.Errorf("%s.%s: an adaptive cap (max_in_flight: auto) caps this process's requests running at once and has no %s", ref, f.name, f.name))
		}
	}
	if pc.MaxInFlightCeiling == 0 {
		errs = append(errs, fmt.Errorf("%s.max_in_flight_ceiling: required with max_in_flight: auto (the most requests this process runs at once, whatever latency says; 1 to 1000000)", ref))
		pc.MaxInFlightCeiling = max(pc.MinInFlight, 1) // reported; the rest is still checked
	}
	p.Cost = 0
	p.Limit = limiter.Limit{MinInFlight: int64(pc.MinInFlight), MaxInFlightCeiling: int64(pc.MaxInFlightCeiling)}
	p.Priorities, p.LimitLogFactor = priorities(pc.Priorities), pc.LimitLogFactor
	if pc.Reserved != nil {
		p.Reserved = float64(*pc.Reserved)
	}
	// A priority on a tenant or a plan without credentials: ratekey.New
	// refuses it (see yamlError).
	for j, oc := range pc.Overrides {
		o, oerrs := buildOverride(fmt.Sprintf("%s.overrides[%d]", ref, j), oc)
		errs = append(errs, oerrs...)
		p.Overrides = append(p.Overrides, o) // refused by the rate limiter, naming the field
	}
	return errs
}

// priorities returns the entries of a config's priorities.
func priorities(pcs []PriorityConfig) []policy.Priority {
	var ps []policy.Priority
	for _, pc := range pcs {
		ps = append(ps, policy.Priority{Tenant: pc.Tenant, Plan: pc.Plan, Operation: pc.Operation, Class: policy.Class(pc.Class)})
	}
	return ps
}

// buildOverride parses what YAML writes as text in one override (where is
// its path, policies[i] ("name").overrides[j]); the rate limiter checks the
// rest with the same paths.
func buildOverride(where string, oc OverrideConfig) (ratekey.Override, []error) {
	var errs []error
	o := ratekey.Override{Tenant: oc.Tenant, Plan: oc.Plan, Account: oc.Account, Cost: int64(oc.Cost),
		Limit: limiter.Limit{Burst: int64(oc.Burst)}}
	if oc.Rate != "" {
		rate, err := limiter.ParseRate(oc.Rate)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.rate: %v", where, err))
		}
		o.Limit.Rate = rate
	}
	if oc.DelayAfter != nil {
		if *oc.DelayAfter < 1 {
			errs = append(errs, fmt.Errorf("%s.delay_after: %d must be 1 to burst (omit it for the policy's)", where, *oc.DelayAfter))
		}
		o.Limit.DelayAfter = max(int64(*oc.DelayAfter), 0)
	}
	if oc.MaxDelay != "" {
		d, err := time.ParseDuration(oc.MaxDelay)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s.max_delay: %s is not a positive duration such as 2s (omit it for the policy's)", where, shown(oc.MaxDelay)))
		}
		o.Limit.MaxDelay = max(d, 0)
	}
	return o, errs
}

// checkOverrides refuses overrides and priorities no credential can ever
// match: a tenant or plan that no issuer record vouches for and no API key
// carries (the config names them all: the demo resolves no issuers at run
// time), an account when no credential is checked. It runs once everything else is
// valid (the API key file is loaded). With a Redis store, an override's
// window must fit it as a policy's must.
func checkOverrides(cfg *Config, auth authSetup, policies []ratekey.Policy) []error {
	tenants, plans := map[string]bool{}, map[string]bool{}
	for _, ic := range cfg.Auth.Issuers {
		for _, t := range append([]string{ic.Tenant}, ic.Tenants...) {
			tenants[t] = true
		}
		for _, p := range append([]string{ic.Plan}, ic.Plans...) {
			plans[p] = true
		}
	}
	for t := range auth.keyTenants {
		tenants[t] = true
	}
	for p := range auth.keyPlans {
		plans[p] = true
	}
	credentials := len(cfg.Auth.Issuers) > 0 || cfg.Auth.APIKeys != nil
	var errs []error
	for i, p := range policies {
		for j, pr := range p.Priorities {
			where := fmt.Sprintf("%s.priorities[%d]", policyRef(i, p.Name), j)
			errs = append(errs, neverMatches(where, pr.Tenant, pr.Plan, "", tenants, plans, true)...)
		}
		for j, o := range p.Overrides {
			where := fmt.Sprintf("%s.overrides[%d]", policyRef(i, p.Name), j)
			errs = append(errs, neverMatches(where, o.Tenant, o.Plan, o.Account, tenants, plans, credentials)...)
			if cfg.Limiter.Store == "redis" {
				errs = append(errs, overrideWindow(where, p.Limit, o.Limit)...)
			}
		}
	}
	return errs
}

// neverMatches reports a priority's or an override's tenant or plan that
// no credential vouches for, or an account when no credential is checked.
func neverMatches(where, tenant, plan, account string, tenants, plans map[string]bool, credentials bool) []error {
	switch {
	case tenant != "" && !tenants[tenant]:
		return []error{fmt.Errorf("%s.tenant: %s is not a tenant of any issuer (tenant, tenants) or API key, so it never matches", where, quote.Value(tenant))}
	case plan != "" && !plans[plan]:
		return []error{fmt.Errorf("%s.plan: %s is not a plan of any issuer (plan, plans) or API key, so it never matches", where, quote.Value(plan))}
	case account != "" && !credentials:
		return []error{fmt.Errorf("%s.account: no credential is checked (neither auth.issuers nor auth.api_keys is configured), so it never matches", where)}
	}
	return nil
}

// overrideWindow reports an override whose bucket (its limit completed
// by the policy's) refills slower than the Redis store allows.
func overrideWindow(where string, policy, override limiter.Limit) []error {
	l := override
	if l.Rate.Count == 0 {
		l.Rate = policy.Rate
	}
	if l.Burst == 0 {
		l.Burst = policy.Burst
	}
	if w := gcra.Window(l); w > gcra.MaxWindow {
		return []error{fmt.Errorf("%s: burst %d at %v refills in %v, longer than the Redis store's %v", where, l.Burst, l.Rate, w.Round(time.Hour), gcra.MaxWindow.Round(time.Hour))}
	}
	return nil
}

// policyRef names policy i of the config in an error as the rate limiter
// does: policies[i] ("name"), or policies[i] alone when the name is not
// one it accepts.
func policyRef(i int, name string) string {
	if policyNameRE.MatchString(name) {
		return fmt.Sprintf("policies[%d] (%q)", i, name)
	}
	return fmt.Sprintf("policies[%d]", i)
}

// policyNameRE is the rate limiter's rule for a policy name.
var policyNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// debugPathRE is a literal path: no chi patterns ({param}, *), no spaces.
var debugPathRE = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)+$`)

// checkDebugPath refuses a debug or metrics path (field is its YAML name,
// debug.path or metrics.path) that chi would reject (and panic on) or that
// would shadow the demo's own routes.
func checkDebugPath(field, p string) error {
	switch {
	case !debugPathRE.MatchString(p):
		return fmt.Errorf("%s: %s must be a literal absolute path such as /debug/ratekey (letters, digits, . _ ~ - between slashes)", field, shown(p))
	case p == "/healthz" || p == "/v1" || strings.HasPrefix(p, "/v1/"):
		return fmt.Errorf("%s: %s would shadow the demo's own routes", field, shown(p))
	}
	return nil
}

// splitErrors flattens an errors.Join tree into its leaves.
func splitErrors(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, splitErrors(e)...)
	}
	return out
}

// fieldErrors splits a joined error of a library that names fields the way
// the YAML does ("rules[1].from[2] ...", "[1] ...") and prefixes each part
// with the path of its section: "trusted_proxies.rules[1].from[2] ...",
// "trusted_proxies.cidrs[1] ...". The library's text is kept as it is.
func fieldErrors(path string, err error) []error {
	out := splitErrors(err)
	for i, e := range out {
		sep := "."
		if strings.HasPrefix(e.Error(), "[") {
			sep = ""
		}
		out[i] = fmt.Errorf("%s%s%w", path, sep, e)
	}
	return out
}

// prefixErrors splits a joined error and prefixes each part with where.
// indexedErrors is prefixErrors for a list's errors, which start with
// their index ("[1] ..."): "debug.allow[1] ...".
func indexedErrors(list string, err error) []error {
	out := splitErrors(err)
	for i, e := range out {
		out[i] = fmt.Errorf("%s%w", list, e)
	}
	return out
}

func prefixErrors(where string, err error) []error {
	out := splitErrors(err)
	for i, e := range out {
		out[i] = fmt.Errorf("%s: %w", where, e)
	}
	return out
}

// printConfigErrors lists every configuration error, one per line.
func printConfigErrors(w io.Writer, path string, err error) {
	fmt.Fprintf(w, "configuration %s is invalid:\n", configName(path))
	for _, e := range splitErrors(err) {
		fmt.Fprintf(w, "  - %s\n", e)
	}
}

// configName names the config file at path for messages: the path, or
// "embedded default".
func configName(path string) string {
	if path == "" {
		return "embedded default"
	}
	return path
}

// underV1 reports whether r is served by the /v1 sub-router, the only part
// of the demo behind the rate limiter.
func underV1(r *http.Request) bool {
	p := r.URL.EscapedPath()
	return p == "/v1" || strings.HasPrefix(p, "/v1/")
}

// router wires the demo's routes: /healthz (not limited), the debug endpoint
// (outside the chain so failed derivations can be shown), and the /v1 API
// behind the chain of ratekey.New: resolve the client → pre-auth policies →
// authenticate (when credentials are configured) → the other policies.
// The gRPC calls run through the same chain (grpc.go).
func (a *app) router(logger *slog.Logger) (http.Handler, error) {
	r := chi.NewRouter()
	m, yaml, err := a.newFront(r, logger)
	if err != nil {
		if len(yaml) > 0 {
			err = errors.Join(yaml...)
		}
		return nil, err
	}
	a.front = m
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	if a.cfg.Metrics.Enabled && a.cfg.Metrics.Exporter != exporterOTLP && a.registry != nil {
		admin, err := middleware.AdminOnly(a.resolver, a.cfg.Metrics.Allow)
		if err != nil {
			return nil, fmt.Errorf("metrics.%w", err)
		}
		r.With(admin).Handle(a.cfg.Metrics.Path,
			promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}))
	}
	if a.grpcSrv != nil {
		a.grpc = a.newGRPCSide(m, logger)
	}
	if a.cfg.Debug.Enabled {
		debug := m.Debug()
		if a.grpc != nil {
			debug = m.DebugGRPC(a.grpc.describe)
		}
		r.Handle(a.cfg.Debug.Path, debug)
	}
	r.Route("/v1", func(v chi.Router) {
		v.Use(m.Handler)
		v.Get("/reports/{id}", getReport)
		v.Post("/export", postExport)
		v.Get("/slow", getSlow)
		v.Post("/complete", postComplete)
		v.Get("/work", a.getWork)
	})
	return r, nil
}
