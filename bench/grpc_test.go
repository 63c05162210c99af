package bench

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/grpclimit"
	"github.com/ratekey/ratekey/limiter/memory"
)

// grpcMethod is the bench's unary gRPC method: a hand-written service
// (no protoc) taking and returning a google.protobuf.StringValue, the
// gRPC counterpart of GET /v1/reports/{id}.
const grpcMethod = "/bench.v1.Reports/Get"

var reportsDesc = grpc.ServiceDesc{
	ServiceName: "bench.v1.Reports",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(context.Context, any) (any, error) { return emptyReport, nil }
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: grpcMethod}, h)
	}}},
}

var emptyReport = wrapperspb.String("")

// serveGRPC starts a gRPC server with the Reports service on a free
// loopback port; with lim, behind its interceptors.
func serveGRPC(tb testing.TB, lim *grpclimit.Limiter) string {
	var opts []grpc.ServerOption
	if lim != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&reportsDesc, nil)
	if lim != nil {
		lim.Register(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// newGRPCLimiter is the front door of newFrontDoor (chainProxies,
// chainAuthenticator, chainPolicies on the memory store) as grpclimit
// interceptors: the same chain, the operation the full method name.
func newGRPCLimiter(tb testing.TB, k jwtKey) *grpclimit.Limiter {
	rk, err := ratekey.New(ratekey.Config{
		Router:        chi.NewRouter(),
		Proxies:       chainProxies(),
		Authenticator: chainAuthenticator(tb, k),
		Policies:      chainPolicies(),
		Limiter:       memory.New(memory.Options{}),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return grpclimit.New(rk, nil)
}

// grpcLoadGen drives one gRPC server over conns client connections (one
// TCP connection each), one call in flight per connection, with the
// chain workload's metadata (x-forwarded-for, authorization) in prebuilt
// outgoing contexts.
type grpcLoadGen struct {
	conns []*grpc.ClientConn
	ctxs  []context.Context
	next  []int
	bad   atomic.Int64
}

func newGRPCLoadGen(tb testing.TB, addr string, conns int, in []chainInput) *grpcLoadGen {
	g := &grpcLoadGen{next: make([]int, conns)}
	for _, c := range in {
		g.ctxs = append(g.ctxs, metadata.NewOutgoingContext(context.Background(), metadata.Pairs("x-forwarded-for", c.xff, "authorization", c.auth)))
	}
	for i := range conns {
		cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = cc.Close() })
		g.conns = append(g.conns, cc)
		g.next[i] = i * len(in) / conns
	}
	return g
}

// run makes n calls spread over the connections and waits for every
// answer.
func (g *grpcLoadGen) run(n int) {
	in := wrapperspb.String("1")
	outs := make([]wrapperspb.StringValue, len(g.conns)) // one per connection, reused
	spread(n, g.next, func(ci, i int) bool {
		if err := g.conns[ci].Invoke(g.ctxs[i%len(g.ctxs)], grpcMethod, in, &outs[ci]); err != nil {
			g.bad.Add(1)
		}
		return true
	})
}

// BenchmarkGRPCLoopback (issue 28): the chain workload as unary gRPC calls
// over loopback, 16 connections, from the in-process grpc-go client:
// grpclimit's interceptors on the front door of BenchmarkLoopback
// (ratekey-grpc) against a bare grpc.Server (grpc), interleaved in the
// same run with BenchmarkLoopback's HTTP front door (ratekey) and bare
// chi (chi) on the same requests. Metrics: <name>-req/s, grpc-ratio
// (ratekey-grpc ÷ grpc) and http-ratio (ratekey ÷ chi): the target is
// grpc-ratio ≥ http-ratio (the interceptor costs no more over a bare gRPC
// server than the front door over bare chi).
func BenchmarkGRPCLoopback(b *testing.B) {
	const conns = 16
	k := newJWTKey(b, "ES256")
	in := chainInputs(b, k)
	raw := loopbackRequests(in)
	rg := newGRPCLoadGen(b, serveGRPC(b, newGRPCLimiter(b, k)), conns, in)
	bg := newGRPCLoadGen(b, serveGRPC(b, nil), conns, in)
	rh := newLoadGen(b, serve(b, newFrontDoor(b, k, false)), conns, raw)
	bh := newLoadGen(b, serve(b, newBareRouter()), conns, raw)
	cs := []contender{{"ratekey-grpc", rg.run}, {"grpc", bg.run}, {"ratekey", rh.run}, {"chi", bh.run}}
	for _, c := range cs {
		c.run(len(in)) // warm-up: verify and cache every token, track every key
	}
	for name, n := range map[string]int64{"ratekey-grpc": rg.bad.Swap(0), "grpc": bg.bad.Swap(0), "ratekey": rh.bad.Swap(0), "chi": bh.bad.Swap(0)} {
		if n > 0 {
			b.Fatalf("%s: %d calls failed during warm-up", name, n)
		}
	}
	res := interleave(b, cs, interleaveOptions{})
	for name, g := range map[string]*atomic.Int64{"ratekey-grpc": &rg.bad, "grpc": &bg.bad, "ratekey": &rh.bad, "chi": &bh.bad} {
		if n := g.Load(); n > 0 {
			b.Errorf("%s: %d calls failed", name, n)
		}
	}
	rkg, gr, rk, chi := 1e9/res[0].nsOp, 1e9/res[1].nsOp, 1e9/res[2].nsOp, 1e9/res[3].nsOp
	b.ReportMetric(rkg, "ratekey-grpc-req/s")
	b.ReportMetric(gr, "grpc-req/s")
	b.ReportMetric(rk, "ratekey-req/s")
	b.ReportMetric(chi, "chi-req/s")
	b.ReportMetric(rkg/gr, "grpc-ratio")
	b.ReportMetric(rk/chi, "http-ratio")
	b.ReportMetric(res[0].allocs-res[1].allocs, "grpc-allocs-over-bare")
	b.ReportMetric(res[2].allocs-res[3].allocs, "http-allocs-over-bare")
}
