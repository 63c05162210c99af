// Package identity turns request credentials into a verified [limitkey.Principal] and
// describes the budget a request spends as a typed, injectively encoded [Key].
//
// The package has no HTTP routing and no limiter. Its pieces are:
//
//   - [Key], [Part] and [Dimension]: the ordered tuple that names one rate-limit
//     bucket, with an encoding ([Key.String], [Key.AppendTo]) that is injective
//     whatever bytes the values hold, printable ASCII, and parsed back by
//     [ParseKey].
//   - [limitkey.Principal]: who a verified credential says the caller is. Only
//     authenticators produce one, and only from verified input.
//   - [BearerToken]: strict extraction of an RFC 6750 §2.1 bearer token from
//     the Authorization header.
//   - [Authenticator] and [JWTAuthenticator]: JWT verification that is strict by
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
//     [Source]s (Authorization header by default; query string and cookie
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
