// Package identity is authentication: it turns request credentials into a
// verified [limitkey.Principal] (who the caller is: tenant, account, plan,
// credential id), the only source of a key's principal dimensions.
//
// The package has no HTTP routing, no key model (package limitkey) and no
// limiter. Its pieces are:
//
//   - [Authenticator]: the one interface every authenticator implements;
//     each reads the credential from the request (the Authorization header
//     by strict RFC 6750 §2.1 extraction: one line, scheme Bearer, a
//     b64token of bounded length).
//   - [JWTAuthenticator]: JWT verification that is strict by
//     construction (per-issuer keys, algorithms, audiences and type; one
//     algorithm per key; exp required; crit, jku, x5u, jwk and x5c refused;
//     token length capped before decoding; signature checked before claims).
//     Keys are static or come from a JWK Set per issuer record ([JWKSOptions]:
//     own cache, background refresh, last good set kept, unknown-kid
//     refreshes rate-limited per issuer); issuers may be added at run time by
//     an [IssuerResolver]. Successful verifications are cached (bounded,
//     found by a keyed hash of the token and answering only the identical
//     token, never past exp or a key rotation), so a repeated token costs a
//     hash and a comparison instead of a signature check.
//   - [APIKeyAuthenticator]: API keys rk_<id>_<secret><checksum> ([NewAPIKey]),
//     checked against HMAC-SHA256(pepper, secret) held by an [APIKeyStore]
//     (your database, or [NewMemoryAPIKeyStore]).
//   - [CombinedAuthenticator]: one credential per request from the configured
//     [Source] values (Authorization header by default; query string and cookie
//     opt-in), dispatched to the JWT or API-key authenticator.
//   - [AuthError], [ErrNoCredential], [ErrUnsupportedScheme] and
//     [ErrKeySourceUnavailable]: the RFC 6750 §3.1 error taxonomy plus 503.
//
// Threat model: every byte of a request is attacker-controlled. Claims are
// believed only after signature, issuer, audience and expiry checks pass, and
// only for the issuer record whose keys verified them. No error text or log
// line produced by this package contains a token, an API key, a secret or
// any part of one; only [NewAPIKey] returns a secret, once.
package identity
