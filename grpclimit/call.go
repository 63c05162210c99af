package grpclimit

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratekey/ratekey/middleware"
)

// maxMetadataBytes bounds a call's metadata, counted as net/http counts a
// request's header fields (name, value and 4 bytes a line): the bound
// net/http servers apply by default (http.DefaultMaxHeaderBytes, 1 MiB).
const maxMetadataBytes = http.DefaultMaxHeaderBytes

// maxProblemBytes bounds the refusal body a call keeps: a problem is a
// few hundred bytes.
const maxProblemBytes = 16 << 10

// call is one gRPC call on its way through the chain, and the
// http.ResponseWriter the chain answers it on.
type call struct {
	ctx context.Context
	req http.Request // request's, before WithContext copies it
	url url.URL

	// The handler: unary, or a stream's.
	unary         grpc.UnaryHandler
	msg, resp     any
	stream        grpc.ServerStream
	streamHandler grpc.StreamHandler
	srv           any
	err           error
	ran           bool // the chain admitted the call: the handler ran

	// What the chain answered.
	out    http.Header
	status int
	body   []byte
}

// calls pools the calls the interceptors run, with their response
// header maps: a call is done with once the chain has returned (the
// chain holds the request only while it runs; the handler gets the
// context, never the request).
var calls = sync.Pool{New: func() any { return &call{out: make(http.Header, 4)} }}

// getCall returns an empty call.
func getCall() *call { return calls.Get().(*call) }

// putCall empties c and pools it: the response header map cleared, every
// reference dropped.
func putCall(c *call) {
	if len(c.out) > 8 || cap(c.body) > 4<<10 {
		return // an unusual answer: let it go
	}
	clear(c.out)
	*c = call{out: c.out, body: c.body[:0]}
	calls.Put(c)
}

// request returns the HTTP/2 request c's call is on the wire: POST to its
// full method name, its metadata as header fields (binary "-bin" keys
// and pseudo-headers aside), its peer as RemoteAddr, on c's context with
// op fixed as its operation. With bounded, metadata over
// maxMetadataBytes is refused with INVALID_ARGUMENT.
func (c *call) request(op, method string, bounded bool) (*http.Request, error) {
	h, host, size := header(c.ctx)
	if bounded && size > maxMetadataBytes {
		return nil, status.Error(codes.InvalidArgument, "grpclimit: the call's metadata exceeds 1 MiB")
	}
	c.url.Path = method
	c.req = http.Request{Method: http.MethodPost, URL: &c.url, Proto: "HTTP/2.0", ProtoMajor: 2, Header: h,
		Body: http.NoBody, Host: host, RemoteAddr: peerAddr(c.ctx), RequestURI: method}
	return c.req.WithContext(middleware.WithOperation(c.ctx, op)), nil
}

// header returns the header fields of ctx's incoming metadata, its
// :authority and its size. Keys are canonicalised (gRPC sends them in
// lower case, the chain reads canonical ones, http.CanonicalHeaderKey);
// values keep their order and bytes, so that a malformed forwarding chain
// from a trusted proxy is refused as over HTTP, never dropped (which would
// key the call by the proxy). The header is the map FromIncomingContext
// copied, its keys canonicalised in place.
func header(ctx context.Context) (h http.Header, host string, size int) {
	md, _ := metadata.FromIncomingContext(ctx) // a copy, keys in lower case: its map and slices are ours
	for k, vs := range md {
		if strings.ContainsFunc(k, unicode.IsUpper) {
			continue // added below, canonicalised: every key of md is in lower case
		}
		for _, v := range vs {
			size += len(k) + len(v) + 4
		}
		switch {
		case k == ":authority":
			if len(vs) > 0 { // grpc-go always sets one; hand-built metadata may not
				host = vs[0]
			}
			delete(md, k)
			continue
		case strings.HasPrefix(k, ":") || strings.HasSuffix(k, "-bin"):
			delete(md, k)
			continue
		}
		canon, ok := canonicalKeys[k]
		if !ok {
			canon = http.CanonicalHeaderKey(k)
		}
		if canon != k {
			delete(md, k)
			md[canon] = vs
		}
	}
	return http.Header(md), host, size
}

// canonicalKeys holds the canonical names of the metadata keys most calls
// carry (grpc-go's own, credentials, forwarding), so that they cost no
// allocation; http.CanonicalHeaderKey names the others.
var canonicalKeys = map[string]string{
	"content-type": "Content-Type", "user-agent": "User-Agent", "te": "Te",
	"grpc-accept-encoding": "Grpc-Accept-Encoding", "grpc-encoding": "Grpc-Encoding", "grpc-timeout": "Grpc-Timeout",
	"authorization": "Authorization", "x-api-key": "X-Api-Key", "cookie": "Cookie",
	"x-forwarded-for": "X-Forwarded-For", "forwarded": "Forwarded", "x-real-ip": "X-Real-Ip",
	"cf-connecting-ip": "Cf-Connecting-Ip", "true-client-ip": "True-Client-Ip", "x-client-ip": "X-Client-Ip",
	"x-envoy-external-address": "X-Envoy-External-Address", "traceparent": "Traceparent", "tracestate": "Tracestate",
}

// peerAddr returns ctx's peer as net/http writes a RemoteAddr ("ip:port",
// or a Unix socket's name), "" without one.
func peerAddr(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	switch {
	case !ok || p.Addr == nil:
		return ""
	case p.Addr.Network() == "tcp":
		if a, ok := p.Addr.(*net.TCPAddr); ok {
			// a.String() in one allocation: an IPv4 address as IPv4,
			// whether its net.IP has 4 bytes or 16.
			ap := a.AddrPort()
			return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
		}
	}
	return p.Addr.String()
}

// Header, Write and WriteHeader capture the chain's answer.
func (c *call) Header() http.Header {
	if c.out == nil {
		c.out = make(http.Header, 4)
	}
	return c.out
}

func (c *call) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if len(c.body)+len(p) <= maxProblemBytes {
		c.body = append(c.body, p...)
	}
	return len(p), nil
}

func (c *call) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

// terminal is the chain's last handler: it runs the call's gRPC handler
// on the request's context, after setting the response header metadata.
func terminal(w http.ResponseWriter, r *http.Request) {
	c := callOf(w)
	if c == nil {
		// A Front that wrapped the writer without Unwrap: the call
		// cannot be found, and is refused (INTERNAL).
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	c.ran = true
	c.sendHeader()
	ctx := r.Context()
	if c.unary != nil {
		c.resp, c.err = c.unary(ctx, c.msg)
		return
	}
	c.err = c.streamHandler(c.srv, &serverStream{ServerStream: c.stream, ctx: ctx})
}

// callOf returns the call w is, unwrapping writers that wrap it.
func callOf(w http.ResponseWriter) *call {
	for {
		switch v := w.(type) {
		case *call:
			return v
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return nil
		}
	}
}

// responseFields are the response fields the chain writes that a call's
// header metadata carries, with their metadata keys.
var responseFields = [...]struct{ field, key string }{
	{"Ratelimit", "ratelimit"},
	{"Ratelimit-Policy", "ratelimit-policy"},
	{"Ratelimit-Decision", "ratelimit-decision"},
}

// sendHeader sets the call's response header metadata from the fields the
// chain wrote: sent with the response, or with the refusal's status.
func (c *call) sendHeader() {
	var md metadata.MD
	for _, f := range responseFields {
		if v := c.out[f.field]; len(v) > 0 {
			if md == nil {
				md = make(metadata.MD, len(responseFields))
			}
			md[f.key] = v
		}
	}
	if md == nil {
		return
	}
	if c.stream != nil {
		_ = c.stream.SetHeader(md)
		return
	}
	_ = grpc.SetHeader(c.ctx, md) // fails only outside a server call (Check)
}

// sendPushback sets, on a refusal with a Retry-After of secs seconds, the
// trailer grpc-retry-pushback-ms (gRFC A6: a client that retries the
// code waits that long first; grpc-go's retry policy reads it, where
// RetryInfo is read by Google's client libraries).
func (c *call) sendPushback(secs int64) {
	md := metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(secs*1000, 10))
	if c.stream != nil {
		c.stream.SetTrailer(md)
		return
	}
	_ = grpc.SetTrailer(c.ctx, md)
}

// serverStream is a stream whose context is the chain's request's.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the request's context: it carries the request state.
func (s *serverStream) Context() context.Context { return s.ctx }
