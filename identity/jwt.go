package identity

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/limitkey"
)

// Sentinels for header and key-selection failures (wrapped in AuthError.Err).
var (
	errCrit            = errors.New("identity: token has a crit header")
	errUntrustedHeader = errors.New("identity: token header names a key source that is never trusted")
	errAlgNotAllowed   = errors.New("identity: algorithm not allowed")
	errKeyAlg          = errors.New("identity: token algorithm differs from its key's algorithm")
	errKeyUnusable     = errors.New("identity: the key named by kid is not usable for this issuer")
	errTyp             = errors.New("identity: token type is not accepted")
	errUnknownIssuer   = ErrUnknownIssuer
	errUnknownKID      = errors.New("identity: unknown key id")
	errKIDRequired     = errors.New("identity: key id required")
	errTenant          = errors.New("identity: token tenant is not accepted")
	errPlan            = errors.New("identity: token plan is not accepted")
)

// untrustedHeaders are the JWS header parameters that point at or embed key
// material (RFC 7515 §4.1.2-§4.1.6). Keys come only from configuration, so
// a token carrying any of them is refused rather than silently ignored
// (RFC 8725 §3.10).
var untrustedHeaders = [...]string{"jku", "jwk", "x5u", "x5c"}

// JWTAuthenticator verifies bearer JWTs (RFC 7519, JWS compact serialization
// RFC 7515) against issuer records (static keys or a JWK Set per record,
// plus records supplied at run time by an [IssuerResolver]) and returns the
// [limitkey.Principal] they prove.
//
// Verification is strict by construction (ratekey's identity rules, RFC 8725):
//
//  1. The token is at most 8192 bytes (checked before decoding)
//     and has exactly three base64url segments (strict decoding, no
//     padding).
//  2. The header is one JSON object with unique keys and a string "alg".
//     "crit" present: refused, no extension is understood (RFC 7515
//     §4.1.11). "jku", "jwk", "x5u", "x5c" present: refused, keys are never
//     taken from the token (RFC 8725 §3.10). "alg" must be one the record
//     lists ("none" never is; names are case-sensitive, so "None" and
//     "NONE" are unknown). "kid" and "typ", when present, must be strings.
//  3. The unverified `iss` only selects the issuer record (static, or from
//     the resolver); an unknown issuer is refused. From here on only that
//     record's keys, algorithms, audiences and type apply.
//  4. When the record sets Type, "typ" must match it (RFC 8725 §3.11,
//     RFC 9068 §4 for "at+jwt").
//  5. The key is chosen by "kid" among the record's keys only (a token
//     without kid is accepted only if the record, or its current JWK Set,
//     has exactly one key); the token's alg must be the one algorithm that
//     key is bound to (see [VerificationKey]).
//  6. golang-jwt checks the signature, then the claims: exp required
//     (RFC 7519 §4.1.4), nbf and iat (not in the future), all with the
//     configured leeway; iss equal to the record's; aud containing one of the
//     record's audiences. `exp` must be a positive JSON number (a quoted
//     number, 0 or a negative value is refused), `sub` a non-empty string;
//     duplicate claim names and case variants of the claims read here are
//     refused. Because the signature is checked first, a forged token
//     reports only "token signature is invalid", whatever its claims.
//  7. `iss` is compared with the record once more. Tenant: the record's
//     fixed tenant, or the record's tenant claim, whose value must be in
//     the record's list (exact match). Plan: likewise, the record's fixed
//     plan or its plan claim checked against its plans ("token plan is
//     not accepted"), "" when the record names none. Account: `sub`. CredentialID:
//     `client_id`, else `azp`, else "".
//
// Every verification failure is an [*AuthError] with "invalid_token" and a
// fixed description; none contains the token or any value taken from it.
// When the keys cannot be obtained (JWK Set never fetched, resolver down)
// the error wraps [ErrKeySourceUnavailable] instead (503, not 401).
//
// # Verification cache
//
// Clients present the same token on every request until it expires, so
// successful verifications are remembered: a repeated token costs one
// keyed hash of the token (hash/maphash), a map lookup and a comparison
// with the stored copy instead of steps 1-7 (two orders of magnitude less
// for ES256 and RS256: BenchmarkVerifyRepeated). JWTConfig.CacheSize
// bounds the entries (10000 by default; negative disables the cache) and
// JWTConfig.CacheTTL their age (5m). The cache changes no answer, only its
// cost:
//
//   - Every check above (RFC 8725 §3.1 algorithm, §3.8 issuer, §3.9
//     audience, §3.10 keys never taken from the token, §3.11 typ, RFC 7515
//     crit) is a function of the token's bytes and of the issuer record and
//     key that verified it. An entry is found by a keyed hash of the whole
//     token (a per-authenticator random seed, so tokens cannot be aimed at
//     one shard) and answers only a token equal, byte for byte, to the
//     copy it keeps: only the identical token finds it (one byte more,
//     less or different misses), and tokens whose hashes collide never
//     share an entry. The copy is kept in memory only, for the entry's
//     life, and never printed, logged or returned (it prints as
//     "[REDACTED]"; its bytes are zeroed when another token takes the
//     entry over).
//   - Only successes are stored. A failure is recomputed every time (and
//     never evicts an entry), so no failing token is ever answered by the
//     cache and equal tokens get equal answers.
//   - Time: an entry is served only while JWTConfig.Now is in [max(the
//     verification instant, nbf, iat), min(exp, the verification instant +
//     CacheTTL)). That window lies inside the one the full path accepts,
//     [max(nbf, iat) - Leeway, exp + Leeway), so the cache never accepts a
//     token the full path would refuse at that instant; near the edges
//     (within the leeway, or a clock stepped back) the token is fully
//     verified again.
//   - Keys: an entry is served only while its issuer's JWK Set has the
//     contents it had when its key verified the token. A refresh that
//     removes, adds or changes any key (kid gone, another key under the
//     kid, another algorithm binding) retires every entry of that issuer;
//     a refresh returning the same keys does not. An entry of a record from
//     the [IssuerResolver] is served only while the resolver cache still
//     holds that record unexpired (ResolverTTL on its clock), so a record
//     that was replaced, deprovisioned or is due for re-resolution sends
//     the token through the full path, which asks the resolver.
//   - Nothing a cache hit skips depends on the request: a hit needs no I/O
//     (ctx is not consulted), and the credential-source rules of
//     [CombinedAuthenticator] run before this method on every request.
//   - Memory is bounded by CacheSize; when full, the CLOCK (second-chance)
//     policy evicts, in O(1) amortized time, entries that can no longer be
//     served or have not been hit since the hand last passed, so a flood of
//     distinct valid tokens evicts entries in use last.
//
// A JWTAuthenticator is immutable after [NewJWTAuthenticator] (its JWK Set
// caches, resolved records and verification cache are internally
// synchronized; cache hits take a read lock on one of 16 shards) and safe
// for concurrent use by multiple goroutines. Call [JWTAuthenticator.Close]
// to stop the background JWK Set refreshers.
type JWTAuthenticator struct {
	issuers map[string]*issuerState
	env     *jwtEnv

	onVerify func() // tests only: called on every uncached verification
}

var _ Authenticator = (*JWTAuthenticator)(nil)

// NewJWTAuthenticator validates cfg and returns an authenticator. It reports
// all configuration problems at once (errors.Join), each naming its field
// as described on [JWTConfig] (`issuers[0] ("https://a.invalid").keys[1]
// ("k2").alg: ...`, no package prefix): no issuers (and no resolver); empty or
// duplicate issuer; tenant settings inconsistent; a tenant that two issuers
// could vouch for; no audiences; no, unknown ("none" included) or duplicate
// algorithms; neither or both of Keys and JWKSURL; a JWKSURL that is not
// https (or http to a loopback host); duplicate kid or empty kid among
// several keys; unsupported key type; RSA key under 2048 or over 8192
// bits; HMAC secret shorter than its hash (32/48/64 bytes for
// HS256/384/512, RFC 7518 §3.2) or containing PEM text; a key compatible
// with none of the algorithms, or with several and no
// VerificationKey.Alg; an algorithm without a compatible key; an invalid Typ; leeway negative or above 5m;
// JWKS options out of range; a negative CacheTTL; a CacheSize above 2^26.
// Configuration values (issuer names, kids) appear in the messages; key
// material never does.
//
// No network I/O happens here: JWK Sets are fetched on first use or by
// [JWTAuthenticator.Ready].
func NewJWTAuthenticator(cfg JWTConfig) (*JWTAuthenticator, error) {
	states, env, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	return &JWTAuthenticator{issuers: states, env: env}, nil
}

// Ready fetches the JWK Set of every static JWKSURL record that has none
// yet (starting its background refresher) and waits until each has
// completed its first attempt or ctx ends. It returns nil when every such
// record has a key set, else one error per record without one, joined,
// each naming the issuer and wrapping [ErrKeySourceUnavailable]. Records
// without a key set keep being retried in the background. Call it at
// start-up to fail fast or log; it is optional. Safe for concurrent use.
func (a *JWTAuthenticator) Ready(ctx context.Context) error {
	var errs []error
	for _, st := range a.issuers {
		if st.jwks != nil {
			st.jwks.start()
		}
	}
	for _, st := range a.issuers {
		if st.jwks != nil {
			if err := st.jwks.waitFirst(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Tenants returns every tenant a principal this authenticator verifies may
// carry, sorted and without repeats: the Tenant, or the Tenants list, of
// each static issuer record. complete is false when JWTConfig.Resolver may
// supply records, and so tenants, at run time; the list then holds the
// static records' only. A caller can tell from it whether account names
// are unique across the deployment (one tenant) or only per tenant (the
// rate limiter's overrides do: see middleware.RateLimitConfig.SingleTenant),
// and ratekey.New refuses overrides on a tenant a complete list lacks. A
// type that embeds a JWTAuthenticator but admits principals of other
// tenants must define its own Tenants, reporting complete false. A nil or
// zero JWTAuthenticator (not made by NewJWTAuthenticator) lists nothing,
// incomplete. Safe for concurrent use.
func (a *JWTAuthenticator) Tenants() (tenants []string, complete bool) {
	if a == nil || a.env == nil {
		return nil, false
	}
	for _, st := range a.issuers {
		if st.tenant != "" {
			tenants = append(tenants, st.tenant)
		}
		for t := range st.tenants {
			tenants = append(tenants, t)
		}
	}
	slices.Sort(tenants)
	return slices.Compact(tenants), a.env.resolver == nil
}

// Close stops every background JWK Set refresher and waits for them to
// exit. Cached keys stay usable, but nothing is fetched any more (a token
// needing a fetch gets [ErrKeySourceUnavailable]). It also empties the
// verification cache, zeroing the copies of the tokens it held; later
// verifications are answered as before, in full. Idempotent; safe for
// concurrent use. It always returns nil.
func (a *JWTAuthenticator) Close() error {
	a.env.mu.Lock()
	a.env.closed = true
	a.env.mu.Unlock()
	a.env.cancel()
	a.env.wg.Wait()
	if a.env.cache != nil {
		a.env.cache.wipe()
	}
	return nil
}

// Authenticate extracts the bearer token from h with [bearerToken] and
// verifies it as described on [JWTAuthenticator], returning the Principal
// it proves, with Method [limitkey.MethodJWT]. It returns
// [ErrNoCredential] when h has no Authorization header,
// [ErrUnsupportedScheme] for another scheme, an [*AuthError] with
// "invalid_request" (400) for a malformed header and with
// "invalid_token" (401) for a token that fails verification (RFC 6750
// §3.1), and an error wrapping [ErrKeySourceUnavailable] (503) when the
// keys cannot be obtained. r.Context() bounds any wait for a JWK Set fetch. Only the
// Authorization header is read; see [CombinedAuthenticator] for other
// credential sources and API keys. Safe for concurrent use.
func (a *JWTAuthenticator) Authenticate(r *http.Request) (limitkey.Principal, error) {
	// bearerToken in two steps: a token found in the verification cache
	// equals, byte for byte, a token that was checked against the b64token
	// charset before it was cached (put caches no other), so the charset
	// scan of every byte runs only for tokens the cache does not answer.
	// The outcome is bearerToken's then verifyToken's, whichever token.
	tok, err := bearerCandidate(r.Header)
	if err != nil {
		return limitkey.Principal{}, err
	}
	c := a.env.cache
	if c == nil {
		if !isB64Token(tok) {
			return limitkey.Principal{}, errCharsetRequest()
		}
		p, _, err := a.verify(r.Context(), tok)
		return p, err
	}
	k := c.key(tok)
	if p, ok := c.get(k, tok, a.env); ok {
		return p, nil
	}
	if !isB64Token(tok) {
		return limitkey.Principal{}, errCharsetRequest()
	}
	return a.verifyMiss(r.Context(), c, k, tok)
}

// verifyToken verifies a compact-serialized JWT (the bearer token without
// the "Bearer " prefix) as described on [JWTAuthenticator] and returns the
// Principal it proves, with Method [limitkey.MethodJWT]. Every verification failure
// is an [*AuthError] with "invalid_token"; its Err wraps a sentinel
// (jwt.ErrTokenExpired, jwt.ErrTokenSignatureInvalid, jwt.ErrTokenMalformed,
// [ErrUnknownIssuer], ... or an internal one) for errors.Is. When the
// issuer's keys cannot be obtained the error wraps [ErrKeySourceUnavailable]
// and is not an AuthError. ctx bounds any wait for a JWK Set fetch or a
// resolver call (each also bounded by its own options). A token verified
// successfully before may be answered from the verification cache (see
// [JWTAuthenticator]) with the same Principal, without I/O and without
// allocating. Safe for concurrent use.
func (a *JWTAuthenticator) verifyToken(ctx context.Context, token string) (limitkey.Principal, error) {
	if len(token) > maxTokenBytes {
		return limitkey.Principal{}, invalidToken("token is too long", errTokenTooLong)
	}
	c := a.env.cache
	if c == nil {
		p, _, err := a.verify(ctx, token)
		return p, err
	}
	k := c.key(token)
	if p, ok := c.get(k, token, a.env); ok {
		return p, nil
	}
	return a.verifyMiss(ctx, c, k, token)
}

// verifyMiss is verifyToken for a token, whose cache key is k, that the
// cache c did not answer: it verifies the token and caches a success.
func (a *JWTAuthenticator) verifyMiss(ctx context.Context, c *verifyCache, k cacheKey, token string) (limitkey.Principal, error) {
	p, v, err := a.verify(ctx, token)
	if err == nil {
		c.put(k, token, p, v, a.env)
	}
	return p, err
}

// verified is what a successful verification tells the cache about the
// validity of its result: the issuer state and key-set generation that
// verified the token, and the token's time claims as golang-jwt compared
// them.
type verified struct {
	st       *issuerState
	gen      uint64 // of st.jwks's snapshot; 0 for static keys
	exp      time.Time
	nbf, iat time.Time // zero when absent
}

// verify is verifyToken without the cache (the caller checked the
// length cap): the token's shape, its protected header, the issuer record
// it names and that record's algorithms and type, then golang-jwt's
// signature and claims checks, then the Principal.
func (a *JWTAuthenticator) verify(ctx context.Context, token string) (limitkey.Principal, verified, error) {
	if a.onVerify != nil {
		a.onVerify()
	}
	var none verified
	hseg, rest, ok1 := strings.Cut(token, ".")
	pseg, sseg, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(sseg, ".") {
		return limitkey.Principal{}, none, invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}
	hdr, aerr := checkHeader(hseg)
	if aerr != nil {
		return limitkey.Principal{}, none, aerr
	}
	iss, ok := peekIssuer(pseg)
	if !ok {
		return limitkey.Principal{}, none, invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}
	st, err := a.issuerFor(ctx, iss, hdr)
	if err != nil {
		return limitkey.Principal{}, none, err
	}
	claims, gen, err := st.parse(ctx, token, hdr)
	if err != nil {
		return limitkey.Principal{}, none, err
	}
	p, err := st.principal(iss, claims)
	if err != nil {
		return limitkey.Principal{}, none, err
	}
	v := verified{st: st, gen: gen, exp: claims.ExpiresAt.Time}
	if claims.NotBefore != nil {
		v.nbf = claims.NotBefore.Time
	}
	if claims.IssuedAt != nil {
		v.iat = claims.IssuedAt.Time
	}
	return p, v, nil
}

// issuerFor returns the state of the issuer record named by iss (a static
// record, or one the IssuerResolver provides), once the token's algorithm
// and type are among those it accepts.
func (a *JWTAuthenticator) issuerFor(ctx context.Context, iss string, hdr header) (*issuerState, error) {
	st := a.issuers[iss]
	if st == nil && a.env.resolver != nil && iss != "" {
		var err error
		st, err = a.resolve(ctx, iss)
		if errors.Is(err, ErrKeySourceUnavailable) {
			return nil, ErrKeySourceUnavailable
		}
	}
	if st == nil {
		return nil, invalidToken("token issuer is not accepted", errUnknownIssuer)
	}
	if !st.algs[hdr.alg] {
		return nil, invalidToken("algorithm not allowed", errAlgNotAllowed)
	}
	if st.typ != "" && (!hdr.hasTyp || !typMatches(hdr.typ, st.typ)) {
		return nil, invalidToken("token type is not accepted", errTyp)
	}
	return st, nil
}

// parse runs golang-jwt's signature and claims checks with the record's
// parser and keys, returning the claims and the generation of the JWK Set
// snapshot whose key verified the token (0 for static keys).
func (st *issuerState) parse(ctx context.Context, token string, hdr header) (*tokenClaims, uint64, error) {
	claims := &tokenClaims{tenantClaim: st.tenantClaim, planClaim: st.planClaim}
	var gen uint64
	keyfunc := func(t *jwt.Token) (any, error) {
		k, g, err := st.key(ctx, t, hdr)
		gen = g
		return k, err
	}
	if _, err := st.parser.ParseWithClaims(token, claims, keyfunc); err != nil {
		if errors.Is(err, ErrKeySourceUnavailable) {
			return nil, 0, ErrKeySourceUnavailable
		}
		return nil, 0, classify(err)
	}
	return claims, gen, nil
}

// principal builds the Principal of verified claims: the record's issuer,
// its tenant and plan (or the claimed ones, when the record vouches for
// them), the subject as the account, and client_id (else azp) as the
// credential id.
func (st *issuerState) principal(iss string, claims *tokenClaims) (limitkey.Principal, error) {
	// Defence in depth: golang-jwt compared iss with the record already.
	if claims.Issuer != st.issuer || iss != st.issuer {
		return limitkey.Principal{}, invalidToken("token issuer is not accepted", jwt.ErrTokenInvalidIssuer)
	}
	tenant := st.tenant
	if st.tenantClaim != "" {
		if _, ok := st.tenants[claims.Tenant]; !claims.tenantOK || !ok {
			return limitkey.Principal{}, invalidToken("token tenant is not accepted", errTenant)
		}
		tenant = claims.Tenant
	}
	plan := st.plan
	if st.planClaim != "" {
		if _, ok := st.plans[claims.Plan]; !claims.planOK || !ok {
			return limitkey.Principal{}, invalidToken("token plan is not accepted", errPlan)
		}
		plan = claims.Plan
	}
	cred := claims.ClientID
	if cred == "" {
		cred = claims.AZP
	}
	return limitkey.Principal{
		Issuer:       st.issuer,
		Tenant:       tenant,
		Plan:         plan,
		Account:      claims.Subject,
		CredentialID: cred,
		Method:       limitkey.MethodJWT,
	}, nil
}

// header is what checkHeader keeps of a JWS protected header.
type header struct {
	alg    string
	kid    string
	hasKID bool
	typ    string
	hasTyp bool
}

// checkHeader strictly decodes the JWS protected header (RFC 7515 §4).
func checkHeader(seg string) (header, *AuthError) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(seg)
	if err != nil {
		return header{}, invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return header{}, invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}
	if _, ok := obj["crit"]; ok {
		return header{}, invalidToken("token has a critical header parameter that is not understood", errCrit)
	}
	for _, name := range untrustedHeaders {
		if _, ok := obj[name]; ok {
			return header{}, invalidToken("token header parameter is not allowed", errUntrustedHeader)
		}
	}
	var h header
	var ok bool
	h.alg, ok = jsonString(obj["alg"])
	if !ok {
		return header{}, invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}
	if _, known := algorithms[h.alg]; !known {
		return header{}, invalidToken("algorithm not allowed", errAlgNotAllowed)
	}
	if raw, present := obj["kid"]; present {
		if h.kid, ok = jsonString(raw); !ok {
			return header{}, invalidToken("token is malformed", jwt.ErrTokenMalformed)
		}
		h.hasKID = h.kid != "" // an empty kid names no key, as in v0
	}
	if raw, present := obj["typ"]; present {
		if h.typ, ok = jsonString(raw); !ok {
			return header{}, invalidToken("token is malformed", jwt.ErrTokenMalformed)
		}
		h.hasTyp = true
	}
	return h, nil
}

// peekIssuer returns the unverified `iss` of the payload segment. It is used
// only to select the issuer record whose keys will verify the token.
func peekIssuer(seg string) (string, bool) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(seg)
	if err != nil {
		return "", false
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return "", false
	}
	iss, ok := obj["iss"]
	if !ok {
		return "", true // no issuer: unknown issuer
	}
	s, ok := jsonString(iss)
	if !ok {
		return "", true
	}
	return s, true
}

// key is the jwt.Keyfunc of one issuer record: it returns only this
// record's key named by the token's kid (static, or from the record's own
// JWK Set), and only if the token's algorithm is listed for the record and
// is the one algorithm that key is bound to. gen is the generation of the
// JWK Set snapshot the key came from (0 for static keys).
func (st *issuerState) key(ctx context.Context, t *jwt.Token, hdr header) (key any, gen uint64, err error) {
	alg := t.Method.Alg()
	if !st.algs[alg] || alg != hdr.alg {
		return nil, 0, errAlgNotAllowed
	}
	var bk boundKey
	switch {
	case st.jwks != nil:
		if bk, gen, err = st.jwks.lookup(ctx, hdr.kid, hdr.hasKID); err != nil {
			return nil, 0, err
		}
	case !hdr.hasKID:
		if st.only == nil {
			return nil, 0, errKIDRequired
		}
		bk = *st.only
	default:
		k, ok := st.byKID[hdr.kid]
		if !ok {
			return nil, 0, errUnknownKID
		}
		bk = k
	}
	if bk.alg != alg || !compatible(alg, bk.key) {
		return nil, 0, errKeyAlg
	}
	return bk.key, gen, nil
}

// classify maps a golang-jwt error to an AuthError with a fixed description.
// Order matters when several claim checks fail at once: the first match
// wins.
func classify(err error) *AuthError {
	for _, e := range classes {
		if errors.Is(err, e.sentinel) {
			return invalidToken(e.desc, e.sentinel)
		}
	}
	return invalidToken("token is invalid", jwt.ErrTokenInvalidClaims)
}

// classes is the ordered table used by classify.
var classes = [...]struct {
	sentinel error
	desc     string
}{
	{errAlgNotAllowed, "algorithm not allowed"},
	{errKeyAlg, "token algorithm does not match its key"},
	{errKeyUnusable, "token key is not usable for this issuer"},
	{errUnknownKID, "unknown key id"},
	{errKIDRequired, "token has no key id and the issuer has several keys"},
	{jwt.ErrTokenMalformed, "token is malformed"},
	{jwt.ErrTokenUnverifiable, "token is unverifiable"},
	{jwt.ErrTokenSignatureInvalid, "token signature is invalid"},
	{errClaimsMalformed, "token claims are malformed"},
	{errBadExp, "token expiration time is invalid"},
	{errMissingExp, "token has no expiration time"},
	{jwt.ErrTokenExpired, "token is expired"},
	{jwt.ErrTokenNotValidYet, "token is not valid yet"},
	{jwt.ErrTokenUsedBeforeIssued, "token is issued in the future"},
	{jwt.ErrTokenInvalidIssuer, "token issuer is not accepted"},
	{errMissingAud, "token audience is missing"},
	{jwt.ErrTokenInvalidAudience, "token audience is not accepted"},
	{errMissingSub, "token subject is missing"},
}
