// Package trustedproxy derives the client address of an HTTP request from its
// TCP peer and, only when that peer is a trusted proxy, from a forwarding
// header the proxy wrote.
//
// Threat model: every byte of a request is attacker-controlled except the TCP
// peer address (http.Request.RemoteAddr). A forwarding header is believed
// only as far as the chain of proxies that wrote it is trusted.
//
// # Rules
//
// A [Config] holds an ordered list of [Rule] values, each "when the peer is in
// set S, read header H, trusting N hops". The first rule whose set contains
// the peer applies; when none does, the peer is the client and no header is
// read. A single proxy setup is one rule. A mixed
// topology, for instance a CDN in front of some routes and a load balancer
// in front of others, with some clients coming direct:
//
//	Rules: []trustedproxy.Rule{
//		{From: cdnRanges, Header: "CF-Connecting-IP"},          // CDN edge → its single-address header
//		{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}, // our load balancers → walk the list
//	}                                                              // anyone else → the peer
//
// The rules of resolution, each pinned by a table test and the golden
// vectors in testdata/trustedproxy:
//
//  1. Gate on the peer. The peer is canonicalised (see 6); if no rule's set
//     contains it, it is the client and no header is read at all. A peer
//     no connection can come from (see 8) is refused first.
//  2. List headers: X-Forwarded-For, and RFC 7239 Forwarded (its for=
//     parameters). Every line of the header is merged in wire order (a
//     proxy may append a line instead of extending the last one; reading
//     only the first line was a bug in gin, Traefik and nginx), the merged
//     list is walked right to left, and each entry is classified: an
//     address in the rule's set is a trusted proxy and is skipped; any other
//     address uses up one of the rule's Hops; the entry that uses up the
//     last one is the client. Entries left of it are never examined.
//  3. Hops. The unit: with Hops n (0 means 1), the client is the n-th entry
//     from the right that is not in the rule's set. n = 1 is the classic
//     walk (first untrusted entry). When the chain lists no address of the
//     rule's set, n is the number of proxies counting the peer, so n = 1 is
//     the rightmost entry (the address the peer saw). When the set lists your
//     own load balancers, n = 2 reads "skip my known ranges, then trust one
//     more hop" (a CDN whose ranges you do not keep). Entries trusted by
//     count are reported with the verdict "counted" and the client with
//     "hop_count".
//  4. Failing closed. An entry reached by the walk that is not an address is
//     a [*ChainError]: [ErrMalformedEntry] (garbage, an empty element, an
//     RFC 7239 element breaking the grammar, a repeated or missing for) or
//     an error wrapping it for "unknown" and obfuscated "_xyz" nodes, whose
//     trust cannot be decided (reason unknown_node), or, wrapping ErrMalformedEntry, for an address no
//     connection can come from (see 8). The resolver never skips such an
//     entry and never falls back to the peer. More than [MaxHops] entries
//     to examine is [ErrChainTooLong].
//  5. Single-address headers (X-Real-IP, CF-Connecting-IP, True-Client-IP,
//     ...). Read only from a peer the rule trusts; the last line wins; the
//     value must be exactly one address that can be a source (see 8),
//     otherwise [*ChainError]. The value names the client, so its own
//     trust is not checked.
//  6. Canonicalise before any trust comparison: brackets and port are
//     stripped, IPv4-mapped IPv6 (::ffff:a.b.c.d) is unmapped, and the IPv6
//     zone is dropped. [netip.Prefix.Contains] and [netipx.IPSet.Contains] are
//     false for mapped and zoned forms, so without this step an attacker, or
//     a dual-stack listener, aliases a trusted address into an untrusted one.
//     Other IPv6 embeddings are left alone: NAT64 64:ff9b::a.b.c.d and
//     IPv4-compatible ::a.b.c.d stay IPv6 (they are not the IPv4 host).
//  7. Network key: the client masked to a configurable prefix length (IPv4
//     /32 and IPv6 /64 by default), applied after unmapping, so that
//     ::ffff:1.2.3.4 keys as 1.2.3.4/32, not as ::/64.
//  8. Addresses that are never a source. The unspecified address (0.0.0.0,
//     ::), multicast (224.0.0.0/4, ff00::/8) and the limited broadcast
//     255.255.255.255 cannot be the source of a TCP connection: RFC 1122
//     §3.2.1.3 lets 0.0.0.0 be a source only while a host learns its own
//     address and forbids 255.255.255.255 as a source, RFC 4291 §2.5.2
//     restricts :: as 0.0.0.0 is, and §2.7 forbids a multicast source
//     (so does RFC 1112 for IPv4 groups). Keying such an
//     address would put every request that carries it in one bucket, so
//     it is refused after canonicalisation (::ffff:0.0.0.0 is 0.0.0.0, a
//     zone is dropped): as the peer with an error wrapping
//     [ErrMalformedPeer] (reason malformed_peer); reached in a chain or as
//     a single-address value with a [*ChainError] wrapping
//     [ErrMalformedEntry] (reason malformed_entry, verdict malformed,
//     [ChainError.Detail] naming the kind). The check comes before the trusted sets: a set
//     that contains such an address (a broad range, Config.AllowAll) is
//     an artifact of how it was written, not a proxy the request came
//     through, so it neither admits such a peer nor skips such a hop, and
//     a hop count does not count it. Other reserved ranges (the rest of
//     0.0.0.0/8, 240.0.0.0/4) stay addresses: some stacks assign them. A
//     directed broadcast cannot be told from a host address without the
//     subnet's mask, so it is not refused.
//
// # RFC 7239 Forwarded
//
// Forwarded is parsed as RFC 7239 §4 and §6 say: elements separated by
// commas (not those inside quoted strings), pairs by semicolons, parameter
// names case-insensitive, values tokens or quoted strings with quoted-pairs,
// IPv6 only in brackets (hence quoted), optionally with a port or an
// obfuscated port, no zones, no whitespace around ";" or "=". Each element
// reached must have exactly one for parameter; a repeated registered
// parameter (for, by, host, proto) is an error. Elements are split off from
// the right, so like X-Forwarded-For only the elements examined are parsed
// and an attacker's malformed prefix left of the client is never looked at.
// The same chain written as X-Forwarded-For or as Forwarded gives the same
// client, reason and positions (a fuzz target checks it), and the XFF
// spelling of "unknown" and "_xyz" gives the same error (unknown_node).
//
// # Decisions where other implementations diverge
//
//   - Which entry: right to left, first entry not trusted. Taking the
//     leftmost entry (chi RealIP, GHSA-3fxj-6jh8-hvhx and its siblings; gin
//     before trusted proxies, CVE-2020-28483; Caddy's default mode, issue
//     5804) lets the client choose. nginx with real_ip_recursive on, Caddy
//     trusted_proxies_strict and chi ClientIPFromXFF walk as we do; nginx
//     with real_ip_recursive off takes the rightmost entry even when it is
//     a trusted address, where we skip it.
//   - The peer is always checked. chi ClientIPFromXFFTrustedProxies,
//     Envoy's xff_num_trusted_hops, Traefik's ipStrategy (which relies on
//     the entry point's forwardedHeaders having stripped untrusted values)
//     and realclientip-go before its issue 4 fix decide from the header
//     alone, so a client reaching the service directly chooses its
//     address. Here even hop counting requires the peer to be in the
//     rule's From.
//   - Hop unit: Rule.Hops n = chi's numTrustedProxies n = Envoy's
//     xff_num_trusted_hops n (with use_remote_address) = Traefik's depth n:
//     the n-th entry from the right. Unlike all three, entries whose
//     address is in the rule's set are skipped without using up a hop, so
//     a listed load balancer appearing in the chain does not shift the
//     count, and Hops composes with CIDR skipping (Traefik ignores
//     excludedIPs when depth is set).
//   - Every hop trusted (or the chain shorter than Hops): the client is the
//     peer ("all_hops_trusted"). nginx takes the leftmost entry, chi
//     sets no address, Traefik an empty one (and then answers 403). The
//     leftmost entry of a short hop-counted chain can be
//     written by an attacker who bypassed the outer proxy, and "no address"
//     is an outage for health checks; the peer is never attacker-chosen.
//   - Empty list elements ("a,,b", a trailing comma) are not skipped when
//     the walk reaches them: [ErrMalformedEntry]. chi and realclientip-go
//     skip them, and RFC 9110 §5.6.1.2 lets recipients ignore them; but an
//     empty element inside the part of the chain written by trusted hops
//     means a hop that did not say who sent it the request, and counting or
//     classifying past it would step over that hop. An empty element is
//     never counted as a hop. Lines holding only spaces and tabs carry no
//     element and are ignored.
//   - All header lines are merged (Traefik issue 8586, gin, nginx read only
//     the first). A single-address header takes its last line (chi's
//     ClientIPFromHeader does the same); a list in it is malformed.
//   - A trusted peer that sent no forwarding header is reported
//     ("trusted_peer_without_header"), never silently keyed as the proxy, and never
//     turned into an empty address (Traefik issue 7884 answers 403):
//     Config.RejectMissingHeader picks the peer (false, the default, so load balancer
//     health checks keep working) or an error.
//   - Header-name aliases (X_Forwarded_For, X-Forwarded_For) are never read,
//     whatever stack folded them; Config.RejectAliases can also reject requests
//     carrying them.
//   - Unspecified, multicast and broadcast addresses are refused, as peer
//     and as entry (rule 8). realclientip-go refuses the unspecified
//     address too; chi takes 0.0.0.0 or :: as the client, one bucket for
//     every such request.
//   - Ports and brackets in X-Forwarded-For entries are accepted
//     ("[2001:db8::1]:443", "192.0.2.1:5555" as Azure Application Gateway
//     writes); chi parses bare addresses only and fails closed on them.
//     IPv4 with brackets or a zone, and IPv6 with a port but no brackets,
//     are malformed (realclientip-go tolerates some of these).
//   - Shorthands (private_ranges, loopback, link_local, unix) exist only
//     when listed. Caddy's private_ranges includes loopback; ours does not
//     (list both).
//   - Catch-all trust (0.0.0.0/0, ::/0, or ranges whose union covers a
//     family, including through ::ffff:0:0/96) is refused unless
//     Config.AllowAll; gin trusted everyone by default.
//   - Unix-socket peers ("", "@", paths) are accepted only by a rule that
//     lists "unix" (Caddy: trusted_proxies_unix). realclientip-go reads
//     headers from any non-IP peer. An accepted Unix peer that would be the
//     client is an error: a socket has no address to key.
//
// # Trusted sets
//
// Sets are netipx.IPSet values built by [ParseSet] (CIDRs, addresses,
// shorthands), compiled into a sorted interval table searched in O(log n)
// without allocation. A rule's [Source] values ([FileSource], [URLSource], or
// your own through [SourceFunc]) are loaded by [New] and reloaded by
// [Resolver.Refresh] (from a timer or on a signal), which swaps the rule's set atomically and keeps the
// last good set when a load fails. Requests never wait for, or fail
// because of, a refresh.
//
// # Explaining
//
// [Resolver.Resolve] returns the client address and network key with the
// outcome of its [Derivation] (which peer was seen, whether it was trusted
// and by which rule, which header was read, and why the client is what it
// is), without allocating and without any work on the unexamined part of
// a header. [Resolver.Explain] returns the same with the hops listed:
// which were examined, with their verdicts, and which one was chosen;
// given a buffer of [MaxHops] hops it does not allocate either. The debug
// endpoint prints it.
//
// Work per request is bounded: at most [MaxHops] entries are examined and
// at most 64 bytes of any attacker-written value are copied into a
// Derivation or an error; listing the hops also counts the header's
// elements once (linear, vectorised for quote-free lines) to number them.
package trustedproxy
