package trustedproxy

import (
	"net/http"
	"testing"
)

// TestResolveAllocs pins the allocation budget of the common paths (see
// Resolve): nothing but the Hops slice when a header is examined, as long as
// the addresses are written canonically (the strings in the Derivation are
// then substrings of the request's own strings).
func TestResolveAllocs(t *testing.T) {
	xffR := mustNew(t, Config{Trusted: []string{"10.0.0.0/8", "2001:db8::/32"}, Header: "X-Forwarded-For"})
	realR := mustNew(t, Config{Trusted: []string{"10.0.0.0/8"}, Header: "X-Real-IP"})
	noneR := mustNew(t, Config{Trusted: []string{"10.0.0.0/8"}})
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
	}
	for _, tc := range tests {
		got := testing.AllocsPerRun(200, func() {
			if _, err := tc.r.Resolve(tc.peer, tc.h); err != nil {
				t.Fatal(err)
			}
		})
		if got != tc.want {
			t.Errorf("%s: %v allocs per Resolve, want %v", tc.name, got, tc.want)
		}
	}
}
