package identity

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/internal/strictjson"
)

// Strict JSON decoding of JWS headers and JWT claims sets.
//
// encoding/json is lenient in three ways that matter here, so claims are not
// decoded into a tagged struct:
//   - it matches object keys to struct fields case-insensitively (with
//     Unicode folding: "ſub" and "SUB" both fill Sub), so a claim "TENANT"
//     could populate "tenant";
//   - for duplicate keys the last one wins, while other parsers take the
//     first;
//   - jwt.NumericDate accepts quoted numbers ("exp": "1700000000").
//
// Instead the object is split into exact keys (duplicates refused), each
// consumed claim is read by its exact name with an exact JSON type, and a
// token that also carries a case-variant of a consumed name ("Sub", "SUB",
// "ſub") is refused, because a downstream service decoding the same token
// with encoding/json could read that variant instead.

// Sentinels for claim problems (wrapped in AuthError.Err).
var (
	errMalformed       = errors.New("identity: token is malformed")
	errClaimsMalformed = errors.New("identity: token claims are malformed")
	errMissingExp      = errors.New("identity: token has no exp claim")
	errBadExp          = errors.New("identity: token exp claim is not positive")
	errMissingAud      = errors.New("identity: token has no aud claim")
	errMissingSub      = errors.New("identity: token has no sub claim")
)

// maxNumericDate is 9999-12-31T23:59:59Z in seconds; larger NumericDates
// are refused rather than overflowing time arithmetic.
const maxNumericDate = 253402300799

// decodeObject splits a JSON object into its members, refusing duplicate
// keys and trailing data (see [strictjson.Object]).
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	obj, ok := strictjson.Object(data)
	if !ok {
		return nil, errMalformed
	}
	return obj, nil
}

// isNull reports whether raw is the JSON literal null.
func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// jsonString decodes raw as a JSON string of valid UTF-8 without U+FFFD
// (see [strictjson.String]).
func jsonString(raw json.RawMessage) (string, bool) { return strictjson.String(raw) }

// numericDate decodes raw as an RFC 7519 §2 NumericDate: a JSON number (not a
// string), finite, in [0, maxNumericDate].
func numericDate(raw json.RawMessage) (*jwt.NumericDate, bool) {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return nil, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > maxNumericDate {
		return nil, false
	}
	sec, frac := math.Modf(f)
	return jwt.NewNumericDate(time.Unix(int64(sec), int64(frac*1e9))), true
}

// tokenClaims is the claims set of a JWT as this package reads it. It embeds
// jwt.RegisteredClaims so golang-jwt's validator checks exp, nbf, iat, iss
// and aud, but it is filled by UnmarshalJSON with exact-name, exact-type
// rules. Problems with claim values are not returned from UnmarshalJSON
// (which golang-jwt calls before verifying the signature) but from Validate
// (called after), so a forged token reports only the signature failure.
type tokenClaims struct {
	jwt.RegisteredClaims

	ClientID string // `client_id` (RFC 8693 §4.3, RFC 9068 §2.2)
	AZP      string // `azp` (OpenID Connect Core §2)

	tenantClaim string // claim to read the tenant from; set before decoding
	Tenant      string // value of tenantClaim, if it is a string
	tenantOK    bool   // tenantClaim present and a valid string

	planClaim string // claim to read the plan from; set before decoding
	Plan      string // value of planClaim, if it is a string
	planOK    bool   // planClaim present and a valid string

	problem error // deferred claim-value problem, reported by Validate
}

// UnmarshalJSON implements json.Unmarshaler. It fails only when data is not
// a single JSON object with unique keys; value problems are deferred to
// Validate.
func (c *tokenClaims) UnmarshalJSON(data []byte) error {
	obj, err := decodeObject(data)
	if err != nil {
		return err
	}
	c.problem = c.fill(obj)
	return nil
}

// consumed lists the claim names this package reads.
var consumed = [...]string{"iss", "sub", "aud", "exp", "nbf", "iat", "client_id", "azp"}

// fill reads the consumed claims from obj.
func (c *tokenClaims) fill(obj map[string]json.RawMessage) error {
	if c.foldedName(obj) {
		return errClaimsMalformed
	}
	if !strClaim(obj, "iss", &c.Issuer) || !strClaim(obj, "sub", &c.Subject) ||
		!strClaim(obj, "client_id", &c.ClientID) || !strClaim(obj, "azp", &c.AZP) ||
		!dateClaim(obj, "exp", &c.ExpiresAt) || !dateClaim(obj, "nbf", &c.NotBefore) || !dateClaim(obj, "iat", &c.IssuedAt) {
		return errClaimsMalformed
	}
	if raw, ok := obj["aud"]; ok && !isNull(raw) {
		if c.Audience, ok = audience(raw); !ok {
			return errClaimsMalformed
		}
	}
	if c.tenantClaim != "" {
		if raw, ok := obj[c.tenantClaim]; ok {
			c.Tenant, c.tenantOK = jsonString(raw)
		}
	}
	if c.planClaim != "" {
		if raw, ok := obj[c.planClaim]; ok {
			c.Plan, c.planOK = jsonString(raw)
		}
	}
	if c.ExpiresAt != nil && c.ExpiresAt.Unix() <= 0 {
		return errBadExp
	}
	return nil
}

// foldedName reports whether obj has a name that differs from a claim
// this package reads (a consumed one, or the record's tenant or plan claim)
// only by case: Go's JSON decoding would fold it onto that claim, so such
// a token is refused rather than read one way here and another elsewhere.
func (c *tokenClaims) foldedName(obj map[string]json.RawMessage) bool {
	for k := range obj {
		for _, n := range consumed {
			if k != n && strings.EqualFold(k, n) {
				return true
			}
		}
		if c.tenantClaim != "" && k != c.tenantClaim && strings.EqualFold(k, c.tenantClaim) {
			return true
		}
		if c.planClaim != "" && k != c.planClaim && strings.EqualFold(k, c.planClaim) {
			return true
		}
	}
	return false
}

// strClaim reads the string claim name of obj into dst; absent or null
// leaves dst alone. It reports false for any other JSON value.
func strClaim(obj map[string]json.RawMessage, name string, dst *string) bool {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return true
	}
	*dst, ok = jsonString(raw)
	return ok
}

// dateClaim reads the NumericDate claim name of obj into dst; absent or
// null leaves dst alone. It reports false for any other JSON value.
func dateClaim(obj map[string]json.RawMessage, name string, dst **jwt.NumericDate) bool {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return true
	}
	*dst, ok = numericDate(raw)
	return ok
}

// audience reads an aud claim (not null): one string, or an array of
// strings (RFC 7519 §4.1.3). ok is false for anything else; an array is
// then returned up to its first element that is not a string.
func audience(raw json.RawMessage) (jwt.ClaimStrings, bool) {
	if raw[0] == '"' {
		s, ok := jsonString(raw)
		if !ok {
			return nil, false
		}
		return jwt.ClaimStrings{s}, true
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, false
	}
	var aud jwt.ClaimStrings
	for _, r := range list {
		s, ok := jsonString(r)
		if !ok {
			return aud, false // the strings before it, as golang-jwt's checks see them
		}
		aud = append(aud, s)
	}
	return aud, true
}

// Validate implements jwt.ClaimsValidator. golang-jwt calls it after the
// signature check, together with its own exp/nbf/iat/iss/aud checks.
func (c *tokenClaims) Validate() error {
	if c.problem != nil {
		return c.problem
	}
	var errs []error
	if c.ExpiresAt == nil {
		errs = append(errs, errMissingExp)
	}
	if len(c.Audience) == 0 {
		errs = append(errs, errMissingAud)
	}
	if c.Subject == "" {
		errs = append(errs, errMissingSub)
	}
	return errors.Join(errs...)
}
