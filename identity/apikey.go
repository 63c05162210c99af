package identity

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/ratekey/ratekey/limitkey"
)

// API key shape: rk_<id>_<secret><checksum>, every part base62
// (0-9A-Za-z). See [NewAPIKey].
const (
	// apiKeyPrefix starts every API key; it tells an API key from a JWT
	// (whose compact serialization starts with "ey") in the same
	// Authorization header.
	apiKeyPrefix = "rk_"
	// apiKeyIDLen is the length of the public id, in base62 characters
	// (71 bits of randomness).
	apiKeyIDLen = 12
	// apiKeySecretLen is the length of the secret, in base62 characters
	// (190 bits of randomness).
	apiKeySecretLen = 32
	// apiKeyChecksumLen is the length of the checksum: the CRC-32 (IEEE) of
	// everything before it, in base62, left-padded with '0'.
	apiKeyChecksumLen = 6
	// apiKeyLen is the length of a whole key: 54 bytes.
	apiKeyLen = len(apiKeyPrefix) + apiKeyIDLen + 1 + apiKeySecretLen + apiKeyChecksumLen
	// apiKeyHeader is the header an API key may be presented in (besides
	// `Authorization: Bearer rk_...`).
	apiKeyHeader = "X-API-Key"
	// minPepperBytes is the shortest accepted pepper (the HMAC-SHA256 key
	// the stored hashes are computed with), in bytes.
	minPepperBytes = 32
	// defaultAPIKeyIssuer is the [limitkey.Principal].Issuer of API-key principals
	// when APIKeyConfig.Issuer is empty.
	defaultAPIKeyIssuer = "urn:ratekey:api-key"
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Sentinels of API-key failures (wrapped in AuthError.Err).
var (
	errAPIKeyMalformed = errors.New("identity: API key is malformed")
	errAPIKeyInvalid   = errors.New("identity: API key is invalid")
)

// APIKeyRecord is what an [APIKeyStore] keeps about one API key: the public
// id, who the key speaks for, and HMAC-SHA256(pepper, secret). The secret
// itself is never stored, so a leaked store (without the pepper, which
// lives elsewhere) does not yield usable keys, and a leaked store with the
// pepper still needs a 190-bit brute force per key.
type APIKeyRecord struct {
	// ID is the public id, 12 base62 characters; it becomes the principal's
	// CredentialID.
	ID string
	// Tenant is the principal's tenant: non-empty valid UTF-8 without
	// control characters, at most 256 bytes.
	Tenant string
	// Account is the principal's account, text like Tenant's.
	Account string
	// Plan, optional, is the principal's plan ([limitkey.Principal].Plan): "" or
	// text like Tenant's.
	Plan string
	// Hash is HMAC-SHA256 keyed with the pepper, over the secret's bytes.
	Hash [sha256.Size]byte
	// Created is informational (UTC, second precision); zero if unknown.
	Created time.Time
}

// Validate checks the record's shape (id alphabet and length, tenant and
// account text). It never reports the hash. The error names the field the
// way a key file writes it (the Go field ID is written id, Tenant tenant),
// with no package prefix, so that the caller prefixes the record's place:
// `tenant: is empty`, `id: must be 12 base62 characters`.
func (r APIKeyRecord) Validate() error {
	if field, err := r.validate(); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// validate is Validate as the failing field and what is wrong with it.
func (r APIKeyRecord) validate() (string, error) {
	if len(r.ID) != apiKeyIDLen || !isBase62(r.ID) {
		return "id", fmt.Errorf("must be %d base62 characters", apiKeyIDLen)
	}
	for _, f := range []struct{ name, v string }{{"tenant", r.Tenant}, {"account", r.Account}} {
		if err := checkLabel(f.v); err != nil {
			return f.name, err
		}
	}
	if r.Plan != "" {
		if err := checkLabel(r.Plan); err != nil {
			return "plan", err
		}
	}
	return "", nil
}

// checkLabel validates a tenant, account or plan name.
func checkLabel(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if len(s) > 256 {
		return errors.New("is longer than 256 bytes")
	}
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return errors.New("contains a control character")
		}
	}
	return nil
}

// NewAPIKey creates an API key for (tenant, account): a random id and a
// random secret from crypto/rand, with their checksum. It returns the whole
// key, to be shown to its owner once and never stored or logged, and the
// record to store (which holds only HMAC-SHA256(pepper, secret)).
//
// pepper must be at least 32 bytes, the same pepper the
// [APIKeyAuthenticator] is configured with. Errors: short pepper, invalid
// tenant or account (see [APIKeyRecord]), or a failure of crypto/rand; none
// contains the key. Safe for concurrent use.
func NewAPIKey(pepper []byte, tenant, account string) (key string, rec APIKeyRecord, err error) {
	if len(pepper) < minPepperBytes {
		return "", APIKeyRecord{}, fmt.Errorf("identity: pepper is %d bytes, need at least %d", len(pepper), minPepperBytes)
	}
	id, err := randomBase62(apiKeyIDLen)
	if err != nil {
		return "", APIKeyRecord{}, err
	}
	secret, err := randomBase62(apiKeySecretLen)
	if err != nil {
		return "", APIKeyRecord{}, err
	}
	rec = APIKeyRecord{ID: id, Tenant: tenant, Account: account, Hash: hashSecret(pepper, secret),
		Created: time.Now().UTC().Truncate(time.Second)}
	if err := rec.Validate(); err != nil {
		return "", APIKeyRecord{}, fmt.Errorf("identity: %w", err)
	}
	body := apiKeyPrefix + id + "_" + secret
	return body + checksum(body), rec, nil
}

// parseAPIKey splits rk_<id>_<secret><checksum> and verifies the checksum.
// It reads only the key's bytes, in constant structure: fixed length,
// prefix, separator, base62 alphabet, CRC-32.
func parseAPIKey(key string) (id, secret string, err error) {
	const idAt = len(apiKeyPrefix)
	const sepAt = idAt + apiKeyIDLen
	const secretAt = sepAt + 1
	const sumAt = secretAt + apiKeySecretLen
	if len(key) != apiKeyLen || key[:idAt] != apiKeyPrefix || key[sepAt] != '_' {
		return "", "", errAPIKeyMalformed
	}
	if !isBase62(key[idAt:sepAt]) || !isBase62(key[secretAt:]) {
		return "", "", errAPIKeyMalformed
	}
	if checksum(key[:sumAt]) != key[sumAt:] {
		return "", "", errAPIKeyMalformed
	}
	return key[idAt:sepAt], key[secretAt:sumAt], nil
}

// checksum is the CRC-32 (IEEE) of s in base62, 6 characters, left-padded.
func checksum(s string) string {
	v := crc32.ChecksumIEEE([]byte(s))
	var b [apiKeyChecksumLen]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = base62[v%62]
		v /= 62
	}
	return string(b[:])
}

func isBase62(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// randomBase62 returns n uniformly random base62 characters.
func randomBase62(n int) (string, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, n*2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("identity: reading random bytes: %w", err)
		}
		for _, b := range buf {
			if b < 248 && len(out) < n { // 248 = 4·62: no modulo bias
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out), nil
}

// hashSecret is HMAC-SHA256(pepper, secret).
func hashSecret(pepper []byte, secret string) [sha256.Size]byte {
	m := hmac.New(sha256.New, pepper)
	m.Write([]byte(secret))
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}

// APIKeyStore looks API key records up by public id. It is defined here, by
// its consumer, so that a file, a database or a cache can back it.
//
// Contract: LookupAPIKey returns (record, true, nil) when id is known,
// (zero, false, nil) when it is not, and a non-nil error only when the
// store cannot answer (then the request gets 503, never 401 and never
// anonymous). id is attacker-controlled but always 12 base62
// characters (the key's checksum was verified). The checksum is a public
// CRC-32, which catches typos, not attackers: anyone can mint well-formed
// keys, and each reaches the store once (nothing caches unknown ids), so
// a store behind a network call should be guarded by a pre-auth policy
// per network, as for a flood of bad tokens. Implementations should
// answer known and unknown ids in similar time; the authenticator does
// the same HMAC work in both cases. Safe for concurrent use.
type APIKeyStore interface {
	LookupAPIKey(ctx context.Context, id string) (rec APIKeyRecord, ok bool, err error)
}

// APIKeyConfig configures [NewAPIKeyAuthenticator].
//
// The errors of [NewAPIKeyAuthenticator] name the field the way a
// configuration file writes it (Store store, Pepper pepper), with no
// package prefix: `pepper: 16 bytes, need at least 32`.
type APIKeyConfig struct {
	// Store is where records are looked up. Required.
	Store APIKeyStore
	// Pepper is the HMAC-SHA256 key of the stored hashes, at least 32 bytes
	// (e.g. 43 random base62 characters); keep it outside the store (a leaked
	// store without it yields no usable key). Copied.
	Pepper []byte
	// Issuer is the Principal.Issuer of API-key principals; "" means
	// "urn:ratekey:api-key".
	Issuer string
}

// APIKeyAuthenticator verifies API keys of the form
// rk_<id>_<secret><checksum> (see [NewAPIKey]) and returns the [limitkey.Principal]
// of the stored record: Tenant, Account and Plan from the record, CredentialID the
// public id, Method [limitkey.MethodAPIKey].
//
// Verification: the key's length, alphabet and checksum are checked first
// (a typo or a random string costs no lookup); then the record is looked up
// by id; HMAC-SHA256(pepper, secret) is computed and compared in constant
// time (crypto/subtle) with the stored hash, or, for an unknown id, with a
// dummy hash, so unknown ids and wrong secrets do the same work and get the
// same answer (401 invalid_token "API key is invalid").
//
// Immutable after construction; safe for concurrent use.
type APIKeyAuthenticator struct {
	store  APIKeyStore
	pepper secretBytes // prints redacted (a struct dump of the authenticator too)
	issuer string
	dummy  [sha256.Size]byte
}

var _ Authenticator = (*APIKeyAuthenticator)(nil)

// NewAPIKeyAuthenticator validates cfg (Store set, Pepper long enough) and
// returns the authenticator.
func NewAPIKeyAuthenticator(cfg APIKeyConfig) (*APIKeyAuthenticator, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("store: required"))
	}
	if len(cfg.Pepper) < minPepperBytes {
		errs = append(errs, fmt.Errorf("pepper: %d bytes, need at least %d", len(cfg.Pepper), minPepperBytes))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	a := &APIKeyAuthenticator{store: cfg.Store, issuer: cfg.Issuer}
	a.pepper.set(string(cfg.Pepper))
	if a.issuer == "" {
		a.issuer = defaultAPIKeyIssuer
	}
	// A hash no secret is known to match: HMAC of fresh random bytes.
	noise, err := randomBase62(apiKeySecretLen)
	if err != nil {
		return nil, err
	}
	a.dummy = hashSecret(a.pepper.bytes(), noise)
	return a, nil
}

// Authenticate reads an API key from the `X-API-Key` header or from
// `Authorization: Bearer rk_...` and verifies it with
// the checks described on [APIKeyAuthenticator]. No credential: [ErrNoCredential]; both
// headers, two lines of either, or an empty X-API-Key: 400 invalid_request;
// a bearer token that is not an API key, or a failed check: 401
// invalid_token; store failure: an error wrapping [ErrKeySourceUnavailable].
// r.Context() bounds the store call. Use [CombinedAuthenticator] to accept
// JWTs as well. Safe for concurrent use.
func (a *APIKeyAuthenticator) Authenticate(r *http.Request) (limitkey.Principal, error) {
	c, err := headerExtractor(true).extract(r.Header, nil)
	if err != nil {
		return limitkey.Principal{}, err
	}
	if !c.isAPIKey() {
		return limitkey.Principal{}, invalidToken("bearer token is not an API key", errAPIKeyMalformed)
	}
	return a.verifyKey(r.Context(), c.value)
}

// verifyKey checks one API key as described on [APIKeyAuthenticator]. Errors:
// [*AuthError] invalid_token "API key is malformed" (shape or checksum) or
// "API key is invalid" (unknown id or wrong secret, indistinguishable), or
// an error wrapping [ErrKeySourceUnavailable] when the store fails. No
// error contains the key or its secret. Safe for concurrent use.
func (a *APIKeyAuthenticator) verifyKey(ctx context.Context, key string) (limitkey.Principal, error) {
	id, secret, err := parseAPIKey(key)
	if err != nil {
		return limitkey.Principal{}, invalidToken("API key is malformed", errAPIKeyMalformed)
	}
	rec, found, err := a.store.LookupAPIKey(ctx, id)
	if err != nil {
		return limitkey.Principal{}, fmt.Errorf("identity: API key store: %w: %w", ErrKeySourceUnavailable, err)
	}
	want := &a.dummy
	if found {
		want = &rec.Hash
	}
	got := hashSecret(a.pepper.bytes(), secret)
	match := subtle.ConstantTimeCompare(got[:], want[:]) == 1
	if !match || !found || rec.ID != id {
		return limitkey.Principal{}, invalidToken("API key is invalid", errAPIKeyInvalid)
	}
	return limitkey.Principal{Issuer: a.issuer, Tenant: rec.Tenant, Plan: rec.Plan, Account: rec.Account, CredentialID: id, Method: limitkey.MethodAPIKey}, nil
}
