package grpclimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/internal/logtest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
)

// describe renders a status error: its code, message and details.
func describe(err error) string {
	if err == nil {
		return "OK"
	}
	st, _ := status.FromError(err)
	out := st.Code().String() + " " + st.Message()
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			out += fmt.Sprintf(" | ErrorInfo %s %s type=%s policy=%s", d.GetReason(), d.GetDomain(), d.GetMetadata()["type"], d.GetMetadata()["policy"])
		case *errdetails.RetryInfo:
			out += fmt.Sprintf(" | RetryInfo %v", d.GetRetryDelay().AsDuration())
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				out += fmt.Sprintf(" | QuotaFailure %s %s", v.GetSubject(), v.GetQuotaId())
			}
		default:
			out += fmt.Sprintf(" | %T", d)
		}
	}
	return out
}

// TestClient: the client is the TCP peer unless the peer is a trusted
// proxy: a forged x-forwarded-for from an untrusted peer (127.0.0.1) is
// ignored, the one of a trusted proxy (127.0.0.2) honoured from the right,
// RFC 7239 forwarded honoured from the proxy trusted for it (127.0.0.3),
// and a malformed chain from a trusted proxy refused with
// INVALID_ARGUMENT, never keyed by the proxy.
func TestClient(t *testing.T) {
	g := newRig(t, rigOptions{})
	for i, tc := range []struct {
		from string
		kv   []string
		want string
	}{
		{"127.0.0.1", []string{"x-forwarded-for", "198.51.100.7"}, "client=127.0.0.1 account=acme/u0"},
		{"127.0.0.1", []string{"forwarded", "for=198.51.100.7"}, "client=127.0.0.1 account=acme/u1"},
		{"127.0.0.2", []string{"x-forwarded-for", "203.0.113.9, 198.51.100.7"}, "client=198.51.100.7 account=acme/u2"},
		{"127.0.0.2", []string{"x-forwarded-for", "203.0.113.9", "x-forwarded-for", "198.51.100.8"}, "client=198.51.100.8 account=acme/u3"},
		{"127.0.0.3", []string{"forwarded", `for="[2001:db8::1]:4711"`}, "client=2001:db8::1 account=acme/u4"},
		{"127.0.0.3", []string{"x-forwarded-for", "198.51.100.7"}, "client=127.0.0.3 account=acme/u5"},
		{"127.0.0.2", []string{"x-forwarded-for", "not-an-address"},
			"InvalidArgument the forwarding header written by a trusted proxy holds an entry that is not an IP address | ErrorInfo INVALID_FORWARDING_CHAIN ratekey type=urn:ratekey:problem:invalid-forwarding-chain policy="},
	} {
		rep := call(g.conn(tc.from), methodDo, "", append(tc.kv, bearer(g.token(fmt.Sprintf("u%d", i)))...)...)
		got := rep.body
		if rep.err != nil {
			got = describe(rep.err)
		}
		if got != tc.want {
			t.Errorf("from %s with %q:\n got %s\nwant %s", tc.from, tc.kv, got, tc.want)
		}
	}
}

// TestCredentials: the authorization and x-api-key metadata go through
// the same authenticators as HTTP header fields, with the same outcomes.
func TestCredentials(t *testing.T) {
	g := newRig(t, rigOptions{})
	cc := g.conn("127.0.0.1")
	for _, tc := range []struct {
		name string
		kv   []string
		want string
	}{
		{"jwt", bearer(g.token("alice")), "client=127.0.0.1 account=acme/alice"},
		{"api key", []string{"x-api-key", g.apiKey}, "client=127.0.0.1 account=acme/robot"},
		{"api key as bearer", bearer(g.apiKey), "client=127.0.0.1 account=acme/robot"},
		{"none", nil, "Unauthenticated no credential was presented | ErrorInfo UNAUTHENTICATED ratekey type=urn:ratekey:problem:unauthenticated policy="},
		{"forged jwt", bearer(g.forged("mallory")), "Unauthenticated token signature is invalid | ErrorInfo INVALID_TOKEN ratekey type=urn:ratekey:problem:invalid-token policy="},
		{"basic", []string{"authorization", "Basic YTpi"}, "Unauthenticated the Authorization scheme is not Bearer | ErrorInfo UNAUTHENTICATED ratekey type=urn:ratekey:problem:unauthenticated policy="},
		{"two authorization values", append(bearer(g.token("alice")), bearer(g.token("bob"))...),
			"InvalidArgument multiple Authorization header lines | ErrorInfo INVALID_REQUEST ratekey type=urn:ratekey:problem:invalid-request policy="},
		{"jwt and api key", append(bearer(g.token("alice")), "x-api-key", g.apiKey),
			"InvalidArgument credentials presented in more than one place | ErrorInfo INVALID_REQUEST ratekey type=urn:ratekey:problem:invalid-request policy="},
	} {
		rep := call(cc, methodDo, "", tc.kv...)
		got := rep.body
		if rep.err != nil {
			got = describe(rep.err)
		}
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// TestRateLimited: each admitted call carries ratelimit and
// ratelimit-policy metadata; the call past the burst gets
// RESOURCE_EXHAUSTED with RetryInfo (the Retry-After) and a QuotaFailure
// naming the policy, never its key, the same metadata, and the trailer
// grpc-retry-pushback-ms.
func TestRateLimited(t *testing.T) {
	g := newRig(t, rigOptions{})
	cc := g.conn("127.0.0.1")
	tok := g.token("alice")
	for i, want := range []string{`"per-account";r=2;t=3600`, `"per-account";r=1;t=7200`, `"per-account";r=0;t=10800`, `"per-account";r=0;t=10800`} {
		rep := call(cc, methodDo, "", bearer(tok)...)
		if got := strings.Join(rep.header.Get("ratelimit"), "|"); got != want {
			t.Errorf("call %d: ratelimit %q, want %q", i, got, want)
		}
		if got := strings.Join(rep.header.Get("ratelimit-policy"), "|"); got != `"per-account";q=3;w=10800` {
			t.Errorf("call %d: ratelimit-policy %q", i, got)
		}
		wantErr := "OK"
		if i == 3 {
			wantErr = "ResourceExhausted policy per-account (burst 3, refill 1/h) has no room for this request; retry in 3600 s" +
				" | ErrorInfo RATE_LIMITED ratekey type=urn:ratekey:problem:rate-limited policy=per-account | RetryInfo 1h0m0s | QuotaFailure policy:per-account per-account"
		}
		if got := describe(rep.err); got != wantErr {
			t.Errorf("call %d:\n got %s\nwant %s", i, got, wantErr)
		}
		wantPushback := ""
		if i == 3 {
			wantPushback = "3600000" // gRFC A6: grpc-go's retry policy waits that long
		}
		if got := strings.Join(rep.trailer.Get("grpc-retry-pushback-ms"), "|"); got != wantPushback {
			t.Errorf("call %d: grpc-retry-pushback-ms %q, want %q", i, got, wantPushback)
		}
		if rep.err != nil && strings.Contains(fmt.Sprint(rep.err), "alice") {
			t.Errorf("call %d: the status names the account: %v", i, rep.err)
		}
	}
}

// TestHTTPAndGRPCShareBuckets: an account's HTTP requests and gRPC calls
// spend one bucket (the Limiter runs the same Middleware).
func TestHTTPAndGRPCShareBuckets(t *testing.T) {
	g := newRig(t, rigOptions{})
	cc := g.conn("127.0.0.1")
	tok := g.token("bob")
	viaHTTP := func() string {
		req, _ := http.NewRequest(http.MethodGet, g.http.URL+"/v1/who", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return fmt.Sprintf("HTTP %d %s", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	viaGRPC := func() string {
		rep := call(cc, methodDo, "", bearer(tok)...)
		return fmt.Sprintf("gRPC %s %s", status.Code(rep.err), strings.Join(rep.header.Get("ratelimit"), ""))
	}
	got := []string{viaHTTP(), viaGRPC(), viaHTTP(), viaGRPC(), viaHTTP()}
	want := []string{
		`HTTP 200 "per-account";r=2;t=3600`,
		`gRPC OK "per-account";r=1;t=7200`,
		`HTTP 200 "per-account";r=0;t=10800`,
		`gRPC ResourceExhausted "per-account";r=0;t=10800`,
		`HTTP 429 "per-account";r=0;t=10800`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestStreamHoldsSlot: a stream takes its in-flight slot at its start and
// holds it for its whole life: a second stream of the network is refused
// (RESOURCE_EXHAUSTED, concurrency-limited) while the first runs, and
// admitted once the client cancelled the first and its handler returned.
func TestStreamHoldsSlot(t *testing.T) {
	g := newRig(t, rigOptions{})
	cc := g.conn("127.0.0.1")
	tok := g.token("carol")
	desc := &grpc.StreamDesc{ServerStreams: true}
	open := func() (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), bearer(tok)...))
		s, err := cc.NewStream(ctx, desc, methodHold)
		if err == nil {
			err = s.SendMsg(wrapperspb.String(""))
		}
		if err == nil {
			err = s.CloseSend()
		}
		if err == nil {
			err = s.RecvMsg(new(wrapperspb.StringValue))
		}
		return cancel, err
	}
	cancel1, err := open()
	if err != nil {
		t.Fatal(err)
	}
	<-g.holding
	cancel2, err := open()
	cancel2()
	want := "ResourceExhausted policy hold (max_in_flight 1) has as many requests running as it allows" +
		" | ErrorInfo CONCURRENCY_LIMITED ratekey type=urn:ratekey:problem:concurrency-limited policy=hold | QuotaFailure policy:hold hold"
	if got := describe(err); got != want {
		t.Errorf("second stream while the first runs:\n got %s\nwant %s", got, want)
	}
	if got := <-g.finished; got != "ResourceExhausted" {
		t.Errorf("second stream ended with %s, want ResourceExhausted", got)
	}
	cancel1()
	if got := <-g.finished; got != "Canceled" {
		t.Errorf("first stream ended with %s, want Canceled", got)
	}
	cancel3, err := open()
	if err != nil {
		t.Errorf("third stream, after the first ended: %v", err)
	} else {
		<-g.holding
	}
	cancel3()
	<-g.finished
}

// TestSettle: a unary call and a stream each reserve the policy's cost
// (10) at their start and settle at the cost their handler reports
// (middleware.ReportCost on the handler's context) when it returns.
func TestSettle(t *testing.T) {
	g := newRig(t, rigOptions{})
	cc := g.conn("127.0.0.1")
	tok := g.token("dave")
	report := func(n string) string {
		rep := call(cc, methodReport, n, bearer(tok)...)
		return describe(rep.err) + " " + strings.Join(rep.header.Get("ratelimit"), "")
	}
	count := func(n string) string {
		ctx := metadata.AppendToOutgoingContext(context.Background(), bearer(tok)...)
		var hdr metadata.MD
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, methodCount, grpc.Header(&hdr))
		if err == nil {
			err = s.SendMsg(wrapperspb.String(n))
		}
		if err == nil {
			err = s.CloseSend()
		}
		for err == nil {
			err = s.RecvMsg(new(wrapperspb.StringValue))
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return describe(err) + " " + strings.Join(hdr.Get("ratelimit"), "")
	}
	// Each reserves 10 (r is the bucket after the reservation); the
	// bucket then holds what the previous ones settled at: 3, then 5.
	for i, step := range []struct {
		do   func(string) string
		n    string
		want string
	}{
		{report, "3", `OK "llm";r=90;t=360`},
		{count, "5", `OK "llm";r=87;t=468`},
		{report, "0", `OK "llm";r=82;t=648`},
	} {
		if got := step.do(step.n); got != step.want {
			t.Errorf("step %d: got %s, want %s", i, got, step.want)
		}
		if err := <-g.reported; err != nil {
			t.Errorf("step %d: ReportCost: %v", i, err)
		}
	}
}

// TestUnknownMethods: methods the server does not serve (answered by an
// UnknownServiceHandler) share one operation, UNMATCHED: a client cannot
// mint fresh buckets by naming methods.
func TestUnknownMethods(t *testing.T) {
	g := newRig(t, rigOptions{unknown: true, anonymous: true, policies: []ratekey.Policy{{
		Name: "per-op", Key: []limitkey.Dimension{limitkey.DimNetwork, limitkey.DimOperation},
		Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: 3600e9}, Burst: 1}, Operations: []string{middleware.UnmatchedOperation, methodDo},
	}}})
	cc := g.conn("127.0.0.1")
	for i, tc := range []struct{ method, want string }{
		{"/x.Y/A", "OK"},
		{"/x.Y/B", "ResourceExhausted"},
		{"/test.v1.Echo/Nope", "ResourceExhausted"},
		{methodDo, "OK"},
	} {
		if got := codeName(call(cc, tc.method, "").err); got != tc.want {
			t.Errorf("call %d, %s: %s, want %s", i, tc.method, got, tc.want)
		}
	}
	if rec := g.lim.Check(peerContext("127.0.0.1"), "/x.Y/C"); rec.Operation != middleware.UnmatchedOperation {
		t.Errorf("Check of an unknown method: operation %q, want UNMATCHED", rec.Operation)
	}
}

// TestStoreDown: a store that fails, for a policy that fails closed (the
// default), refuses the call with UNAVAILABLE and RetryInfo (1 s), as the
// HTTP side answers 503 with Retry-After: 1.
func TestStoreDown(t *testing.T) {
	p := basePolicies()[:1]
	g := newRig(t, rigOptions{store: downStore{}, policies: p})
	rep := call(g.conn("127.0.0.1"), methodDo, "", bearer(g.token("erin"))...)
	want := "Unavailable the rate limit store cannot decide right now | ErrorInfo STORE_UNAVAILABLE ratekey type=urn:ratekey:problem:store-unavailable policy= | RetryInfo 1s"
	if got := describe(rep.err); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// downStore is a store that cannot decide.
type downStore struct{}

var errDown = errors.New("store down")

func (downStore) Take(context.Context, []limiter.Decision, []limiter.Request) ([]limiter.Decision, error) {
	return nil, errDown
}

func (downStore) Peek(context.Context, []limiter.Decision, []limiter.Request) ([]limiter.Decision, error) {
	return nil, errDown
}
func (downStore) Release(context.Context, []limiter.Request, []limiter.Decision) error {
	return errDown
}
func (downStore) Settle(context.Context, []limiter.Request, []limiter.Decision, []int64) error {
	return errDown
}

// TestUnregistered: before Register, every limited call is refused with
// INTERNAL, and logged once.
func TestUnregistered(t *testing.T) {
	no := false
	logs := &logtest.Lines{}
	g := newRig(t, rigOptions{register: &no, logHandler: logs})
	cc := g.conn("127.0.0.1")
	for range 2 {
		if got, want := describe(call(cc, methodDo, "", bearer(g.token("f"))...).err), "Internal grpclimit: the Limiter's server is not registered (call Register)"; got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	if got := logs.Get(); len(got) != 1 || got[0] != "ERROR grpclimit: a call before Register: every call is refused with INTERNAL until the server is registered" {
		t.Errorf("logged %q", got)
	}
}

// TestOperationCheck: at the first call, each gRPC operation a policy
// names that the server does not serve is logged, naming its field.
func TestOperationCheck(t *testing.T) {
	logs := &logtest.Lines{}
	p := basePolicies()
	p[0].Operations = []string{methodDo, "/test.v1.Echo/Nope", "GET /v1/who", "/other.v1.Svc/Do"}
	g := newRig(t, rigOptions{policies: p, logHandler: logs})
	cc := g.conn("127.0.0.1")
	call(cc, methodDo, "", bearer(g.token("g"))...)
	call(cc, methodDo, "", bearer(g.token("g"))...)
	var got []string
	for _, l := range logs.Get() {
		if strings.Contains(l, "gRPC method") {
			got = append(got, l)
		}
	}
	line := func(j int, op string) string {
		return `ERROR ratekey operation served by no gRPC method policy=per-account operation=` + op + ` error=policies[0] ("per-account").operations[` +
			fmt.Sprint(j) + `]: "` + op + `" is served by no method of the gRPC server: the policy never applies to it (a gRPC operation is a method's full name, "/package.Service/Method", as registered)`
	}
	want := []string{line(1, "/test.v1.Echo/Nope"), line(3, "/other.v1.Svc/Do")}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logged\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCheck: Check explains a call from its context's peer and metadata,
// charging nothing, as the debug endpoint does; a method no policy
// applies to is "limited": false, authentication not reached, no policy,
// with the client it would derive (rule 0, the trusted proxy, where a
// zeroed derivation would claim rule 0 for any peer).
func TestCheck(t *testing.T) {
	g := newRig(t, rigOptions{})
	ctx := metadata.NewIncomingContext(peerContext("127.0.0.2"), metadata.Pairs("x-forwarded-for", "198.51.100.7", "authorization", "Bearer "+g.token("heidi")))
	for range 2 { // charging nothing: twice the same
		rec := g.lim.Check(ctx, methodDo)
		got := fmt.Sprintf("peer=%s client=%s op=%s auth=%s limited=%v decision=%s", rec.Peer, deref(rec.Client), rec.Operation, rec.Authentication.Outcome, rec.Limited, rec.Decision)
		if want := "peer=127.0.0.2:5000 client=198.51.100.7 op=/test.v1.Echo/Do auth=verified limited=true decision=PASSED"; got != want {
			t.Errorf("Check:\n got %s\nwant %s", got, want)
		}
		if len(rec.Policies) != 1 || rec.Policies[0].Key != "per-account|tenant=acme|account=heidi" || rec.Policies[0].Remaining != 2 {
			t.Errorf("Check: policies %+v", rec.Policies)
		}
	}
	rec := g.lim.Check(ctx, methodFree)
	got := fmt.Sprintf("peer=%s client=%s op=%s auth=%s limited=%v decision=%q policies=%d rule=%d", rec.Peer, deref(rec.Client), rec.Operation, rec.Authentication.Outcome, rec.Limited, rec.Decision, len(rec.Policies), rec.Derivation.Rule)
	if want := `peer=127.0.0.2:5000 client=198.51.100.7 op=/test.v1.Echo/Free auth=not_reached limited=false decision="" policies=0 rule=0`; got != want {
		t.Errorf("Check of an unlimited method:\n got %s\nwant %s", got, want)
	}
}

// TestCheckEmptyAuthority: metadata built by hand whose :authority holds
// no value (grpc-go always sets one) is checked as one without it, not a
// panic.
func TestCheckEmptyAuthority(t *testing.T) {
	g := newRig(t, rigOptions{})
	ctx := metadata.NewIncomingContext(peerContext("127.0.0.2"), metadata.MD{":authority": {}, "authorization": {"Bearer " + g.token("judy")}})
	rec := g.lim.Check(ctx, methodDo)
	if rec.Decision != "PASSED" || len(rec.Policies) != 1 || rec.Policies[0].Key != "per-account|tenant=acme|account=judy" {
		t.Errorf("Check: decision %q, policies %+v", rec.Decision, rec.Policies)
	}
}

// TestDebugGRPC: the front door's debug endpoint with Describe
// (Middleware.DebugGRPC) answers GET ?grpc=<method> with the Record of a
// call of that method from the debug request's peer and header fields,
// for admins only; plain Debug answers it 400.
func TestDebugGRPC(t *testing.T) {
	g := newRig(t, rigOptions{})
	get := func(h http.Handler, peer string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/debug/ratekey?grpc="+methodDo, nil)
		r.RemoteAddr = peer
		r.Header.Set("Authorization", "Bearer "+g.token("ivan"))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := get(g.m.DebugGRPC(g.lim.Describe), "192.0.2.1:1234")
	var rec struct {
		Operation string
		Limited   bool
		Policies  []struct{ Name, Key string }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &rec); w.Code != http.StatusOK || err != nil || rec.Operation != methodDo || !rec.Limited ||
		len(rec.Policies) != 1 || rec.Policies[0].Key != "per-account|tenant=acme|account=ivan" {
		t.Errorf("an admin's ?grpc=: %d %+v (%v): %s", w.Code, rec, err, w.Body)
	}
	if w := get(g.m.DebugGRPC(g.lim.Describe), "198.51.100.1:1234"); w.Code != http.StatusNotFound {
		t.Errorf("an outsider's ?grpc=: %d; want 404", w.Code)
	}
	if w := get(g.m.Debug(), "192.0.2.1:1234"); w.Code != http.StatusBadRequest {
		t.Errorf("?grpc= on plain Debug: %d; want 400", w.Code)
	}
}

// peerContext is a context whose gRPC peer is ip, port 5000.
func peerContext(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 5000}})
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestUnlimited: a method no policy applies to goes straight to its
// handler (nothing derived), with no allocation.
func TestUnlimited(t *testing.T) {
	g := newRig(t, rigOptions{})
	rep := call(g.conn("127.0.0.1"), methodFree, "")
	if rep.err != nil || rep.body != "client= account=" || len(rep.header.Get("ratelimit")) != 0 {
		t.Errorf("Free: %q, %v, header %v", rep.body, rep.err, rep.header)
	}
	ic := g.lim.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: methodFree}
	out := wrapperspb.String("x")
	h := func(context.Context, any) (any, error) { return out, nil }
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _, _ = ic(ctx, out, info, h) }); n > 0 {
		t.Errorf("an unlimited unary call allocates %v times in the interceptor, want 0", n)
	}
	sic := g.lim.StreamServerInterceptor()
	sinfo := &grpc.StreamServerInfo{FullMethod: "/test.v1.Echo/Free"}
	sh := func(any, grpc.ServerStream) error { return nil }
	if n := testing.AllocsPerRun(1000, func() { _ = sic(nil, nil, sinfo, sh) }); n > 0 {
		t.Errorf("an unlimited stream allocates %v times in the interceptor, want 0", n)
	}
}

// TestMetadataBound: metadata over 1 MiB is refused with INVALID_ARGUMENT
// before anything is derived (as net/http refuses a header over its
// default bound).
func TestMetadataBound(t *testing.T) {
	g := newRig(t, rigOptions{})
	ic := g.lim.UnaryServerInterceptor()
	for _, tc := range []struct {
		size int
		want string
	}{
		{1 << 20, "Unauthenticated no credential was presented | ErrorInfo UNAUTHENTICATED ratekey type=urn:ratekey:problem:unauthenticated policy="},
		{1<<20 + 1, "InvalidArgument grpclimit: the call's metadata exceeds 1 MiB"},
	} {
		// "x-big: <value>" counts 5 + len(value) + 4 bytes.
		ctx := metadata.NewIncomingContext(peerContext("127.0.0.1"), metadata.Pairs("x-big", strings.Repeat("a", tc.size-9)))
		_, err := ic(ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodDo}, func(context.Context, any) (any, error) { return nil, nil })
		if got := describe(err); got != tc.want {
			t.Errorf("%d bytes: got %s, want %s", tc.size, got, tc.want)
		}
	}
}

// TestOverloaded: an adaptive cap (max_in_flight: auto) that has as many
// calls running as it takes refuses the next with UNAVAILABLE and
// RetryInfo (its retry_after, 1 s by default), as the HTTP side answers
// 503 overloaded: the service is saturated, not the client over budget.
func TestOverloaded(t *testing.T) {
	g := newRig(t, rigOptions{anonymous: true, policies: []ratekey.Policy{{
		Name: "work", Key: []limitkey.Dimension{}, Limit: limiter.Limit{MinInFlight: 1, MaxInFlightCeiling: 1}, Operations: []string{methodHold},
	}}})
	cc := g.conn("127.0.0.1")
	hold := func() (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, methodHold)
		if err == nil {
			err = s.SendMsg(wrapperspb.String(""))
		}
		if err == nil {
			err = s.RecvMsg(new(wrapperspb.StringValue))
		}
		return cancel, err
	}
	cancel1, err := hold()
	if err != nil {
		t.Fatal(err)
	}
	<-g.holding
	cancel2, err := hold()
	cancel2()
	want := "Unavailable policy work: the service runs as many requests as it can take now (adaptive limit 1); retry in 1 s" +
		" | ErrorInfo OVERLOADED ratekey type=urn:ratekey:problem:overloaded policy=work | RetryInfo 1s"
	if got := describe(err); got != want {
		t.Errorf("second call:\n got %s\nwant %s", got, want)
	}
	<-g.finished
	cancel1()
	<-g.finished
}

// TestCheckFromHandler: Check of another method from inside a handler (on
// the live call's context, which holds its request state and Record)
// explains that method, and the live call's Record keeps its own. (Check
// fixes the operation in a request state of its own; the live Record is
// written before the handler runs, so this test cannot see a change to the
// live state's operation after it.)
func TestCheckFromHandler(t *testing.T) {
	g := newRig(t, rigOptions{})
	ic := g.lim.UnaryServerInterceptor()
	ctx := metadata.NewIncomingContext(peerContext("127.0.0.1"), metadata.Pairs("authorization", "Bearer "+g.token("ivan")))
	ctx, rec := middleware.WithRecord(ctx)
	_, err := ic(ctx, nil, &grpc.UnaryServerInfo{FullMethod: methodDo}, func(ctx context.Context, _ any) (any, error) {
		if got := g.lim.Check(ctx, methodReport).Operation; got != methodReport {
			t.Errorf("Check from a handler: operation %q, want %q", got, methodReport)
		}
		return nil, nil
	})
	if err != nil || rec.Operation != methodDo {
		t.Errorf("the live call: %v, operation %q, want %q", err, rec.Operation, methodDo)
	}
}
