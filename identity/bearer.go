package identity

import (
	"errors"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// maxTokenBytes is the longest bearer token accepted, in bytes. Longer
// tokens are rejected with "invalid_token" before any decoding, so a
// flood of huge tokens costs a length comparison, not base64 and JSON work.
const maxTokenBytes = 8192

// Sentinels wrapped by the AuthErrors of bearerToken (for tests and
// errors.Is inside the package; their text is as safe as the descriptions).
var (
	errMultipleAuthorization = errors.New("identity: multiple Authorization header lines")
	errNotBearer             = errors.New("identity: authorization scheme is not Bearer")
	errEmptyToken            = errors.New("identity: empty bearer token")
	errTokenCharset          = errors.New("identity: bearer token has characters outside b64token")
	errTokenTooLong          = errors.New("identity: bearer token exceeds maxTokenBytes")
)

// bearerToken extracts the bearer token from the Authorization header of h,
// following RFC 6750 §2.1 and RFC 9110 §11.4:
//
//	Authorization: Bearer <b64token>
//	b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
//
// Rules (decided; tests pin each one):
//   - No Authorization header: [ErrNoCredential].
//   - Two or more Authorization lines (h["Authorization"] has more than one
//     value): [*AuthError] invalid_request. The token is never chosen from
//     several candidates.
//   - The scheme is matched case-insensitively ("bearer", "BEARER"), as
//     auth-schemes are case-insensitive (RFC 9110 §11.1).
//   - One or more SP (0x20) separate scheme and token, as the RFC 9110 §11.4
//     grammar allows (credentials = auth-scheme [ 1*SP token68 ]); HTAB or
//     any other whitespace is not a separator and is rejected.
//   - Another well-formed scheme (Basic, Digest, "BearerX": any RFC 9110
//     token other than bearer, alone or followed by SP):
//     [ErrUnsupportedScheme], a 401 with a bare challenge (RFC 6750 §3.1).
//   - A present but empty header, a malformed scheme (leading space, HTAB,
//     non-token bytes), a missing or empty token, or any byte outside
//     b64token (including trailing spaces and commas): invalid_request.
//     None of these ever yields ErrNoCredential, so a malformed or foreign
//     credential never becomes anonymous.
//   - A token longer than 8192: invalid_token, checked before
//     the charset and before any decoding.
//
// The returned token has been checked only for shape; it is not verified.
// Error descriptions never contain header bytes. h is only read; safe for
// concurrent use with other readers.
func bearerToken(h http.Header) (string, error) {
	tok, err := bearerCandidate(h)
	if err != nil {
		return "", err
	}
	if !isB64Token(tok) {
		return "", errCharsetRequest()
	}
	return tok, nil
}

// errCharsetRequest is bearerToken's error for a token with a byte outside
// b64token.
func errCharsetRequest() error {
	return invalidRequest("bearer token contains invalid characters", errTokenCharset)
}

// bearerCandidate is bearerToken without the b64token charset check (the
// only check that reads every byte of the token): every other rule, in the
// same order, with the same errors. A caller that returns a result for the
// token without calling isB64Token must know that the token is b64token by
// other means (JWTAuthenticator.Authenticate: it equals, byte for byte, a
// token in the verification cache, which holds only b64tokens).
func bearerCandidate(h http.Header) (string, error) {
	vals := h["Authorization"] // the canonical key: h.Values without canonicalising it again
	switch len(vals) {
	case 0:
		return "", ErrNoCredential
	case 1:
	default:
		return "", invalidRequest("multiple Authorization header lines", errMultipleAuthorization)
	}
	v := vals[0]
	const scheme = "bearer"
	name, _, _ := strings.Cut(v, " ")
	if !httpguts.ValidHeaderFieldName(name) { // an RFC 9110 §5.6.2 token, as an auth-scheme must be
		return "", invalidRequest("authorization scheme is malformed", errNotBearer)
	}
	if !asciiEqualFold(name, scheme) {
		return "", ErrUnsupportedScheme
	}
	rest := v[len(scheme):]
	if rest == "" {
		return "", invalidRequest("bearer token is missing", errEmptyToken)
	}
	i := 0
	for i < len(rest) && rest[i] == ' ' {
		i++
	}
	tok := rest[i:]
	if tok == "" {
		return "", invalidRequest("bearer token is missing", errEmptyToken)
	}
	if len(tok) > maxTokenBytes {
		return "", invalidToken("token is too long", errTokenTooLong)
	}
	return tok, nil
}

// asciiEqualFold reports whether a and b are equal under ASCII case folding
// only (no Unicode folding: "ſ" or the Kelvin sign must not match).
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// isB64Token reports whether s matches RFC 6750 §2.1 b64token:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
// It runs on every bearer token (up to 8 KiB), so it reads eight bytes per
// branch.
func isB64Token(s string) bool {
	n := len(s)
	for n > 0 && s[n-1] == '=' {
		n--
	}
	if n == 0 {
		return false
	}
	s = s[:n]
	for len(s) >= 8 {
		w := s[:8]
		t := &b64tokenByte
		if t[w[0]]&t[w[1]]&t[w[2]]&t[w[3]]&t[w[4]]&t[w[5]]&t[w[6]]&t[w[7]] == 0 {
			return false
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if b64tokenByte[s[i]] == 0 {
			return false
		}
	}
	return true
}

// b64tokenByte is 1 for the bytes a b64token holds before its '='
// padding, 0 for the others.
var b64tokenByte = func() (t [256]byte) {
	for c := range t {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			t[c] = 1
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
			t[c] = 1
		}
	}
	return t
}()
