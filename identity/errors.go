package identity

import (
	"errors"
	"net/http"
)

// ErrNoCredential reports that the request carries no credential at all (no
// Authorization header). Per RFC 6750 §3.1 the response is 401 with a bare
// `WWW-Authenticate: Bearer` challenge and no error code, or, if the
// deployment configured it, the request proceeds as anonymous. It is never
// returned for a credential that is present but invalid: those are
// [*AuthError] and never become anonymous. Compare with errors.Is.
var ErrNoCredential = errors.New("identity: no credential")

// ErrUnsupportedScheme reports an Authorization header in a well-formed
// scheme other than Bearer (Basic, Digest, ...). RFC 6750 §3.1 treats a
// request that "attempted using an unsupported authentication method" as
// lacking authentication information: 401 with a bare `WWW-Authenticate:
// Bearer` challenge and no error code. Unlike [ErrNoCredential] it never
// admits the request as anonymous: a credential was presented, and it is
// not one this server can verify. Compare with errors.Is.
var ErrUnsupportedScheme = errors.New("identity: authorization scheme is not Bearer")

// RFC 6750 §3.1 error codes used in [AuthError.Code].
const (
	// codeInvalidRequest: the request is malformed (two Authorization
	// lines, an empty or malformed header, a token with characters outside
	// the b64token set). HTTP 400.
	codeInvalidRequest = "invalid_request"
	// codeInvalidToken: the token is present and well-formed at the HTTP
	// level but fails verification (too long, malformed, bad signature,
	// expired, wrong issuer or audience, unknown key id, ...). HTTP 401.
	codeInvalidToken = "invalid_token"
)

// AuthError is a credential that was presented but rejected, classified by
// the RFC 6750 §3.1 error codes. No field holds the token, any part of it,
// or any other attacker-supplied bytes.
type AuthError struct {
	// Code is "invalid_request" (HTTP 400) or "invalid_token" (HTTP 401).
	Code string
	// Description is a fixed, safe English phrase chosen by this package,
	// suitable for the `error_description` attribute of a
	// `WWW-Authenticate` challenge and for logs.
	Description string
	// Err, when non-nil, is a sentinel error for errors.Is (for JWTs, one
	// of the golang-jwt jwt.Err* values or an internal sentinel); its text
	// is likewise free of token bytes and is not included in
	// [AuthError.Error].
	Err error
}

// Error returns "identity: <code>: <description>". It never includes the
// token or Err's text.
func (e *AuthError) Error() string {
	return "identity: " + e.Code + ": " + e.Description
}

// Unwrap returns Err, so errors.Is(err, jwt.ErrTokenExpired) and similar
// checks work.
func (e *AuthError) Unwrap() error { return e.Err }

// Status returns the HTTP status for the error per RFC 6750 §3.1: 400 for
// "invalid_request", 401 for "invalid_token" and for any other code
// (a failed credential is never treated as success).
func (e *AuthError) Status() int {
	if e.Code == codeInvalidRequest {
		return http.StatusBadRequest
	}
	return http.StatusUnauthorized
}

// invalidRequest returns an AuthError with codeInvalidRequest.
func invalidRequest(desc string, err error) *AuthError {
	return &AuthError{Code: codeInvalidRequest, Description: desc, Err: err}
}

// invalidToken returns an AuthError with codeInvalidToken.
func invalidToken(desc string, err error) *AuthError {
	return &AuthError{Code: codeInvalidToken, Description: desc, Err: err}
}
