package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limitkey"
)

// Source names a place a credential is read from (see [CombinedConfig]):
// one of the constants below, matched exactly (lower case).
type Source string

// Credential sources.
const (
	// SourceHeader: `Authorization: Bearer <token>` (RFC 6750 §2.1) and,
	// when API keys are configured, `X-API-Key: rk_...`. The default and
	// the recommended source.
	SourceHeader Source = "header"
	// SourceQuery: a URI query parameter, "access_token" by default
	// (RFC 6750 §2.3). Risky: URLs end up in access logs, proxy logs,
	// browser history and Referer headers, so the credential leaks (RFC
	// 6750 §5.3 says not to). ratekey never logs it, but it does not
	// remove it from the request either. Opt-in only.
	SourceQuery Source = "query"
	// SourceCookie: a named cookie. Risky: browsers attach cookies to
	// cross-site requests, so another site can make a victim's browser
	// spend (or exhaust) the victim's budget and act with its credential
	// (CSRF); use it only with SameSite cookies and CSRF protection.
	// Opt-in only.
	SourceCookie Source = "cookie"
)

// Default names of the opt-in sources.
const (
	// defaultQueryParameter is the query parameter read by [SourceQuery]
	// when CombinedConfig.QueryParameter is empty (RFC 6750 §2.3).
	defaultQueryParameter = "access_token"
	// defaultCookieName is the cookie read by [SourceCookie] when
	// CombinedConfig.CookieName is empty.
	defaultCookieName = "access_token"
)

// Sentinels of credential extraction (wrapped in AuthError.Err).
var (
	errMultipleCredentials = errors.New("identity: credentials presented in more than one place")
	errMultipleValues      = errors.New("identity: a credential field appears more than once")
	errNotAccepted         = errors.New("identity: this kind of credential is not accepted")
)

// CombinedConfig configures [NewCombinedAuthenticator].
//
// The errors of [NewCombinedAuthenticator] name the field the way a
// configuration file writes it (the Go field QueryParameter is written
// query_parameter), list elements by index, with no package prefix:
// `sources[1]: "query" listed twice`.
type CombinedConfig struct {
	// JWT verifies bearer tokens that are not API keys; nil refuses them
	// (401 invalid_token).
	JWT *JWTAuthenticator
	// APIKeys verifies API keys (`rk_` prefix); nil refuses them and leaves
	// X-API-Key unread. At least one of JWT and APIKeys is required. Keep the
	// tenants of API keys apart from the tenants the JWT issuers vouch for: a
	// key's principal has no issuer, so an account of a shared tenant would
	// share its (tenant, account) buckets with the issuer's account of that
	// name. The store is not enumerable here, so this is the caller's check
	// (the demo makes it when it loads keys).
	APIKeys *APIKeyAuthenticator
	// Sources is where credentials are read from; nil or empty means
	// [SourceHeader] only. Each at most once.
	Sources []Source
	// QueryParameter is the parameter of [SourceQuery]; "" means
	// "access_token". Must be an RFC 9110 token.
	QueryParameter string
	// CookieName is the cookie of [SourceCookie]; "" means "access_token".
	// Must be an RFC 6265 cookie-name (a token).
	CookieName string
}

// CombinedAuthenticator reads one credential from the configured sources
// and dispatches it: an API key (`X-API-Key`, or any value starting with
// "rk_") to the [APIKeyAuthenticator], anything else to the
// [JWTAuthenticator].
//
// Extraction rules (decided; tests pin each one), following RFC 6750 §2
// ("clients MUST NOT use more than one method to transmit the token"):
//   - Authorization is parsed by [bearerToken] (scheme case-insensitive,
//     two lines → 400 invalid_request, another scheme → the bare 401 of
//     [ErrUnsupportedScheme]).
//   - X-API-Key (only with APIKeys), the query parameter and the cookie:
//     more than one occurrence or an empty value → 400 invalid_request;
//     longer than 8192 → 401 invalid_token; bytes outside the
//     b64token set → 400 invalid_request.
//   - Credentials in two places (a bearer token and an API key, a header
//     and a query parameter, another-scheme Authorization and an API key,
//     ...) → 400 invalid_request, whatever their validity.
//   - None at all → [ErrNoCredential]. Sources that are not enabled are
//     not read: a token in the query string of a header-only deployment is
//     no credential.
//
// Errors are those of the authenticators (401 invalid_token, or
// [ErrKeySourceUnavailable] for 503); none contains the credential.
// Immutable; safe for concurrent use.
type CombinedAuthenticator struct {
	jwt     *JWTAuthenticator
	apiKeys *APIKeyAuthenticator
	x       extractor
}

var _ Authenticator = (*CombinedAuthenticator)(nil)

// NewCombinedAuthenticator validates cfg and returns the authenticator.
func NewCombinedAuthenticator(cfg CombinedConfig) (*CombinedAuthenticator, error) {
	var errs []error
	if cfg.JWT == nil && cfg.APIKeys == nil {
		errs = append(errs, errors.New("jwt, api_keys: neither a JWT nor an API key authenticator"))
	}
	x := extractor{apiKeyHeader: cfg.APIKeys != nil, param: cfg.QueryParameter, cookieName: cfg.CookieName}
	sources := cfg.Sources
	if len(sources) == 0 {
		sources = []Source{SourceHeader}
	}
	seen := map[Source]bool{}
	for i, s := range sources {
		if seen[s] {
			errs = append(errs, fmt.Errorf("sources[%d]: %s listed twice", i, quote.Value(s)))
		}
		seen[s] = true
		switch s {
		case SourceHeader:
			x.header = true
		case SourceQuery:
			x.query = true
		case SourceCookie:
			x.cookie = true
		default:
			errs = append(errs, fmt.Errorf("sources[%d]: unknown source %s (want header, query or cookie)", i, quote.Value(s)))
		}
	}
	if x.param == "" {
		x.param = defaultQueryParameter
	}
	if !httpguts.ValidHeaderFieldName(x.param) {
		errs = append(errs, fmt.Errorf("query_parameter: %s is not a token", quote.Value(x.param)))
	}
	if x.cookieName == "" {
		x.cookieName = defaultCookieName
	}
	if !httpguts.ValidHeaderFieldName(x.cookieName) {
		errs = append(errs, fmt.Errorf("cookie_name: %s is not a token", quote.Value(x.cookieName)))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &CombinedAuthenticator{jwt: cfg.JWT, apiKeys: cfg.APIKeys, x: x}, nil
}

// Tenants returns the tenants of its JWTAuthenticator (see
// [JWTAuthenticator.Tenants]). complete is false with API keys: each
// record names its own tenant, and a store cannot be listed. A nil or
// zero CombinedAuthenticator (not made by NewCombinedAuthenticator) lists
// nothing, incomplete. Safe for concurrent use.
func (c *CombinedAuthenticator) Tenants() (tenants []string, complete bool) {
	if c == nil || c.jwt == nil && c.apiKeys == nil {
		return nil, false
	}
	complete = c.apiKeys == nil
	if c.jwt != nil {
		var all bool
		tenants, all = c.jwt.Tenants()
		complete = complete && all
	}
	return tenants, complete
}

// Authenticate reads the credential from r (headers, and the query string
// or cookie if enabled) and verifies it; r.Context() bounds any key-set
// fetch or store call. See [CombinedAuthenticator] and the contract of
// [Authenticator]. Safe for concurrent use.
func (c *CombinedAuthenticator) Authenticate(r *http.Request) (limitkey.Principal, error) {
	var q []string
	if c.x.query && r.URL != nil {
		q = queryValues(r.URL.RawQuery, c.x.param)
	}
	cred, err := c.x.extract(r.Header, q)
	if err != nil {
		return limitkey.Principal{}, err
	}
	return c.dispatch(r.Context(), cred)
}

func (c *CombinedAuthenticator) dispatch(ctx context.Context, cred credential) (limitkey.Principal, error) {
	if cred.isAPIKey() {
		if c.apiKeys == nil {
			return limitkey.Principal{}, invalidToken("API keys are not accepted", errNotAccepted)
		}
		return c.apiKeys.verifyKey(ctx, cred.value)
	}
	if c.jwt == nil {
		return limitkey.Principal{}, invalidToken("bearer tokens are not accepted", errNotAccepted)
	}
	return c.jwt.verifyToken(ctx, cred.value)
}

// extractor reads at most one credential from the enabled sources.
type extractor struct {
	header, query, cookie bool
	apiKeyHeader          bool // read X-API-Key (with the header source)
	param, cookieName     string
}

// headerExtractor reads Authorization and, if apiKeys, X-API-Key.
func headerExtractor(apiKeys bool) extractor {
	return extractor{header: true, apiKeyHeader: apiKeys}
}

// credential is one extracted, shape-checked, unverified credential.
type credential struct {
	value string
	from  string // "authorization", "x-api-key", "query" or "cookie"
}

// isAPIKey: X-API-Key only carries API keys; elsewhere the prefix decides
// (a JWT starts with "ey", the base64url of `{"`).
func (c credential) isAPIKey() bool {
	return c.from == "x-api-key" || strings.HasPrefix(c.value, apiKeyPrefix)
}

// extract applies the rules documented on CombinedAuthenticator. q holds
// the values of the query parameter (see [queryValues]), nil when the query
// string is not read.
func (x extractor) extract(h http.Header, q []string) (credential, error) {
	var found []credential
	unsupported := false
	add := func(from string, vals []string) error {
		switch len(vals) {
		case 0:
			return nil
		case 1:
		default:
			return invalidRequest("a credential field appears more than once", errMultipleValues)
		}
		v := vals[0]
		switch {
		case v == "":
			return invalidRequest("credential is empty", errEmptyToken)
		case len(v) > maxTokenBytes:
			return invalidToken("token is too long", errTokenTooLong)
		case !isB64Token(v):
			return invalidRequest("credential contains invalid characters", errTokenCharset)
		}
		found = append(found, credential{value: v, from: from})
		return nil
	}
	if x.header {
		tok, err := bearerToken(h)
		switch {
		case err == nil:
			found = append(found, credential{value: tok, from: "authorization"})
		case errors.Is(err, ErrNoCredential):
		case errors.Is(err, ErrUnsupportedScheme):
			unsupported = true
		default:
			return credential{}, err
		}
		if x.apiKeyHeader {
			if err := add("x-api-key", h.Values(apiKeyHeader)); err != nil {
				return credential{}, err
			}
		}
	}
	if x.query {
		if err := add("query", q); err != nil {
			return credential{}, err
		}
	}
	if x.cookie {
		if err := add("cookie", cookieValues(h, x.cookieName)); err != nil {
			return credential{}, err
		}
	}
	switch {
	case len(found) > 1, len(found) == 1 && unsupported:
		return credential{}, invalidRequest("credentials presented in more than one place", errMultipleCredentials)
	case len(found) == 1:
		return found[0], nil
	case unsupported:
		return credential{}, ErrUnsupportedScheme
	}
	return credential{}, ErrNoCredential
}

// queryValues returns the values of the query parameter name in rawQuery,
// in order, decoded as url.ParseQuery decodes them. ParseQuery drops a pair
// it cannot decode (a bad %-escape) or that holds a ";" (which some
// servers split on as well); a pair naming this parameter, or holding a
// ";"-separated part that names it, is kept here as written instead, so
// that the credential checks reject it (invalid_request: a raw value with
// "%" or ";" is no b64token) rather than the request passing as one
// without a credential, anonymous perhaps.
func queryValues(rawQuery, name string) []string {
	names := func(part string) bool {
		k, _, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(k)
		return err == nil && key == name
	}
	var vals []string
	for pair := range strings.SplitSeq(rawQuery, "&") {
		if strings.Contains(pair, ";") {
			for part := range strings.SplitSeq(pair, ";") {
				if names(part) {
					vals = append(vals, pair)
					break
				}
			}
			continue
		}
		if !names(pair) {
			continue
		}
		_, v, _ := strings.Cut(pair, "=")
		if d, err := url.QueryUnescape(v); err == nil {
			v = d
		}
		vals = append(vals, v)
	}
	return vals
}

// cookieValues returns the values of the cookies named name in h's Cookie
// lines, in order. net/http's lenient reader (Request.Cookies) drops a
// cookie whose value is malformed; one of this name is kept here as
// written instead (a value that http.ParseCookie refuses is never a
// b64token), so that the credential checks reject it (invalid_request)
// rather than the request passing as one without a credential.
func cookieValues(h http.Header, name string) []string {
	var vals []string
	for _, line := range h.Values("Cookie") {
		for part := range strings.SplitSeq(line, ";") {
			part = textproto.TrimString(part)
			n, v, _ := strings.Cut(part, "=")
			if textproto.TrimString(n) != name {
				continue
			}
			if cs, err := http.ParseCookie(part); err == nil && len(cs) == 1 {
				v = cs[0].Value
			}
			vals = append(vals, v)
		}
	}
	return vals
}
