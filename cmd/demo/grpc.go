package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/grpclimit"
	"github.com/ratekey/ratekey/middleware"
)

// The demo's gRPC side (grpc.listen, -grpc-addr): the standard health
// service, not limited (as /healthz), and ratekey.demo.v1.Work, whose
// calls run through the /v1 routes' chain (package grpclimit): the same
// trusted proxies, credentials, policies and buckets. Work needs no
// protoc: its ServiceDesc is written by hand, with well-known message
// types.

// workDo is Work's one method: a google.protobuf.StringValue in (ignored),
// a google.protobuf.Struct out, {"served": whoami}, like GET
// /v1/reports/{id}.
const workDo = "/ratekey.demo.v1.Work/Do"

// grpcLimitedMethods are the demo's gRPC methods behind the limiter: the
// operations a policy may name beside the /v1 routes.
var grpcLimitedMethods = map[string]bool{workDo: true}

// healthService is the standard health service's name.
const healthService = "grpc.health.v1.Health"

var workDesc = grpc.ServiceDesc{
	ServiceName: "ratekey.demo.v1.Work",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Do", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		if ic == nil {
			return workDoHandler(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: workDo}, workDoHandler)
	}}},
}

// workDoHandler answers Do: whose budget the call spent.
func workDoHandler(ctx context.Context, _ any) (any, error) {
	b, err := json.Marshal(map[string]any{"served": whoamiOf(ctx)})
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return structpb.NewStruct(m)
}

// newGRPCServer returns the demo's gRPC server: health and Work, every
// call but health's through the current app's grpclimit interceptors,
// metadata bounded as the HTTP server bounds header fields (64 KiB).
func newGRPCServer(s *server) *grpc.Server {
	gs := grpc.NewServer(
		grpc.MaxHeaderListSize(64<<10),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	gs.RegisterService(&workDesc, nil)
	return gs
}

// grpcLimited reports whether the demo limits calls of method: all but
// the health service's.
func grpcLimited(method string) bool {
	return !strings.HasPrefix(method, "/"+healthService+"/")
}

// unaryInterceptor runs a unary call through the current app's Limiter.
func (s *server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if a := s.current.Load(); a != nil && a.grpc != nil && grpcLimited(info.FullMethod) {
		return a.grpc.unary(ctx, req, info, h)
	}
	return h(ctx, req)
}

// streamInterceptor runs a stream through the current app's Limiter.
func (s *server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if a := s.current.Load(); a != nil && a.grpc != nil && grpcLimited(info.FullMethod) {
		return a.grpc.stream(srv, ss, info, h)
	}
	return h(srv, ss)
}

// grpcSide is an app's gRPC limiter: built with its router, on its rate
// limiter, so that a reload swaps both at once.
type grpcSide struct {
	lim    *grpclimit.Limiter
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

// newGRPCSide builds a's Limiter over the /v1 chain m, registered on
// a's gRPC server.
func (a *app) newGRPCSide(m *ratekey.Middleware, logger *slog.Logger) *grpcSide {
	lim := grpclimit.New(m, logger)
	lim.Register(a.grpcSrv)
	return &grpcSide{lim: lim, unary: lim.UnaryServerInterceptor(), stream: lim.StreamServerInterceptor()}
}

// describe is the debug endpoint's ?grpc=<method>: the Record of a call
// of method with r's peer, header fields (as metadata) and credential.
// The health service is served outside the limiter, as /healthz is: its
// Record says so, with the client it would derive.
func (g *grpcSide) describe(r *http.Request, method string) *middleware.Record {
	rec := g.lim.Describe(r, method)
	if !grpcLimited(method) {
		rec.Principal, rec.Limited, rec.Decision, rec.Policies = nil, false, "", []decide.PolicyResult{}
		rec.Authentication = middleware.DebugAuthentication{Outcome: "not_reached"}
	}
	return rec
}

// codeName is a gRPC status code as the gRPC specification names it
// (RESOURCE_EXHAUSTED).
func codeName(err error) string {
	name := status.Code(err).String()
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' && name[i-1] >= 'a' && name[i-1] <= 'z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}
