package middleware

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sync"

	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/trustedproxy"
)

type ctxKey int

// stateKey is the context key of a request's *requestState.
const stateKey ctxKey = 0

// requestState is everything ratekey keeps about one request, in one
// allocation (with the request copy that carries it: stateRequest) that is
// also the request's context layer (it embeds the parent context and
// answers [stateKey] itself, so no context.WithValue node is needed): the
// client address and how it was derived (see [clientState]), the
// principal, the Record, and the arena that holds the rate limiter's keys
// and response field values (so that they need no allocation of their
// own). Every request that passes ClientAddress pays for it (and zeroes
// it): with the request copy it fits Go's 896-byte size class
// (TestRequestStateSize), and every byte a request allocates costs the
// garbage collector work (BENCHMARKS.md, "A smaller request state"). The
// rate limiter's working memory is pooled apart from it (see [scratch]).
// The first ratekey middleware a request meets adds it; the others fill it
// in place, so a request costs one context layer whatever the chain. It is
// written by the request's goroutine as it passes the middlewares; a
// handler may run rate-limit evaluations of the request concurrently,
// which record under mu (and each claim the arena or get their own, see
// [claimArena]).
type requestState struct {
	context.Context // the parent
	client          clientState
	principal       limitkey.Principal
	record          *Record
	out             arena // the rate limiter's keys and response field values
	// op is the operation opBy named for the request, kept for the second
	// phase: both phases need it, and a lookup costs a chi Find.
	op   string
	opBy *rateLimitState
	// mu guards record's rate-limit part, op, opBy and the open
	// reservations of the request's settle scopes (settle.go): a handler
	// may run evaluations of the request concurrently, and report costs
	// from any goroutine.
	mu           sync.Mutex
	hasClient    bool
	hasPrincipal bool
	// opFixed: op was fixed by [WithOperation] before the chain ran (a
	// gRPC call's full method name); no rate limiter names it then.
	opFixed bool
}

// clientState is a successful [trustedproxy.Result] of Resolve, without
// the parts it leaves empty: the examined hops (Explain lists them, for
// the Record and the debug endpoint) and the error (there is none). 56
// bytes fewer than the Result in every request's state.
type clientState struct {
	client            netip.Addr
	network           netip.Prefix
	peer, header, why string // Derivation.Peer, Header and Reason
	rule              int32
	peerTrusted       bool
}

// set keeps res, a successful resolution.
func (c *clientState) set(res *trustedproxy.Result) {
	d := &res.Derivation
	*c = clientState{
		client: res.Client, network: res.Network,
		peer: d.Peer, header: d.Header, why: d.Reason, rule: int32(d.Rule), peerTrusted: d.PeerTrusted,
	}
}

// result returns the Result c keeps, its Derivation without Hops (nil)
// and so with Chosen -1.
func (c *clientState) result() trustedproxy.Result {
	return trustedproxy.Result{Client: c.client, Network: c.network, Derivation: trustedproxy.Derivation{
		Peer: c.peer, PeerTrusted: c.peerTrusted, Rule: int(c.rule), Header: c.header, Chosen: -1, Reason: c.why,
	}}
}

// operation returns r's operation as st names it, asking st once per
// request (rs may be nil: then st is asked). Safe for concurrent use.
func (rs *requestState) operation(st *rateLimitState, r *http.Request) string {
	if rs == nil {
		return st.Operation(r)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.opFixed {
		return rs.op
	}
	if rs.opBy != st {
		rs.op, rs.opBy = st.Operation(r), st
	}
	return rs.op
}

// Value returns the state itself for stateKey, and asks the parent
// context for any other key.
func (st *requestState) Value(key any) any {
	if key == stateKey {
		return st
	}
	return st.Context.Value(key)
}

// String names the layer, never its contents (a client's address and
// identity), as context.WithValue does for a value that is not a
// Stringer: fmt prints contexts in log lines.
func (st *requestState) String() string {
	if p, ok := st.Context.(fmt.Stringer); ok {
		return p.String() + ".WithValue(ratekey request state)"
	}
	return "context.WithValue(ratekey request state)"
}

// GoString is String, for %#v.
func (st *requestState) GoString() string { return st.String() }

// stateFrom returns ctx's request state, or nil.
func stateFrom(ctx context.Context) *requestState {
	st, _ := ctx.Value(stateKey).(*requestState)
	return st
}

// withState returns a context derived from ctx holding a new, empty
// request state (the state itself), and the state.
func withState(ctx context.Context) (context.Context, *requestState) {
	st := &requestState{Context: ctx}
	return st, st
}

// ensureState returns r's request state, first giving r one (and so
// returning a new *http.Request) when it has none.
func ensureState(r *http.Request) (*http.Request, *requestState) {
	if st := stateFrom(r.Context()); st != nil {
		return r, st
	}
	m := &stateRequest{st: requestState{Context: r.Context()}}
	// WithContext is inlined, and its copy of r does not escape: it is
	// copied into m, so the state and the request carrying it are one
	// allocation.
	m.req = *r.WithContext(&m.st)
	return &m.req, &m.st
}

// stateRequest is a new request state and the shallow copy of the request
// that carries it as its context: one allocation instead of two, for
// every request the first ratekey middleware meets (they live as long as
// each other anyway: the request refers to the state, the state to
// nothing of the request's).
type stateRequest struct {
	st  requestState
	req http.Request
}

// WithOperation returns a context in which the request whose context it
// becomes has operation op, whatever its method and path: every rate
// limiter of the chain, [DebugConfig.Explain] and the [Record] then use op
// instead of asking [RateLimitConfig].Operation (which names routes of an
// HTTP router). It is how a gRPC call, run through the HTTP chain as a
// POST to its full method name, gets that name as its operation (package
// grpclimit); it costs the one allocation of the request's state, which the
// chain would make anyway. op is used as given: pass a name the policies'
// Operations use, or [UnmatchedOperation], never a raw value the client
// chose (each distinct value is a fresh bucket of an operation-keyed
// policy). When ctx already holds a request's state ([WithRecord]), op is
// fixed in it and ctx is returned. Call it before the chain runs, from
// the request's goroutine.
func WithOperation(ctx context.Context, op string) context.Context {
	st := stateFrom(ctx)
	if st == nil {
		ctx, st = withState(ctx)
	}
	st.mu.Lock()
	st.op, st.opFixed = op, true
	st.mu.Unlock()
	return ctx
}

// ClientFrom returns the client address resolved by [ClientAddress] for this
// request, and false when that middleware did not run. The Result is
// [trustedproxy.Resolver.Resolve]'s: its Derivation says how the client
// was chosen but lists no hops (Hops nil, Chosen -1); the request's
// [Record] and the debug endpoint list them.
func ClientFrom(ctx context.Context) (trustedproxy.Result, bool) {
	st := stateFrom(ctx)
	if st == nil || !st.hasClient {
		return trustedproxy.Result{}, false
	}
	return st.client.result(), true
}

// PrincipalFrom returns the principal established by [Authenticate], and false
// when that middleware did not run. An anonymous request (allowed by
// [AuthOptions].Anonymous) yields a Principal whose Method is
// limitkey.MethodAnonymous and whose other fields are empty.
func PrincipalFrom(ctx context.Context) (limitkey.Principal, bool) {
	st := stateFrom(ctx)
	if st == nil || !st.hasPrincipal {
		return limitkey.Principal{}, false
	}
	return st.principal, true
}
