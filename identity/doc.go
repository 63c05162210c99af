// Package identity turns request credentials into a verified [Principal] and
// describes the budget a request spends as a typed, injectively encoded [Key].
//
// The package has no HTTP routing and no limiter. Its pieces are:
//
//   - [Key], [Part] and [Dimension]: the ordered tuple that names one rate-limit
//     bucket, with an encoding ([Key.String], [Key.AppendTo]) that is injective
//     whatever bytes the values hold, printable ASCII, and parsed back by
//     [ParseKey].
//   - [Principal]: who a verified credential says the caller is. Only
//     authenticators produce one, and only from verified input.
//   - [BearerToken]: strict extraction of an RFC 6750 §2.1 bearer token from
//     the Authorization header.
//   - [Authenticator] and [JWTAuthenticator]: JWT verification that is strict by
//     construction (per-issuer keys, algorithms and audiences; exp required;
//     crit, jku, x5u, jwk and x5c refused; token length capped before decoding;
//     signature checked before claims).
//   - [AuthError] and [ErrNoCredential]: the RFC 6750 §3.1 error taxonomy.
//
// Threat model: every byte of a request is attacker-controlled. Claims are
// believed only after signature, issuer, audience and expiry checks pass, and
// only for the issuer record whose keys verified them. No error text produced
// by this package contains a token or any part of one.
package identity
