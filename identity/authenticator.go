package identity

import (
	"net/http"

	"github.com/ratekey/ratekey/limitkey"
)

// Authenticator verifies the credential a request carries (its headers,
// and for [CombinedAuthenticator] its query string or a cookie when
// enabled) and returns the [limitkey.Principal] it proves. It is the one
// authenticator interface: JWT, API-key, combined and test authenticators
// are interchangeable. A transport other than HTTP/1-2 (a gRPC call)
// presents its metadata as the request's headers.
//
// Contract for implementations:
//   - No credential present: return (Principal{}, [ErrNoCredential]) and
//     nothing else; the caller decides between a 401 challenge and anonymous.
//   - A credential present but malformed or unverifiable: return a
//     [*AuthError] ("invalid_request" for malformed requests,
//     "invalid_token" for failed verification, RFC 6750 §3.1). Never
//     ErrNoCredential, never an anonymous Principal.
//   - The credential cannot be checked now (key source unreachable with
//     nothing cached, store down): an error wrapping
//     [ErrKeySourceUnavailable] (503). Never 401, never anonymous.
//   - Success: a Principal built only from verified data, with Method set.
//   - Errors never contain the credential or any part of it.
//   - Safe for concurrent use by multiple goroutines.
//   - r is only read; r.Context() bounds any I/O the implementation needs
//     (e.g. a key-set fetch); implementations with static keys may ignore
//     it.
type Authenticator interface {
	// Authenticate verifies the credential in r. Returns ErrNoCredential
	// when none is present, ErrUnsupportedScheme for another
	// Authorization scheme, an error wrapping ErrKeySourceUnavailable when
	// the keys cannot be obtained, *AuthError otherwise on failure. Safe
	// for concurrent use.
	Authenticate(r *http.Request) (limitkey.Principal, error)
}
