package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const grpcBase = `
listen: 127.0.0.1:0
grpc:
  listen: 127.0.0.1:0
trusted_proxies:
  cidrs: []
auth:
  anonymous: allow
policies:
  - name: per-network
    key: [network]
    rate: 1/m
    burst: %s
    operations: ["GET /v1/reports/{id}", "/ratekey.demo.v1.Work/Do"]
debug:
  enabled: true
  path: /debug/ratekey
  allow: [127.0.0.0/8]
`

// grpcServer builds the demo's server with gRPC from the config file at
// path, serving gRPC on a free loopback port; it returns a client of it.
func grpcServer(t *testing.T, path string) (*server, *grpc.ClientConn) {
	t.Helper()
	c, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	a, err := build(c, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServerGRPC(path, logger, a, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.gsrv.Serve(ln) }()
	t.Cleanup(s.gsrv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return s, cc
}

// TestGRPCDemo: Work/Do spends the per-network bucket its HTTP routes
// spend; the debug endpoint describes a gRPC call (?grpc=) without
// spending; a reload swaps the gRPC side's policies with the HTTP
// side's, keeping unchanged budgets.
func TestGRPCDemo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratekey.yaml")
	write := func(burst string) {
		if err := os.WriteFile(path, []byte(strings.Replace(grpcBase, "%s", burst, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("3")
	s, cc := grpcServer(t, path)
	do := func() string {
		var md metadata.MD
		err := cc.Invoke(context.Background(), workDo, wrapperspb.String(""), new(structpb.Struct), grpc.Header(&md))
		return codeName(err) + " " + strings.Join(md.Get("ratelimit-policy"), "") + " " + strings.Join(md.Get("ratelimit"), "")
	}
	viaHTTP := func(target string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.RemoteAddr = "127.0.0.1:1234"
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w
	}
	debug := func(method string) string {
		w := viaHTTP("/debug/ratekey?grpc=" + method)
		var rec struct {
			Operation string
			Limited   bool
			Decision  string
		}
		if err := json.Unmarshal(w.Body.Bytes(), &rec); err != nil {
			t.Fatalf("debug %s: %d %s", method, w.Code, w.Body)
		}
		return rec.Operation + " " + rec.Decision + " " + map[bool]string{true: "limited", false: "not limited"}[rec.Limited]
	}
	steps := []struct{ name, got, want string }{
		{"first call", do(), `OK "per-network";q=3;w=180 "per-network";r=2;t=60`},
		{"HTTP, the same bucket", viaHTTP("/v1/reports/1").Header().Get("RateLimit"), `"per-network";r=1;t=120`},
		{"debug of a call", debug(workDo), workDo + " PASSED limited"},
		{"debug of health", debug("/grpc.health.v1.Health/Check"), "/grpc.health.v1.Health/Check  not limited"},
		{"debug of an unknown method", debug("/x.Y/Z"), "UNMATCHED  not limited"},
		{"third call", do(), `OK "per-network";q=3;w=180 "per-network";r=0;t=180`},
		{"refused", do(), `RESOURCE_EXHAUSTED "per-network";q=3;w=180 "per-network";r=0;t=180`},
	}
	for _, st := range steps {
		if st.got != st.want {
			t.Errorf("%s:\n got %s\nwant %s", st.name, st.got, st.want)
		}
	}
	write("5") // a changed burst: a fresh bucket, for gRPC too
	if err := s.reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := do(), `OK "per-network";q=5;w=300 "per-network";r=4;t=60`; got != want {
		t.Errorf("after the reload:\n got %s\nwant %s", got, want)
	}
}

// TestGRPCCheck: a policy may name the demo's limited gRPC method beside
// its routes; check refuses any other gRPC method (health is not limited)
// and a malformed grpc.listen.
func TestGRPCCheck(t *testing.T) {
	policy := func(op string) string {
		return "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 1, operations: [\"" + op + "\"]}\n"
	}
	for _, tc := range []struct {
		name, config, want string
	}{
		{"Work/Do", policy(workDo), ""},
		{"health", policy("/grpc.health.v1.Health/Check"), `policies[0] ("p").operations[0]: "/grpc.health.v1.Health/Check" is not a rate-limited route of the demo`},
		{"unknown", policy("/ratekey.demo.v1.Work/Nope"), `policies[0] ("p").operations[0]: "/ratekey.demo.v1.Work/Nope" is not a rate-limited route of the demo`},
		{"grpc.listen", "grpc: {listen: \"localhost:http\"}\n" + policy(workDo), `grpc.listen: "localhost:http" is not host:port with a port of 0 to 65535`},
	} {
		code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, tc.config))
		if tc.want == "" {
			if code != 0 {
				t.Errorf("%s: exit %d: %s", tc.name, code, errOut)
			}
			continue
		}
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, want 1 and %q in:\n%s", tc.name, code, tc.want, errOut)
		}
	}
}

// TestGRPCCallPrintsARefusal: demo grpc-call prints a refusal's status,
// its details (ErrorInfo, RetryInfo, QuotaFailure) and the ratelimit
// response metadata grpclimit sends in the refused call's header.
func TestGRPCCallPrintsARefusal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratekey.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(grpcBase, "%s", "1", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, cc := grpcServer(t, path)
	call := func() (int, string) {
		var out, errb strings.Builder
		code := run([]string{"grpc-call", "-addr", cc.Target()}, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := call(); code != 0 {
		t.Fatalf("first call: exit %d\n%s", code, out)
	}
	code, out := call()
	want := "status: RESOURCE_EXHAUSTED: policy per-network (burst 1, refill 1/m) has no room for this request; retry in 60 s\n" +
		"error-info: RATE_LIMITED type=urn:ratekey:problem:rate-limited policy=per-network\n" +
		"retry-info: retry in 1m0s\n" +
		"quota-failure: policy:per-network\n" +
		"ratelimit-policy: \"per-network\";q=1;w=60\n" +
		"ratelimit: \"per-network\";r=0;t=60\n"
	if code != 1 || out != want {
		t.Errorf("refused call: exit %d\n%s\nwant exit 1\n%s", code, out, want)
	}
}
