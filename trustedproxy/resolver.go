package trustedproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"go4.org/netipx"
)

// MaxHops is the most entries of a list header one resolution examines. A
// chain needing more (every entry examined so far trusted) fails closed with
// [ErrChainTooLong]. Real deployments have a handful of proxies (CDN, load
// balancer, ingress); 32 leaves ample room while bounding the work and the
// size of a [Derivation] per request. Entries left of the client are never
// examined and do not count. It is also the largest [Rule.Hops], and a
// hop buffer of this capacity makes [Resolver.Explain] allocation-free.
const MaxHops = 32

// Resolver derives client addresses. Build it with [New]. Its configuration
// (rules, headers, prefix lengths, actions) is immutable after
// construction; the trusted sets of rules with Sources are replaced
// atomically by [Resolver.Refresh]. Every method is safe for concurrent use
// by any number of goroutines, Refresh included: a resolution sees, per
// rule, either the old or the new set, never a mix. To change the
// configuration itself, build a new Resolver and swap a pointer to it
// atomically.
//
// The zero Resolver, and a nil *Resolver, behave as New(Config{}): they trust
// nobody and read no header, so every client is its TCP peer.
type Resolver struct {
	rules         []*rule
	v4bits        int // network-key prefix lengths; 0 means default
	v6bits        int
	rejectMissing bool
	rejectAliases bool
	allowAll      bool
	refreshMu     sync.Mutex // serialises Refresh
}

// headerKind says how a rule's header is read.
type headerKind uint8

const (
	kindNone      headerKind = iota // no header: the peer is the client
	kindXFF                         // X-Forwarded-For list
	kindForwarded                   // RFC 7239 Forwarded list
	kindSingle                      // single-address header
)

// rule is a compiled Rule.
type rule struct {
	header  string
	kind    headerKind
	hops    int  // >= 1
	unix    bool // accepts Unix-socket peers
	static  *netipx.IPSet
	sources []Source
	label   string                  // "rules[i].sources", for errors
	cur     atomic.Pointer[ruleSet] // current set: static ∪ sources
}

// ruleSet is one immutable version of a rule's trusted set.
type ruleSet struct {
	set *netipx.IPSet
	tab table
}

var zeroResolver Resolver

// header returns the canonical name of the forwarding header of the first
// rule, or "" when none is read.
func (r *Resolver) header() string {
	if r == nil || len(r.rules) == 0 {
		return ""
	}
	return r.rules[0].header
}

// trusts reports whether a, canonicalised first (unmapped, zone dropped), is
// in the current trusted set of some rule, that is, whether a peer with
// that address would be treated as a trusted proxy. An invalid address is
// never trusted. So trusts(::ffff:10.0.0.1) == trusts(10.0.0.1) and
// trusts(fe80::1%eth0) == trusts(fe80::1), whatever form the configuration
// used.
func (r *Resolver) trusts(a netip.Addr) bool {
	if r == nil || !a.IsValid() {
		return false
	}
	// netipx.IPSet.Contains is false for zoned and mapped forms (the set
	// holds canonical ranges only); canonicalise or aliases escape.
	a = canonical(a)
	for _, ru := range r.rules {
		if rs := ru.cur.Load(); rs != nil && rs.tab.contains(a) {
			return true
		}
	}
	return false
}

// trustedSet returns the current trusted set of rule i (index into
// Config.Rules), or nil when there is no such rule. The set is immutable; a
// later Refresh replaces it rather than changing it.
func (r *Resolver) trustedSet(i int) *netipx.IPSet {
	if r == nil || i < 0 || i >= len(r.rules) {
		return nil
	}
	if rs := r.rules[i].cur.Load(); rs != nil {
		return rs.set
	}
	return nil
}

// Refresh reloads every [Source] of every rule and swaps in the new sets.
// Per rule it is all or nothing: when one of the rule's sources fails,
// returns a nil or empty set, or the union covers every address of a
// family without Config.AllowAll, that rule keeps its last good set.
// Requests are never failed by a refresh and never wait for one. The error
// is an errors.Join of one error per failing source, each naming its rule
// (nil when every rule with sources was refreshed, including when there
// are none).
//
// Refresh serialises with itself; run it from a timer or on a signal. ctx
// bounds the loads. A timer, in its own goroutine:
//
//	t := time.NewTicker(time.Hour)
//	defer t.Stop()
//	for {
//		select {
//		case <-ctx.Done():
//			return
//		case <-t.C:
//			if err := res.Refresh(ctx); err != nil {
//				logger.Warn("trusted ranges", "err", err)
//			}
//		}
//	}
func (r *Resolver) Refresh(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	var errs []error
	for _, ru := range r.rules {
		if len(ru.sources) == 0 {
			continue
		}
		set, err := ru.load(ctx, r.allowAll)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ru.cur.Store(&ruleSet{set: set, tab: newTable(set)})
	}
	return errors.Join(errs...)
}

// Resolve derives the client of a request from its TCP peer and headers:
// the canonical client address and its network key (client masked to
// Config.IPv4Prefix or Config.IPv6Prefix by its family after unmapping, so
// Network.Contains(Client) is always true), and the [Derivation]'s outcome:
// the peer, whether it is trusted, the rule, the header and the reason (on
// error, Error too), but not the examined hops (Hops nil, Chosen -1).
// [Resolver.Explain] returns the same Result and error with the hops
// listed.
//
// remoteAddr is the peer as in http.Request.RemoteAddr ("192.0.2.1:5678",
// "[2001:db8::1]:443"); a bare address ("192.0.2.1", "2001:db8::1",
// "[2001:db8::1]") is accepted too, and so are Unix-socket peers ("",
// "@...", "/...") for rules listing "unix". h is the request header; it is
// only read when the peer matches a rule, and never modified.
//
// The rules, in order (see the package documentation); the reason named is
// the Derivation.Reason reported:
//   - peer unparsable: error wrapping [ErrMalformedPeer] (reason
//     malformed_peer); a peer no connection can come from (unspecified,
//     multicast, 255.255.255.255), whatever the rules trust: also an error
//     wrapping ErrMalformedPeer, its text saying "not a source address"
//     (malformed_peer); a Unix-socket peer no rule accepts: an error
//     wrapping ErrMalformedPeer, its text saying "Unix-socket peer"
//     (unix_peer_untrusted);
//   - no rule matches the peer: client = peer ("peer_untrusted"), no
//     header read;
//   - the first matching rule names no header: client = peer
//     ("no_header_configured");
//   - Config.RejectAliases and an alias of the header present: error
//     wrapping [ErrHeaderAlias] (header_alias);
//   - header absent or only spaces/tabs ("trusted_peer_without_header"): client =
//     peer, or error [ErrMissingHeader] with Config.RejectMissingHeader;
//   - list header (X-Forwarded-For, Forwarded): lines merged in wire order,
//     walked right to left; entries in the rule's set are skipped; the
//     client is the entry that uses up the rule's Hops
//     ("first_untrusted_hop", or "hop_count" when Hops >= 2);
//     every entry trusted: client = peer ("all_hops_trusted"); an entry
//     that is not an address reached, including an empty element and an
//     RFC 7239 element breaking the grammar: [*ChainError] wrapping
//     [ErrMalformedEntry] (malformed_entry; unknown_node for "unknown" and obfuscated nodes; an unspecified,
//     multicast or broadcast address, checked before the trusted set, is
//     malformed, ChainError.Detail naming the kind); more than [MaxHops]
//     entries to examine: [*ChainError] wrapping [ErrChainTooLong]
//     (chain_too_long);
//   - single-address header: the last line, which must be exactly one
//     address that can be a source (otherwise a [*ChainError] wrapping
//     [ErrMalformedEntry]), is the client ("single_address_header").
//
// When a rule accepting a Unix-socket peer ends in "client = peer", the
// result is instead an error wrapping [ErrMalformedPeer] whose text says
// "Unix-socket peer": a socket has no address.
//
// On error Client and Network are zero; the caller must fail closed (for
// instance answer 400), never fall back to the peer.
//
// Resolve is the fast path: it does no work proportional to the part of a
// header left of the client (it counts a list header's elements only to
// fill in [ChainError.Position] on failure) and allocates nothing on
// success when the peer address is written canonically, as net/http's
// RemoteAddr always is (otherwise Derivation.Peer is a new string). Errors
// allocate. Safe for concurrent use.
func (r *Resolver) Resolve(remoteAddr string, h http.Header) (Result, error) {
	return r.derive(remoteAddr, h, nil, false)
}

// Explain is [Resolver.Resolve] with the full [Derivation]: the same
// Result and error (errors.Is and errors.As behave identically), plus the
// examined hops with their verdicts and the chosen hop. The debug endpoint
// prints it. Safe for concurrent use.
//
// On success, Result.Client is canonical and Result.Network contains it. On
// error, Result.Client and Result.Network are zero and Result.Derivation
// explains the failure (Error set, Chosen -1).
//
// buf is the buffer for the hop list; it may be nil. Derivation.Hops is
// buf[:n] when n hops were examined (nil when none), and the returned
// Derivation aliases buf: reuse buf only once the Result is no longer
// needed. Cost: when a list header is walked, Explain allocates the hop
// list unless cap(buf) >= n (always, with cap(buf) >= [MaxHops]), plus one
// string per examined address whose canonical text is not a substring of
// what was written (upper-case or zero-padded IPv6; ports, brackets, zones
// and the ::ffff: prefix cost nothing), and counts the header's elements to
// number them (one pass, vectorised for X-Forwarded-For and quote-free
// Forwarded lines). So with such a buffer and canonically written
// addresses Explain allocates nothing on success.
func (r *Resolver) Explain(remoteAddr string, h http.Header, buf []Hop) (Result, error) {
	return r.derive(remoteAddr, h, buf, true)
}

// derive is Resolve, and with explain Explain, listing the hops into buf.
func (r *Resolver) derive(remoteAddr string, h http.Header, buf []Hop, explain bool) (Result, error) {
	if r == nil {
		r = &zeroResolver
	}
	d := Derivation{Chosen: -1, Rule: -1}
	if buf != nil {
		d.Hops = buf[:0:cap(buf)]
	}
	c, err := r.resolve(remoteAddr, h, &d, explain)
	if len(d.Hops) == 0 {
		d.Hops = nil
	}
	if err != nil {
		d.Chosen = -1
		d.Error = err.Error()
		return Result{Derivation: d}, err
	}
	return Result{Client: c, Network: r.network(c), Derivation: d}, nil
}

// network returns the network key of the canonical client c. The key is
// taken after unmapping (c is canonical), so an IPv4 client reached over a
// dual-stack socket keys as IPv4/32, not as ::/64.
func (r *Resolver) network(c netip.Addr) netip.Prefix {
	bits := r.v6bits
	if bits == 0 {
		bits = defaultIPv6Prefix
	}
	if c.Is4() {
		bits = r.v4bits
		if bits == 0 {
			bits = defaultIPv4Prefix
		}
	}
	return netip.PrefixFrom(c, bits).Masked()
}

// isUnixPeer reports whether remoteAddr is how net/http reports a peer on a
// Unix-domain socket: "" (unnamed), "@" or "@name" (Linux abstract), or a
// filesystem path.
func isUnixPeer(remoteAddr string) bool {
	return remoteAddr == "" || remoteAddr[0] == '@' || remoteAddr[0] == '/'
}

// unixPeerError is the error for Unix-socket peers; it matches both
// errUnixPeer and ErrMalformedPeer.
type unixPeerError struct{ peer, why string }

func (e *unixPeerError) Error() string {
	return fmt.Sprintf("%v %q %s", errUnixPeer, e.peer, e.why)
}

func (e *unixPeerError) Is(target error) bool {
	return target == errUnixPeer || target == ErrMalformedPeer
}

// resolve runs the rules. It always sets d's scalar fields and, when
// explain, appends the examined hops to d.Hops with their positions;
// without explain it skips everything that only serves the hop list.
func (r *Resolver) resolve(remoteAddr string, h http.Header, d *Derivation, explain bool) (netip.Addr, error) {
	var (
		ru   *rule
		rs   *ruleSet
		unix bool
	)
	var (
		peer netip.Addr
		text string
		ok   bool
	)
	if !isUnixPeer(remoteAddr) { // none of those forms is an address; skip netip's error
		peer, text, ok = parseEntry(remoteAddr)
	}
	switch {
	case ok:
		d.Peer = addrText(peer, text)
		if why := nonSource(peer); why != "" {
			// Checked before the gate: no rule can make such a peer
			// the sender, even one whose set happens to contain it.
			d.Reason = reasonMalformedPeer
			return netip.Addr{}, fmt.Errorf("%w %q: %s", errNonSourcePeer, d.Peer, why)
		}
		for i, x := range r.rules {
			if s := x.cur.Load(); s != nil && s.tab.contains(peer) { // peer is canonical
				ru, rs, d.Rule = x, s, i
				break
			}
		}
		if ru == nil {
			// Gate on the TCP peer: the only address the client cannot
			// choose. No header is read.
			d.Reason = reasonPeerUntrusted
			return peer, nil
		}
	case isUnixPeer(remoteAddr):
		d.Peer = truncate(remoteAddr)
		unix = true
		for i, x := range r.rules {
			if x.unix {
				ru, rs, d.Rule = x, x.cur.Load(), i
				break
			}
		}
		if ru == nil {
			d.Reason = reasonUnixPeerUntrusted
			return netip.Addr{}, &unixPeerError{peer: d.Peer, why: `is trusted by no rule (list "unix" in a rule's From to accept it)`}
		}
	default:
		d.Peer = truncate(remoteAddr)
		d.Reason = reasonMalformedPeer
		return netip.Addr{}, fmt.Errorf("%w %q", ErrMalformedPeer, d.Peer)
	}
	d.PeerTrusted = true
	if ru.kind == kindNone {
		d.Reason = reasonNoHeaderConfigured
		return usePeer(peer, unix, d)
	}
	d.Header = ru.header
	if r.rejectAliases {
		if alias := findAlias(h, ru.header); alias != "" {
			d.Reason = reasonHeaderAlias
			return netip.Addr{}, fmt.Errorf("%w: %q present while reading %s", ErrHeaderAlias, truncate(alias), ru.header)
		}
	}
	// ru.header is canonical, so indexing the map finds exactly what
	// h.Values(ru.header) would, without re-canonicalising the key.
	lines := h[ru.header]
	if ru.kind == kindSingle {
		return r.single(peer, unix, lines, d, explain)
	}
	return r.walk(ru, rs, peer, unix, lines, d, explain)
}

// usePeer returns the peer as the client; a Unix-socket peer has no
// address, so that is an error.
func usePeer(peer netip.Addr, unix bool, d *Derivation) (netip.Addr, error) {
	if unix {
		return netip.Addr{}, &unixPeerError{peer: d.Peer, why: "has no address to use as the client (reason " + string(d.Reason) + ")"}
	}
	return peer, nil
}

// absent handles a trusted peer that sent no value in its rule's header.
func (r *Resolver) absent(peer netip.Addr, unix bool, d *Derivation) (netip.Addr, error) {
	d.Reason = reasonHeaderAbsent
	if r.rejectMissing {
		return netip.Addr{}, fmt.Errorf("%w: %s", ErrMissingHeader, d.Header)
	}
	return usePeer(peer, unix, d)
}

// present reports whether some line holds more than spaces and tabs.
func present(lines []string) bool {
	for _, l := range lines {
		if trimOWS(l) != "" {
			return true
		}
	}
	return false
}

// countElems returns the number of list elements in the lines of a list
// header, as the walk splits them. Lines holding only spaces and tabs
// contribute none.
func countElems(lines []string, fwd bool) int {
	total := 0
	for _, l := range lines {
		if l = trimOWS(l); l == "" {
			continue
		}
		if fwd {
			total += forwardedSeparators(l) + 1
		} else {
			total += strings.Count(l, ",") + 1
		}
	}
	return total
}

// walk resolves a list header sent by a trusted peer.
//
// The lines are one list in wire order (RFC 9110 §5.3: several field lines
// are equivalent to one line joined with commas), so line k's elements are
// left of line k+1's. Lines holding only spaces and tabs contribute no
// element. Elements are split off from the right in place: no split, no
// copy. Positions count from the left; k counts elements from the right,
// and the position is total-1-k, total being counted up front when
// explaining and only on failure otherwise.
func (r *Resolver) walk(ru *rule, rs *ruleSet, peer netip.Addr, unix bool, lines []string, d *Derivation, explain bool) (netip.Addr, error) {
	if !present(lines) {
		return r.absent(peer, unix, d)
	}
	fwd := ru.kind == kindForwarded
	total := -1
	if explain {
		total = countElems(lines, fwd)
		if cap(d.Hops) == 0 {
			d.Hops = make([]Hop, 0, min(total, 8))
		}
	}
	budget := ru.hops
	k := 0 // elements examined so far
	for li := len(lines) - 1; li >= 0; li-- {
		rest := trimOWS(lines[li])
		if rest == "" {
			continue
		}
		for more := true; more; k++ {
			var elem string
			if fwd {
				elem, rest, more = lastForwardedElem(rest)
			} else {
				elem, rest, more = lastXFFElem(rest)
			}
			elem = trimOWS(elem)
			if k == MaxHops {
				return fail(d, reasonChainTooLong, &ChainError{Header: d.Header, Position: position(total, lines, fwd, k), Value: truncate(elem), Err: ErrChainTooLong})
			}
			value, detail := elem, ""
			var (
				a    netip.Addr
				text string
				kind nodeKind
			)
			if fwd {
				value, a, text, kind, detail = classifyForwarded(elem)
			} else {
				a, text, kind = classifyXFF(elem)
			}
			kind, detail, sentinel := checkSource(a, kind, detail)
			if kind != nodeAddr {
				return refuse(d, position(total, lines, fwd, k), value, detail, kind, sentinel, explain)
			}
			verdict := verdictTrusted
			if !rs.tab.contains(a) { // a is canonical
				budget--
				verdict = verdictCounted
				if budget == 0 {
					verdict = verdictClient
				}
			}
			if explain {
				d.Hops = append(d.Hops, Hop{Position: total - 1 - k, Value: truncate(value), Address: addrText(a, text), Verdict: verdict})
			}
			if verdict == verdictClient {
				return choose(ru, a, d, explain), nil
			}
		}
	}
	// Every entry is a trusted proxy (by address or by count). The
	// documented choice is the peer, never the leftmost entry.
	d.Reason = reasonAllHopsTrusted
	return usePeer(peer, unix, d)
}

// lastXFFElem splits the rightmost element off one X-Forwarded-For line
// (OWS not trimmed): elem is the text right of the last comma, rest the
// text left of it, more whether there was a comma. (lastForwardedElem is
// its Forwarded counterpart.)
func lastXFFElem(line string) (elem, rest string, more bool) {
	comma := strings.LastIndexByte(line, ',')
	if comma < 0 {
		return line, "", false
	}
	return line[comma+1:], line[:comma], true
}

// position is the position, counted from the left, of the element k places
// from the right of lines; total is their number of elements, or -1 when
// not counted yet (a resolution without Explain counts them only on
// failure).
func position(total int, lines []string, fwd bool, k int) int {
	if total < 0 {
		total = countElems(lines, fwd)
	}
	return total - 1 - k
}

// classifyForwarded reads one Forwarded element (OWS trimmed). value is
// what the Derivation shows: the raw value of the element's for parameter,
// or the whole element when it breaks the grammar. detail says what is
// wrong, when more can be said than "malformed".
func classifyForwarded(elem string) (value string, a netip.Addr, text string, kind nodeKind, detail string) {
	raw, detail := forwardedFor(elem)
	if detail != "" {
		return elem, netip.Addr{}, "", nodeMalformed, detail
	}
	node, ok := unquoteNode(raw)
	if !ok {
		return raw, netip.Addr{}, "", nodeMalformed, "node too long"
	}
	a, text, kind = parseNode(node)
	return raw, a, text, kind, ""
}

// checkSource makes an address no connection can come from (unspecified,
// multicast, broadcast) a malformed entry, before any trust check: no
// proxy, listed or not, can have received the request from it. It returns
// the entry's kind and detail, and the sentinel its error wraps if it is
// refused.
func checkSource(a netip.Addr, kind nodeKind, detail string) (nodeKind, string, error) {
	if kind == nodeAddr {
		if why := nonSource(a); why != "" {
			return nodeMalformed, why, errNonSourceEntry
		}
	}
	return kind, detail, ErrMalformedEntry
}

// refuse fails the resolution on an entry that is not an address (kind
// nodeMalformed or nodeUnknown) at position pos, recording it as a hop
// when explaining. Fail closed: skipping the entry would let whoever wrote
// it choose the next one as the client, and falling back to the peer would
// key every client of the proxy alike.
func refuse(d *Derivation, pos int, value, detail string, kind nodeKind, sentinel error, explain bool) (netip.Addr, error) {
	verdict, reason := verdictMalformed, reasonMalformedEntry
	if kind == nodeUnknown {
		verdict, reason, sentinel = verdictUnknown, reasonUnknownNode, errUnknownNode
	}
	if explain {
		d.Hops = append(d.Hops, Hop{Position: pos, Value: truncate(value), Verdict: verdict})
	}
	return fail(d, reason, &ChainError{Header: d.Header, Position: pos, Value: truncate(value), Detail: detail, Err: sentinel})
}

// choose records the hop just appended (when explaining) as the client of
// a list header and the reason, and returns a.
func choose(ru *rule, a netip.Addr, d *Derivation, explain bool) netip.Addr {
	if explain {
		d.Chosen = len(d.Hops) - 1
	}
	d.Reason = reasonFirstUntrustedHop
	if ru.hops > 1 {
		d.Reason = reasonHopCount
	}
	return a
}

// single resolves a single-address header sent by a trusted peer: the last
// line wins (a proxy that appends rather than replaces puts its value last),
// and must hold exactly one address. Its trust is not checked: it names the
// client. An address no connection can come from is refused like garbage.
func (r *Resolver) single(peer netip.Addr, unix bool, lines []string, d *Derivation, explain bool) (netip.Addr, error) {
	if !present(lines) {
		return r.absent(peer, unix, d)
	}
	pos := len(lines) - 1
	raw := trimOWS(lines[pos])
	a, text, kind := netip.Addr{}, "", nodeMalformed
	if strings.IndexByte(raw, ',') < 0 { // a list here is malformed, even via a zone
		a, text, kind = classifyXFF(raw)
	}
	kind, detail, sentinel := checkSource(a, kind, "")
	if kind != nodeAddr {
		return refuse(d, pos, raw, detail, kind, sentinel, explain)
	}
	if explain {
		d.Hops = append(d.Hops, Hop{Position: pos, Value: truncate(raw), Address: addrText(a, text), Verdict: verdictClient})
		d.Chosen = len(d.Hops) - 1
	}
	d.Reason = reasonSingleAddressHeader
	return a, nil
}

// fail records reason and returns err.
func fail(d *Derivation, reason string, err error) (netip.Addr, error) {
	d.Reason = reason
	d.Chosen = -1
	return netip.Addr{}, err
}

// findAlias returns the smallest (for a deterministic report) key of h other
// than canonical that equals canonical once both are lower-cased with '_'
// read as '-', or "" when there is none.
func findAlias(h http.Header, canonical string) string {
	alias := ""
	for k := range h {
		if len(k) != len(canonical) || k == canonical || !foldHeader(k, canonical) {
			continue
		}
		if alias == "" || k < alias {
			alias = k
		}
	}
	return alias
}

// foldHeader compares equal-length header names ignoring ASCII case and
// the difference between '_' and '-'.
func foldHeader(a, b string) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if x != y {
			return false
		}
	}
	return true
}
