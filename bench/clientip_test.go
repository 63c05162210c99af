package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/realclientip/realclientip-go"

	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/trustedproxy"
)

// xffRequest is one request of the client-IP workloads and the client
// every resolver must find.
type xffRequest struct {
	req    *http.Request
	client netip.Addr
}

// xffRequests returns 1 024 requests: a TCP peer inside a random trusted
// prefix, and an X-Forwarded-For line of hops entries: the client (a random
// public address, IPv4 four times in five, else IPv6, in no trusted prefix)
// then hops-1 proxies, each inside a random trusted prefix. Every resolver
// therefore checks the peer and walks all hops entries, right to left.
func xffRequests(trusted []netip.Prefix, hops int) []xffRequest {
	r := rand.New(rand.NewPCG(uint64(len(trusted)), uint64(hops)))
	pick := func() netip.Addr { return randomIn(r, trusted[r.IntN(len(trusted))]) }
	out := make([]xffRequest, 1024)
	for i := range out {
		var c netip.Addr
		for {
			if r.IntN(5) == 0 {
				c = randomIn(r, netip.MustParsePrefix("2000::/3"))
			} else {
				c = randomIn(r, netip.MustParsePrefix("0.0.0.0/0"))
			}
			p := netip.PrefixFrom(c, c.BitLen())
			if !overlapsAny(p, reserved) && !overlapsAny(p, trusted) {
				break
			}
		}
		entries := []string{c.String()}
		for range hops - 1 {
			entries = append(entries, pick().String())
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = netip.AddrPortFrom(pick(), uint16(1024+r.IntN(60000))).String()
		req.Header.Set("X-Forwarded-For", strings.Join(entries, ", "))
		out[i] = xffRequest{req: req, client: c}
	}
	return out
}

type benchCtxKey struct{}

var sinkAddr netip.Addr

// BenchmarkClientIP compares client-address resolution on identical
// requests, interleaved: X-Forwarded-For chains of 1, 3 and 10 entries,
// with trust lists of 3 and 2 000 prefixes (see trustList2000). Every
// request's answer is checked against the expected client for every
// resolver before timing. Contenders (metric unit prefixes):
//   - ratekey: trustedproxy.Resolver.Resolve, its allocation-free
//     fast path (client, network key and the Derivation's outcome, no
//     hop list).
//   - ratekey-mw: Resolve, then the client stored in the request
//     context and the next handler called: the same shape as chi's
//     middleware, like for like.
//   - ratekey-ClientAddress: ratekey's real middleware.ClientAddress
//     (Resolve, its Result stored in the request state).
//   - chi: chi v5.5.0 middleware.ClientIPFromXFF(prefixes...) (its only
//     entry point: a middleware, which checks the peer, walks the header
//     right to left and stores the client in the request context).
//   - realclientip: realclientip-go RightmostTrustedRangeStrategy.ClientIP
//     (walks the header right to left; never looks at the peer).
func BenchmarkClientIP(b *testing.B) {
	for _, list := range []struct {
		name string
		ps   []netip.Prefix
	}{{"3", trustList3()}, {"2000", trustList2000()}} {
		strs := make([]string, len(list.ps))
		for i, p := range list.ps {
			strs[i] = p.String()
		}
		rk, err := trustedproxy.New(trustedproxy.Config{Rules: []trustedproxy.Rule{{From: strs, Header: "X-Forwarded-For"}}})
		if err != nil {
			b.Fatal(err)
		}
		set, err := trustedproxy.ParseSet(strs) // how New parses a rule's From
		if err != nil {
			b.Fatal(err)
		}
		if got := len(set.Ranges()); got != len(list.ps) {
			b.Fatalf("ratekey's set has %d ranges, want %d", got, len(list.ps))
		}
		nets, err := realclientip.AddressesAndRangesToIPNets(strs...)
		if err != nil {
			b.Fatal(err)
		}
		rci, err := realclientip.NewRightmostTrustedRangeStrategy("X-Forwarded-For", nets)
		if err != nil {
			b.Fatal(err)
		}
		var got netip.Addr
		chiH := chimw.ClientIPFromXFF(strs...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = chimw.GetClientIPAddr(r.Context())
		}))
		mwNext := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, _ = r.Context().Value(benchCtxKey{}).(netip.Addr)
		})
		rkMW := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := rk.Resolve(r.RemoteAddr, r.Header)
			if err != nil {
				http.Error(w, "bad forwarding chain", http.StatusBadRequest)
				return
			}
			mwNext.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), benchCtxKey{}, res.Client)))
		})
		rkCA := middleware.ClientAddress(rk, middleware.ClientAddressOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, _ := middleware.ClientFrom(r.Context())
			got = res.Client
		}))

		for _, hops := range []int{1, 3, 10} {
			b.Run(fmt.Sprintf("prefixes=%s/hops=%d", list.name, hops), func(b *testing.B) {
				reqs := xffRequests(list.ps, hops)
				for i, q := range reqs {
					if res, err := rk.Resolve(q.req.RemoteAddr, q.req.Header); err != nil || res.Client != q.client {
						b.Fatalf("request %d: ratekey %v %v, want %v", i, res.Client, err, q.client)
					}
					for name, h := range map[string]http.Handler{"chi": chiH, "ratekey-mw": rkMW, "ratekey-ClientAddress": rkCA} {
						got = netip.Addr{}
						h.ServeHTTP(nil, q.req)
						if got != q.client {
							b.Fatalf("request %d: %s %v, want %v", i, name, got, q.client)
						}
					}
					if s := rci.ClientIP(q.req.Header, q.req.RemoteAddr); s != q.client.String() {
						b.Fatalf("request %d: realclientip %q, want %v", i, s, q.client)
					}
				}
				loop := func(f func(q *xffRequest)) func(n int) {
					i := 0
					return func(n int) {
						for range n {
							f(&reqs[i&1023])
							i++
						}
					}
				}
				var sinkS string
				interleave(b, []contender{
					{"ratekey", loop(func(q *xffRequest) {
						res, _ := rk.Resolve(q.req.RemoteAddr, q.req.Header)
						sinkAddr = res.Client
					})},
					{"ratekey-mw", loop(func(q *xffRequest) { rkMW.ServeHTTP(nil, q.req) })},
					{"ratekey-ClientAddress", loop(func(q *xffRequest) { rkCA.ServeHTTP(nil, q.req) })},
					{"chi", loop(func(q *xffRequest) { chiH.ServeHTTP(nil, q.req) })},
					{"realclientip", loop(func(q *xffRequest) { sinkS = rci.ClientIP(q.req.Header, q.req.RemoteAddr) })},
				}, interleaveOptions{rounds: 20})
				_ = sinkS
			})
		}
	}
}
