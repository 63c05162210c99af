package grpclimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
)

// BenchmarkUnary: a limited unary call through the interceptor (grpc), in
// process (no transport: a stream that drops the header metadata),
// against the same request through the HTTP front
// door's Handler: the interceptor's own cost is the difference. The
// metadata is what grpc-go's server hands the interceptor for a call from
// grpc-go behind a proxy. unlimited is a call of a method no policy
// applies to (the issue 28 target: at most 1 allocation; TestUnlimited
// holds it at 0).
func BenchmarkUnary(b *testing.B) {
	big := limiter.Limit{Rate: limiter.Rate{Count: 1e9, Per: time.Second}, Burst: 1e9}
	g := newRig(b, rigOptions{policies: []ratekey.Policy{
		{Name: "per-network", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: big, Operations: []string{methodDo}},
		{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount, limitkey.DimOperation}, Limit: big, Operations: []string{methodDo}},
	}})
	tok := g.token("bench")
	b.Run("grpc", func(b *testing.B) {
		ic := g.lim.UnaryServerInterceptor()
		md := metadata.Pairs(":authority", "127.0.0.1:50051", "content-type", "application/grpc", "user-agent", "grpc-go/1.85.0",
			"x-forwarded-for", "198.51.100.7", "authorization", "Bearer "+tok)
		ctx := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(peerContext("127.0.0.2"), md), nopStream{})
		info := &grpc.UnaryServerInfo{FullMethod: methodDo}
		out := wrapperspb.String("")
		h := func(context.Context, any) (any, error) { return out, nil }
		b.ReportAllocs()
		for b.Loop() {
			_, _ = ic(ctx, out, info, h)
		}
	})
	b.Run("unlimited", func(b *testing.B) {
		// A method no policy applies to: straight to its handler.
		ic := g.lim.UnaryServerInterceptor()
		ctx := metadata.NewIncomingContext(peerContext("127.0.0.2"), metadata.Pairs("authorization", "Bearer "+tok))
		info := &grpc.UnaryServerInfo{FullMethod: methodFree}
		out := wrapperspb.String("")
		h := func(context.Context, any) (any, error) { return out, nil }
		b.ReportAllocs()
		for b.Loop() {
			_, _ = ic(ctx, out, info, h)
		}
	})
	b.Run("http", func(b *testing.B) {
		h := g.m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		r := httptest.NewRequest(http.MethodPost, methodDo, nil)
		r = r.WithContext(middleware.WithOperation(r.Context(), methodDo))
		r.RemoteAddr = "127.0.0.2:5000"
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		r.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		b.ReportAllocs()
		for b.Loop() {
			clear(w.Header())
			// A fresh request state per request, as the interceptor makes.
			h.ServeHTTP(w, r.WithContext(middleware.WithOperation(r.Context(), methodDo)))
		}
	})
}

// nopStream is a grpc.ServerTransportStream that drops what it is given.
type nopStream struct{}

func (nopStream) Method() string               { return methodDo }
func (nopStream) SetHeader(metadata.MD) error  { return nil }
func (nopStream) SendHeader(metadata.MD) error { return nil }
func (nopStream) SetTrailer(metadata.MD) error { return nil }
