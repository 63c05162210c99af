package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/engine"
	"github.com/ratekey/ratekey/internal/grpcmethod"
	"github.com/ratekey/ratekey/internal/strictjson"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/trustedproxy"
)

// DebugConfig configures [Debug].
type DebugConfig struct {
	// Resolver derives the client address, exactly as [ClientAddress] does. Required.
	Resolver *trustedproxy.Resolver
	// Authenticator verifies the credential exactly as [Authenticate] does;
	// nil shows no principal.
	Authenticator identity.Authenticator
	// Auth holds the options the live routes use with Authenticator.
	Auth AuthOptions
	// RateLimiter computes each policy's key and would-be decision without
	// spending budget; nil shows no policies.
	RateLimiter *RateLimiter
	// Limited reports whether the RateLimiter is mounted in front of the
	// route that serves r (r carries the described method and path). nil
	// means every route. Routes it excludes show "limited": false and no
	// policies, so the endpoint never claims a limit that does not apply.
	Limited func(r *http.Request) bool
	// Authenticated reports, likewise, whether Authenticate is mounted in
	// front of the route that serves r; nil means every route. Routes it
	// excludes show the authentication outcome "not_reached", never a
	// status the route would not answer.
	Authenticated func(r *http.Request) bool
	// GRPC, when set, describes a gRPC call of fullMethod with r's peer,
	// header fields (as metadata) and credential: GET
	// ?grpc=/pkg.Service/Method answers with its Record (set it to call
	// grpclimit's Limiter.Check with r's peer and header as the call's).
	// nil answers such a request 400: the endpoint describes no gRPC
	// calls. It must be safe for concurrent use.
	GRPC func(r *http.Request, fullMethod string) *Record
	// Allow lists the admin networks, CIDRs or addresses (see
	// [AdminOnly], whose rule the endpoint applies to the live request,
	// never to a simulated one's peer). A request whose own derivation
	// fails is refused; simulate it from an admin address to see why it
	// fails. Everyone else gets 404, as if the endpoint did not exist.
	// Empty answers nobody.
	Allow []string
}

// outcomeNotReached is the authentication outcome of a request that never
// reaches Authenticate.
const outcomeNotReached = "not_reached"

// DebugAuthentication is the outcome of the credential check in a [Record].
type DebugAuthentication struct {
	// Outcome is "verified", "anonymous", "missing" (no credential, anonymous
	// off), "invalid_request", "invalid_token", "unavailable",
	// "not_configured" (the debug endpoint has no Authenticator; a live
	// Record, which cannot tell, says "not_reached"), or "not_reached" (the
	// request never reaches Authenticate: the client address derivation
	// failed, a pre-auth policy rejected it, or its route has no
	// Authenticate; also a live Record's value until Authenticate runs).
	Outcome string `json:"outcome"`
	// Status is the HTTP status a normal route would answer (0 when admitted).
	Status int `json:"status,omitempty"`
	// Detail is a fixed, secret-free description of a failure.
	Detail string `json:"detail,omitempty"`
}

// Debug returns the handler of the operators' debug endpoint. For the
// request it describes, it answers with its [Record]: the whole derivation
// (peer, client, network, hops), the principal, the operation and each
// policy's key and would-be decision, without spending any budget. Mount it
// outside [ClientAddress] so that failed derivations can be shown.
//
//   - GET (or HEAD) describes the request it receives; the optional query
//     parameters "method" and "path" describe another method and path with
//     the same peer, headers and credential (GET
//     /debug/ratekey?method=GET&path=/v1/reports/1); "grpc" describes a
//     gRPC call of that full method name with them (GET
//     /debug/ratekey?grpc=/pkg.Service/Method), through
//     [DebugConfig].GRPC.
//   - POST with Content-Type application/json simulates a described request
//     (at most 64 KiB, unknown fields refused): {"peer": "10.0.0.5:1234",
//     "method": "GET", "path": "/v1/reports/1", "headers":
//     {"X-Forwarded-For": ["198.51.100.7, 10.0.0.1"]}}. Its credential is
//     verified like a real one, then dropped; nothing of it is echoed.
//   - The answer is JSON, or an HTML page with a section per stage (the
//     fields of the JSON in tables, null as —) when the request's Accept
//     names text/html (rendered server-side; no script).
//
// Admission is decided on the live request, never on a simulated peer: see
// [DebugConfig].Allow. Other methods get 405. Debug fails when
// cfg.Resolver is nil or an entry of cfg.Allow is not an address or CIDR
// prefix ("allow[1] ..."). The handler is safe for concurrent use.
func Debug(cfg DebugConfig) (http.Handler, error) {
	set, err := adminSet(cfg.Resolver, cfg.Allow)
	if err != nil {
		return nil, err
	}
	return adminOnly(cfg.Resolver, set)(http.HandlerFunc(cfg.serve)), nil
}

// serve answers an admin's debug request (see [Debug]).
func (cfg DebugConfig) serve(w http.ResponseWriter, r *http.Request) {
	var target *http.Request
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if method, ok := r.URL.Query()["grpc"]; ok {
			cfg.describeGRPC(w, r, method)
			return
		}
		var ok bool
		if target, ok = describedRequest(r); !ok {
			writeProblem(w, problem{Type: problemInvalidRequest, Status: http.StatusBadRequest,
				Detail: `"method" (an HTTP method token such as GET) and "path" (an absolute path such as /v1/reports/1) are each given at most once`})
			return
		}
	case http.MethodPost:
		var p *problem
		if target, p = simulatedRequest(w, r); p != nil {
			writeProblem(w, *p)
			return
		}
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeProblem(w, problem{Type: problemInvalidRequest, Status: http.StatusMethodNotAllowed,
			Detail: "the debug endpoint answers GET (a live request) and POST (a simulated one)"})
		return
	}
	writeRecord(w, r, cfg.describe(target), target.Method, target.URL.Path)
}

// writeRecord answers r with rec, the Record of a request of method and
// path: as JSON, or as HTML for a browser.
func writeRecord(w http.ResponseWriter, r *http.Request, rec *Record, method, path string) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if wantsHTML(r) {
		writeDebugHTML(w, rec, method, path)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rec)
}

// describeGRPC answers GET ?grpc=<method>: the Record of a gRPC call of
// method (one full method name, "/pkg.Service/Method") with r's peer,
// header fields and credential, from cfg.GRPC; 400 without one.
func (cfg *DebugConfig) describeGRPC(w http.ResponseWriter, r *http.Request, method []string) {
	bad := func(detail string) {
		writeProblem(w, problem{Type: problemInvalidRequest, Status: http.StatusBadRequest, Detail: detail})
	}
	switch {
	case len(method) != 1 || !grpcmethod.Valid(method[0]):
		bad(`the "grpc" parameter must be one gRPC full method name such as /pkg.Service/Method`)
	case cfg.GRPC == nil:
		bad("this debug endpoint describes no gRPC calls: mount ratekey's Middleware.DebugGRPC with grpclimit's Limiter.Describe (or set DebugConfig.GRPC)")
	default:
		writeRecord(w, r, cfg.GRPC(r, method[0]), http.MethodPost, method[0])
	}
}

// Explain returns the Record of r as the live chain would compute it
// (client address, authentication, operation, each policy's key and
// would-be decision), charging nothing: what [Debug] shows for r. r's
// RemoteAddr is its peer. Safe for concurrent use.
func (cfg *DebugConfig) Explain(r *http.Request) *Record { return cfg.describe(r) }

// describe computes the Record of r as the live chain would, charging
// nothing.
func (cfg *DebugConfig) describe(r *http.Request) *Record {
	rec := &Record{Policies: []decide.PolicyResult{}}
	// A fresh request state: the described request shares nothing with the
	// live one's (which may carry a Recorder's record).
	// Nor does it share the debug request's chi routing context, which
	// holds the debug route's method and path, not the described ones.
	ctx, rs := withState(context.WithValue(r.Context(), chi.RouteCtxKey, nil))
	if live := stateFrom(r.Context()); live != nil && live.opFixed {
		rs.op, rs.opFixed = live.op, true // WithOperation's, kept
	}
	r = r.WithContext(ctx)
	res, err := cfg.Resolver.Explain(r.RemoteAddr, r.Header, nil)
	rec.recordDerivation(r.RemoteAddr, &res, err)
	if err != nil {
		// The live chain answers 400 at ClientAddress: no credential is
		// checked, no operation named, no policy decides.
		rec.Authentication.Outcome = outcomeNotReached
		return rec
	}
	rs.client.set(&res)
	rs.hasClient = true
	// Then, as the live chain runs them: the pre-auth policies, the
	// credential check, the other policies, each only if the step before
	// let the request through. One configuration for all three.
	var st *rateLimitState
	limited := false
	if cfg.RateLimiter != nil {
		// The operation is named by the rate limiter, as in a live Record:
		// a route without one shows none.
		st = cfg.RateLimiter.state.Load()
		limited = cfg.Limited == nil || cfg.Limited(r)
	}
	phase := func(ph engine.Phase) bool {
		if !limited {
			return true
		}
		ev := st.check(r, ph)
		rec.recordEvaluation(&ev)
		return ev.Allowed
	}
	if !phase(engine.PhasePreAuth) {
		rec.Authentication.Outcome = outcomeNotReached
		return rec
	}
	switch {
	case cfg.Authenticator == nil:
		rec.Authentication.Outcome = "not_configured"
	case cfg.Authenticated != nil && !cfg.Authenticated(r):
		rec.Authentication.Outcome = outcomeNotReached // no Authenticate on this route
	default:
		out := authenticate(cfg.Authenticator, cfg.Auth, r)
		rec.recordAuth(&out)
		if !out.ok {
			return rec // the live chain answers at Authenticate
		}
		rs.principal, rs.hasPrincipal = out.principal, true
	}
	phase(engine.PhaseMain)
	return rec
}

// maxSimulation bounds a simulated request's JSON body, in bytes.
const maxSimulation = 64 << 10

// simulation is the JSON body of a simulated request.
type simulation struct {
	Peer    string      `json:"peer"`
	Method  string      `json:"method"`
	Path    string      `json:"path"`
	Headers headerLines `json:"headers"`
}

// headerLines is the "headers" object of a simulated request, in document
// order: name → list of lines.
type headerLines []headerLine

type headerLine struct {
	name   string
	values []string
}

// errHeaderTwice reports a header named twice in a simulated request.
var errHeaderTwice = errors.New("a header is named twice")

// UnmarshalJSON reads the object in document order, refusing a name given
// twice, exactly or in another case: a Go map would keep the last of two
// exact repeats, and replay differently-cased names in random order,
// where the live request's lines have one order (an X-Forwarded-For chain
// then changes from one answer to the next).
func (hl *headerLines) UnmarshalJSON(b []byte) error {
	if *hl != nil {
		return errHeaderTwice // "headers" itself given twice
	}
	if string(b) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("headers: not an object")
	}
	seen := map[string]bool{}
	lines := headerLines{} // not nil, even for {}: a second "headers" is refused
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string) // object keys are strings
		var values []string
		if err := dec.Decode(&values); err != nil {
			return err
		}
		key := http.CanonicalHeaderKey(name)
		if seen[key] {
			return errHeaderTwice
		}
		seen[key] = true
		lines = append(lines, headerLine{name, values})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	*hl = lines
	return nil
}

// simulatedRequest decodes a POSTed simulation into a request, or returns
// the problem to answer with. The request has the live request's context
// and Host.
func simulatedRequest(w http.ResponseWriter, r *http.Request) (*http.Request, *problem) {
	bad := func(status int, detail string) (*http.Request, *problem) {
		return nil, &problem{Type: problemInvalidRequest, Status: status, Detail: detail}
	}
	if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		return bad(http.StatusUnsupportedMediaType, "a simulated request is posted as application/json")
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSimulation))
	if err != nil {
		return bad(http.StatusBadRequest, `the body must be one JSON object {"peer", "method", "path", "headers"} of at most 64 KiB`)
	}
	if _, ok := strictjson.Object(data); !ok {
		// A member given twice would otherwise be read as its last value.
		return bad(http.StatusBadRequest, `the body must be exactly one JSON object {"peer", "method", "path", "headers"}, each member at most once`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var sim simulation
	if err := dec.Decode(&sim); errors.Is(err, errHeaderTwice) {
		return bad(http.StatusBadRequest, `a header is named twice in "headers" (perhaps in another case): give all its lines, in order, in one list`)
	} else if err != nil {
		return bad(http.StatusBadRequest, `the body must be one JSON object {"peer", "method", "path", "headers"} of at most 64 KiB`)
	}
	if sim.Peer == "" {
		return bad(http.StatusBadRequest, `"peer" is required: the TCP peer as host:port, e.g. "10.0.0.5:1234"`)
	}
	if sim.Method == "" {
		sim.Method = http.MethodGet
	}
	if !httpguts.ValidHeaderFieldName(sim.Method) { // a method is an RFC 9110 token
		return bad(http.StatusBadRequest, `"method" must be an HTTP method token such as GET`)
	}
	u, err := url.ParseRequestURI(sim.Path)
	if err != nil || !strings.HasPrefix(sim.Path, "/") { // "http://x/..." parses, but is no path
		return bad(http.StatusBadRequest, `"path" must be an absolute path such as /v1/reports/1`)
	}
	h := make(http.Header, len(sim.Headers))
	for _, line := range sim.Headers {
		name, values := line.name, line.values
		if !httpguts.ValidHeaderFieldName(name) {
			return bad(http.StatusBadRequest, "a header name is not an RFC 9110 token")
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return bad(http.StatusBadRequest, "a header value holds characters RFC 9110 forbids")
			}
			h.Add(name, v)
		}
	}
	target := r.Clone(r.Context())
	target.Method, target.RemoteAddr, target.Header = sim.Method, sim.Peer, h
	target.URL = &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}
	target.RequestURI = u.RequestURI()
	target.Body, target.ContentLength = http.NoBody, 0
	return target, nil
}

// zeroQuality reports whether media-range parameters carry q=0 (RFC 9110
// §12.4.2: "not acceptable").
func zeroQuality(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(k, "q") {
			q, err := strconv.ParseFloat(v, 64)
			return err == nil && q == 0
		}
	}
	return false
}

// wantsHTML reports whether the request's Accept names text/html (a
// browser); anything else, */* included, gets JSON.
func wantsHTML(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/html") && !zeroQuality(params) {
				return true
			}
		}
	}
	return false
}

// describedRequest applies the optional query parameters "method" and
// "path": the operation and policies are then computed as if the request
// had that method and path, with the query path carries, if any, and not
// the debug request's own (peer, headers and credential stay the live
// request's). The path is routed, never used as a key.
// It reports false when path is not an absolute path, method not an
// RFC 9110 token, or either is given twice.
func describedRequest(r *http.Request) (*http.Request, bool) {
	q := r.URL.Query()
	if len(q["method"]) > 1 || len(q["path"]) > 1 {
		return nil, false // which one? never the first silently
	}
	m, p := q.Get("method"), q.Get("path")
	if m == "" && p == "" {
		return r, true
	}
	r2 := r.Clone(r.Context())
	if m != "" {
		if !httpguts.ValidHeaderFieldName(m) { // a method is an RFC 9110 token
			return nil, false
		}
		r2.Method = m
	}
	if p != "" {
		u, err := url.ParseRequestURI(p)
		if err != nil || !strings.HasPrefix(p, "/") { // "http://x/..." parses, but is no path
			return nil, false
		}
		// The query is path's (?path=/v1/batch%3Fitems%3D4, for a cost
		// function), never the debug request's own (method=, path=).
		r2.URL.Path, r2.URL.RawPath, r2.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
	}
	return r2, true
}

func describeAuth(out *authOutcome) DebugAuthentication {
	switch {
	case out.ok && out.principal.Method == limitkey.MethodAnonymous:
		return DebugAuthentication{Outcome: "anonymous"}
	case out.ok:
		return DebugAuthentication{Outcome: "verified"}
	case out.code != "":
		return DebugAuthentication{Outcome: out.code, Status: out.status, Detail: out.detail}
	case out.status == http.StatusServiceUnavailable:
		return DebugAuthentication{Outcome: "unavailable", Status: out.status, Detail: out.detail}
	}
	return DebugAuthentication{Outcome: "missing", Status: out.status, Detail: out.detail}
}
