package trustedproxy

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"go4.org/netipx"
)

// MaxHops is the most entries of a list header one resolution examines. A
// chain needing more (every entry examined so far trusted) fails closed with
// [ErrChainTooLong]. Real deployments have a handful of proxies (CDN, load
// balancer, ingress); 32 leaves ample room while bounding the work and the
// size of a [Derivation] per request. Entries left of the client are never
// examined and do not count.
const MaxHops = 32

// Resolver derives client addresses. Build it with [New]; it is immutable
// after construction and safe for concurrent use by any number of
// goroutines. To reload configuration, build a new Resolver and swap a
// pointer to it atomically.
//
// The zero Resolver, and a nil *Resolver, behave as New(Config{}): they trust
// nobody and read no header, so every client is its TCP peer.
type Resolver struct {
	set    *netipx.IPSet // canonical trusted addresses; nil trusts nobody
	header string        // canonical header name, "" for none
	list   bool          // header is X-Forwarded-For
	v4bits int           // network-key prefix lengths; 0 means default
	v6bits int
}

var zeroResolver Resolver

// Header returns the canonical name of the configured forwarding header, or
// "" when none is read.
func (r *Resolver) Header() string {
	if r == nil {
		return ""
	}
	return r.header
}

// Trusts reports whether a, canonicalised first (unmapped, zone dropped), is
// in the trusted set. An invalid address is never trusted. So
// Trusts(::ffff:10.0.0.1) == Trusts(10.0.0.1) and Trusts(fe80::1%eth0) ==
// Trusts(fe80::1), whatever form the configuration used.
func (r *Resolver) Trusts(a netip.Addr) bool {
	if r == nil || r.set == nil || !a.IsValid() {
		return false
	}
	// netipx.IPSet.Contains is false for zoned and mapped forms (the set
	// holds canonical ranges only); canonicalise or aliases escape.
	return r.set.Contains(canonical(a))
}

// Resolve derives the client of a request from its TCP peer and headers.
//
// remoteAddr is the peer as in http.Request.RemoteAddr ("192.0.2.1:5678",
// "[2001:db8::1]:443"); a bare address ("192.0.2.1", "2001:db8::1",
// "[2001:db8::1]") is accepted too. h is the request header; it is only read
// when the peer is trusted, and never modified.
//
// The rules, in order (see the package documentation):
//   - peer unparsable: error wrapping [ErrMalformedPeer] ([ReasonMalformedPeer]);
//   - peer untrusted: client = peer ([ReasonPeerUntrusted]), no header read;
//   - no header configured: client = peer ([ReasonNoHeaderConfigured]);
//   - header absent or only spaces/tabs: client = peer ([ReasonHeaderAbsent]);
//   - X-Forwarded-For: lines merged in wire order, walked right to left;
//     the first untrusted entry is the client ([ReasonFirstUntrustedHop]);
//     every entry trusted: client = peer ([ReasonAllHopsTrusted]); a
//     malformed entry reached, including an empty element ("a,,b", a
//     trailing comma): [*ChainError] wrapping [ErrMalformedEntry]; more than
//     [MaxHops] entries to examine: [*ChainError] wrapping [ErrChainTooLong];
//   - single-address header: the last line, which must be exactly one
//     address (a comma or empty value is a [*ChainError] wrapping
//     [ErrMalformedEntry]), is the client ([ReasonSingleAddressHeader]).
//
// Empty elements: RFC 9110 §5.6.1 lets recipients ignore empty list
// elements, but an empty element reached in a chain that trusted proxies
// wrote is a corrupted chain, and skipping it would let the walk step over a
// hop, so it fails closed. Lines holding only spaces and tabs are a
// different matter: they carry no element at all and are ignored.
//
// On success, Result.Client is canonical and Result.Network contains it. On
// error, Result.Client and Result.Network are zero and Result.Derivation
// explains the failure (Error set, Chosen -1); the caller must fail closed
// (for instance answer 400), never fall back to the peer.
//
// The common path allocates only the Hops slice when a list header is
// walked, plus one string per examined address written in a non-canonical
// form (port, brackets, mapped, upper case, zone).
func (r *Resolver) Resolve(remoteAddr string, h http.Header) (Result, error) {
	if r == nil {
		r = &zeroResolver
	}
	d := Derivation{Chosen: -1}

	peer, text, ok := parseEntry(remoteAddr)
	if !ok {
		d.Peer = truncate(remoteAddr)
		return fail(d, ReasonMalformedPeer, fmt.Errorf("%w %q", ErrMalformedPeer, d.Peer))
	}
	d.Peer = addrText(peer, text)

	// Gate on the TCP peer: the only address the client cannot choose.
	d.PeerTrusted = r.Trusts(peer)
	if !d.PeerTrusted {
		d.Reason = ReasonPeerUntrusted
		return r.result(peer, d), nil
	}
	if r.header == "" {
		d.Reason = ReasonNoHeaderConfigured
		return r.result(peer, d), nil
	}
	d.Header = r.header
	// r.header is canonical, so indexing the map finds exactly what
	// h.Values(r.header) would, without re-canonicalising the key.
	lines := h[r.header]
	if r.list {
		return r.walk(peer, lines, d)
	}
	return r.single(peer, lines, d)
}

// walk resolves a list header (X-Forwarded-For) sent by a trusted peer.
//
// The lines are one list in wire order (RFC 9110 §5.3: several field lines
// are equivalent to one line joined with commas), so line k's elements are
// left of line k+1's. Lines holding only spaces and tabs contribute no
// element. The elements are parsed in place from the right: no split, no
// copy. Positions count from the left, so they are computed from a first
// pass that counts elements.
func (r *Resolver) walk(peer netip.Addr, lines []string, d Derivation) (Result, error) {
	total := 0
	for _, l := range lines {
		if l = trimOWS(l); l != "" {
			total += strings.Count(l, ",") + 1
		}
	}
	if total == 0 {
		d.Reason = ReasonHeaderAbsent
		return r.result(peer, d), nil
	}
	d.Hops = make([]Hop, 0, min(total, 8))

	pos := total
	for li := len(lines) - 1; li >= 0; li-- {
		rest := trimOWS(lines[li])
		if rest == "" {
			continue
		}
		for {
			pos--
			comma := strings.LastIndexByte(rest, ',')
			raw := trimOWS(rest[comma+1:])
			if len(d.Hops) == MaxHops {
				return fail(d, ReasonChainTooLong, &ChainError{Header: d.Header, Position: pos, Value: truncate(raw), Err: ErrChainTooLong})
			}
			a, text, ok := parseEntry(raw)
			if !ok {
				// Fail closed: skipping the entry would let whoever wrote
				// it choose the next one as the client, and falling back
				// to the peer would key every client of the proxy alike.
				d.Hops = append(d.Hops, Hop{Position: pos, Value: truncate(raw), Verdict: VerdictMalformed})
				return fail(d, ReasonMalformedEntry, &ChainError{Header: d.Header, Position: pos, Value: truncate(raw), Err: ErrMalformedEntry})
			}
			hop := Hop{Position: pos, Value: truncate(raw), Address: addrText(a, text)}
			if !r.set.Contains(a) { // a is canonical (parseEntry)
				hop.Verdict = VerdictClient
				d.Hops = append(d.Hops, hop)
				d.Chosen = len(d.Hops) - 1
				d.Reason = ReasonFirstUntrustedHop
				return r.result(a, d), nil
			}
			hop.Verdict = VerdictTrusted
			d.Hops = append(d.Hops, hop)
			if comma < 0 {
				break
			}
			rest = rest[:comma]
		}
	}
	// Every entry is a trusted proxy. The leftmost entry is no more than
	// another proxy's claim, so the documented choice is the peer.
	d.Reason = ReasonAllHopsTrusted
	return r.result(peer, d), nil
}

// single resolves a single-address header sent by a trusted peer: the last
// line wins (a proxy that appends rather than replaces puts its value last),
// and must hold exactly one address. Its trust is not checked: it names the
// client.
func (r *Resolver) single(peer netip.Addr, lines []string, d Derivation) (Result, error) {
	present := false
	for _, l := range lines {
		if trimOWS(l) != "" {
			present = true
			break
		}
	}
	if !present {
		d.Reason = ReasonHeaderAbsent
		return r.result(peer, d), nil
	}
	pos := len(lines) - 1
	raw := trimOWS(lines[pos])
	a, text, ok := netip.Addr{}, "", false
	if strings.IndexByte(raw, ',') < 0 { // a list here is malformed, even via a zone
		a, text, ok = parseEntry(raw)
	}
	if !ok {
		d.Hops = []Hop{{Position: pos, Value: truncate(raw), Verdict: VerdictMalformed}}
		return fail(d, ReasonMalformedEntry, &ChainError{Header: d.Header, Position: pos, Value: truncate(raw), Err: ErrMalformedEntry})
	}
	d.Hops = []Hop{{Position: pos, Value: truncate(raw), Address: addrText(a, text), Verdict: VerdictClient}}
	d.Chosen = 0
	d.Reason = ReasonSingleAddressHeader
	return r.result(a, d), nil
}

// result returns the successful Result for the canonical client c. The
// network key is taken after unmapping (c is canonical), so an IPv4 client
// reached over a dual-stack socket keys as IPv4/32, not as ::/64.
func (r *Resolver) result(c netip.Addr, d Derivation) Result {
	bits := r.v6bits
	if bits == 0 {
		bits = DefaultIPv6Prefix
	}
	if c.Is4() {
		bits = r.v4bits
		if bits == 0 {
			bits = DefaultIPv4Prefix
		}
	}
	return Result{Client: c, Network: netip.PrefixFrom(c, bits).Masked(), Derivation: d}
}

// fail returns the failed Result for err: no client, the derivation so far
// with its reason and error text.
func fail(d Derivation, reason Reason, err error) (Result, error) {
	d.Reason = reason
	d.Chosen = -1
	d.Error = err.Error()
	return Result{Derivation: d}, err
}
