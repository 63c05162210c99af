package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// The chain workload: 10 000 client addresses behind one trusted proxy
// hop, 1 000 accounts each presenting its own ES256 token on every request
// (so, with the verification cache, every verification after the first is
// a hit), GET /v1/reports/{id} with 10 000 ids.
const (
	chainClients  = 10_000
	chainAccounts = 1_000
)

// chainLimit is high enough that no request is rejected: the benchmark
// measures the full path (every policy charged, RateLimit fields written),
// not the cheaper rejection.
var chainLimit = rateBurst{Rate: 10_000_000, Burst: 10_000_000}

// chainProxies trusts X-Forwarded-For from 127.0.0.1 and 10.0.0.0/8.
func chainProxies() trustedproxy.Config {
	return trustedproxy.Config{Rules: []trustedproxy.Rule{{From: []string{"127.0.0.1", "10.0.0.0/8"}, Header: "X-Forwarded-For"}}}
}

// chainPolicies are the chain's two policies: per-network, and per
// tenant+account+operation (skipped for anonymous requests).
func chainPolicies() []policy.Policy {
	lim := rkLimit(chainLimit)
	return []policy.Policy{
		{Name: "per-network", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: lim},
		{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount, limitkey.DimOperation},
			Limit: lim, OnMissing: policy.OnMissingSkip},
	}
}

// chainAuthenticator is the chain's authenticator: one ES256 issuer,
// default options (so the verification cache is on).
func chainAuthenticator(tb testing.TB, k jwtKey) identity.Authenticator {
	auth, err := identity.NewJWTAuthenticator(jwtConfig(k))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = auth.Close() })
	return auth
}

// newFrontDoor wires ratekey as a user does: a chi router with the front
// door (ratekey.New with chainProxies, chainAuthenticator and
// chainPolicies on the default memory store) given the root router and
// mounted by Use on the /v1 sub-router, with GET /v1/reports/{id}
// answering 200 with no body. With anonymous, requests without a token are admitted
// (Config.Anonymous) and the account policy is skipped.
func newFrontDoor(tb testing.TB, k jwtKey, anonymous bool) http.Handler {
	r := chi.NewRouter()
	rk, err := ratekey.New(ratekey.Config{
		Router:        r,
		Proxies:       chainProxies(),
		Authenticator: chainAuthenticator(tb, k),
		Anonymous:     anonymous,
		Policies:      chainPolicies(),
		Limiter:       memory.New(memory.Options{}),
	})
	if err != nil {
		tb.Fatal(err)
	}
	// Mounted where the hand-built chain is, on the /v1 sub-router, so the
	// two compare like for like (mounted on the root, both would pay chi's
	// lookup through the mount: 2 allocations, about 100 ns; see
	// BenchmarkHandler in the root package).
	r.Route("/v1", func(v chi.Router) {
		v.Use(rk.Handler)
		v.Get("/reports/{id}", okHandler)
	})
	return r
}

// newChainRouter is the chain composed by hand, as the demo did before the
// front door: the same router and route, with the /v1 sub-router running
// ClientAddress (chainProxies) → Authenticate (chainAuthenticator) →
// RateLimiter (chainPolicies on the memory store, RouteOperation). With
// anonymous, requests carry no token and the account policy is skipped.
func newChainRouter(tb testing.TB, k jwtKey, anonymous bool) http.Handler {
	return newStagedRouter(tb, k, anonymous, stageRateLimiter)
}

// The stages of the chain, in order: a staged router runs the first n.
const (
	stageAddress     = 1 // ClientAddress
	stageAuth        = 2 // ClientAddress → Authenticate
	stageRateLimiter = 3 // ClientAddress → Authenticate → RateLimiter
)

// newStagedRouter is newChainRouter's router running only the first
// stages of its chain.
func newStagedRouter(tb testing.TB, k jwtKey, anonymous bool, stages int) http.Handler {
	res, err := trustedproxy.New(chainProxies())
	if err != nil {
		tb.Fatal(err)
	}
	auth := chainAuthenticator(tb, k)
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter:   memory.New(memory.Options{}),
		Policies:  chainPolicies(),
		Operation: middleware.RouteOperation(r),
	})
	if err != nil {
		tb.Fatal(err)
	}
	chain := []func(http.Handler) http.Handler{middleware.ClientAddress(res, middleware.ClientAddressOptions{}), middleware.Authenticate(auth, middleware.AuthOptions{Anonymous: anonymous}), rl.Handler}
	r.Route("/v1", func(v chi.Router) {
		v.Use(chain[:stages]...)
		v.Get("/reports/{id}", okHandler)
	})
	return r
}

// newBareRouter is the same router and route with none of ratekey: the
// baseline a service without rate limiting pays.
func newBareRouter() http.Handler {
	r := chi.NewRouter()
	r.Route("/v1", func(v chi.Router) {
		v.Get("/reports/{id}", okHandler)
	})
	return r
}

func okHandler(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

// chainInput is request i of the chain workload: its path, headers and
// the values they hold.
type chainInput struct {
	path, xff, auth string
}

// chainRequests returns the requests of inputs in, from the trusted proxy
// 10.0.0.1, each with its X-Forwarded-For and, withAuth, its token.
func chainRequests(in []chainInput, withAuth bool) []*http.Request {
	reqs := make([]*http.Request, len(in))
	for i, c := range in {
		r := httptest.NewRequest(http.MethodGet, c.path, nil)
		r.RemoteAddr = "10.0.0.1:41234"
		r.Header.Set("X-Forwarded-For", c.xff)
		if withAuth {
			r.Header.Set("Authorization", c.auth)
		}
		reqs[i] = r
	}
	return reqs
}

func chainInputs(tb testing.TB, k jwtKey) []chainInput {
	tokens := make([]string, chainAccounts)
	for i := range tokens {
		tokens[i] = k.mint(tb, fmt.Sprintf("user-%04d", i), 0)
	}
	in := make([]chainInput, chainClients)
	for i := range in {
		in[i] = chainInput{
			path: fmt.Sprintf("/v1/reports/%d", i),
			xff:  fmt.Sprintf("198.51.%d.%d, 10.0.0.2", i/256, i%256),
			auth: "Bearer " + tokens[i%chainAccounts],
		}
	}
	return in
}

type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// serveParallel returns a contender run function serving n of reqs with h
// over GOMAXPROCS goroutines, each with its own writer, counting non-200
// answers in bad.
func serveParallel(h http.Handler, reqs []*http.Request, bad *atomic.Int64) func(n int) {
	procs := runtime.GOMAXPROCS(0)
	next := make([]int, procs)
	for g := range next {
		next[g] = g * len(reqs) / procs
	}
	return func(n int) {
		var wg sync.WaitGroup
		for g := range procs {
			share := n / procs
			if g < n%procs {
				share++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := discardWriter{h: http.Header{}}
				i := next[g]
				for range share {
					clear(w.h)
					w.code = 0
					h.ServeHTTP(&w, reqs[i%len(reqs)])
					if w.code != http.StatusOK {
						bad.Add(1)
					}
					i++
				}
				next[g] = i
			}()
		}
		wg.Wait()
	}
}

// BenchmarkChain measures the whole chain in process (httptest requests,
// no network), interleaved with the bare chi router on the same requests:
//   - ratekey: the front door (newFrontDoor: ratekey.New, r.Use(rk.Handler)):
//     the client address → Authenticate (a repeated ES256 token per account,
//     1 000 accounts) → 2 policies on the memory store → 200;
//   - hand: the same chain composed by hand on the /v1 sub-router
//     (newChainRouter: ClientAddress → Authenticate → RateLimiter), what
//     the front door must cost no more than;
//   - ratekey-anon: the front door without a token (anonymous; the account
//     policy is skipped): ratekey's cost without verification;
//   - chi: the bare router;
//   - peer: the peer stack a user assembles instead of ratekey
//     (newPeerStack: chi's ClientIPFromXFF, go-chi/jwtauth verifying the
//     same ES256 token on every request, httprate per network and per
//     account and operation);
//   - peer-anon: the peer stack without authentication on the requests
//     without a token (chi's ClientIPFromXFF and httprate per network), the
//     counterpart of ratekey-anon.
//
// Each runs over GOMAXPROCS goroutines (RunParallel's shape); ns/op is wall
// time per request. Every request is served once by each before timing
// (so tokens are verified and cached, and every key is tracked).
func BenchmarkChain(b *testing.B) {
	k := newJWTKey(b, "ES256")
	in := chainInputs(b, k)
	authed, anon := chainRequests(in, true), chainRequests(in, false)
	front, hand, frontAnon, bare := newFrontDoor(b, k, false), newChainRouter(b, k, false), newFrontDoor(b, k, true), newBareRouter()
	peer, peerAnon := newPeerStack(b, k, chainLimit, false), newPeerStack(b, k, chainLimit, true)
	var bad [6]atomic.Int64
	cs := []contender{
		{"ratekey", serveParallel(front, authed, &bad[0])},
		{"hand", serveParallel(hand, authed, &bad[1])},
		{"ratekey-anon", serveParallel(frontAnon, anon, &bad[2])},
		{"chi", serveParallel(bare, authed, &bad[3])},
		{"peer", serveParallel(peer, authed, &bad[4])},
		{"peer-anon", serveParallel(peerAnon, anon, &bad[5])},
	}
	for _, c := range cs {
		c.run(len(in))
	}
	for i := range bad {
		if n := bad[i].Swap(0); n > 0 {
			b.Fatalf("%s: %d answers were not 200 during warm-up", cs[i].name, n)
		}
	}
	res := interleave(b, cs, interleaveOptions{})
	for i := range bad {
		if n := bad[i].Load(); n > 0 {
			b.Errorf("%s: %d answers were not 200", cs[i].name, n)
		}
	}
	chi := res[3].nsOp
	b.ReportMetric(res[0].nsOp-chi, "ratekey-overhead-ns/op")
	b.ReportMetric(res[1].nsOp-chi, "hand-overhead-ns/op")
	b.ReportMetric(res[4].nsOp-chi, "peer-overhead-ns/op")
}

// loadConn is one keep-alive HTTP/1.1 connection of the load generator.
type loadConn struct {
	c net.Conn
	r *bufio.Reader
}

// do writes one request and reads the response (status line, header
// fields, a Content-Length body), returning the status code.
func (lc *loadConn) do(req []byte) (int, error) {
	if _, err := lc.c.Write(req); err != nil {
		return 0, err
	}
	line, err := lc.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 {
		return 0, fmt.Errorf("short status line %q", line)
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, err
	}
	length := 0
	for {
		l, err := lc.r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(l) <= 2 {
			break
		}
		if len(l) > 16 && bytes.EqualFold(l[:15], []byte("Content-Length:")) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(l[15:]))); err != nil {
				return 0, err
			}
		}
	}
	if _, err := lc.r.Discard(length); err != nil {
		return 0, err
	}
	return code, nil
}

// loadGen drives one server over conns keep-alive connections with
// prebuilt raw requests: a minimal client (no net/http on the client
// side) so that as much of the shared CPU as possible goes to the server.
type loadGen struct {
	conns []*loadConn
	reqs  [][]byte
	next  []int
	bad   atomic.Int64
	err   atomic.Pointer[error]
}

func newLoadGen(tb testing.TB, addr string, conns int, reqs [][]byte) *loadGen {
	g := &loadGen{reqs: reqs, next: make([]int, conns)}
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = c.Close() })
		g.conns = append(g.conns, &loadConn{c: c, r: bufio.NewReaderSize(c, 4096)})
		g.next[i] = i * len(reqs) / conns
	}
	return g
}

// run sends n requests spread over the connections and waits for every
// response.
func (g *loadGen) run(n int) {
	spread(n, g.next, func(ci, i int) bool {
		code, err := g.conns[ci].do(g.reqs[i%len(g.reqs)])
		if err != nil {
			g.err.CompareAndSwap(nil, &err)
			return false
		}
		if code != http.StatusOK {
			g.bad.Add(1)
		}
		return true
	})
}

// spread makes n calls over len(next) connections, one goroutine each
// making its share in turn, and waits for them: call(ci, i) makes call i
// (counted from next[ci], where the connection's last run stopped) on
// connection ci, and returns false to stop that connection's share.
func spread(n int, next []int, call func(ci, i int) bool) {
	var wg sync.WaitGroup
	for ci := range next {
		share := n / len(next)
		if ci < n%len(next) {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := next[ci]
			for range share {
				if !call(ci, i) {
					return
				}
				i++
			}
			next[ci] = i
		}()
	}
	wg.Wait()
}

// serve starts an HTTP server for h on a free loopback port.
func serve(tb testing.TB, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// BenchmarkLoopback serves the chain workload over real loopback HTTP/1.1,
// from net/http servers on 127.0.0.1, to an in-process load generator with
// conns keep-alive connections per server sending raw prebuilt requests:
// ratekey's front door (as in BenchmarkChain), the same chain composed by
// hand (hand), the bare chi router doing the same work minus ratekey and
// the peer stack (newPeerStack: chi ClientIPFromXFF, jwtauth, httprate), on
// byte-identical requests, interleaved. Metrics: <name>-req/s, ratekey/chi,
// hand/chi and peer/chi (throughput ratios), ratekey/hand and ratekey/peer
// (the front door over the peer stack). The load generator
// shares the machine's cores with the servers, so the ratios understate
// ratekey's share of a dedicated server's CPU.
func BenchmarkLoopback(b *testing.B) {
	const conns = 16
	k := newJWTKey(b, "ES256")
	raw := loopbackRequests(chainInputs(b, k))
	names := []string{"ratekey", "hand", "chi", "peer"}
	gens := []*loadGen{
		newLoadGen(b, serve(b, newFrontDoor(b, k, false)), conns, raw),
		newLoadGen(b, serve(b, newChainRouter(b, k, false)), conns, raw),
		newLoadGen(b, serve(b, newBareRouter()), conns, raw),
		newLoadGen(b, serve(b, newPeerStack(b, k, chainLimit, false)), conns, raw),
	}
	cs := make([]contender, len(gens))
	for i, g := range gens {
		g.run(len(raw)) // warm-up: verify and cache every token, track every key
		g.bad.Store(0)
		cs[i] = contender{names[i], g.run}
	}
	res := interleave(b, cs, interleaveOptions{})
	for i, g := range gens {
		if p := g.err.Load(); p != nil {
			b.Fatalf("load generator %s: %v", names[i], *p)
		}
		if n := g.bad.Load(); n > 0 {
			b.Errorf("load generator %s: %d answers were not 200", names[i], n)
		}
	}
	rk, hand, chi, peer := 1e9/res[0].nsOp, 1e9/res[1].nsOp, 1e9/res[2].nsOp, 1e9/res[3].nsOp
	b.ReportMetric(rk, "ratekey-req/s")
	b.ReportMetric(hand, "hand-req/s")
	b.ReportMetric(chi, "chi-req/s")
	b.ReportMetric(peer, "peer-req/s")
	b.ReportMetric(rk/chi, "ratekey/chi")
	b.ReportMetric(hand/chi, "hand/chi")
	b.ReportMetric(peer/chi, "peer/chi")
	b.ReportMetric(rk/hand, "ratekey/hand")
	b.ReportMetric(rk/peer, "ratekey/peer")
}

// BenchmarkLoopbackStages splits BenchmarkLoopback's throughput loss by
// middleware: the same servers and load, interleaved, with the chain
// composed by hand cut after each stage (address: ClientAddress; auth: +
// Authenticate; ratekey: + RateLimiter, the whole chain) next to bare chi. Metrics:
// <stage>/chi, each one's throughput over bare chi's. Not a target;
// BENCHMARKS.md reads the misses with it.
func BenchmarkLoopbackStages(b *testing.B) {
	const conns = 16
	k := newJWTKey(b, "ES256")
	raw := loopbackRequests(chainInputs(b, k))
	names := []string{"address", "auth", "ratekey", "chi"}
	hs := []http.Handler{
		newStagedRouter(b, k, false, stageAddress),
		newStagedRouter(b, k, false, stageAuth),
		newStagedRouter(b, k, false, stageRateLimiter),
		newBareRouter(),
	}
	cs := make([]contender, len(hs))
	gens := make([]*loadGen, len(hs))
	for i, h := range hs {
		gens[i] = newLoadGen(b, serve(b, h), conns, raw)
		gens[i].run(len(raw)) // warm-up
		cs[i] = contender{names[i], gens[i].run}
	}
	res := interleave(b, cs, interleaveOptions{})
	for i, g := range gens {
		if p := g.err.Load(); p != nil {
			b.Fatalf("load generator %s: %v", names[i], *p)
		}
	}
	chi := res[len(res)-1].nsOp
	for i := range len(res) - 1 {
		b.ReportMetric(chi/res[i].nsOp, names[i]+"/chi")
	}
}

// loopbackRequests returns the raw HTTP/1.1 requests of the chain
// workload.
func loopbackRequests(in []chainInput) [][]byte {
	raw := make([][]byte, len(in))
	for i, c := range in {
		raw[i] = fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: ratekey-bench\r\nX-Forwarded-For: %s\r\nAuthorization: %s\r\n\r\n", c.path, c.xff, c.auth)
	}
	return raw
}
