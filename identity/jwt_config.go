package identity

import (
	"crypto/ecdsa"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Leeway bounds for [JWTConfig.Leeway].
const (
	// DefaultLeeway is the clock-skew allowance used when JWTConfig.Leeway
	// is zero: exp, nbf and iat are checked with this much slack.
	DefaultLeeway = 30 * time.Second
	// MaxLeeway is the largest accepted JWTConfig.Leeway.
	MaxLeeway = 5 * time.Minute
)

// VerificationKey is one key an issuer signs tokens with.
//
// KID is the JWS "kid" header value that selects this key (RFC 7515
// §4.1.4); it may be "" only when the issuer record has exactly one key.
// Key is one of:
//
//   - ed25519.PublicKey (32 bytes) for EdDSA;
//   - *ecdsa.PublicKey on P-256, P-384 or P-521 for ES256, ES384, ES512
//     respectively (the curve must match the algorithm);
//   - *rsa.PublicKey of at least 2048 bits for RS* and PS*;
//   - []byte, an HMAC secret for HS*, at least as long as the hash output
//     (32, 48, 64 bytes for HS256, HS384, HS512; RFC 7518 §3.2).
//
// Parse PEM files with [ParsePublicKeyPEM]; never pass PEM or DER bytes as
// an HMAC secret (that is the RS256→HS256 confusion, refused at start-up).
// The authenticator copies []byte secrets; public keys must not be mutated
// after [NewJWTAuthenticator].
type VerificationKey struct {
	KID string
	Key any
}

// IssuerRecord is everything the authenticator believes about one token
// issuer. Keys are never pooled across records: a token is verified only
// with the keys of the record whose Issuer equals its `iss` claim, so tenant
// A's key never vouches for an "iss: B" token.
//
// Fields:
//   - Issuer: the exact `iss` value (RFC 7519 §4.1.1), compared
//     case-sensitively. Required, unique across records.
//   - Tenant: the fixed tenant of every principal this record verifies.
//   - TenantClaim, Tenants: alternatively, the name of a claim that holds
//     the tenant, and the exact, case-sensitive list of values this record
//     may vouch for. Exactly one of Tenant and TenantClaim must be set;
//     Tenants is required with TenantClaim and forbidden with Tenant.
//   - Audiences: accepted `aud` values (RFC 7519 §4.1.3); a token must name
//     at least one of them. Required, none empty.
//   - Algorithms: accepted JWS `alg` values (see [SigningMethodFor]).
//     Required. Each must be usable with at least one of Keys and each key
//     with at least one algorithm: an HS* algorithm with only asymmetric
//     keys, or RS* with only []byte secrets, is a configuration error.
//   - Keys: one or more verification keys, kids unique within the record.
type IssuerRecord struct {
	Issuer      string
	Tenant      string
	TenantClaim string
	Tenants     []string
	Audiences   []string
	Algorithms  []string
	Keys        []VerificationKey
}

// JWTConfig configures [NewJWTAuthenticator].
//
//   - Issuers: the issuer records; at least one.
//   - Leeway: clock-skew allowance applied to exp, nbf and iat
//     (RFC 7519 §4.1.4, §4.1.5, §4.1.6). Zero means [DefaultLeeway] (30s);
//     negative or above [MaxLeeway] (5m) is an error.
//   - Now: the clock, for tests; nil means time.Now.
type JWTConfig struct {
	Issuers []IssuerRecord
	Leeway  time.Duration
	Now     func() time.Time
}

// issuerState is the immutable, validated form of one IssuerRecord.
type issuerState struct {
	issuer      string
	tenant      string
	tenantClaim string
	tenants     map[string]struct{}
	algs        map[string]bool
	byKID       map[string]any
	only        any // the key used for tokens without kid; nil if >1 key
	parser      *jwt.Parser
	keyfunc     jwt.Keyfunc
}

// compile validates cfg and builds the per-issuer state. It reports every
// problem found, joined, each naming the issuer and, where relevant, the kid.
func compile(cfg JWTConfig) (map[string]*issuerState, error) {
	var errs []error
	leeway := cfg.Leeway
	switch {
	case leeway == 0:
		leeway = DefaultLeeway
	case leeway < 0:
		errs = append(errs, fmt.Errorf("identity: jwt config: leeway %v is negative", leeway))
	case leeway > MaxLeeway:
		errs = append(errs, fmt.Errorf("identity: jwt config: leeway %v exceeds %v", leeway, MaxLeeway))
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if len(cfg.Issuers) == 0 {
		errs = append(errs, errors.New("identity: jwt config: no issuers"))
	}
	states := make(map[string]*issuerState, len(cfg.Issuers))
	tenantOwner := map[string]string{} // tenant → the issuer that may vouch for it
	for i, rec := range cfg.Issuers {
		// A subject is unique only within its issuer (OpenID Connect Core
		// §2): if two issuers could vouch for one tenant, "alice" of one
		// would spend (or lock out) "alice" of the other in every key
		// built from (tenant, account). One tenant, one issuer.
		tenants := rec.Tenants
		if rec.Tenant != "" {
			tenants = []string{rec.Tenant}
		}
		for _, t := range tenants {
			if owner, ok := tenantOwner[t]; ok && owner != rec.Issuer {
				errs = append(errs, fmt.Errorf("identity: issuer %q: tenant %q is already vouched for by issuer %q (subjects are unique only per issuer, so their accounts would share budgets)", rec.Issuer, t, owner))
				continue
			}
			tenantOwner[t] = rec.Issuer
		}
		name := fmt.Sprintf("issuer %q", rec.Issuer)
		if rec.Issuer == "" {
			name = fmt.Sprintf("issuers[%d]", i)
			errs = append(errs, fmt.Errorf("identity: %s: issuer is empty", name))
		} else if _, dup := states[rec.Issuer]; dup {
			errs = append(errs, fmt.Errorf("identity: %s: duplicate issuer", name))
		}
		st, recErrs := compileRecord(name, rec)
		errs = append(errs, recErrs...)
		if rec.Issuer != "" && states[rec.Issuer] == nil {
			states[rec.Issuer] = st
		}
		opts := []jwt.ParserOption{
			jwt.WithValidMethods(slices.Clone(rec.Algorithms)),
			jwt.WithIssuer(rec.Issuer),
			jwt.WithAudience(slices.Clone(rec.Audiences)...),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(leeway),
			jwt.WithTimeFunc(now),
			jwt.WithStrictDecoding(),
		}
		st.parser = jwt.NewParser(opts...)
		st.keyfunc = st.key
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return states, nil
}

// compileRecord validates one record (name is its label in messages).
func compileRecord(name string, rec IssuerRecord) (*issuerState, []error) {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("identity: %s: %s", name, fmt.Sprintf(format, args...)))
	}
	st := &issuerState{
		issuer:      rec.Issuer,
		tenant:      rec.Tenant,
		tenantClaim: rec.TenantClaim,
		algs:        make(map[string]bool, len(rec.Algorithms)),
		byKID:       make(map[string]any, len(rec.Keys)),
	}

	// Tenant.
	switch {
	case rec.Tenant != "" && rec.TenantClaim != "":
		fail("set either Tenant or TenantClaim, not both")
	case rec.Tenant == "" && rec.TenantClaim == "":
		fail("one of Tenant or TenantClaim is required")
	case rec.Tenant != "" && len(rec.Tenants) > 0:
		fail("Tenants is only allowed with TenantClaim")
	case rec.TenantClaim != "" && len(rec.Tenants) == 0:
		fail("TenantClaim %q requires a non-empty Tenants list", rec.TenantClaim)
	}
	if rec.TenantClaim != "" {
		st.tenants = make(map[string]struct{}, len(rec.Tenants))
		for _, t := range rec.Tenants {
			if t == "" {
				fail("Tenants contains an empty tenant")
			}
			st.tenants[t] = struct{}{}
		}
	}

	// Audiences.
	if len(rec.Audiences) == 0 {
		fail("no audiences configured")
	}
	if slices.Contains(rec.Audiences, "") {
		fail("Audiences contains an empty audience")
	}

	// Algorithms, in configuration order (deterministic messages).
	if len(rec.Algorithms) == 0 {
		fail("no algorithms configured")
	}
	var algs []string
	for _, alg := range rec.Algorithms {
		if _, ok := algorithms[alg]; !ok {
			fail("unknown or unsupported algorithm %q", alg)
			continue
		}
		if st.algs[alg] {
			fail("algorithm %q listed twice", alg)
			continue
		}
		st.algs[alg] = true
		algs = append(algs, alg)
	}

	// Keys.
	if len(rec.Keys) == 0 {
		fail("no keys configured")
	}
	seenKID := make(map[string]bool, len(rec.Keys))
	for _, vk := range rec.Keys {
		kname := fmt.Sprintf("key %q", vk.KID)
		kfail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("identity: %s %s: %s", name, kname, fmt.Sprintf(format, args...)))
		}
		if vk.KID == "" && len(rec.Keys) > 1 {
			kfail("kid may be empty only when the issuer has exactly one key")
		} else if seenKID[vk.KID] {
			kfail("duplicate kid")
		}
		seenKID[vk.KID] = true
		if err := checkPublicKey(vk.Key); err != nil {
			kfail("%v", err)
			continue
		}
		key := vk.Key
		if b, ok := key.([]byte); ok {
			key = slices.Clone(b)
		}
		usable := false
		for _, alg := range algs {
			if !compatible(alg, key) {
				continue
			}
			usable = true
			if n := algorithms[alg].hmacN; n > 0 && len(key.([]byte)) < n {
				kfail("HMAC secret is %d bytes, %s needs at least %d", len(key.([]byte)), alg, n)
			}
		}
		if !usable && len(algs) > 0 {
			kfail("key type %s matches none of the algorithms %v", keyTypeName(key), rec.Algorithms)
		}
		if vk.KID != "" {
			st.byKID[vk.KID] = key
		}
		if len(rec.Keys) == 1 {
			st.only = key
		}
	}
	for _, alg := range algs {
		ok := false
		for _, vk := range rec.Keys {
			if compatible(alg, vk.Key) {
				ok = true
				break
			}
		}
		if !ok {
			fail("algorithm %s has no compatible key (HS* needs a []byte secret, RS*/PS* an RSA key, ES* an ECDSA key on its curve, EdDSA an Ed25519 key)", alg)
		}
	}
	return st, errs
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
