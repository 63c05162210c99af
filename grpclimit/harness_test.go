package grpclimit_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/grpclimit"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/internal/logtest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/trustedproxy"
)

// The test service, test.v1.Echo, hand-written (no protoc): Do answers
// who the call was keyed as; Free is the same, unlimited; Report reports
// its request's value as the call's cost (middleware.ReportCost), and so
// does Count, a server stream; Hold is a server stream that sends one
// message and holds until its client goes away.
const (
	methodDo     = "/test.v1.Echo/Do"
	methodFree   = "/test.v1.Echo/Free"
	methodReport = "/test.v1.Echo/Report"
	methodHold   = "/test.v1.Echo/Hold"
	methodCount  = "/test.v1.Echo/Count"
)

const testIssuer = "https://issuer.grpclimit.test.invalid"

// rig is a real gRPC server on 127.0.0.1 with the test service behind a
// Limiter, and an HTTP server (GET /v1/who) behind the same
// ratekey.Middleware, on a manual clock.
type rig struct {
	t        testing.TB
	clock    *clocktest.ManualClock
	m        *ratekey.Middleware
	lim      *grpclimit.Limiter
	srv      *grpc.Server
	addr     string // the gRPC server's
	http     *httptest.Server
	key      ed25519.PrivateKey
	now      time.Time
	apiKey   string        // a valid API key of tenant acme, account robot
	holding  chan struct{} // Hold's handler has started
	finished chan string   // the interceptors returned for a Hold call (its status)
	reported chan error    // ReportCost's result in Report
}

type rigOptions struct {
	policies   []ratekey.Policy
	store      limiter.Limiter // nil: a memory store on the rig's clock
	register   *bool           // Register the server (default true)
	unknown    bool            // an UnknownServiceHandler answers unknown methods
	anonymous  bool            // Config.Anonymous
	logHandler *logtest.Lines  // Config.Logger's handler; nil: slog.Default()
}

// basePolicies are the rig's default policies: per-account (tenant,
// account; 3 requests an hour) on Do and on the HTTP route, shared; hold
// (network; 1 in flight) on Hold; llm (tenant, account; reserves 10 of
// 100 an hour, settles) on Report and Count. Free has none.
func basePolicies() []ratekey.Policy {
	perHour := func(n int64) limiter.Rate { return limiter.Rate{Count: n, Per: time.Hour} }
	return []ratekey.Policy{
		{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount},
			Limit: limiter.Limit{Rate: perHour(1), Burst: 3}, Operations: []string{methodDo, "GET /v1/who"}},
		{Name: "hold", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limiter.Limit{MaxInFlight: 1}, Operations: []string{methodHold}},
		{Name: "llm", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}, Settle: true,
			Cost: 10, Limit: limiter.Limit{Rate: perHour(100), Burst: 100}, Operations: []string{methodReport, methodCount}},
	}
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	g := &rig{t: t, clock: clocktest.NewManualClock(), key: priv, now: time.Now(),
		holding: make(chan struct{}, 8), finished: make(chan string, 8), reported: make(chan error, 8)}
	jwtAuth, err := identity.NewJWTAuthenticator(identity.JWTConfig{
		Issuers: []identity.IssuerRecord{{Issuer: testIssuer, Tenant: "acme", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
			Keys: []identity.VerificationKey{{KID: "k1", Key: pub}}}},
		Now: func() time.Time { return g.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	pepper := []byte("0123456789abcdef0123456789abcdef")
	key, rec, err := identity.NewAPIKey(pepper, "acme", "robot")
	if err != nil {
		t.Fatal(err)
	}
	g.apiKey = key
	store, err := identity.NewMemoryAPIKeyStore([]identity.APIKeyRecord{rec})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := identity.NewAPIKeyAuthenticator(identity.APIKeyConfig{Store: store, Pepper: pepper})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := identity.NewCombinedAuthenticator(identity.CombinedConfig{JWT: jwtAuth, APIKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	if o.policies == nil {
		o.policies = basePolicies()
	}
	if o.store == nil {
		o.store = memory.New(memory.Options{Now: g.clock.Time})
	}
	router := chi.NewRouter()
	cfg := ratekey.Config{
		Router: router,
		// 127.0.0.2 is a trusted proxy writing X-Forwarded-For, 127.0.0.3
		// one writing Forwarded (RFC 7239); 127.0.0.1 is a client.
		Proxies: trustedproxy.Config{Rules: []trustedproxy.Rule{
			{From: []string{"127.0.0.2"}, Header: "X-Forwarded-For"},
			{From: []string{"127.0.0.3"}, Header: "Forwarded"},
		}},
		Authenticator: auth,
		Anonymous:     o.anonymous,
		Policies:      o.policies,
		Limiter:       o.store,
		DebugAllow:    []string{"192.0.2.0/24"},
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	if o.logHandler != nil {
		cfg.Logger = slog.New(o.logHandler)
	}
	g.m, err = ratekey.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	router.With(g.m.Handler).Get("/v1/who", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprint(w, who(r.Context()))
	})
	g.http = httptest.NewServer(router)
	t.Cleanup(g.http.Close)

	g.lim = grpclimit.New(g.m, cfg.Logger)
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.lim.UnaryServerInterceptor()),
		// The outer interceptor reports when the Limiter's returned for a
		// Hold call: its slot is released by then.
		grpc.ChainStreamInterceptor(g.streamDone, g.lim.StreamServerInterceptor()),
	}
	if o.unknown {
		opts = append(opts, grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			return ss.SendMsg(wrapperspb.String(who(ss.Context())))
		}))
	}
	g.srv = grpc.NewServer(opts...)
	g.srv.RegisterService(&echoDesc, g)
	if o.register == nil || *o.register {
		g.lim.Register(g.srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	go func() { _ = g.srv.Serve(ln) }()
	t.Cleanup(g.srv.Stop)
	return g
}

// streamDone is a stream interceptor before the Limiter's: it reports
// the status of each Hold call once the Limiter's interceptor returned.
func (g *rig) streamDone(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	if info.FullMethod == methodHold {
		g.finished <- codeName(err)
	}
	return err
}

// who describes how a call or request was keyed: its client and account.
func who(ctx context.Context) string {
	out := "client="
	if c, ok := middleware.ClientFrom(ctx); ok {
		out += c.Client.String()
	}
	out += " account="
	if p, ok := middleware.PrincipalFrom(ctx); ok {
		out += p.Tenant + "/" + p.Account
	}
	return out
}

// token mints an EdDSA token for sub.
func (g *rig) token(sub string) string {
	g.t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": testIssuer, "sub": sub, "aud": "api",
		"iat": g.now.Unix(), "exp": g.now.Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(g.key)
	if err != nil {
		g.t.Fatal(err)
	}
	return s
}

// forged mints a token for sub signed with a key the issuer never had.
func (g *rig) forged(sub string) string {
	g.t.Helper()
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		g.t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": testIssuer, "sub": sub, "aud": "api",
		"iat": g.now.Unix(), "exp": g.now.Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(other)
	if err != nil {
		g.t.Fatal(err)
	}
	return s
}

// conn dials the rig's gRPC server from source address from (127.0.0.1,
// 127.0.0.2, ...).
func (g *rig) conn(from string) *grpc.ClientConn {
	g.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	cc, err := grpc.NewClient("passthrough:///"+g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// reply is what a unary call returned.
type reply struct {
	body            string
	err             error
	header, trailer metadata.MD
}

// call makes a unary call of method with metadata kv (key, value pairs).
func call(cc *grpc.ClientConn, method string, in string, kv ...string) reply {
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	var out wrapperspb.StringValue
	var rep reply
	rep.err = cc.Invoke(ctx, method, wrapperspb.String(in), &out, grpc.Header(&rep.header), grpc.Trailer(&rep.trailer))
	rep.body = out.GetValue()
	return rep
}

// bearer is the authorization metadata of a token.
func bearer(tok string) []string { return []string{"authorization", "Bearer " + tok} }

// The service.

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.v1.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Do", Handler: unary(methodDo, func(_ *rig, ctx context.Context, _ string) (string, error) { return who(ctx), nil })},
		{MethodName: "Free", Handler: unary(methodFree, func(_ *rig, ctx context.Context, _ string) (string, error) { return who(ctx), nil })},
		{MethodName: "Report", Handler: unary(methodReport, func(g *rig, ctx context.Context, in string) (string, error) {
			n, _ := strconv.ParseInt(in, 10, 64)
			g.reported <- middleware.ReportCost(ctx, "", n)
			return "", nil
		})},
	},
	Streams: []grpc.StreamDesc{{StreamName: "Count", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		var in wrapperspb.StringValue
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		n, _ := strconv.ParseInt(in.GetValue(), 10, 64)
		srv.(*rig).reported <- middleware.ReportCost(ss.Context(), "", n)
		return ss.SendMsg(wrapperspb.String(who(ss.Context())))
	}}, {StreamName: "Hold", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		var in wrapperspb.StringValue
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		if err := ss.SendMsg(wrapperspb.String(who(ss.Context()))); err != nil {
			return err
		}
		srv.(*rig).holding <- struct{}{}
		<-ss.Context().Done()
		return ss.Context().Err()
	}}},
}

// unary returns the MethodDesc handler of fn, which takes and returns a
// google.protobuf.StringValue's value.
func unary(method string, fn func(g *rig, ctx context.Context, in string) (string, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			out, err := fn(srv.(*rig), ctx, req.(*wrapperspb.StringValue).GetValue())
			if err != nil {
				return nil, err
			}
			return wrapperspb.String(out), nil
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

// codeName is err's gRPC code's name ("OK" for nil), a context's error
// as gRPC reports it.
func codeName(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String()
	}
	return status.FromContextError(err).Code().String()
}
