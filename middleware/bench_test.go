package middleware_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// BenchmarkChain measures the whole chain in process: resolve a 3-hop
// X-Forwarded-For, verify an EdDSA token (or none), name the operation,
// charge the policies in the memory store, over 10 000 client networks.
func BenchmarkChain(b *testing.B) {
	b.Run("jwt", func(b *testing.B) { benchmarkChain(b, true) })
	b.Run("anonymous", func(b *testing.B) { benchmarkChain(b, false) })
}

// benchmarkChain runs the chain with a verified token (two policies) or
// anonymously (the account policy skips), isolating ratekey's own cost
// from the signature check.
func benchmarkChain(b *testing.B, withToken bool) {
	t := &testing.T{}
	s := newStack(t, stackOptions{anonymous: true, policies: []policy.Policy{
		perNetwork("1000000/s", 1000000),
		{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount, limitkey.DimOperation},
			Limit: limit("1000000/s", 1000000), OnMissing: policy.OnMissingSkip},
	}})
	tok := s.token("alice", "app")
	const clients = 10000
	reqs := make([]*http.Request, clients)
	for i := range reqs {
		r := httptest.NewRequest("GET", fmt.Sprintf("/v1/reports/%d", i), nil)
		r.RemoteAddr = "10.0.0.1:1234"
		r.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.%d.%d, 10.0.0.3, 10.0.0.2", i/256, i%256))
		if withToken {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		reqs[i] = r
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := discardWriter{h: http.Header{}}
		i := 0
		for pb.Next() {
			clear(w.h)
			s.handler.ServeHTTP(&w, reqs[i%clients])
			i++
		}
	})
}

// BenchmarkClientAddress measures ClientAddress alone: a 3-hop
// X-Forwarded-For resolved into the request state.
func BenchmarkClientAddress(b *testing.B) {
	res := proxyResolver(b)
	h := middleware.ClientAddress(res, middleware.ClientAddressOptions{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.1:1"
	req.Header.Set("X-Forwarded-For", "198.51.100.7, 10.0.0.3, 10.0.0.2")
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}

type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// BenchmarkLogSample measures the rejection path (ClientAddress and the
// RateLimiter, every request rejected, over 1 000 client networks) with the
// decision log bounded (the default) and with a line per rejection
// (LogEveryDecision), the JSON lines going to io.Discard, on one goroutine
// and on all of them.
func BenchmarkLogSample(b *testing.B) {
	for _, every := range []bool{false, true} {
		for _, parallel := range []bool{false, true} {
			b.Run(fmt.Sprintf("every=%v/parallel=%v", every, parallel), func(b *testing.B) {
				rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
					Policies:  []policy.Policy{perNetwork("1/h", 1)},
					Operation: func(*http.Request) string { return "GET /v1/reports/{id}" },
					Logger:    slog.New(slog.NewJSONHandler(io.Discard, nil)), LogEveryDecision: every})
				if err != nil {
					b.Fatal(err)
				}
				h := middleware.ClientAddress(proxyResolver(b), middleware.ClientAddressOptions{})(rl.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
				const clients = 1000
				reqs := make([]*http.Request, clients)
				w := &discardWriter{h: http.Header{}}
				for i := range reqs {
					r := httptest.NewRequest("GET", "/v1/reports/1", nil)
					r.RemoteAddr = "10.0.0.1:1234"
					r.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.%d.%d", i/256, i%256))
					reqs[i] = r
					h.ServeHTTP(w, r) // spend the only token
				}
				b.ReportAllocs()
				b.ResetTimer()
				if !parallel {
					for i := 0; b.Loop(); i++ {
						clear(w.h)
						h.ServeHTTP(w, reqs[i%clients])
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					w := &discardWriter{h: http.Header{}}
					for i := 0; pb.Next(); i++ {
						clear(w.h)
						h.ServeHTTP(w, reqs[i%clients])
					}
				})
			})
		}
	}
}

// BenchmarkOverrides measures the rate limiter (fakeAuth, a policy keyed
// by tenant, plan and account, the memory store, 1 000 accounts of 100
// tenants, all admitted) without overrides, with one tenant override that
// matches no request (one map lookup), with a tenant, a plan and an
// account (of a tenant) override matching none (one lookup per kind), and
// with a tenant override matching every request.
func BenchmarkOverrides(b *testing.B) {
	big := limiter.Limit{Burst: 2000000}
	cases := []struct {
		name      string
		overrides []policy.Override
		tenant    string // the tenant of every request ("" for t0..t99)
	}{
		{"none", nil, ""},
		{"tenant-miss", []policy.Override{{Tenant: "acme", Limit: big}}, ""},
		{"three-kinds-miss", []policy.Override{{Tenant: "acme", Limit: big}, {Plan: "pro", Limit: big}, {Tenant: "acme", Account: "vip", Limit: big}}, ""},
		{"tenant-hit", []policy.Override{{Tenant: "acme", Limit: big}}, "acme"},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
				Policies: []policy.Policy{{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimPlan, limitkey.DimAccount},
					Limit: limit("1000000/s", 1000000), Overrides: tc.overrides}},
				Operation: func(*http.Request) string { return "GET /v1/reports/{id}" },
				Logger:    slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			h := middleware.Authenticate(fakeAuth{}, middleware.AuthOptions{})(rl.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			const accounts = 1000
			reqs := make([]*http.Request, accounts)
			for i := range reqs {
				r := httptest.NewRequest("GET", "/v1/reports/1", nil)
				tenant := tc.tenant
				if tenant == "" {
					tenant = fmt.Sprintf("t%d", i%100)
				}
				r.Header.Set("Authorization", fmt.Sprintf("Bearer %s:free:a%d", tenant, i))
				reqs[i] = r
			}
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%accounts])
				if w.code != 0 {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}
