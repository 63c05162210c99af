package trustedproxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	chimw "github.com/go-chi/chi/v5/middleware"
)

// benchTrusted returns 3 + extra trusted prefixes: extra non-adjacent IPv4
// /24s and IPv6 /48s (the IPSet keeps them as separate ranges, as a CDN
// range list would be), then the 3 prefixes the benchmark requests match
// (10.0.0.0/8 holds the peer and the proxies). With first, the matching
// prefixes come first instead, which is the best case for a linear scan.
func benchTrusted(extra int, first bool) []string {
	real := []string{"10.0.0.0/8", "192.168.0.0/16", "2001:db8::/32"}
	var ps []string
	for i := 0; i < extra; i++ {
		if i%2 == 0 {
			ps = append(ps, fmt.Sprintf("20.%d.%d.0/24", i/128, 2*(i%128)))
		} else {
			ps = append(ps, fmt.Sprintf("2600:%x::/48", i))
		}
	}
	if first {
		return append(real, ps...)
	}
	return append(ps, real...)
}

const (
	benchPeer = "10.0.0.1:44123"
	benchXFF  = "203.0.113.7, 10.0.0.2, 10.0.0.3"
)

var benchClient = netip.AddrFrom4([4]byte{203, 0, 113, 7})

// chiHandler wraps chi v5.5.0's ClientIPFromXFF around a handler that
// reads the result, as an application would.
func chiHandler(prefixes []string, got *netip.Addr) http.Handler {
	return chimw.ClientIPFromXFF(prefixes...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*got = chimw.GetClientIPAddr(r.Context())
	}))
}

type benchCtxKey struct{}

// ratekeyHandler is the same shape for ratekey: resolve with the fast path,
// store the client in the request context, call the next handler. It
// measures what chi's middleware does, allocations of WithContext included.
func ratekeyHandler(r *Resolver, got *netip.Addr) http.Handler {
	next := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		*got, _ = req.Context().Value(benchCtxKey{}).(netip.Addr)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		res, err := r.Resolve(req.RemoteAddr, req.Header)
		if err != nil {
			http.Error(w, "bad forwarding chain", http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), benchCtxKey{}, res.Client)))
	})
}

// BenchmarkVsChi compares ratekey with chi v5.5.0 middleware.ClientIPFromXFF
// on the same request in the same run: a trusted peer and a 3-entry
// X-Forwarded-For (client, two trusted proxies), with 3 and with 2 000
// trusted prefixes. "chi" and "ratekey-middleware" both resolve and store
// the client in the request context (the allocations of WithContext);
// "baseline-context-only" is that storing alone, to subtract; "Resolve",
// "ExplainBuf" and "Explain" are the bare resolution with no context
// (Resolve: no hop list), Explain with a reused hop buffer, and Explain
// allocating its hop list.
func BenchmarkVsChi(b *testing.B) {
	h := http.Header{"X-Forwarded-For": {benchXFF}}
	for _, tc := range []struct {
		name     string
		prefixes []string
	}{
		{"prefixes=3", benchTrusted(0, false)},
		{"prefixes=2000", benchTrusted(1997, false)},
		{"prefixes=2000-matching-first", benchTrusted(1997, true)},
	} {
		r := mustNew(b, Config{Rules: []Rule{{From: tc.prefixes, Header: "X-Forwarded-For"}}})
		if got := len(r.trustedSet(0).Ranges()); got != len(tc.prefixes) {
			b.Fatalf("set has %d ranges, want %d", got, len(tc.prefixes))
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr, req.Header = benchPeer, h
		var got netip.Addr

		b.Run(tc.name+"/chi-ClientIPFromXFF", func(b *testing.B) {
			hd := chiHandler(tc.prefixes, &got)
			b.ReportAllocs()
			for b.Loop() {
				hd.ServeHTTP(nil, req)
			}
			if got != benchClient {
				b.Fatal(got)
			}
		})
		b.Run(tc.name+"/baseline-context-only", func(b *testing.B) {
			// What both middlewares pay besides resolving: store a
			// constant address in the context and call the handler.
			next := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				got, _ = req.Context().Value(benchCtxKey{}).(netip.Addr)
			})
			b.ReportAllocs()
			for b.Loop() {
				next.ServeHTTP(nil, req.WithContext(context.WithValue(req.Context(), benchCtxKey{}, benchClient)))
			}
			if got != benchClient {
				b.Fatal(got)
			}
		})
		b.Run(tc.name+"/ratekey-middleware", func(b *testing.B) {
			hd := ratekeyHandler(r, &got)
			b.ReportAllocs()
			for b.Loop() {
				hd.ServeHTTP(nil, req)
			}
			if got != benchClient {
				b.Fatal(got)
			}
		})
		b.Run(tc.name+"/ratekey-Resolve", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, _ := r.Resolve(benchPeer, h)
				got = res.Client
			}
			if got != benchClient {
				b.Fatal(got)
			}
		})
		b.Run(tc.name+"/ratekey-ExplainBuf", func(b *testing.B) {
			buf := make([]Hop, 0, MaxHops)
			b.ReportAllocs()
			for b.Loop() {
				res, _ := r.Explain(benchPeer, h, buf)
				got = res.Client
			}
			if got != benchClient {
				b.Fatal(got)
			}
		})
		b.Run(tc.name+"/ratekey-Explain", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, _ := r.Explain(benchPeer, h, nil)
				got = res.Client
			}
			if got != benchClient {
				b.Fatal(got)
			}
		})
	}
}

// BenchmarkChainLength sweeps the X-Forwarded-For length n = 1 … 10 000
// (one line, 3 trusted prefixes), ratekey and chi in the same run, in two
// shapes:
//   - "client-right": n-2 attacker-written entries, the client, one
//     trusted proxy (n = 1: the client alone). Every resolver stops after
//     two entries; Resolve also counts the n elements to number them.
//   - "all-trusted": n trusted entries. chi walks all n and sets no
//     client; ratekey gives the peer for n <= 32 and fails closed with
//     ErrChainTooLong beyond (an error, so it allocates).
func BenchmarkChainLength(b *testing.B) {
	prefixes := benchTrusted(0, false)
	r := mustNew(b, Config{Rules: []Rule{{From: prefixes, Header: "X-Forwarded-For"}}})
	for _, shape := range []string{"client-right", "all-trusted"} {
		for _, n := range []int{1, 10, 100, 1000, 10000} {
			var v string
			if shape == "all-trusted" {
				v = chain("10.0.0.2", n)
			} else if n == 1 {
				v = "203.0.113.7"
			} else {
				v = strings.TrimPrefix(chain("6.6.6.6", n-2)+", 203.0.113.7, 10.0.0.2", ", ")
			}
			h := http.Header{"X-Forwarded-For": {v}}
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr, req.Header = benchPeer, h
			var got netip.Addr
			name := fmt.Sprintf("%s/n=%d", shape, n)
			b.Run(name+"/chi", func(b *testing.B) {
				hd := chiHandler(prefixes, &got)
				b.ReportAllocs()
				for b.Loop() {
					hd.ServeHTTP(nil, req)
				}
			})
			b.Run(name+"/ratekey-Resolve", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					res, _ := r.Resolve(benchPeer, h)
					got = res.Client
				}
			})
			b.Run(name+"/ratekey-Explain", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					res, _ := r.Explain(benchPeer, h, nil)
					got = res.Client
				}
			})
		}
	}
}

// BenchmarkResolve covers paths the comparison does not: an untrusted peer,
// Forwarded, a hop-counting rule and a single-address header.
func BenchmarkResolve(b *testing.B) {
	r := mustNew(b, Config{Rules: []Rule{
		{From: []string{"192.0.2.0/24"}, Header: "CF-Connecting-IP"},
		{From: []string{"172.16.0.0/12"}, Header: "Forwarded"},
		{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For", Hops: 2},
	}})
	for _, tc := range []struct {
		name, peer string
		h          http.Header
	}{
		{"untrusted-peer", "203.0.113.9:44123", http.Header{"X-Forwarded-For": {benchXFF}}},
		{"forwarded", "172.16.0.1:44123", http.Header{"Forwarded": {`for=203.0.113.7;proto=https, for="[2001:db8::2]:443", for=172.16.0.3`}}},
		{"hops=2", "10.0.0.1:44123", http.Header{"X-Forwarded-For": {"6.6.6.6, 203.0.113.7, 198.51.100.9, 10.0.0.3"}}},
		{"cf-connecting-ip", "192.0.2.1:44123", http.Header{"Cf-Connecting-Ip": {"203.0.113.7"}}},
	} {
		b.Run(tc.name+"/Resolve", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Resolve(tc.peer, tc.h); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/Explain", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Explain(tc.peer, tc.h, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
