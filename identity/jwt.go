package identity

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// Sentinels for header and key-selection failures (wrapped in AuthError.Err).
var (
	errCrit            = errors.New("identity: token has a crit header")
	errUntrustedHeader = errors.New("identity: token header names a key source that is never trusted")
	errAlgNotAllowed   = errors.New("identity: algorithm not allowed")
	errUnknownIssuer   = errors.New("identity: token issuer is not accepted")
	errUnknownKID      = errors.New("identity: unknown key id")
	errKIDRequired     = errors.New("identity: key id required")
	errTenant          = errors.New("identity: token tenant is not accepted")
)

// untrustedHeaders are the JWS header parameters that point at or embed key
// material (RFC 7515 §4.1.2-§4.1.6). Keys come only from configuration, so
// a token carrying any of them is refused rather than silently ignored.
var untrustedHeaders = [...]string{"jku", "jwk", "x5u", "x5c"}

// JWTAuthenticator verifies bearer JWTs (RFC 7519, JWS compact serialization
// RFC 7515) against statically configured issuer records and returns the
// [Principal] they prove.
//
// Verification is strict by construction (ratekey's identity rules):
//
//  1. The token is at most [MaxTokenBytes] bytes (checked before decoding)
//     and has exactly three base64url segments (strict decoding, no
//     padding).
//  2. The header is one JSON object with unique keys and a string "alg".
//     "crit" present: refused, no extension is understood (RFC 7515
//     §4.1.11). "jku", "jwk", "x5u", "x5c" present: refused, keys are never
//     taken from the token. "alg" must be one the record lists ("none"
//     never is).
//  3. The unverified `iss` only selects the issuer record; an unknown issuer
//     is refused. From here on only that record's keys, algorithms and
//     audiences apply.
//  4. The key is chosen by "kid" among the record's keys only (a token
//     without kid is accepted only if the record has exactly one key), and
//     must be of the family and curve the algorithm requires.
//  5. golang-jwt checks the signature, then the claims: exp required
//     (RFC 7519 §4.1.4), nbf and iat (not in the future), all with the
//     configured leeway; iss equal to the record's; aud containing one of the
//     record's audiences. `exp` must be a positive JSON number, `sub` a
//     non-empty string. Because the signature is checked first, a forged
//     token reports only "token signature is invalid", whatever its claims.
//  6. Tenant: the record's fixed tenant, or the record's tenant claim, whose
//     value must be in the record's list (exact match). Account: `sub`.
//     CredentialID: `client_id`, else `azp`, else "".
//
// Every failure is an [*AuthError] with [CodeInvalidToken] and a fixed
// description; none contains the token or any value taken from it.
//
// A JWTAuthenticator is immutable after [NewJWTAuthenticator] and safe for
// concurrent use by multiple goroutines.
type JWTAuthenticator struct {
	issuers map[string]*issuerState
}

var _ Authenticator = (*JWTAuthenticator)(nil)

// NewJWTAuthenticator validates cfg and returns an authenticator. It reports
// all configuration problems at once (errors.Join), each naming the issuer
// and, for key problems, the kid: no issuers; empty or duplicate issuer;
// tenant settings inconsistent; a tenant that two issuers could vouch for; no audiences; no, unknown ("none" included)
// or duplicate algorithms; no keys; duplicate kid or empty kid among
// several keys; unsupported key type; RSA key under 2048 bits; HMAC secret
// shorter than its hash (32/48/64 bytes for HS256/384/512, RFC 7518 §3.2) or
// containing PEM text; an ECDSA key whose curve matches no listed ES*
// algorithm; any algorithm without a compatible key (HS256 with an RSA key)
// or key without a compatible algorithm; leeway negative or above
// [MaxLeeway]. Configuration values (issuer names, kids) appear in the
// messages; key material never does.
func NewJWTAuthenticator(cfg JWTConfig) (*JWTAuthenticator, error) {
	states, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	return &JWTAuthenticator{issuers: states}, nil
}

// Authenticate extracts the bearer token from h with [BearerToken] and
// verifies it with [JWTAuthenticator.Verify]. It returns [ErrNoCredential]
// when h has no Authorization header, an [*AuthError] with
// [CodeInvalidRequest] (400) for a malformed header and with
// [CodeInvalidToken] (401) for a token that fails verification (RFC 6750
// §3.1). ctx is not consulted: keys are static. Safe for concurrent use.
func (a *JWTAuthenticator) Authenticate(ctx context.Context, h http.Header) (Principal, error) {
	_ = ctx // static keys: no I/O to bound
	tok, err := BearerToken(h)
	if err != nil {
		return Principal{}, err
	}
	return a.Verify(tok)
}

// Verify verifies a compact-serialized JWT (the bearer token without the
// "Bearer " prefix) as described on [JWTAuthenticator] and returns the
// Principal it proves, with Method [MethodJWT]. Every failure is an
// [*AuthError] with [CodeInvalidToken]; its Err wraps a sentinel
// (jwt.ErrTokenExpired, jwt.ErrTokenSignatureInvalid, jwt.ErrTokenMalformed,
// ... or an internal one) for errors.Is. Safe for concurrent use.
func (a *JWTAuthenticator) Verify(token string) (Principal, error) {
	if len(token) > MaxTokenBytes {
		return Principal{}, invalidToken("token is too long", errTokenTooLong)
	}
	hseg, rest, ok1 := strings.Cut(token, ".")
	pseg, sseg, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(sseg, ".") {
		return Principal{}, invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}

	alg, aerr := checkHeader(hseg)
	if aerr != nil {
		return Principal{}, aerr
	}
	iss, ok := peekIssuer(pseg)
	if !ok {
		return Principal{}, invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}
	st := a.issuers[iss]
	if st == nil {
		return Principal{}, invalidToken("token issuer is not accepted", errUnknownIssuer)
	}
	if !st.algs[alg] {
		return Principal{}, invalidToken("algorithm not allowed", errAlgNotAllowed)
	}

	claims := &tokenClaims{tenantClaim: st.tenantClaim}
	if _, err := st.parser.ParseWithClaims(token, claims, st.keyfunc); err != nil {
		return Principal{}, classify(err)
	}
	// Defence in depth: golang-jwt compared iss with the record already.
	if claims.Issuer != st.issuer {
		return Principal{}, invalidToken("token issuer is not accepted", jwt.ErrTokenInvalidIssuer)
	}
	tenant := st.tenant
	if st.tenantClaim != "" {
		if _, ok := st.tenants[claims.Tenant]; !claims.tenantOK || !ok {
			return Principal{}, invalidToken("token tenant is not accepted", errTenant)
		}
		tenant = claims.Tenant
	}
	cred := claims.ClientID
	if cred == "" {
		cred = claims.AZP
	}
	return Principal{
		Issuer:       st.issuer,
		Tenant:       tenant,
		Account:      claims.Subject,
		CredentialID: cred,
		Method:       MethodJWT,
	}, nil
}

// checkHeader strictly decodes the JWS protected header and returns its alg.
func checkHeader(seg string) (string, *AuthError) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(seg)
	if err != nil {
		return "", invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}
	hdr, err := decodeObject(raw)
	if err != nil {
		return "", invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}
	if _, ok := hdr["crit"]; ok {
		return "", invalidToken("token has a critical header parameter that is not understood", errCrit)
	}
	for _, name := range untrustedHeaders {
		if _, ok := hdr[name]; ok {
			return "", invalidToken("token header parameter is not allowed", errUntrustedHeader)
		}
	}
	alg, ok := jsonString(hdr["alg"])
	if !ok {
		return "", invalidToken("token is malformed", jwt.ErrTokenMalformed)
	}
	if _, known := algorithms[alg]; !known {
		return "", invalidToken("algorithm not allowed", errAlgNotAllowed)
	}
	if raw, ok := hdr["kid"]; ok {
		if _, ok := jsonString(raw); !ok {
			return "", invalidToken("token is malformed", jwt.ErrTokenMalformed)
		}
	}
	return alg, nil
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
// record's key named by the token's kid, and only if the token's algorithm
// is listed for the record and compatible with that key.
func (st *issuerState) key(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	if !st.algs[alg] {
		return nil, errAlgNotAllowed
	}
	kid := ""
	if v, ok := t.Header["kid"]; ok {
		s, ok := v.(string)
		if !ok {
			return nil, jwt.ErrTokenMalformed
		}
		kid = s
	}
	var key any
	if kid == "" {
		if st.only == nil {
			return nil, errKIDRequired
		}
		key = st.only
	} else {
		k, ok := st.byKID[kid]
		if !ok {
			return nil, errUnknownKID
		}
		key = k
	}
	if !compatible(alg, key) {
		return nil, errAlgNotAllowed
	}
	return key, nil
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
