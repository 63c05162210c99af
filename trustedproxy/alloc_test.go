package trustedproxy

import (
	"net/http"
	"testing"
)

// TestResolveAllocs pins the allocation budget of the common paths (see
// Explain): nothing but the Hops slice when a header is examined, as long as
// the addresses are written canonically (the strings in the Derivation are
// then substrings of the request's own strings). Upper-case IPv6 costs one
// string per address.
func TestResolveAllocs(t *testing.T) {
	xffR := mustNew(t, Config{Rules: []Rule{{From: []string{"10.0.0.0/8", "2001:db8::/32"}, Header: "X-Forwarded-For"}}})
	realR := mustNew(t, Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Real-IP"}}})
	noneR := mustNew(t, Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}}}})
	tests := []struct {
		name string
		r    *Resolver
		peer string
		h    http.Header
		want float64
	}{
		{"untrusted peer", xffR, "203.0.113.9:1234", xff("1.2.3.4"), 0},
		{"untrusted IPv6 peer", xffR, "[2001:db9::1]:1234", xff("1.2.3.4"), 0},
		{"no header configured", noneR, "10.0.0.1:1234", xff("1.2.3.4"), 0},
		{"header absent", xffR, "10.0.0.1:1234", http.Header{}, 0},
		{"xff 3 hops", xffR, "10.0.0.1:1234", xff("203.0.113.7, 10.0.0.2, 10.0.0.3"), 1},
		{"xff 3 hops over 2 lines", xffR, "10.0.0.1:1234", xff("203.0.113.7", "10.0.0.2, 10.0.0.3"), 1},
		{"xff IPv6", xffR, "[2001:db8::1]:443", xff("2001:db9::7, 2001:db8::2"), 1},
		{"x-real-ip", realR, "10.0.0.1:1234", hdr("X-Real-IP", "203.0.113.7"), 1},
		{"xff mapped and bracketed", xffR, "10.0.0.1:1234", xff("::ffff:203.0.113.7, [2001:db8::2]:443"), 1},
		{"xff upper-case IPv6", xffR, "10.0.0.1:1234", xff("2001:DB9::7, 2001:DB8::2"), 3},
	}
	for _, tc := range tests {
		got := testing.AllocsPerRun(200, func() {
			if _, err := tc.r.Explain(tc.peer, tc.h, nil); err != nil {
				t.Fatal(err)
			}
		})
		if got != tc.want {
			t.Errorf("%s: %v allocs per Explain, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFastPathAllocs pins 0 allocations per successful Resolve, and per
// successful Explain(buf) given a buffer of MaxHops hops, on every kind of
// rule and header, including a 100 000-entry header (the work left of the
// client allocates nothing either).
func TestFastPathAllocs(t *testing.T) {
	rules := mustNew(t, Config{Rules: []Rule{
		{From: []string{"192.0.2.0/24"}, Header: "CF-Connecting-IP"},
		{From: []string{"10.0.0.0/8", "2001:db8::/32"}, Header: "X-Forwarded-For"},
		{From: []string{"172.16.0.0/12"}, Header: "Forwarded"},
		{From: []string{"198.51.100.0/24"}, Header: "X-Forwarded-For", Hops: 3},
		{From: []string{"unix"}, Header: "Forwarded", Hops: 2},
	}, RejectAliases: true})
	big := chain("6.6.6.6", 100000) + ", 203.0.113.7, 10.0.0.2"
	bigFwd := chain(`for="[2001:db8::1]:1"`, 100000) + ", for=203.0.113.7"
	withOther := xff("203.0.113.7, 10.0.0.3")
	withOther["User-Agent"] = []string{"test"}
	withOther["X-Request-Id"] = []string{"abc"}
	tests := []struct {
		name string
		peer string
		h    http.Header
	}{
		{"untrusted peer", "203.0.113.9:1234", xff("1.2.3.4")},
		{"single-address header", "192.0.2.9:443", hdr("CF-Connecting-IP", "203.0.113.7")},
		{"xff", "10.0.0.1:1234", xff("203.0.113.7, 10.0.0.2, 10.0.0.3")},
		{"xff over lines, aliases checked", "10.0.0.1:1234", withOther},
		{"xff IPv6 with brackets and port", "[2001:db8::1]:443", xff("[2001:db9::7]:80, 2001:db8::2")},
		{"xff mapped (non-canonical) entries", "10.0.0.1:1", xff("::ffff:203.0.113.7, ::ffff:10.0.0.2")},
		{"forwarded", "172.16.0.1:1", hdr("Forwarded", `for=203.0.113.7;proto=https, for="[2001:db8::2]:443";by=_lb`)},
		{"forwarded quoted with pairs", "172.16.0.1:1", hdr("Forwarded", `for=203.0.113.7;ext="a,\"b", for=172.16.0.9`)},
		{"hops", "198.51.100.1:1", xff("6.6.6.6, 203.0.113.7, 192.0.2.1, 192.0.2.2")},
		{"unix peer", "@", hdr("Forwarded", "for=203.0.113.7, for=192.0.2.1")},
		{"header absent", "10.0.0.1:1", http.Header{}},
		{"all hops trusted", "10.0.0.1:1", xff("10.0.0.3, 10.0.0.2")},
		{"100 000-entry xff", "10.0.0.1:1", xff(big)},
		{"100 000-element forwarded", "172.16.0.1:1", hdr("Forwarded", bigFwd)},
	}
	buf := make([]Hop, 0, MaxHops)
	for _, tc := range tests {
		if _, err := rules.Resolve(tc.peer, tc.h); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n := testing.AllocsPerRun(50, func() { rules.Resolve(tc.peer, tc.h) }); n != 0 {
			t.Errorf("%s: Resolve %v allocs, want 0", tc.name, n)
		}
		if n := testing.AllocsPerRun(50, func() { rules.Explain(tc.peer, tc.h, buf) }); n != 0 {
			t.Errorf("%s: Explain(buf) %v allocs, want 0", tc.name, n)
		}
	}
}
