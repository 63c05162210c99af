package trustedproxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// hdr builds a header whose name has lines in wire order.
func hdr(name string, lines ...string) http.Header {
	return http.Header{http.CanonicalHeaderKey(name): lines}
}

func xff(lines ...string) http.Header { return hdr("X-Forwarded-For", lines...) }

func mustNew(t testing.TB, cfg Config) *Resolver {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return r
}

var (
	cfgXFF10 = Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}}}
	cfgXFFlo = Config{Rules: []Rule{{From: []string{"127.0.0.1"}, Header: "X-Forwarded-For"}}}
	cfgReal  = Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Real-IP"}}}
)

type resolveCase struct {
	name   string
	cfg    Config
	peer   string
	h      http.Header
	client string // "" when an error is expected
	net    string
	want   Derivation // Error is checked for emptiness only (text pinned elsewhere)
	err    error      // sentinel, nil for success
	chain  *ChainError
}

func trusted(pos int, v, a string) Hop {
	return Hop{Position: pos, Value: v, Address: a, Verdict: verdictTrusted}
}
func client(pos int, v, a string) Hop {
	return Hop{Position: pos, Value: v, Address: a, Verdict: verdictClient}
}
func malformed(pos int, v string) Hop {
	return Hop{Position: pos, Value: v, Verdict: verdictMalformed}
}

var resolveCases = []resolveCase{
	// ---- The cases of the issue, verbatim. ----
	{
		name: "issue/untrusted peer, forged XFF ignored",
		cfg:  cfgXFF10, peer: "203.0.113.9:41000", h: xff("1.2.3.4, 10.0.0.1"),
		client: "203.0.113.9", net: "203.0.113.9/32",
		want: Derivation{Peer: "203.0.113.9", Chosen: -1, Reason: reasonPeerUntrusted},
	},
	{
		name: "issue/mapped trusted entry, all hops trusted -> peer",
		cfg:  cfgXFF10, peer: "10.0.0.2:41000", h: xff("::ffff:10.0.0.5, 10.0.0.1"),
		client: "10.0.0.2", net: "10.0.0.2/32",
		want: Derivation{Peer: "10.0.0.2", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonAllHopsTrusted,
			Hops: []Hop{trusted(1, "10.0.0.1", "10.0.0.1"), trusted(0, "::ffff:10.0.0.5", "10.0.0.5")}},
	},
	{
		name: "issue/two XFF lines merged in wire order",
		cfg:  cfgXFFlo, peer: "127.0.0.1:5000", h: xff("1.2.3.4, 127.0.0.1", "5.6.7.8"),
		client: "5.6.7.8", net: "5.6.7.8/32",
		want: Derivation{Peer: "127.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 0, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{client(2, "5.6.7.8", "5.6.7.8")}},
	},
	{
		name: "issue/entry with port",
		cfg:  cfgXFF10, peer: "10.0.0.1:80", h: xff("198.51.100.7:5555"),
		client: "198.51.100.7", net: "198.51.100.7/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 0, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{client(0, "198.51.100.7:5555", "198.51.100.7")}},
	},
	{
		name: "issue/garbage reached -> ChainError",
		cfg:  cfgXFF10, peer: "10.0.0.9:80", h: xff("203.0.113.7, garbage, 10.0.0.1"),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Forwarded-For", Position: 1, Value: "garbage", Err: ErrMalformedEntry},
		want: Derivation{Peer: "10.0.0.9", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonMalformedEntry,
			Hops: []Hop{trusted(2, "10.0.0.1", "10.0.0.1"), malformed(1, "garbage")}},
	},

	// ---- Merging lines. ----
	{
		name: "lines/second line trusted, walk continues into first line",
		cfg:  cfgXFFlo, peer: "127.0.0.1:5000", h: xff("1.2.3.4, 127.0.0.1", "127.0.0.1"),
		client: "1.2.3.4", net: "1.2.3.4/32",
		want: Derivation{Peer: "127.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 2, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{trusted(2, "127.0.0.1", "127.0.0.1"), trusted(1, "127.0.0.1", "127.0.0.1"), client(0, "1.2.3.4", "1.2.3.4")}},
	},
	{
		name: "lines/blank lines contribute no element",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff("1.2.3.4", " \t", "", "10.0.0.2"),
		client: "1.2.3.4", net: "1.2.3.4/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 1, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{trusted(1, "10.0.0.2", "10.0.0.2"), client(0, "1.2.3.4", "1.2.3.4")}},
	},
	{
		name: "lines/only the examined suffix matters, garbage on the left is fine",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff("garbage, ,,unknown", "1.2.3.4, 10.0.0.2"),
		client: "1.2.3.4", net: "1.2.3.4/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 1, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{trusted(5, "10.0.0.2", "10.0.0.2"), client(4, "1.2.3.4", "1.2.3.4")}},
	},
	{
		name: "lines/spaces and tabs trimmed",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff("\t1.2.3.4 ,\t10.0.0.2\t "),
		client: "1.2.3.4", net: "1.2.3.4/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 1, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{trusted(1, "10.0.0.2", "10.0.0.2"), client(0, "1.2.3.4", "1.2.3.4")}},
	},
	{
		name: "lines/non-canonical header key in map is not read (as net/http)",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: http.Header{"x-forwarded-for": {"1.2.3.4"}},
		client: "10.0.0.1", net: "10.0.0.1/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonHeaderAbsent},
	},

	// ---- Empty elements and malformed entries: fail closed. ----
	{
		name: "empty/element between commas reached -> error",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff("1.2.3.4,,10.0.0.2"),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Forwarded-For", Position: 1, Value: "", Err: ErrMalformedEntry},
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonMalformedEntry,
			Hops: []Hop{trusted(2, "10.0.0.2", "10.0.0.2"), malformed(1, "")}},
	},
	{
		name: "empty/trailing comma -> error at the last position",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff("1.2.3.4, "),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Forwarded-For", Position: 1, Value: "", Err: ErrMalformedEntry},
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonMalformedEntry,
			Hops: []Hop{malformed(1, "")}},
	},
	{
		name: "empty/leading comma never reached",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff(", 1.2.3.4"),
		client: "1.2.3.4", net: "1.2.3.4/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 0, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{client(1, "1.2.3.4", "1.2.3.4")}},
	},
	{
		name: "empty/only a comma -> error",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff(","),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Forwarded-For", Position: 1, Value: "", Err: ErrMalformedEntry},
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonMalformedEntry,
			Hops: []Hop{malformed(1, "")}},
	},
	{
		// "unknown" (RFC 7239 §6 spelling, also written by Squid) is
		// errUnknownNode, which is still errors.Is ErrMalformedEntry.
		name: "malformed/unknown right of a trusted hop",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff("1.2.3.4, unknown"),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Forwarded-For", Position: 1, Value: "unknown", Err: errUnknownNode},
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonUnknownNode,
			Hops: []Hop{{Position: 1, Value: "unknown", Verdict: verdictUnknown}}},
	},
	{
		name: "malformed/IPv4 with zone",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff("1.2.3.4%eth0"),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Forwarded-For", Position: 0, Value: "1.2.3.4%eth0", Err: ErrMalformedEntry},
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonMalformedEntry,
			Hops: []Hop{malformed(0, "1.2.3.4%eth0")}},
	},
	{
		name: "malformed/value truncated to 64 bytes",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff(strings.Repeat("x", 100)),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Forwarded-For", Position: 0, Value: strings.Repeat("x", 64), Err: ErrMalformedEntry},
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonMalformedEntry,
			Hops: []Hop{malformed(0, strings.Repeat("x", 64))}},
	},

	// ---- Canonicalisation: mapped, zoned, bracketed, ported, upper case. ----
	{
		name: "canon/mapped peer is the trusted IPv4 address",
		cfg:  cfgXFF10, peer: "[::ffff:10.0.0.1]:80", h: xff("1.2.3.4"),
		client: "1.2.3.4", net: "1.2.3.4/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 0, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{client(0, "1.2.3.4", "1.2.3.4")}},
	},
	{
		name: "canon/mapped untrusted peer keys as IPv4 /32, not ::/64",
		cfg:  cfgXFF10, peer: "[::ffff:203.0.113.9]:80", h: xff("1.2.3.4"),
		client: "203.0.113.9", net: "203.0.113.9/32",
		want: Derivation{Peer: "203.0.113.9", Chosen: -1, Reason: reasonPeerUntrusted},
	},
	{
		name: "canon/zoned peer is the trusted link-local address",
		cfg:  Config{Rules: []Rule{{From: []string{"fe80::1"}, Header: "X-Forwarded-For"}}}, peer: "[fe80::1%eth0]:80", h: xff("2001:db8::7"),
		client: "2001:db8::7", net: "2001:db8::/64",
		want: Derivation{Peer: "fe80::1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 0, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{client(0, "2001:db8::7", "2001:db8::7")}},
	},
	{
		name: "canon/zoned and mapped entries are trusted hops, not clients",
		cfg:  Config{Rules: []Rule{{From: []string{"10.0.0.0/8", "fe80::/10"}, Header: "X-Forwarded-For"}}}, peer: "10.0.0.1:1",
		h:      xff("198.51.100.1, fe80::2%eth1, [::ffff:10.0.0.9]:443"),
		client: "198.51.100.1", net: "198.51.100.1/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 2, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{trusted(2, "[::ffff:10.0.0.9]:443", "10.0.0.9"), trusted(1, "fe80::2%eth1", "fe80::2"), client(0, "198.51.100.1", "198.51.100.1")}},
	},
	{
		name: "canon/mapped client is reported unmapped",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff("::ffff:198.51.100.1"),
		client: "198.51.100.1", net: "198.51.100.1/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 0, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{client(0, "::ffff:198.51.100.1", "198.51.100.1")}},
	},
	{
		name: "canon/bracketed IPv6 with and without port",
		cfg:  Config{Rules: []Rule{{From: []string{"2001:db8:ffff::/48"}, Header: "X-Forwarded-For"}}}, peer: "[2001:db8:ffff::1]:443",
		h:      xff("[2001:db8::1], [2001:db8:ffff::2]:80"),
		client: "2001:db8::1", net: "2001:db8::/64",
		want: Derivation{Peer: "2001:db8:ffff::1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 1, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{trusted(1, "[2001:db8:ffff::2]:80", "2001:db8:ffff::2"), client(0, "[2001:db8::1]", "2001:db8::1")}},
	},
	{
		name: "canon/IPv6 upper case peer and entries",
		cfg:  Config{Rules: []Rule{{From: []string{"2001:DB8:FFFF::/48"}, Header: "X-Forwarded-For"}}}, peer: "[2001:DB8:FFFF::1]:443",
		h:      xff("2001:DB8:0:0:1::ABCD, 2001:DB8:FFFF::2"),
		client: "2001:db8::1:0:0:abcd", net: "2001:db8::/64",
		want: Derivation{Peer: "2001:db8:ffff::1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 1, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{trusted(1, "2001:DB8:FFFF::2", "2001:db8:ffff::2"), client(0, "2001:DB8:0:0:1::ABCD", "2001:db8::1:0:0:abcd")}},
	},
	{
		name: "canon/bare peer addresses accepted",
		cfg:  cfgXFF10, peer: "10.0.0.1", h: xff("1.2.3.4"),
		client: "1.2.3.4", net: "1.2.3.4/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 0, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{client(0, "1.2.3.4", "1.2.3.4")}},
	},
	{
		name: "canon/bare IPv6 peer",
		cfg:  Config{Rules: []Rule{{From: []string{"::1"}, Header: "X-Forwarded-For"}}}, peer: "::1", h: xff("1.2.3.4"),
		client: "1.2.3.4", net: "1.2.3.4/32",
		want: Derivation{Peer: "::1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 0, Reason: reasonFirstUntrustedHop,
			Hops: []Hop{client(0, "1.2.3.4", "1.2.3.4")}},
	},

	// ---- Peer gate, header configuration, absent header. ----
	{
		name: "gate/zero config trusts nobody, not even loopback",
		cfg:  Config{}, peer: "127.0.0.1:1", h: xff("1.2.3.4"),
		client: "127.0.0.1", net: "127.0.0.1/32",
		want: Derivation{Peer: "127.0.0.1", Chosen: -1, Reason: reasonPeerUntrusted},
	},
	{
		name: "gate/trusted peer, no header configured",
		cfg:  Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}}}}, peer: "10.0.0.1:1", h: xff("1.2.3.4"),
		client: "10.0.0.1", net: "10.0.0.1/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Chosen: -1, Reason: reasonNoHeaderConfigured},
	},
	{
		name: "gate/trusted peer without the header is reported",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: http.Header{},
		client: "10.0.0.1", net: "10.0.0.1/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonHeaderAbsent},
	},
	{
		name: "gate/trusted peer with an empty header is reported",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff(" "),
		client: "10.0.0.1", net: "10.0.0.1/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonHeaderAbsent},
	},
	{
		name: "gate/nil header map",
		cfg:  cfgXFF10, peer: "10.0.0.1:1", h: nil,
		client: "10.0.0.1", net: "10.0.0.1/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: -1, Reason: reasonHeaderAbsent},
	},
	{
		// Unix-socket peers are ErrMalformedPeer and also errUnixPeer,
		// with their own reason.
		name: "gate/unix peer @ without opt-in",
		cfg:  cfgXFF10, peer: "@", h: xff("1.2.3.4"),
		err:  errUnixPeer,
		want: Derivation{Peer: "@", Chosen: -1, Reason: reasonUnixPeerUntrusted},
	},
	{
		name: "gate/empty (unnamed unix) peer without opt-in",
		cfg:  cfgXFF10, peer: "", h: xff("1.2.3.4"),
		err:  ErrMalformedPeer,
		want: Derivation{Peer: "", Chosen: -1, Reason: reasonUnixPeerUntrusted},
	},
	{
		name: "gate/host name peer",
		cfg:  cfgXFF10, peer: "localhost:80", h: xff("1.2.3.4"),
		err:  ErrMalformedPeer,
		want: Derivation{Peer: "localhost:80", Chosen: -1, Reason: reasonMalformedPeer},
	},
	{
		name: "gate/peer port out of range",
		cfg:  cfgXFF10, peer: "10.0.0.1:65536", h: xff("1.2.3.4"),
		err:  ErrMalformedPeer,
		want: Derivation{Peer: "10.0.0.1:65536", Chosen: -1, Reason: reasonMalformedPeer},
	},

	// ---- Single-address headers. ----
	{
		name: "single/untrusted peer's forged X-Real-IP ignored",
		cfg:  cfgReal, peer: "203.0.113.9:1", h: hdr("X-Real-IP", "10.0.0.7"),
		client: "203.0.113.9", net: "203.0.113.9/32",
		want: Derivation{Peer: "203.0.113.9", Chosen: -1, Reason: reasonPeerUntrusted},
	},
	{
		name: "single/trusted peer's X-Real-IP is the client",
		cfg:  cfgReal, peer: "10.0.0.1:1", h: hdr("X-Real-IP", "198.51.100.7"),
		client: "198.51.100.7", net: "198.51.100.7/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Real-Ip", Chosen: 0, Reason: reasonSingleAddressHeader,
			Hops: []Hop{client(0, "198.51.100.7", "198.51.100.7")}},
	},
	{
		name: "single/last line wins",
		cfg:  cfgReal, peer: "10.0.0.1:1", h: hdr("X-Real-IP", "1.1.1.1", "2.2.2.2"),
		client: "2.2.2.2", net: "2.2.2.2/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Real-Ip", Chosen: 0, Reason: reasonSingleAddressHeader,
			Hops: []Hop{client(1, "2.2.2.2", "2.2.2.2")}},
	},
	{
		name: "single/value's own trust is not checked",
		cfg:  cfgReal, peer: "10.0.0.1:1", h: hdr("X-Real-IP", "10.0.0.7"),
		client: "10.0.0.7", net: "10.0.0.7/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Real-Ip", Chosen: 0, Reason: reasonSingleAddressHeader,
			Hops: []Hop{client(0, "10.0.0.7", "10.0.0.7")}},
	},
	{
		name: "single/bracketed IPv6 with port",
		cfg:  Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "CF-Connecting-IP"}}}, peer: "10.0.0.1:1", h: hdr("CF-Connecting-IP", " [2001:DB8::1]:443 "),
		client: "2001:db8::1", net: "2001:db8::/64",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "Cf-Connecting-Ip", Chosen: 0, Reason: reasonSingleAddressHeader,
			Hops: []Hop{client(0, "[2001:DB8::1]:443", "2001:db8::1")}},
	},
	{
		name: "single/a list is malformed",
		cfg:  cfgReal, peer: "10.0.0.1:1", h: hdr("X-Real-IP", "1.2.3.4, 5.6.7.8"),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Real-Ip", Position: 0, Value: "1.2.3.4, 5.6.7.8", Err: ErrMalformedEntry},
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Real-Ip", Chosen: -1, Reason: reasonMalformedEntry,
			Hops: []Hop{malformed(0, "1.2.3.4, 5.6.7.8")}},
	},
	{
		name: "single/a comma hidden in a zone is malformed",
		cfg:  cfgReal, peer: "10.0.0.1:1", h: hdr("X-Real-IP", "fe80::1%a,b"),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Real-Ip", Position: 0, Value: "fe80::1%a,b", Err: ErrMalformedEntry},
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Real-Ip", Chosen: -1, Reason: reasonMalformedEntry,
			Hops: []Hop{malformed(0, "fe80::1%a,b")}},
	},
	{
		name: "single/empty last line after a value is malformed",
		cfg:  cfgReal, peer: "10.0.0.1:1", h: hdr("X-Real-IP", "1.2.3.4", ""),
		err: ErrMalformedEntry, chain: &ChainError{Header: "X-Real-Ip", Position: 1, Value: "", Err: ErrMalformedEntry},
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Real-Ip", Chosen: -1, Reason: reasonMalformedEntry,
			Hops: []Hop{malformed(1, "")}},
	},
	{
		name: "single/absent",
		cfg:  cfgReal, peer: "10.0.0.1:1", h: xff("1.2.3.4"),
		client: "10.0.0.1", net: "10.0.0.1/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Real-Ip", Chosen: -1, Reason: reasonHeaderAbsent},
	},
	{
		name: "single/empty",
		cfg:  cfgReal, peer: "10.0.0.1:1", h: hdr("X-Real-IP", ""),
		client: "10.0.0.1", net: "10.0.0.1/32",
		want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Real-Ip", Chosen: -1, Reason: reasonHeaderAbsent},
	},

	// ---- Network keys. ----
	{
		name: "network/IPv6 default /64",
		cfg:  Config{}, peer: "[2001:db8:1:2:3:4:5:6]:1",
		client: "2001:db8:1:2:3:4:5:6", net: "2001:db8:1:2::/64",
		want: Derivation{Peer: "2001:db8:1:2:3:4:5:6", Chosen: -1, Reason: reasonPeerUntrusted},
	},
	{
		name: "network/custom IPv4 /24",
		cfg:  Config{IPv4Prefix: 24, IPv6Prefix: 48}, peer: "198.51.100.77:1",
		client: "198.51.100.77", net: "198.51.100.0/24",
		want: Derivation{Peer: "198.51.100.77", Chosen: -1, Reason: reasonPeerUntrusted},
	},
	{
		name: "network/custom IPv6 /48",
		cfg:  Config{IPv4Prefix: 24, IPv6Prefix: 48}, peer: "[2001:db8:1:2:3:4:5:6]:1",
		client: "2001:db8:1:2:3:4:5:6", net: "2001:db8:1::/48",
		want: Derivation{Peer: "2001:db8:1:2:3:4:5:6", Chosen: -1, Reason: reasonPeerUntrusted},
	},
	{
		name: "network/mapped client masked as IPv4 with custom prefix",
		cfg:  Config{IPv4Prefix: 16, IPv6Prefix: 32}, peer: "[::ffff:198.51.100.77]:1",
		client: "198.51.100.77", net: "198.51.0.0/16",
		want: Derivation{Peer: "198.51.100.77", Chosen: -1, Reason: reasonPeerUntrusted},
	},
	{
		name: "network/IPv6 /128",
		cfg:  Config{IPv6Prefix: 128}, peer: "[2001:db8::1]:1",
		client: "2001:db8::1", net: "2001:db8::1/128",
		want: Derivation{Peer: "2001:db8::1", Chosen: -1, Reason: reasonPeerUntrusted},
	},
}

func TestResolve(t *testing.T) {
	for _, tc := range resolveCases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, tc.cfg)
			checkResolve(t, r, tc)
		})
	}
}

func checkResolve(t *testing.T, r *Resolver, tc resolveCase) {
	t.Helper()
	got, err := r.Explain(tc.peer, tc.h, nil)
	if tc.err == nil {
		if err != nil {
			t.Fatalf("Resolve: unexpected error %v", err)
		}
		if got.Client != netip.MustParseAddr(tc.client) {
			t.Errorf("Client = %v, want %v", got.Client, tc.client)
		}
		if got.Network != netip.MustParsePrefix(tc.net) {
			t.Errorf("Network = %v, want %v", got.Network, tc.net)
		}
		if got.Derivation.Error != "" {
			t.Errorf("Derivation.Error = %q, want empty", got.Derivation.Error)
		}
	} else {
		if !errors.Is(err, tc.err) {
			t.Fatalf("Resolve error = %v, want errors.Is %v", err, tc.err)
		}
		if got.Client.IsValid() || got.Network.IsValid() {
			t.Errorf("on error got Client %v Network %v, want zero", got.Client, got.Network)
		}
		if got.Derivation.Error != err.Error() {
			t.Errorf("Derivation.Error = %q, want %q", got.Derivation.Error, err.Error())
		}
		var ce *ChainError
		if errors.As(err, &ce) != (tc.chain != nil) {
			t.Fatalf("errors.As(*ChainError) = %v, want %v (err %v)", ce != nil, tc.chain != nil, err)
		}
		if tc.chain != nil && *ce != *tc.chain {
			t.Errorf("ChainError = %+v, want %+v", *ce, *tc.chain)
		}
	}
	d := got.Derivation
	d.Error = ""
	want := tc.want
	if want.Rule == 0 && !want.PeerTrusted {
		// The cases use one rule: Rule is 0 when the peer is
		// trusted and -1 otherwise, unless the case says.
		want.Rule = -1
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Derivation\n got %+v\nwant %+v", d, want)
	}
}

func TestResolveNilAndZeroResolver(t *testing.T) {
	want := Derivation{Peer: "10.0.0.1", Rule: -1, Chosen: -1, Reason: reasonPeerUntrusted}
	for name, r := range map[string]*Resolver{"nil": nil, "zero": {}} {
		got, err := r.Explain("10.0.0.1:80", xff("1.2.3.4"), nil)
		if err != nil || got.Client != netip.MustParseAddr("10.0.0.1") || got.Network != netip.MustParsePrefix("10.0.0.1/32") || !reflect.DeepEqual(got.Derivation, want) {
			t.Errorf("%s Resolver: got %+v, %v", name, got, err)
		}
		if r.header() != "" || r.trusts(netip.MustParseAddr("127.0.0.1")) {
			t.Errorf("%s Resolver: Header %q, trusts loopback %v", name, r.header(), r.trusts(netip.MustParseAddr("127.0.0.1")))
		}
		got, _ = r.Explain("[2001:db8::1]:80", nil, nil)
		if got.Network != netip.MustParsePrefix("2001:db8::/64") {
			t.Errorf("%s Resolver: IPv6 network %v, want default /64", name, got.Network)
		}
	}
}

// chain returns n comma-separated copies of entry.
func chain(entry string, n int) string {
	return strings.TrimSuffix(strings.Repeat(entry+", ", n), ", ")
}

func TestResolveMaxHops(t *testing.T) {
	r := mustNew(t, cfgXFF10)

	// Exactly MaxHops trusted entries: all examined, client = peer.
	got, err := r.Explain("10.0.0.1:1", xff(chain("10.0.0.2", MaxHops)), nil)
	if err != nil || got.Derivation.Reason != reasonAllHopsTrusted || len(got.Derivation.Hops) != MaxHops || got.Client != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("%d trusted hops: got %v hops, reason %q, err %v", MaxHops, len(got.Derivation.Hops), got.Derivation.Reason, err)
	}

	// MaxHops trusted entries right of the client: the client would be the
	// 33rd entry examined -> too long, fail closed.
	got, err = r.Explain("10.0.0.1:1", xff("1.2.3.4, "+chain("10.0.0.2", MaxHops)), nil)
	var ce *ChainError
	if !errors.Is(err, ErrChainTooLong) || !errors.As(err, &ce) {
		t.Fatalf("client after %d trusted hops: err %v, want ErrChainTooLong", MaxHops, err)
	}
	if want := (ChainError{Header: "X-Forwarded-For", Position: 0, Value: "1.2.3.4", Err: ErrChainTooLong}); *ce != want {
		t.Errorf("ChainError = %+v, want %+v", *ce, want)
	}
	if got.Client.IsValid() || got.Derivation.Reason != reasonChainTooLong || len(got.Derivation.Hops) != MaxHops || got.Derivation.Chosen != -1 {
		t.Errorf("too long: client %v reason %q hops %d chosen %d", got.Client, got.Derivation.Reason, len(got.Derivation.Hops), got.Derivation.Chosen)
	}

	// One hop fewer: the client is the 32nd entry examined.
	got, err = r.Explain("10.0.0.1:1", xff("1.2.3.4, "+chain("10.0.0.2", MaxHops-1)), nil)
	if err != nil || got.Client != netip.MustParseAddr("1.2.3.4") || got.Derivation.Chosen != MaxHops-1 {
		t.Errorf("client after %d trusted hops: got %v chosen %d err %v", MaxHops-1, got.Client, got.Derivation.Chosen, err)
	}

	// A long attacker-written prefix left of the client is never examined.
	got, err = r.Explain("10.0.0.1:1", xff(chain("garbage", 10000)+", 1.2.3.4, 10.0.0.2"), nil)
	if err != nil || got.Client != netip.MustParseAddr("1.2.3.4") || got.Derivation.Hops[1].Position != 10000 {
		t.Errorf("long garbage prefix: got %+v err %v", got, err)
	}
}

func TestChainErrorText(t *testing.T) {
	r := mustNew(t, cfgXFF10)
	_, err := r.Explain("10.0.0.9:80", xff("203.0.113.7, garbage\n, 10.0.0.1"), nil)
	const want = `trustedproxy: malformed forwarding entry: X-Forwarded-For position 1 "garbage\n"`
	if err == nil || err.Error() != want {
		t.Errorf("error text = %q, want %q", err, want)
	}
	_, err = r.Explain("not an address", nil, nil)
	const wantPeer = `trustedproxy: malformed peer address "not an address"`
	if err == nil || err.Error() != wantPeer {
		t.Errorf("peer error text = %q, want %q", err, wantPeer)
	}
	// The peer value is truncated too.
	res, err := r.Explain(strings.Repeat("p", 200), nil, nil)
	if !errors.Is(err, ErrMalformedPeer) || res.Derivation.Peer != strings.Repeat("p", 64) || strings.Count(err.Error(), "p") > 64+2 {
		t.Errorf("long peer: Peer %q err %v", res.Derivation.Peer, err)
	}
}

func TestDerivationJSON(t *testing.T) {
	r := mustNew(t, cfgXFF10)
	res, err := r.Explain("10.0.0.9:80", xff("203.0.113.7, [::ffff:10.1.2.3]:80, 10.0.0.1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res.Derivation)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"peer":"10.0.0.9","peer_trusted":true,"rule":0,"header":"X-Forwarded-For","hops":[` +
		`{"position":2,"value":"10.0.0.1","address":"10.0.0.1","verdict":"trusted"},` +
		`{"position":1,"value":"[::ffff:10.1.2.3]:80","address":"10.1.2.3","verdict":"trusted"},` +
		`{"position":0,"value":"203.0.113.7","address":"203.0.113.7","verdict":"client"}],` +
		`"chosen":2,"reason":"first_untrusted_hop"}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}

	res, err = r.Explain("10.0.0.9:80", xff("bad"), nil)
	if err == nil {
		t.Fatal("want error")
	}
	b, _ = json.Marshal(res.Derivation)
	const wantErr = `{"peer":"10.0.0.9","peer_trusted":true,"rule":0,"header":"X-Forwarded-For","hops":[` +
		`{"position":0,"value":"bad","verdict":"malformed"}],"chosen":-1,"reason":"malformed_entry",` +
		`"error":"trustedproxy: malformed forwarding entry: X-Forwarded-For position 0 \"bad\""}`
	if string(b) != wantErr {
		t.Errorf("JSON\n got %s\nwant %s", b, wantErr)
	}
}

// TestResolveDoesNotModifyHeader: Resolve only reads h.
func TestResolveDoesNotModifyHeader(t *testing.T) {
	r := mustNew(t, cfgXFF10)
	h := xff(" 1.2.3.4 , 10.0.0.2 ", "10.0.0.3")
	before := h.Clone()
	if _, err := r.Explain("10.0.0.1:1", h, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h, before) {
		t.Errorf("header modified: %v -> %v", before, h)
	}
}

// TestResolveConcurrent: one Resolver, one header map, many goroutines
// (run with -race). The Resolver is immutable and Resolve only reads h.
func TestResolveConcurrent(t *testing.T) {
	r := mustNew(t, cfgXFF10)
	h := xff("198.51.100.1, [::ffff:10.0.0.3]:80", "10.0.0.2")
	done := make(chan struct{})
	for g := 0; g < 8; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 500; i++ {
				res, err := r.Explain("10.0.0.1:1", h, nil)
				if err != nil || res.Client != netip.MustParseAddr("198.51.100.1") || res.Derivation.Chosen != 2 {
					t.Errorf("got %+v, %v", res, err)
					return
				}
			}
		}()
	}
	for g := 0; g < 8; g++ {
		<-done
	}
}
