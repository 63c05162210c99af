package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/grpcmethod"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// Front is the HTTP front door a [Limiter] runs gRPC calls through:
// *ratekey.Middleware implements it, and so can a chain composed by hand
// (the demo's, which it swaps on reload).
type Front interface {
	// Handler returns next behind the whole chain (client address,
	// credential, policies), as ratekey.Middleware.Handler does. It must
	// pass next the http.ResponseWriter it was given (or one whose
	// Unwrap method returns it), and must not write a response when it
	// calls next.
	Handler(next http.Handler) http.Handler
	// Check returns the chain's Record for a request without spending
	// budget, as ratekey.Middleware.Check does.
	Check(r *http.Request) *middleware.Record
	// Policies returns the chain's policies (a copy), as
	// ratekey.Middleware.Policies does: New reads which operations they
	// name.
	Policies() []policy.Policy
}

// Limiter holds a gRPC server's unary and stream interceptors, which run
// every call through a [Front]'s chain. Build it with [New], install its
// interceptors on the grpc.Server and [Limiter.Register] that server.
// Immutable once registered; safe for concurrent use.
type Limiter struct {
	front  Front
	chain  http.Handler // front.Handler(terminal)
	logger *slog.Logger
	// every: some policy applies to every operation (names none);
	// otherwise named holds the operations the policies name.
	every bool
	named map[string]bool
	// grpcOps are the gRPC operations the policies name, with their
	// fields, checked against the server's methods at the first call.
	grpcOps []opField

	srv        atomic.Pointer[grpc.Server]
	once       sync.Once
	methods    map[string]bool // the server's full method names, read once
	unregCalls sync.Once       // logs, once, calls before Register
}

// opField is an operation a policy names and where: policy name and field.
type opField struct{ policy, field, op string }

// New returns the Limiter that runs gRPC calls through front: the same
// trusted proxies, authenticator, policies, store and metrics as front's
// HTTP requests, so that one process limits both against the same
// buckets. logger receives the operation check's errors (see Register);
// nil means slog.Default(). front's policies are read once, here: build a
// new Limiter when they change. Safe for concurrent use.
func New(front Front, logger *slog.Logger) *Limiter {
	if logger == nil {
		logger = slog.Default()
	}
	l := &Limiter{front: front, logger: logger, named: map[string]bool{}}
	for i, p := range front.Policies() {
		ref := fmt.Sprintf("policies[%d] (%q)", i, p.Name)
		l.every = l.every || len(p.Operations) == 0
		for j, op := range p.Operations {
			l.named[op] = true
			if grpcmethod.Valid(op) {
				l.grpcOps = append(l.grpcOps, opField{p.Name, fmt.Sprintf("%s.operations[%d]", ref, j), op})
			}
		}
		for j, pr := range p.Priorities {
			if grpcmethod.Valid(pr.Operation) {
				l.grpcOps = append(l.grpcOps, opField{p.Name, fmt.Sprintf("%s.priorities[%d].operation", ref, j), pr.Operation})
			}
		}
	}
	l.chain = front.Handler(http.HandlerFunc(terminal))
	return l
}

// Register tells l the server its interceptors are installed on. The
// server's services are read at the first call (register them all before
// serving, as grpc-go requires): a call of a method the server does not
// serve (one an UnknownServiceHandler answers) is named
// [middleware.UnmatchedOperation], never by the method the client chose,
// and each gRPC operation a policy names that no service serves is logged
// at Error level ("ratekey operation served by no gRPC method", naming its
// field), as ratekey.New's check of HTTP routes does. A call before
// Register is refused with INTERNAL. Register panics when called a second
// time (one Limiter per server). Safe for concurrent use.
func (l *Limiter) Register(srv *grpc.Server) {
	if srv == nil {
		panic("grpclimit: Register of a nil *grpc.Server")
	}
	if !l.srv.CompareAndSwap(nil, srv) {
		panic("grpclimit: Register called twice: use one Limiter per server")
	}
}

// errUnregistered answers a call before Register.
var errUnregistered = status.Error(codes.Internal, "grpclimit: the Limiter's server is not registered (call Register)")

// operation returns the operation of a call of fullMethod: the method
// itself when the registered server serves it, else UnmatchedOperation;
// ok is false before Register.
func (l *Limiter) operation(fullMethod string) (op string, ok bool) {
	srv := l.srv.Load()
	if srv == nil {
		return middleware.UnmatchedOperation, false
	}
	l.once.Do(func() { l.load(srv) })
	if l.methods[fullMethod] {
		return fullMethod, true
	}
	return middleware.UnmatchedOperation, true
}

// load reads srv's methods and logs each gRPC operation a policy names
// that none of them is.
func (l *Limiter) load(srv *grpc.Server) {
	l.methods = map[string]bool{}
	for name, info := range srv.GetServiceInfo() {
		for _, m := range info.Methods {
			l.methods["/"+name+"/"+m.Name] = true
		}
	}
	for _, f := range l.grpcOps {
		if l.methods[f.op] {
			continue
		}
		err := fmt.Errorf("%s: %s is served by no method of the gRPC server: the policy never applies to it (a gRPC operation is a method's full name, \"/package.Service/Method\", as registered)", f.field, quote.Value(f.op))
		l.logger.Error("ratekey operation served by no gRPC method", "policy", f.policy, "operation", f.op, "error", err.Error())
	}
}

// limits reports whether any policy applies to op.
func (l *Limiter) limits(op string) bool { return l.every || l.named[op] }

// unregistered answers a call before Register, logging it once.
func (l *Limiter) unregistered() error {
	l.unregCalls.Do(func() {
		l.logger.Error("grpclimit: a call before Register: every call is refused with INTERNAL until the server is registered")
	})
	return errUnregistered
}

// UnaryServerInterceptor returns the interceptor of unary calls, for
// grpc.ChainUnaryInterceptor (first, so that no other work is done for a
// refused call). A call of an operation no policy applies to goes
// straight to its handler. Any other is run through the Front's chain as
// an HTTP/2 POST to its full method name, its metadata as header fields
// and its peer as the TCP peer; refused, it returns the status of the
// package documentation's table; admitted, the handler runs on a context
// that carries the chain's request state (middleware.ClientFrom,
// PrincipalFrom, ReportCost), and the response header metadata carries
// ratelimit and ratelimit-policy. Safe for concurrent use.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		op, ok := l.operation(info.FullMethod)
		switch {
		case !ok:
			return nil, l.unregistered()
		case !l.limits(op):
			return handler(ctx, req)
		}
		c := getCall()
		c.ctx, c.unary, c.msg = ctx, handler, req
		err := l.run(c, op, info.FullMethod)
		resp := c.resp
		if err == nil {
			err = c.err
		}
		putCall(c)
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// StreamServerInterceptor returns the interceptor of streaming calls, for
// grpc.ChainStreamInterceptor (first). A stream is one request at its
// start: it spends its tokens then, holds its in-flight slots until its
// handler returns (a client that cancels ends it when the handler sees
// its context done), and settles then (ReportCost on the stream's
// context). Otherwise as [Limiter.UnaryServerInterceptor]. Safe for
// concurrent use.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		op, ok := l.operation(info.FullMethod)
		switch {
		case !ok:
			return l.unregistered()
		case !l.limits(op):
			return handler(srv, ss)
		}
		c := getCall()
		c.ctx, c.stream, c.streamHandler, c.srv = ss.Context(), ss, handler, srv
		err := l.run(c, op, info.FullMethod)
		if err == nil {
			err = c.err
		}
		putCall(c)
		return err
	}
}

// run passes c through the chain; it returns the refusal's status error,
// or nil when the handler ran (its result is in c).
func (l *Limiter) run(c *call, op, method string) error {
	r, err := c.request(op, method, true)
	if err != nil {
		return err
	}
	l.chain.ServeHTTP(c, r)
	if c.ran {
		return nil
	}
	c.sendHeader()
	if secs, ok := retryAfter(c.out); ok {
		c.sendPushback(secs)
	}
	return refusal(c.status, c.out, c.body)
}

// Check returns the Record of a call of fullMethod with ctx's peer and
// incoming metadata (peer.NewContext, metadata.NewIncomingContext; a ctx
// without a peer reads as a Unix-socket peer, as net/http's empty
// RemoteAddr does: see [Limiter.Describe] for an *http.Request's) as the
// interceptors would decide it, charging nothing: the client address and
// its derivation, the principal, the operation and each policy's key and
// would-be decision (Front.Check's, the debug endpoint's JSON). A method
// the registered server does not serve (or any, before Register) is
// named UNMATCHED; for an operation no policy applies to, the Record
// says "limited": false and authentication "not_reached", with no
// policies (the interceptors pass such a call on untouched); its
// derivation shows the client. Safe for concurrent use.
func (l *Limiter) Check(ctx context.Context, fullMethod string) *middleware.Record {
	op, _ := l.operation(fullMethod)
	// A request state of its own: ctx may be a live call's (Check from a
	// handler), whose operation WithOperation must not change.
	ctx, _ = middleware.WithRecord(ctx)
	c := &call{ctx: ctx}
	r, _ := c.request(op, fullMethod, false)
	rec := l.front.Check(r)
	if !l.limits(op) {
		// The interceptors pass the call on untouched: no credential is
		// checked, no policy applies; the derivation shows its client.
		rec.Principal, rec.Limited, rec.Decision = nil, false, ""
		rec.Authentication = middleware.DebugAuthentication{Outcome: "not_reached"}
		rec.Policies, rec.DelaySeconds, rec.RoundTrips = []decide.PolicyResult{}, nil, 0
	}
	return rec
}

// Describe is [Limiter.Check] of a call of fullMethod from r's peer
// (r.RemoteAddr) with r's header fields as its incoming metadata (names
// in lower case) and r's context: the debug endpoint's ?grpc= view, in
// the shape ratekey.Middleware.DebugGRPC and middleware.DebugConfig.GRPC
// take. Charges nothing. Safe for concurrent use.
func (l *Limiter) Describe(r *http.Request, fullMethod string) *middleware.Record {
	ctx := r.Context()
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: net.TCPAddrFromAddrPort(ap)})
	}
	md := metadata.MD{}
	for k, vs := range r.Header {
		md[strings.ToLower(k)] = vs
	}
	return l.Check(metadata.NewIncomingContext(ctx, md), fullMethod)
}
