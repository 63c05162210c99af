package trustedproxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"testing"
)

// The addresses no connection can come from, each in the spelling the
// peer, an X-Forwarded-For entry, a Forwarded for= value and a
// single-address header would use, with what the resolver must report.
var nonSourceRows = []struct {
	peer      string // as http.Request.RemoteAddr
	canonical string // Derivation.Peer
	entry     string // X-Forwarded-For entry and X-Real-IP value
	forwarded string // RFC 7239 for= value, as written
	detail    string // ChainError.Detail
}{
	{"0.0.0.0:1234", "0.0.0.0", "0.0.0.0:1234", `"0.0.0.0:1234"`, "unspecified address"},
	{"[::]:1", "::", "[::]:1", `"[::]:1"`, "unspecified address"},
	{"224.0.0.1", "224.0.0.1", "224.0.0.1", "224.0.0.1", "multicast address"},
	{"[ff02::1]", "ff02::1", "[ff02::1]", `"[ff02::1]"`, "multicast address"},
	{"255.255.255.255", "255.255.255.255", "255.255.255.255", "255.255.255.255", "limited broadcast address"},
	{"[::ffff:0.0.0.0]:80", "0.0.0.0", "::ffff:0.0.0.0", `"[::ffff:0.0.0.0]"`, "unspecified address"},
}

// TestNonSourcePeer: such a peer is a malformed peer ([errNonSourcePeer]),
// refused before any rule is consulted, so no header is read, even when a
// rule's set contains the address.
func TestNonSourcePeer(t *testing.T) {
	catchAll := Config{Rules: []Rule{{From: []string{"0.0.0.0/0", "::/0"}, Header: "X-Forwarded-For"}}, AllowAll: true}
	for _, row := range nonSourceRows {
		for name, cfg := range map[string]Config{"untrusted": cfgXFF10, "trusted by AllowAll": catchAll} {
			t.Run(row.peer+"/"+name, func(t *testing.T) {
				checkResolve(t, mustNew(t, cfg), resolveCase{
					peer: row.peer, h: xff("203.0.113.7"),
					err:  errNonSourcePeer,
					want: Derivation{Peer: row.canonical, Rule: -1, Chosen: -1, Reason: reasonMalformedPeer},
				})
			})
		}
	}
}

// TestNonSourceEntry: reached as an entry of a list header or as the value
// of a single-address header, such an address is a malformed entry
// ([errNonSourceEntry]): the resolution fails closed, never skipping it and
// never falling back to the peer.
func TestNonSourceEntry(t *testing.T) {
	cfgFwd := Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "Forwarded"}}}
	for _, row := range nonSourceRows {
		cases := []resolveCase{
			{
				name: "X-Forwarded-For alone",
				cfg:  cfgXFF10, h: xff(row.entry),
				chain: &ChainError{Header: "X-Forwarded-For", Position: 0, Value: row.entry, Detail: row.detail, Err: errNonSourceEntry},
				want: Derivation{Header: "X-Forwarded-For", Reason: reasonMalformedEntry,
					Hops: []Hop{malformed(0, row.entry)}},
			},
			{
				name: "X-Forwarded-For between client and proxy",
				cfg:  cfgXFF10, h: xff("203.0.113.7, "+row.entry, "10.0.0.2"),
				chain: &ChainError{Header: "X-Forwarded-For", Position: 1, Value: row.entry, Detail: row.detail, Err: errNonSourceEntry},
				want: Derivation{Header: "X-Forwarded-For", Reason: reasonMalformedEntry,
					Hops: []Hop{trusted(2, "10.0.0.2", "10.0.0.2"), malformed(1, row.entry)}},
			},
			{
				name: "Forwarded",
				cfg:  cfgFwd, h: hdr("Forwarded", "for=203.0.113.7, for="+row.forwarded+";proto=https"),
				chain: &ChainError{Header: "Forwarded", Position: 1, Value: row.forwarded, Detail: row.detail, Err: errNonSourceEntry},
				want: Derivation{Header: "Forwarded", Reason: reasonMalformedEntry,
					Hops: []Hop{malformed(1, row.forwarded)}},
			},
			{
				name: "X-Real-IP",
				cfg:  cfgReal, h: hdr("X-Real-IP", "203.0.113.7", " "+row.entry+"\t"),
				chain: &ChainError{Header: "X-Real-Ip", Position: 1, Value: row.entry, Detail: row.detail, Err: errNonSourceEntry},
				want: Derivation{Header: "X-Real-Ip", Reason: reasonMalformedEntry,
					Hops: []Hop{malformed(1, row.entry)}},
			},
		}
		for _, tc := range cases {
			t.Run(row.entry+"/"+tc.name, func(t *testing.T) {
				tc.peer, tc.err = "10.0.0.1:1", errNonSourceEntry
				tc.want.Peer, tc.want.PeerTrusted, tc.want.Chosen = "10.0.0.1", true, -1
				checkResolve(t, mustNew(t, tc.cfg), tc)
			})
		}
	}
}

// TestNonSourceTrustedHop: a hop is checked before the trusted set, so a set
// that happens to contain such an address (a broad range, AllowAll) does not
// skip it: no proxy, listed or not, received the request from it.
func TestNonSourceTrustedHop(t *testing.T) {
	for _, tc := range []resolveCase{
		{
			name:  "multicast range listed",
			cfg:   Config{Rules: []Rule{{From: []string{"10.0.0.0/8", "224.0.0.0/4"}, Header: "X-Forwarded-For"}}},
			h:     xff("203.0.113.7, 224.0.0.251, 10.0.0.2"),
			chain: &ChainError{Header: "X-Forwarded-For", Position: 1, Value: "224.0.0.251", Detail: "multicast address", Err: errNonSourceEntry},
			want:  Derivation{Hops: []Hop{trusted(2, "10.0.0.2", "10.0.0.2"), malformed(1, "224.0.0.251")}},
		},
		{
			name:  "AllowAll",
			cfg:   Config{Rules: []Rule{{From: []string{"0.0.0.0/0", "::/0"}, Header: "X-Forwarded-For"}}, AllowAll: true},
			h:     xff("203.0.113.7, [::]:443"),
			chain: &ChainError{Header: "X-Forwarded-For", Position: 1, Value: "[::]:443", Detail: "unspecified address", Err: errNonSourceEntry},
			want:  Derivation{Hops: []Hop{malformed(1, "[::]:443")}},
		},
		{
			name:  "hop count does not count it",
			cfg:   Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For", Hops: 2}}},
			h:     xff("203.0.113.7, 198.51.100.1, 255.255.255.255"),
			chain: &ChainError{Header: "X-Forwarded-For", Position: 2, Value: "255.255.255.255", Detail: "limited broadcast address", Err: errNonSourceEntry},
			want:  Derivation{Hops: []Hop{malformed(2, "255.255.255.255")}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.peer, tc.err = "10.0.0.1:1", errNonSourceEntry
			tc.want.Peer, tc.want.PeerTrusted, tc.want.Header, tc.want.Chosen, tc.want.Reason = "10.0.0.1", true, "X-Forwarded-For", -1, reasonMalformedEntry
			checkResolve(t, mustNew(t, tc.cfg), tc)
		})
	}
}

// TestNonSourceNotReached: an entry left of the client is never examined,
// so a special address there does not fail the resolution; nor does an
// earlier line of a single-address header.
func TestNonSourceNotReached(t *testing.T) {
	for _, tc := range []resolveCase{
		{
			name: "X-Forwarded-For left of the client",
			cfg:  cfgXFF10, peer: "10.0.0.1:1", h: xff("0.0.0.0, ff02::1", "203.0.113.7, 10.0.0.2"),
			client: "203.0.113.7", net: "203.0.113.7/32",
			want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Forwarded-For", Chosen: 1, Reason: reasonFirstUntrustedHop,
				Hops: []Hop{trusted(3, "10.0.0.2", "10.0.0.2"), client(2, "203.0.113.7", "203.0.113.7")}},
		},
		{
			name: "X-Real-IP earlier line",
			cfg:  cfgReal, peer: "10.0.0.1:1", h: hdr("X-Real-IP", "255.255.255.255", "203.0.113.7"),
			client: "203.0.113.7", net: "203.0.113.7/32",
			want: Derivation{Peer: "10.0.0.1", PeerTrusted: true, Header: "X-Real-Ip", Chosen: 0, Reason: reasonSingleAddressHeader,
				Hops: []Hop{client(1, "203.0.113.7", "203.0.113.7")}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { checkResolve(t, mustNew(t, tc.cfg), tc) })
	}
}

// TestNonSourceErrors pins the error texts, the sentinels each error
// matches (and does not), and the Derivation JSON.
func TestNonSourceErrors(t *testing.T) {
	r := mustNew(t, cfgXFF10)

	res, err := r.Explain("[::ffff:0.0.0.0]:1234", xff("203.0.113.7"), nil)
	const wantPeer = `trustedproxy: malformed peer address: not a source address "0.0.0.0": unspecified address`
	if err == nil || err.Error() != wantPeer {
		t.Errorf("peer error = %v, want %q", err, wantPeer)
	}
	if !errors.Is(err, errNonSourcePeer) || !errors.Is(err, ErrMalformedPeer) || errors.Is(err, ErrMalformedEntry) || errors.Is(err, errUnixPeer) {
		t.Errorf("peer error %v matches the wrong sentinels", err)
	}
	b, _ := json.Marshal(res.Derivation)
	const wantPeerJSON = `{"peer":"0.0.0.0","peer_trusted":false,"rule":-1,"hops":null,"chosen":-1,"reason":"malformed_peer",` +
		`"error":"trustedproxy: malformed peer address: not a source address \"0.0.0.0\": unspecified address"}`
	if string(b) != wantPeerJSON {
		t.Errorf("peer JSON\n got %s\nwant %s", b, wantPeerJSON)
	}

	res, err = r.Explain("10.0.0.9:80", xff("203.0.113.7, [ff02::1]:80, 10.0.0.1"), nil)
	const wantEntry = `trustedproxy: malformed forwarding entry: not a source address: X-Forwarded-For position 1 "[ff02::1]:80": multicast address`
	if err == nil || err.Error() != wantEntry {
		t.Errorf("entry error = %v, want %q", err, wantEntry)
	}
	var ce *ChainError
	if !errors.As(err, &ce) || ce.Err != errNonSourceEntry || !errors.Is(err, ErrMalformedEntry) || errors.Is(err, errUnknownNode) || errors.Is(err, ErrMalformedPeer) {
		t.Errorf("entry error %v matches the wrong sentinels", err)
	}
	b, _ = json.Marshal(res.Derivation)
	const wantEntryJSON = `{"peer":"10.0.0.9","peer_trusted":true,"rule":0,"header":"X-Forwarded-For","hops":[` +
		`{"position":2,"value":"10.0.0.1","address":"10.0.0.1","verdict":"trusted"},` +
		`{"position":1,"value":"[ff02::1]:80","verdict":"malformed"}],"chosen":-1,"reason":"malformed_entry",` +
		`"error":"trustedproxy: malformed forwarding entry: not a source address: X-Forwarded-For position 1 \"[ff02::1]:80\": multicast address"}`
	if string(b) != wantEntryJSON {
		t.Errorf("entry JSON\n got %s\nwant %s", b, wantEntryJSON)
	}

	// Resolve reports the same errors.
	if _, err := r.Resolve("255.255.255.255:1", nil); !errors.Is(err, errNonSourcePeer) {
		t.Errorf("Resolve peer error = %v", err)
	}
	if _, err := r.Resolve("10.0.0.9:80", http.Header{"X-Forwarded-For": {"224.0.0.1"}}); !errors.Is(err, errNonSourceEntry) {
		t.Errorf("Resolve entry error = %v", err)
	}
}

// TestNonSource pins the classification at the edges of each refused range.
func TestNonSource(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"0.0.0.0", "unspecified address"},
		{"::", "unspecified address"},
		{"224.0.0.0", "multicast address"},
		{"239.255.255.255", "multicast address"},
		{"ff00::", "multicast address"},
		{"ff02::1", "multicast address"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "multicast address"},
		{"255.255.255.255", "limited broadcast address"},
		// Neighbours and other reserved ranges stay addresses.
		{"0.0.0.1", ""},
		{"0.255.255.255", ""},
		{"223.255.255.255", ""},
		{"240.0.0.0", ""},
		{"255.255.255.254", ""},
		{"::1", ""},
		{"::0.0.0.1", ""},
		{"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"64:ff9b::e000:1", ""}, // NAT64 of 224.0.0.1 stays IPv6
		{"127.0.0.1", ""},
		{"fe80::1", ""},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.in)
		if got := nonSource(a); got != tt.want {
			t.Errorf("nonSource(%s) = %q, want %q", tt.in, got, tt.want)
		}
		if got := refNonSource(a); got != (tt.want != "") {
			t.Errorf("refNonSource(%s) = %v, want %v", tt.in, got, tt.want != "")
		}
	}
}

// TestNonSourceFastPath: nonSource's IPv4 fast path answers as its general
// rules (netip's IsUnspecified and IsMulticast, the limited broadcast) for
// every first byte, with the other bytes at their extremes and in between.
func TestNonSourceFastPath(t *testing.T) {
	slow := func(a netip.Addr) string {
		switch {
		case a.IsUnspecified():
			return "unspecified address"
		case a.IsMulticast():
			return "multicast address"
		case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			return "limited broadcast address"
		}
		return ""
	}
	n := 0
	for first := 0; first < 256; first++ {
		for _, rest := range [][3]byte{{0, 0, 0}, {255, 255, 255}, {0, 0, 1}, {168, 1, 7}} {
			a := netip.AddrFrom4([4]byte{byte(first), rest[0], rest[1], rest[2]})
			if got, want := nonSource(a), slow(a); got != want {
				t.Errorf("nonSource(%v) = %q, want %q", a, got, want)
			}
			if nonSource(a) != "" {
				n++
			}
		}
	}
	// 0.0.0.0, 16 multicast /8s of 4 spellings each, 255.255.255.255.
	if n != 1+16*4+1 {
		t.Fatalf("%d non-source addresses among those checked, want %d", n, 1+16*4+1)
	}
}
