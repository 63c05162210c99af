package identity

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/internal/httpsonly"
	"github.com/ratekey/ratekey/internal/jwkey"
	"github.com/ratekey/ratekey/internal/quote"
)

// Leeway bounds for [JWTConfig.Leeway].
const (
	// defaultLeeway is the clock-skew allowance used when JWTConfig.Leeway
	// is zero: exp, nbf and iat are checked with this much slack.
	defaultLeeway = 30 * time.Second
	// maxLeeway is the largest accepted JWTConfig.Leeway.
	maxLeeway = 5 * time.Minute
)

// Resolver defaults for [JWTConfig].
const (
	// defaultResolverTTL is how long a record returned by an
	// [IssuerResolver] is used before the resolver is asked again.
	defaultResolverTTL = 10 * time.Minute
	// defaultMaxResolvedIssuers bounds the number of resolver-provided
	// records held at once (each may own a JWK Set and a refresh goroutine).
	defaultMaxResolvedIssuers = 1000
)

// VerificationKey is one key an issuer signs tokens with.
//
// Parse PEM files with [ParsePublicKeyPEM]; never pass PEM or DER bytes as
// an HMAC secret (that is the RS256→HS256 confusion, refused at start-up).
// The authenticator copies []byte secrets; public keys must not be mutated
// after [NewJWTAuthenticator].
type VerificationKey struct {
	// KID is the JWS "kid" header value that selects this key (RFC 7515
	// §4.1.4); it may be "" only when the issuer record has exactly one
	// key.
	KID string
	// Key is one of:
	//   - ed25519.PublicKey (32 bytes) for EdDSA;
	//   - *ecdsa.PublicKey on P-256, P-384 or P-521 for ES256, ES384,
	//     ES512 respectively (the curve must match the algorithm);
	//   - *rsa.PublicKey of 2048 to 8192 bits for RS* and PS* (a larger
	//     modulus makes every verification, even of a forged token, cost
	//     milliseconds; crypto/tls's limit, CVE-2023-29409);
	//   - []byte, an HMAC secret for HS*, at least as long as the hash
	//     output (32, 48, 64 bytes for HS256, HS384, HS512; RFC 7518 §3.2).
	Key any
	// Alg binds the key to exactly one JWS "alg" (RFC 8725 §3.1: one key,
	// one algorithm). It must be one of the record's Algorithms and
	// compatible with Key. When empty, the key is bound to the only
	// algorithm of the record compatible with it; if several are (an RSA
	// key in a record listing RS256 and PS256, a secret with HS256 and
	// HS384), Alg is required. A token whose alg differs from its key's
	// binding is refused even when its kid names the key.
	Alg string
}

// IssuerRecord is everything the authenticator believes about one token
// issuer. Keys are never pooled across records: a token is verified only
// with the keys of the record whose Issuer equals its `iss` claim, so tenant
// A's key never vouches for an "iss: B" token, with or without a kid.
type IssuerRecord struct {
	// Issuer is the exact `iss` value (RFC 7519 §4.1.1), compared
	// case-sensitively. Required, unique across records.
	Issuer string
	// Tenant is the fixed tenant of every principal this record verifies.
	Tenant string
	// TenantClaim, instead of Tenant, is the name of a claim that holds
	// the tenant. Exactly one of Tenant and TenantClaim must be set.
	TenantClaim string
	// Tenants is the exact, case-sensitive list of tenants a TenantClaim
	// may name: required with TenantClaim, forbidden with Tenant.
	Tenants []string
	// Plan, optional, is the fixed plan of every principal this record
	// verifies ([limitkey.Principal].Plan, the plan key dimension and overrides).
	Plan string
	// PlanClaim, instead of Plan, is the name of a claim that holds the
	// plan: a token whose claim is missing, not a string or outside Plans
	// is 401 invalid_token, as for tenants. At most one of Plan and
	// PlanClaim.
	PlanClaim string
	// Plans is the exact, case-sensitive list of plans a PlanClaim may
	// name: required with PlanClaim, forbidden otherwise.
	Plans []string
	// Audiences are the accepted `aud` values (RFC 7519 §4.1.3); a token must name
	// at least one of them. Required, none empty.
	Audiences []string
	// Algorithms are the accepted JWS `alg` values: EdDSA, ES256, ES384, ES512,
	// RS256, RS384, RS512, PS256, PS384, PS512, HS256, HS384 or HS512 (RFC
	// 7518 §3.1, RFC 8037; exact case; never "none"). Required. With Keys,
	// each must be usable with at least one key and each key is bound to
	// exactly one of them (see [VerificationKey]).
	Algorithms []string
	// Keys are the static verification keys, kids unique within the record.
	Keys []VerificationKey
	// JWKSURL, instead of Keys, is the URL of the issuer's JWK Set (RFC 7517
	// §5), fetched with the [JWKSOptions] of the [JWTConfig] into a key set
	// that belongs to this record alone. https is required, except for
	// loopback hosts (localhost, 127.0.0.0/8, ::1). Exactly one of Keys and
	// JWKSURL must be set. Every JWK is bound to one algorithm: its own "alg"
	// (RFC 7517 §4.4), which must be one of Algorithms, or else the only one
	// of Algorithms compatible with it; keys that cannot be bound, symmetric
	// ("oct") keys, keys carrying private parameters, keys whose "use" is not
	// "sig", RSA keys under 2048 or over 8192 bits and unsupported curves
	// are ignored.
	// x5c/x5u members are never read.
	JWKSURL string
	// JWKSRefresh is the background refresh interval of JWKSURL; zero means
	// JWKSOptions.Refresh. At least 1s. Only with JWKSURL.
	JWKSRefresh time.Duration
	// Typ, when set, is the JWS "typ" header the token must carry, compared
	// case-insensitively with an optional "application/" prefix (RFC 7515
	// §4.1.9, RFC 8725 §3.11); "at+jwt" requires RFC 9068 access tokens. When
	// empty, typ is not checked (but must be a string if present).
	Typ string
}

// JWTConfig configures [NewJWTAuthenticator].
//
// The errors of NewJWTAuthenticator name fields the way a configuration
// file writes them: the Go field Foo is written foo and FooBar foo_bar
// (TenantClaim tenant_claim, JWKSURL jwks_url, CacheTTL cache_ttl), list
// elements by index, an issuer record also by its issuer and a key by its
// kid (quoted, escaped, at most 64 bytes), and the value after the path:
// `issuers[0] ("https://a.invalid").tenant_claim: "org" requires a
// non-empty tenants list`, `issuers[0] ("https://a.invalid").keys[1]
// ("k2").alg: "HS384" is not ...`, `leeway: 10m0s exceeds 5m0s`. They carry
// no package prefix, so a caller prefixes the section of its own
// configuration (`auth.issuers[0] ...`).
type JWTConfig struct {
	// Issuers are the static issuer records; at least one unless Resolver is
	// set.
	Issuers []IssuerRecord
	// Leeway is the clock-skew allowance applied to exp, nbf and iat (RFC 7519
	// §4.1.4, §4.1.5, §4.1.6). Zero means 30s; negative or above 5m is an
	// error.
	Leeway time.Duration
	// Now is the time source (golang-jwt's time function); nil means
	// time.Now. It also measures the unknown-kid cooldown, ResolverTTL and
	// CacheTTL; the JWK Set refresh and retry intervals and the request
	// waits run on timers (tests run them in testing/synctest bubbles).
	Now func() time.Time
	// Resolver, optional, is consulted for an `iss` that no static record names
	// (see [IssuerResolver]).
	Resolver IssuerResolver
	// ResolverTTL is how long a resolved record is reused before the resolver
	// is asked again; zero means 10 minutes.
	ResolverTTL time.Duration
	// MaxResolvedIssuers bounds the resolved records held at once; zero means
	// 1000. When full (and none has expired), tokens of further issuers get
	// [ErrKeySourceUnavailable].
	MaxResolvedIssuers int
	// JWKS is how JWK Sets are fetched, for every record with a JWKSURL.
	JWKS JWKSOptions
	// Logger receives JWK Set fetch failures and resolver problems (issuer,
	// redacted URL, error; never a token). nil means slog.Default().
	Logger *slog.Logger
	// CacheSize is the number of successful verifications the authenticator
	// remembers (see "Verification cache" on [JWTAuthenticator]); zero means
	// 10000, a negative value disables the cache; at most 2^26. Memory is
	// bounded by the size: each entry keeps a copy of its token (compared in
	// full on every hit) besides about 220 bytes and the principal's strings,
	// so 10-20 MB at the default size for tokens of 1-2 KiB, and at most
	// about 8 KiB (the longest token accepted) times CacheSize: a slot keeps
	// the largest token it has held.
	CacheSize int
	// CacheTTL is the longest a cached verification is reused, measured with
	// Now from the verification that filled the entry (the token's own exp
	// usually ends it sooner); zero means 5 minutes; negative is an error.
	CacheTTL time.Duration
}

// boundKey is a verification key and the one algorithm it may verify.
type boundKey struct {
	key any
	alg string
}

// issuerState is the immutable, validated form of one IssuerRecord.
type issuerState struct {
	issuer      string
	tenant      string
	tenantClaim string
	tenants     map[string]struct{}
	plan        string
	planClaim   string
	plans       map[string]struct{}
	algs        map[string]bool
	typ         string
	byKID       map[string]boundKey
	only        *boundKey // the key used for tokens without kid; nil if >1 key
	jwks        *jwksSet  // non-nil for a JWKSURL record
	parser      *jwt.Parser

	// res is the resolver cache entry that holds this state (nil for a
	// static record). Set before the state is published; read by the
	// verification cache to tell whether the record is still in force.
	res *resolvedEntry
}

// jwtEnv is what every issuer state of one authenticator shares.
type jwtEnv struct {
	leeway   time.Duration
	now      func() time.Time
	jwks     jwksOptions
	logger   *slog.Logger
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	mu       sync.Mutex // guards closed and wg.Add
	closed   bool
	wg       sync.WaitGroup
	resolver *resolverCache // nil without a Resolver
	cache    *verifyCache   // nil when JWTConfig.CacheSize is negative
}

// compile validates cfg and builds the per-issuer state. It reports every
// problem found, joined, each naming the issuer and, where relevant, the kid.
func compile(cfg JWTConfig) (map[string]*issuerState, *jwtEnv, error) {
	env, errs := compileEnv(cfg)
	if len(cfg.Issuers) == 0 && cfg.Resolver == nil {
		errs = append(errs, errors.New("issuers: at least one issuer record is required (or a resolver)"))
	}
	if cfg.Resolver != nil {
		rc, rerrs := compileResolver(cfg)
		errs = append(errs, rerrs...)
		env.resolver = rc
	}
	states, tenantOwner, ierrs := compileIssuers(cfg.Issuers, env)
	errs = append(errs, ierrs...)
	if env.resolver != nil {
		env.resolver.staticOwners = tenantOwner
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	env.ctx, env.cancel = context.WithCancel(context.Background())
	return states, env, nil
}

// compileEnv validates and builds what every issuer state shares: the
// leeway, the time source, the logger, the verification cache and the JWK Set
// options.
func compileEnv(cfg JWTConfig) (*jwtEnv, []error) {
	var errs []error
	leeway := cfg.Leeway
	switch {
	case leeway == 0:
		leeway = defaultLeeway
	case leeway < 0:
		errs = append(errs, fmt.Errorf("leeway: %v is negative", leeway))
	case leeway > maxLeeway:
		errs = append(errs, fmt.Errorf("leeway: %v exceeds %v", leeway, maxLeeway))
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	env := &jwtEnv{leeway: leeway, now: now, logger: cfg.Logger}
	if env.logger == nil {
		env.logger = slog.Default()
	}
	cache, err := compileCache(cfg)
	if err != nil {
		errs = append(errs, err)
	}
	env.cache = cache
	jo, jerrs := cfg.JWKS.resolve()
	errs = append(errs, jerrs...)
	env.jwks = jo
	return env, errs
}

// compileCache validates CacheSize and CacheTTL and builds the
// verification cache, nil when CacheSize is negative.
func compileCache(cfg JWTConfig) (*verifyCache, error) {
	switch {
	case cfg.CacheTTL < 0:
		return nil, fmt.Errorf("cache_ttl: %v is negative", cfg.CacheTTL)
	case cfg.CacheSize > maxCacheSize:
		return nil, fmt.Errorf("cache_size: %d exceeds %d", cfg.CacheSize, maxCacheSize)
	case cfg.CacheSize < 0:
		return nil, nil
	}
	size, ttl := cfg.CacheSize, cfg.CacheTTL
	if size == 0 {
		size = defaultJWTCacheSize
	}
	if ttl == 0 {
		ttl = defaultJWTCacheTTL
	}
	return newVerifyCache(size, ttl), nil
}

// compileResolver validates ResolverTTL and MaxResolvedIssuers and builds
// the cache of the records cfg.Resolver (not nil) provides.
func compileResolver(cfg JWTConfig) (*resolverCache, []error) {
	var errs []error
	rc := &resolverCache{r: cfg.Resolver, ttl: cfg.ResolverTTL, max: cfg.MaxResolvedIssuers,
		entries: map[string]*resolvedEntry{}, calls: map[string]*resolveCall{}}
	if rc.ttl == 0 {
		rc.ttl = defaultResolverTTL
	}
	if rc.max == 0 {
		rc.max = defaultMaxResolvedIssuers
	}
	if rc.ttl < 0 {
		errs = append(errs, fmt.Errorf("resolver_ttl: %v is negative", rc.ttl))
	}
	if rc.max < 0 {
		errs = append(errs, fmt.Errorf("max_resolved_issuers: %d is negative", rc.max))
	}
	return rc, errs
}

// compileIssuers validates the static issuer records and builds their
// states, by issuer (the first record of a duplicated issuer). It also
// returns which issuer vouches for each tenant (one tenant, one issuer).
func compileIssuers(issuers []IssuerRecord, env *jwtEnv) (map[string]*issuerState, map[string]string, []error) {
	var errs []error
	states := make(map[string]*issuerState, len(issuers))
	tenantOwner := map[string]string{} // tenant → the issuer that may vouch for it
	first := map[string]int{}          // issuer → the index of its first record
	for i, rec := range issuers {
		name, err := recordName(i, rec)
		if err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, claimTenants(name, rec, tenantOwner)...)
		if rec.Issuer == "" {
			errs = append(errs, fmt.Errorf("%s.issuer: required (the exact iss value)", name))
		} else if j, dup := first[rec.Issuer]; dup {
			errs = append(errs, fmt.Errorf("%s.issuer: duplicate of issuers[%d]", name, j))
		} else {
			first[rec.Issuer] = i
		}
		st, recErrs := compileRecord(name, rec, env)
		errs = append(errs, recErrs...)
		if rec.Issuer != "" && states[rec.Issuer] == nil {
			states[rec.Issuer] = st
		}
	}
	return states, tenantOwner, errs
}

// recordName is the path of record i in messages, with its issuer quoted:
// `issuers[0] ("https://a.invalid")`. An issuer carrying user information
// is left out of the name and reported.
func recordName(i int, rec IssuerRecord) (string, error) {
	name := fmt.Sprintf("issuers[%d]", i)
	if u, err := url.Parse(rec.Issuer); err == nil && u.User != nil {
		// A password in the issuer would be quoted by every error
		// naming the record, and compared with every token's iss.
		return name, fmt.Errorf("%s.issuer: carries user information (a password?); an issuer names no credentials", name)
	}
	if rec.Issuer != "" {
		name += fmt.Sprintf(" (%s)", quote.Value(rec.Issuer))
	}
	return name, nil
}

// claimTenants records rec's issuer as the one vouching for each of its
// tenants in tenantOwner, and reports each tenant another issuer vouches
// for already. A subject is unique only within its issuer (OpenID Connect
// Core §2): if two issuers could vouch for one tenant, "alice" of one would
// spend (or lock out) "alice" of the other in every key built from
// (tenant, account). One tenant, one issuer.
func claimTenants(name string, rec IssuerRecord, tenantOwner map[string]string) []error {
	var errs []error
	for j, t := range recordTenants(rec) {
		if owner, ok := tenantOwner[t]; ok && owner != rec.Issuer {
			field := ".tenant"
			if rec.Tenant == "" {
				field = fmt.Sprintf(".tenants[%d]", j)
			}
			errs = append(errs, fmt.Errorf("%s%s: %s is already vouched for by issuer %s (subjects are unique only per issuer, so their accounts would share budgets)", name, field, quote.Value(t), quote.Value(owner)))
			continue
		}
		tenantOwner[t] = rec.Issuer
	}
	return errs
}

// recordTenants lists the tenants a record may vouch for.
func recordTenants(rec IssuerRecord) []string {
	if rec.Tenant != "" {
		return []string{rec.Tenant}
	}
	return rec.Tenants
}

// recordErrs collects the problems of one issuer record, each prefixed
// with the record's path.
type recordErrs struct {
	name string // the record's path, `issuers[0] ("https://a.invalid")`
	errs []error
}

// fail reports a problem of field (".tenants", "" for the record).
func (e *recordErrs) fail(field, format string, args ...any) {
	e.errs = append(e.errs, fmt.Errorf("%s%s: %s", e.name, field, fmt.Sprintf(format, args...)))
}

// acceptedValues returns the values a claim may take (a record's tenants
// or plans, the list at field) as a set, and fails each empty one.
func acceptedValues(field string, values []string, e *recordErrs) map[string]struct{} {
	set := make(map[string]struct{}, len(values))
	for j, v := range values {
		if v == "" {
			e.fail(fmt.Sprintf("%s[%d]", field, j), "empty")
		}
		set[v] = struct{}{}
	}
	return set
}

// compileRecord validates one record (name is its path in messages,
// `issuers[0] ("https://a.invalid")`) and builds its state, including its
// parser and, for a JWKSURL record, its (not yet started) key set.
func compileRecord(name string, rec IssuerRecord, env *jwtEnv) (*issuerState, []error) {
	e := &recordErrs{name: name}
	st := &issuerState{
		issuer:      rec.Issuer,
		tenant:      rec.Tenant,
		tenantClaim: rec.TenantClaim,
		plan:        rec.Plan,
		planClaim:   rec.PlanClaim,
		algs:        make(map[string]bool, len(rec.Algorithms)),
		byKID:       make(map[string]boundKey, len(rec.Keys)),
		typ:         rec.Typ,
	}
	st.tenants = compileTenant(rec, e)
	st.plans = compilePlan(rec, e)
	checkAudiences(rec, e)
	if rec.Typ != "" && !validTyp(rec.Typ) {
		e.fail(".typ", "%s is not a media type such as at+jwt", quote.Value(rec.Typ))
	}
	algs := compileAlgorithms(rec, st, e)
	compileKeySource(rec, algs, st, env, e)
	st.parser = newParser(rec, env)
	return st, e.errs
}

// compileTenant validates the record's tenant fields and returns the set
// of tenants its tenant claim may name (nil without a tenant claim).
func compileTenant(rec IssuerRecord, e *recordErrs) map[string]struct{} {
	switch {
	case rec.Tenant != "" && rec.TenantClaim != "":
		e.fail("", "set either tenant or tenant_claim, not both")
	case rec.Tenant == "" && rec.TenantClaim == "":
		e.fail("", "one of tenant or tenant_claim is required")
	case rec.Tenant != "" && len(rec.Tenants) > 0:
		e.fail(".tenants", "only allowed with tenant_claim")
	case rec.TenantClaim != "" && len(rec.Tenants) == 0:
		e.fail(".tenant_claim", "%s requires a non-empty tenants list", quote.Value(rec.TenantClaim))
	}
	if rec.TenantClaim == "" {
		return nil
	}
	return acceptedValues(".tenants", rec.Tenants, e)
}

// compilePlan validates the record's (optional) plan fields and returns the
// set of plans its plan claim may name (nil without a plan claim).
func compilePlan(rec IssuerRecord, e *recordErrs) map[string]struct{} {
	switch {
	case rec.Plan != "" && rec.PlanClaim != "":
		e.fail("", "set either plan or plan_claim, not both")
	case rec.PlanClaim == "" && len(rec.Plans) > 0:
		e.fail(".plans", "only allowed with plan_claim")
	case rec.PlanClaim != "" && len(rec.Plans) == 0:
		e.fail(".plan_claim", "%s requires a non-empty plans list", quote.Value(rec.PlanClaim))
	}
	if rec.PlanClaim == "" {
		return nil
	}
	return acceptedValues(".plans", rec.Plans, e)
}

// checkAudiences validates the record's audiences: at least one, none
// empty.
func checkAudiences(rec IssuerRecord, e *recordErrs) {
	if len(rec.Audiences) == 0 {
		e.fail(".audiences", "none configured")
	}
	for j, aud := range rec.Audiences {
		if aud == "" {
			e.fail(fmt.Sprintf(".audiences[%d]", j), "empty")
		}
	}
}

// compileAlgorithms validates the record's algorithms, marks each in
// st.algs and returns them in configuration order (deterministic
// messages), without the unknown and repeated ones.
func compileAlgorithms(rec IssuerRecord, st *issuerState, e *recordErrs) []string {
	if len(rec.Algorithms) == 0 {
		e.fail(".algorithms", "none configured")
	}
	var algs []string
	listed := rec.Algorithms
	if len(listed) > len(algorithms) {
		// Longer than the supported set: duplicates or unknown names, which
		// would each get a line; one line says so.
		e.fail(".algorithms", "%d entries, but there are only %d supported algorithms, each listed at most once", len(listed), len(algorithms))
		listed = nil
	}
	for j, alg := range listed {
		field := fmt.Sprintf(".algorithms[%d]", j)
		if _, ok := algorithms[alg]; !ok {
			e.fail(field, "unknown or unsupported algorithm %s", quote.Value(alg))
			continue
		}
		if st.algs[alg] {
			e.fail(field, "%s listed twice", quote.Value(alg))
			continue
		}
		st.algs[alg] = true
		algs = append(algs, alg)
	}
	return algs
}

// compileKeySource validates the record's keys, static or a JWK Set, and
// binds them into st: static keys at once, a JWK Set as a (not yet
// started) set, built only when the record has no problem so far.
func compileKeySource(rec IssuerRecord, algs []string, st *issuerState, env *jwtEnv, e *recordErrs) {
	switch {
	case rec.JWKSURL != "" && len(rec.Keys) > 0:
		e.fail("", "set either keys or jwks_url, not both")
	case rec.JWKSURL != "":
		if _, err := checkJWKSURL(rec.JWKSURL); err != nil {
			e.fail(".jwks_url", "%v", err)
		}
		refresh := rec.JWKSRefresh
		if refresh == 0 {
			refresh = env.jwks.refresh
		}
		if refresh < minJWKSInterval {
			e.fail(".jwks_refresh", "%v is below %v", rec.JWKSRefresh, minJWKSInterval)
		}
		if len(algs) > 0 && len(e.errs) == 0 {
			st.jwks = newJWKSSet(rec.Issuer, rec.JWKSURL, refresh, algs, env)
		}
	case len(rec.Keys) == 0:
		e.fail(".keys", "none configured (set keys or jwks_url)")
	default:
		if rec.JWKSRefresh != 0 {
			e.fail(".jwks_refresh", "only allowed with jwks_url")
		}
		e.errs = append(e.errs, compileKeys(e.name, rec, algs, st)...)
	}
}

// newParser returns the golang-jwt parser of a record: its algorithms,
// issuer and audiences, exp required, iat checked, the authenticator's
// leeway and clock, strict base64 decoding.
func newParser(rec IssuerRecord, env *jwtEnv) *jwt.Parser {
	return jwt.NewParser(
		jwt.WithValidMethods(slices.Clone(rec.Algorithms)),
		jwt.WithIssuer(rec.Issuer),
		jwt.WithAudience(slices.Clone(rec.Audiences)...),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(env.leeway),
		jwt.WithTimeFunc(env.now),
		jwt.WithStrictDecoding(),
	)
}

// compileKeys validates and binds the static keys of rec into st.
func compileKeys(name string, rec IssuerRecord, algs []string, st *issuerState) []error {
	var errs []error
	seenKID := make(map[string]int, len(rec.Keys)) // kid → the index of its first key
	for k, vk := range rec.Keys {
		kname := fmt.Sprintf("%s.keys[%d]", name, k)
		if vk.KID != "" {
			kname += fmt.Sprintf(" (%s)", quote.Value(vk.KID))
		}
		e := &recordErrs{name: kname}
		if j, dup := seenKID[vk.KID]; vk.KID == "" && len(rec.Keys) > 1 {
			e.fail(".kid", "may be empty only when the issuer has exactly one key")
		} else if dup {
			e.fail(".kid", "duplicate of keys[%d]", j)
		} else {
			seenKID[vk.KID] = k
		}
		bk, ok := bindKey(vk, algs, e)
		errs = append(errs, e.errs...)
		if !ok {
			continue
		}
		if vk.KID != "" {
			st.byKID[vk.KID] = bk
		}
		if len(rec.Keys) == 1 {
			st.only = &bk
		}
	}
	return append(errs, keylessAlgorithms(name, rec, algs)...)
}

// bindKey validates one static key and binds it to the one algorithm of
// algs it is for: its alg, or the only one usable with its type. ok is
// false when it cannot be bound; problems go to e (the key's path).
func bindKey(vk VerificationKey, algs []string, e *recordErrs) (bk boundKey, ok bool) {
	if err := jwkey.CheckPublicKey(vk.Key); err != nil {
		e.fail("", "%v", err)
		return boundKey{}, false
	}
	key := vk.Key
	if b, ok := key.([]byte); ok {
		key = slices.Clone(b)
	}
	var usable []string
	for _, alg := range algs {
		if !compatible(alg, key) {
			continue
		}
		usable = append(usable, alg)
		if n := algorithms[alg].hmacN; n > 0 && len(key.([]byte)) < n {
			e.fail("", "HMAC secret is %d bytes, %s needs at least %d", len(key.([]byte)), alg, n)
		}
	}
	if len(usable) == 0 && len(algs) > 0 {
		e.fail("", "key type %s matches none of the algorithms %s", keyTypeName(key), strings.Join(algs, ", "))
		return boundKey{}, false
	}
	var bound string
	switch {
	case vk.Alg != "":
		if !slices.Contains(usable, vk.Alg) {
			e.fail(".alg", "%s is not one of the record's algorithms usable with a %s key %v", quote.Value(vk.Alg), keyTypeName(key), usable)
			return boundKey{}, false
		}
		bound = vk.Alg
	case len(usable) == 1:
		bound = usable[0]
	case len(usable) > 1:
		e.fail("", "usable with several algorithms %v: set alg to bind it to one (RFC 8725 §3.1)", usable)
		return boundKey{}, false
	}
	return boundKey{key: key, alg: bound}, true
}

// keylessAlgorithms reports each of the record's algorithms that none of
// its static keys can verify.
func keylessAlgorithms(name string, rec IssuerRecord, algs []string) []error {
	var errs []error
	for _, alg := range algs {
		ok := false
		for _, vk := range rec.Keys {
			if compatible(alg, vk.Key) {
				ok = true
				break
			}
		}
		if !ok {
			errs = append(errs, fmt.Errorf("%s.algorithms[%d]: %s has no compatible key (HS* needs an HMAC secret, RS*/PS* an RSA key, ES* an ECDSA key on its curve, EdDSA an Ed25519 key)", name, slices.Index(rec.Algorithms, alg), alg))
		}
	}
	return errs
}

// checkJWKSURL parses a JWK Set URL: absolute, with a host, no fragment;
// https, or http to a loopback host only. It returns the URL.
func checkJWKSURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a valid URL")
	}
	if u.Host == "" || u.Fragment != "" || u.Opaque != "" {
		return nil, errors.New("must be an absolute URL with a host and no fragment")
	}
	if err := httpsonly.Check(u); err != nil {
		return nil, err
	}
	return u, nil
}

// validTyp reports whether t looks like a media type without parameters:
// RFC 9110 tokens around at most one "/".
func validTyp(t string) bool {
	a, b, found := strings.Cut(t, "/")
	if !isToken(a) || (found && !isToken(b)) {
		return false
	}
	return true
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// typMatches compares a token's typ with the required one, per RFC 7515
// §4.1.9: media types are case-insensitive and "application/" may be
// omitted.
func typMatches(got, want string) bool {
	trim := func(s string) string {
		const p = "application/"
		if len(s) > len(p) && asciiEqualFold(s[:len(p)], p) {
			return s[len(p):]
		}
		return s
	}
	return asciiEqualFold(trim(got), trim(want))
}

// keyTypeName names a key's type for configuration messages.
func keyTypeName(key any) string {
	switch familyOf(key) {
	case familyEdDSA:
		return "Ed25519"
	case familyECDSA:
		return "ECDSA " + key.(*ecdsa.PublicKey).Curve.Params().Name
	case familyRSA:
		return "RSA"
	case familyHMAC:
		return "HMAC secret"
	}
	return fmt.Sprintf("%T", key)
}

// defaultJWKSClient is the HTTP client used when JWKSOptions.Client is nil:
// an explicit timeout and no redirects (a JWK Set URL is configured, so a
// redirect is a misconfiguration or an attack on it).
func defaultJWKSClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
