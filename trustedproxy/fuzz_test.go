package trustedproxy

import (
	"errors"
	"net/http"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The fuzz configuration. fuzzTrustedCanonical is the same set written out
// by hand in canonical form, for the reference implementation.
var (
	fuzzTrusted          = []string{"10.0.0.0/8", "127.0.0.1", "2001:db8::/32", "::ffff:192.168.0.0/112", "fe80::1%eth0"}
	fuzzTrustedCanonical = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("127.0.0.1/32"),
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("fe80::1/128"),
	}
)

// refParse is the slow, obviously correct reading of one address: try the
// standard library's parsers on the documented forms, then canonicalise.
func refParse(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return a.Unmap().WithZone(""), true
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || len(s)-strings.LastIndex(s, ":")-1 > 5 { // at most 5 port digits
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

// refUnknown reports whether v is RFC 7239's "unknown" (any case) or an
// obfuscated node, by regular expression.
func refUnknown(v string) bool {
	return refUnknownRE.MatchString(v)
}

var refUnknownRE = regexp.MustCompile(`^(?i:unknown)$|^_[A-Za-z0-9._-]+$`)

// refNonSourcePrefixes are the addresses no connection can come from,
// written out by hand (canonical forms only: refParse unmaps): unspecified,
// multicast, limited broadcast.
var refNonSourcePrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/32"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("255.255.255.255/32"),
}

// refNonSource reports whether the canonical a is refused as a source.
func refNonSource(a netip.Addr) bool {
	for _, p := range refNonSourcePrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func refTrusted(a netip.Addr) bool {
	for _, p := range fuzzTrustedCanonical {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

type refResult struct {
	client netip.Addr
	reason string
	err    error // sentinel
	pos    int   // position of the chosen or failing entry, -1 for none
}

// refResolve implements the rules with strings.Split and no cleverness.
func refResolve(header, peer string, lines []string) refResult {
	p, ok := refParse(peer)
	if !ok {
		if peer == "" || peer[0] == '@' || peer[0] == '/' {
			return refResult{reason: reasonUnixPeerUntrusted, err: errUnixPeer, pos: -1}
		}
		return refResult{reason: reasonMalformedPeer, err: ErrMalformedPeer, pos: -1}
	}
	if refNonSource(p) { // before the gate: trust cannot make it a sender
		return refResult{reason: reasonMalformedPeer, err: errNonSourcePeer, pos: -1}
	}
	if !refTrusted(p) {
		return refResult{client: p, reason: reasonPeerUntrusted, pos: -1}
	}
	if header == "" {
		return refResult{client: p, reason: reasonNoHeaderConfigured, pos: -1}
	}
	var nonEmpty []string
	for _, l := range lines {
		if strings.Trim(l, " \t") != "" {
			nonEmpty = append(nonEmpty, l)
		}
	}
	if len(nonEmpty) == 0 {
		return refResult{client: p, reason: reasonHeaderAbsent, pos: -1}
	}
	if header != "X-Forwarded-For" {
		last := len(lines) - 1
		v := strings.Trim(lines[last], " \t")
		a, ok := refParse(v)
		if strings.Contains(v, ",") || !ok {
			if !strings.Contains(v, ",") && refUnknown(v) {
				return refResult{reason: reasonUnknownNode, err: errUnknownNode, pos: last}
			}
			return refResult{reason: reasonMalformedEntry, err: ErrMalformedEntry, pos: last}
		}
		if refNonSource(a) {
			return refResult{reason: reasonMalformedEntry, err: errNonSourceEntry, pos: last}
		}
		return refResult{client: a, reason: reasonSingleAddressHeader, pos: last}
	}
	entries := strings.Split(strings.Join(nonEmpty, ","), ",")
	examined := 0
	for i := len(entries) - 1; i >= 0; i-- {
		if examined == MaxHops {
			return refResult{reason: reasonChainTooLong, err: ErrChainTooLong, pos: i}
		}
		examined++
		v := strings.Trim(entries[i], " \t")
		a, ok := refParse(v)
		if !ok {
			if refUnknown(v) {
				return refResult{reason: reasonUnknownNode, err: errUnknownNode, pos: i}
			}
			return refResult{reason: reasonMalformedEntry, err: ErrMalformedEntry, pos: i}
		}
		if refNonSource(a) { // before the trusted set
			return refResult{reason: reasonMalformedEntry, err: errNonSourceEntry, pos: i}
		}
		if !refTrusted(a) {
			return refResult{client: a, reason: reasonFirstUntrustedHop, pos: i}
		}
	}
	return refResult{client: p, reason: reasonAllHopsTrusted, pos: -1}
}

// FuzzResolve cross-checks Explain against refResolve, and Resolve against
// Explain, and asserts the
// invariants: no panic; the client is the peer or an entry of the chain;
// the client is canonical; Network contains Client; the Derivation is
// consistent; attacker-controlled values stay within 64 bytes.
//
// Inputs: the peer (RemoteAddr), the header value with lines separated by
// '\n', and a mode selecting the configured header (0 X-Forwarded-For,
// 1 X-Real-IP, 2 none). Seeds live in testdata/fuzz/FuzzResolve.
func FuzzResolve(f *testing.F) {

	resolvers := [3]*Resolver{
		mustNew(f, Config{Rules: []Rule{{From: fuzzTrusted, Header: "X-Forwarded-For"}}, IPv4Prefix: 24, IPv6Prefix: 56}),
		mustNew(f, Config{Rules: []Rule{{From: fuzzTrusted, Header: "X-Real-IP"}}}),
		mustNew(f, Config{Rules: []Rule{{From: fuzzTrusted}}}),
	}
	headers := [3]string{"X-Forwarded-For", "X-Real-Ip", ""}
	bits4 := [3]int{24, 32, 32}
	bits6 := [3]int{56, 64, 64}

	f.Fuzz(func(t *testing.T, peer, value string, mode byte) {
		m := int(mode % 3)
		r := resolvers[m]
		var h http.Header
		lines := strings.Split(value, "\n")
		if headers[m] != "" && value != "" {
			h = http.Header{headers[m]: lines}
		} else {
			lines = nil
		}

		got, err := r.Explain(peer, h, nil)
		want := refResolve(headers[m], peer, lines)
		d := got.Derivation
		if fast, err2 := r.Resolve(peer, h); !reflect.DeepEqual(fast, withoutHops(got)) || errorName(err2) != errorName(err) {
			t.Fatalf("Resolve(%q, %q) = %+v, %v; Explain without its hops %+v, %v", peer, lines, fast, err2, withoutHops(got), err)
		}

		// Agreement with the reference.
		if !errors.Is(err, want.err) || (err == nil) != (want.err == nil) || errorName(err) != errorName(want.err) {
			t.Fatalf("Resolve(%q, %q) error %v, reference %v", peer, lines, err, want.err)
		}
		if got.Client != want.client {
			t.Fatalf("Resolve(%q, %q) client %v, reference %v", peer, lines, got.Client, want.client)
		}
		if d.Reason != want.reason {
			t.Fatalf("Resolve(%q, %q) reason %q, reference %q", peer, lines, d.Reason, want.reason)
		}
		var ce *ChainError
		if errors.As(err, &ce) {
			if ce.Position != want.pos || len(ce.Value) > maxValueLen || ce.Header != headers[m] {
				t.Fatalf("ChainError %+v, reference position %d", ce, want.pos)
			}
		}
		if d.Chosen >= 0 && d.Hops[d.Chosen].Position != want.pos {
			t.Fatalf("chosen position %d, reference %d", d.Hops[d.Chosen].Position, want.pos)
		}

		// Invariants independent of the reference.
		if len(d.Peer) > maxValueLen {
			t.Fatalf("Peer has %d bytes", len(d.Peer))
		}
		for i, hop := range d.Hops {
			if len(hop.Value) > maxValueLen {
				t.Fatalf("hop %d value has %d bytes", i, len(hop.Value))
			}
			if i > 0 && hop.Position >= d.Hops[i-1].Position {
				t.Fatalf("hops not in walk order: %+v", d.Hops)
			}
			if (hop.Verdict == verdictMalformed || hop.Verdict == verdictUnknown) != (hop.Address == "") {
				t.Fatalf("hop %+v: address and verdict disagree", hop)
			}
		}
		if len(d.Hops) > MaxHops {
			t.Fatalf("%d hops examined", len(d.Hops))
		}
		if err != nil {
			if got.Client.IsValid() || got.Network.IsValid() || d.Error != err.Error() || d.Chosen != -1 {
				t.Fatalf("error result %+v", got)
			}
			return
		}
		c := got.Client
		if !c.IsValid() || c.Is4In6() || c.Zone() != "" {
			t.Fatalf("client %v not canonical", c)
		}
		if refNonSource(c) {
			t.Fatalf("client %v can never be a source", c)
		}
		bits := bits6[m]
		if c.Is4() {
			bits = bits4[m]
		}
		if !got.Network.Contains(c) || got.Network.Bits() != bits || got.Network != got.Network.Masked() {
			t.Fatalf("network %v for client %v", got.Network, c)
		}
		if !d.PeerTrusted && (d.Header != "" || d.Hops != nil) {
			t.Fatalf("untrusted peer but header read: %+v", d)
		}
		// The client is the peer or an address the chain contained.
		p, _ := refParse(peer)
		if d.Chosen == -1 {
			if c != p || d.Peer != p.String() {
				t.Fatalf("client %v is not the peer %v", c, p)
			}
		} else {
			hop := d.Hops[d.Chosen]
			if hop.Verdict != verdictClient || hop.Address != c.String() || d.Chosen != len(d.Hops)-1 {
				t.Fatalf("chosen hop %+v for client %v", hop, c)
			}
			found := false
			for _, l := range lines {
				for _, e := range strings.Split(l, ",") {
					if a, ok := refParse(strings.Trim(e, " \t")); ok && a == c {
						found = true
					}
				}
			}
			if !found {
				t.Fatalf("client %v not in chain %q", c, lines)
			}
		}
	})
}
