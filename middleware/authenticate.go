package middleware

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limitkey"
)

// AuthOptions configures [Authenticate].
type AuthOptions struct {
	// Anonymous admits requests that carry no credential at all as the
	// anonymous principal (Method limitkey.MethodAnonymous). Default false:
	// such requests get 401 with a bare `WWW-Authenticate: Bearer` challenge
	// (RFC 6750 §3.1). A credential that is present but invalid is never
	// treated as anonymous, whatever this says.
	Anonymous bool
	// Realm, when set, is sent as the challenge's realm parameter (RFC 6750 §3).
	Realm string
	// Metrics counts refused credentials by reason
	// (ratekey_authentication_failures_total): the RFC 6750 code
	// (invalid_request, invalid_token), missing, unsupported_scheme or
	// unavailable. nil counts nothing.
	Metrics Metrics
}

// authOutcome is the result of running an authenticator on a request, shared
// by the middleware and the debug endpoint.
type authOutcome struct {
	principal limitkey.Principal // valid when ok
	ok        bool               // admitted (verified or anonymous)
	status    int                // 0 when admitted
	code      string             // RFC 6750 error code, "" for a bare challenge
	detail    string             // safe text: never the credential
	reason    string             // fixed failure reason for metrics; "" when admitted
}

func authenticate(a identity.Authenticator, opts AuthOptions, r *http.Request) authOutcome {
	p, err := a.Authenticate(r)
	if err == nil {
		return authOutcome{principal: p, ok: true}
	}
	if errors.Is(err, identity.ErrKeySourceUnavailable) {
		// The credential could not be checked (JWK Set never fetched,
		// resolver or API key store down): 503, never 401, never anonymous.
		return authOutcome{status: http.StatusServiceUnavailable, detail: "credentials cannot be verified right now", reason: "unavailable"}
	}
	if errors.Is(err, identity.ErrUnsupportedScheme) {
		// RFC 6750 §3.1: an unsupported method is answered like a missing
		// credential, but a presented credential is never anonymous.
		return authOutcome{status: http.StatusUnauthorized, detail: "the Authorization scheme is not Bearer", reason: "unsupported_scheme"}
	}
	if errors.Is(err, identity.ErrNoCredential) {
		if opts.Anonymous {
			return authOutcome{principal: limitkey.Principal{Method: limitkey.MethodAnonymous}, ok: true}
		}
		return authOutcome{status: http.StatusUnauthorized, detail: "no credential was presented", reason: "missing"}
	}
	var ae *identity.AuthError
	if errors.As(err, &ae) {
		return authOutcome{status: ae.Status(), code: ae.Code, detail: ae.Description, reason: ae.Code}
	}
	// Anything else means the credential could not be checked (a key source
	// is down): 503, never 401, and never anonymous.
	return authOutcome{status: http.StatusServiceUnavailable, detail: "credentials cannot be verified right now", reason: "unavailable"}
}

// Authenticate returns middleware that verifies the request's credential with
// a and stores the resulting [limitkey.Principal] in the context (read it with
// [PrincipalFrom]).
//
// Outcomes follow RFC 6750 §3.1: no credential → anonymous (if
// opts.Anonymous) or 401 with a bare `WWW-Authenticate: Bearer` challenge;
// another scheme (Basic, ...) → the same bare 401, even when anonymous
// access is on; malformed credential (two Authorization lines, empty
// header, credentials in two places such as a bearer token and an API key)
// → 400 `invalid_request`; any failed verification → 401 `invalid_token`; a
// key source that cannot be reached (an error wrapping
// [identity.ErrKeySourceUnavailable], or any error that is not an
// [identity.AuthError]) → 503 with `Retry-After: 5` and no challenge. Every
// 400 and 401 carries a `WWW-Authenticate: Bearer` challenge (RFC 6750 §3)
// and every rejection an RFC 9457 problem body whose detail is a fixed text
// that never contains the credential. Safe for concurrent use if a is.
func Authenticate(a identity.Authenticator, opts AuthOptions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			out := authenticate(a, opts, r)
			r, st := ensureState(r)
			if st.record != nil {
				st.record.recordAuth(&out)
			}
			if !out.ok {
				if opts.Metrics != nil {
					opts.Metrics.AuthFailure(out.reason)
				}
				writeAuthFailure(w, opts, out)
				return
			}
			st.principal, st.hasPrincipal = out.principal, true
			next.ServeHTTP(w, r)
		})
	}
}

func writeAuthFailure(w http.ResponseWriter, opts AuthOptions, out authOutcome) {
	challenge := "Bearer"
	sep := " "
	if opts.Realm != "" {
		challenge += sep + "realm=" + strconv.Quote(opts.Realm)
		sep = ", "
	}
	p := problem{Status: out.status, Detail: out.detail}
	switch out.code {
	case "invalid_request":
		challenge += sep + `error="invalid_request"`
		p.Type = problemInvalidRequest
	case "invalid_token":
		challenge += sep + `error="invalid_token"`
		p.Type = problemInvalidToken
	default:
		if out.status == http.StatusServiceUnavailable {
			p.Type = problemKeySourceUnavailable
			w.Header().Set("Retry-After", "5")
		} else {
			p.Type = problemUnauthenticated
		}
	}
	if out.status == http.StatusUnauthorized || out.code != "" {
		w.Header().Set("WWW-Authenticate", challenge)
	}
	writeProblem(w, p)
}
