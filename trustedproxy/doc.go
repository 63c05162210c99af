// Package trustedproxy derives the client address of an HTTP request from its
// TCP peer and, only when that peer is a trusted proxy, from a forwarding
// header the proxy wrote.
//
// Threat model: every byte of a request is attacker-controlled except the TCP
// peer address (http.Request.RemoteAddr). A forwarding header is believed
// only as far as the chain of proxies that wrote it is trusted.
//
// The rules, each pinned by a table test:
//
//  1. Gate on the peer. The peer is canonicalised (see below); if it is not
//     in the trusted set it is the client and no header is read at all.
//  2. List header (X-Forwarded-For). Every line of the header is merged in
//     wire order (a proxy may append a line instead of extending the last
//     one; reading only the first line was a bug in gin, Traefik and nginx),
//     the merged list is walked right to left, trusted hops are skipped and
//     the first untrusted address is the client. Entries left of it are never
//     examined. A malformed entry reached by the walk is a [*ChainError]
//     wrapping [ErrMalformedEntry]: the resolver fails closed, it never skips
//     the entry and never falls back to the peer. When every hop is trusted
//     the client is the peer ([ReasonAllHopsTrusted]), never the leftmost
//     entry ("take the leftmost" designs all have advisories).
//  3. Single-address header (X-Real-IP, CF-Connecting-IP, True-Client-IP, ...).
//     Read only from a trusted peer; the last line wins; the value must be
//     exactly one address, otherwise [*ChainError]. The value names the client,
//     so its own trust is not checked.
//  4. Canonicalise before any trust comparison: brackets and port are
//     stripped, IPv4-mapped IPv6 (::ffff:a.b.c.d) is unmapped, and the IPv6
//     zone is dropped. [netip.Prefix.Contains] and [netipx.IPSet.Contains] are
//     false for mapped and zoned forms, so without this step an attacker, or
//     a dual-stack listener, aliases a trusted address into an untrusted one.
//  5. Network key: the client masked to a configurable prefix length (IPv4
//     /32 and IPv6 /64 by default), applied after unmapping, so that
//     ::ffff:1.2.3.4 keys as 1.2.3.4/32, not as ::/64.
//
// Every resolution returns a [Derivation] saying which peer was seen, whether
// it was trusted, which header was read, which hops were examined with their
// verdicts, which one was chosen and why. The debug endpoint prints it.
//
// A [Resolver] is built once by [New] from a validated [Config] and is
// immutable; reloading configuration means building a new Resolver and
// swapping a pointer to it atomically.
package trustedproxy
