package trustedproxy

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
)

// benchTrusted returns 3 + extra trusted prefixes. The extra ones are
// non-adjacent IPv4 /24s and IPv6 /48s, so the IPSet keeps them as separate
// ranges (adjacent ones would be merged) as a CDN range list would be.
func benchTrusted(extra int) []string {
	ps := []string{"10.0.0.0/8", "192.168.0.0/16", "2001:db8::/32"}
	for i := 0; i < extra; i++ {
		if i%2 == 0 {
			ps = append(ps, fmt.Sprintf("20.%d.%d.0/24", i/128, 2*(i%128)))
		} else {
			ps = append(ps, fmt.Sprintf("2600:%x::/48", i))
		}
	}
	return ps
}

// BenchmarkResolve: a trusted peer and a 3-entry X-Forwarded-For (client,
// two trusted proxies), the common path.
func BenchmarkResolve(b *testing.B) {
	h := http.Header{"X-Forwarded-For": {"203.0.113.7, 10.0.0.2, 10.0.0.3"}}
	for _, n := range []int{3, 2000} {
		r := mustNew(b, Config{Trusted: benchTrusted(n - 3), Header: "X-Forwarded-For"})
		if got := len(r.TrustedSet(0).Ranges()); got != n {
			b.Fatalf("set has %d ranges, want %d", got, n)
		}
		b.Run(fmt.Sprintf("xff3/trusted=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := r.Resolve("10.0.0.1:44123", h)
				if err != nil || res.Client != netip.AddrFrom4([4]byte{203, 0, 113, 7}) {
					b.Fatal(res, err)
				}
			}
		})
	}
	r := mustNew(b, Config{Trusted: benchTrusted(0), Header: "X-Forwarded-For"})
	b.Run("untrusted-peer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Resolve("203.0.113.9:44123", h); err != nil {
				b.Fatal(err)
			}
		}
	})
}
