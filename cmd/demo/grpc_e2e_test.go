package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekey/ratekey/internal/servertest"
)

// grpcE2EConfig is e2eConfig serving gRPC on a fixed port (%[2]d), its
// per-network policy covering Work/Do beside GET /v1/reports/{id}: one
// bucket per network for both.
var grpcE2EConfig = strings.NewReplacer(
	"listen: 127.0.0.1:0\n", "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:%[2]d\n",
	`operations: ["GET /v1/reports/{id}"]`, `operations: ["GET /v1/reports/{id}", "/ratekey.demo.v1.Work/Do"]`,
).Replace(e2eConfig)

// nginxGRPCConfig is nginxConfig in front of the demo's gRPC port:
// HTTP/2 on the listener (nginx 1.22: listen ... http2; from 1.25.1,
// http2 on), grpc_pass, and the client's address appended to
// X-Forwarded-For.
var nginxGRPCConfig = strings.NewReplacer(
	"listen 127.0.0.1:%[2]d;", "listen 127.0.0.1:%[2]d http2;",
	`proxy_pass http://%[3]s;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`, `grpc_pass grpc://%[3]s;
      grpc_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`,
).Replace(nginxConfig)

// grpcFrom dials addr from source.
func grpcFrom(t *testing.T, source, addr string) *grpc.ClientConn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// doCall calls Work/Do with metadata kv and renders the outcome: the
// client the demo saw, or the status and its details; then ratelimit.
func doCall(cc *grpc.ClientConn, kv ...string) string {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), kv...), 10*time.Second)
	defer cancel()
	var out structpb.Struct
	var md metadata.MD
	err := cc.Invoke(ctx, workDo, wrapperspb.String(""), &out, grpc.Header(&md))
	got := "OK client=" + out.GetFields()["served"].GetStructValue().GetFields()["client"].GetStringValue()
	if err != nil {
		got = codeName(err)
		for _, d := range status.Convert(err).Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				got += fmt.Sprintf(" retry=%v", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				got += " quota=" + d.GetViolations()[0].GetSubject()
			}
		}
	}
	return got + " " + strings.Join(md.Get("ratelimit"), ", ")
}

// TestGRPCBehindNginx: the demo's gRPC port behind nginx (grpc_pass,
// grpc_set_header X-Forwarded-For $proxy_add_x_forwarded_for): a forged
// x-forwarded-for is never read (the walk stops at nginx's entry, the
// true source); each client network has its bucket, shared with its HTTP
// requests; a refusal is RESOURCE_EXHAUSTED with RetryInfo (60 s, whole
// seconds) and QuotaFailure naming the policy, with the ratelimit
// metadata through nginx; health is not limited.
func TestGRPCBehindNginx(t *testing.T) {
	nginx := servertest.RequireNginx(t)
	if !strings.Contains(nginxGRPCConfig, "grpc_pass") || !strings.Contains(nginxGRPCConfig, "http2;") ||
		!strings.Contains(grpcE2EConfig, "grpc:") || !strings.Contains(grpcE2EConfig, workDo) {
		t.Fatalf("a config derived from e2e_test.go's is unchanged (its lines moved):\n%s\n%s", grpcE2EConfig, nginxGRPCConfig)
	}
	dir := t.TempDir()
	keys, err := filepath.Abs("../../testdata/keys")
	if err != nil {
		t.Fatal(err)
	}
	grpcPort := servertest.FreePort(t)
	demoAddr, logs := startDemo(t, dir, fmt.Sprintf(grpcE2EConfig, keys, grpcPort))
	demoGRPC := fmt.Sprintf("127.0.0.1:%d", grpcPort)
	proxy := servertest.StartNginx(t, nginx, dir, func(port int) string { return fmt.Sprintf(nginxGRPCConfig, dir, port, demoGRPC) })
	attacker, neighbour := grpcFrom(t, "127.0.0.7", proxy), grpcFrom(t, "127.0.0.8", proxy)
	tok := mintToken(t, filepath.Join(dir, "ratekey.yaml"), "alice")

	steps := []struct {
		name string
		do   func() string
		want string
	}{
		{"forged x-forwarded-for through nginx", func() string {
			return doCall(attacker, "x-forwarded-for", "1.2.3.4", "authorization", "Bearer "+tok)
		}, `OK client=127.0.0.7 "per-network";r=2;t=60`},
		{"the same network over HTTP, direct", func() string {
			r := send(t, clientFrom("127.0.0.7"), "GET", "http://"+demoAddr+"/v1/reports/1", nil)
			return fmt.Sprintf("HTTP %d %s", r.code, r.header.Get("RateLimit"))
		}, `HTTP 200 "per-network";r=1;t=120`},
		{"third", func() string { return doCall(attacker) }, `OK client=127.0.0.7 "per-network";r=0;t=180`},
		{"refused", func() string { return doCall(attacker, "x-forwarded-for", "198.51.100.1") },
			`RESOURCE_EXHAUSTED retry=1m0s quota=policy:per-network "per-network";r=0;t=180`},
		{"the neighbour's own bucket", func() string { return doCall(neighbour) }, `OK client=127.0.0.8 "per-network";r=2;t=60`},
		{"health, not limited", func() string {
			var md metadata.MD
			resp, err := healthpb.NewHealthClient(attacker).Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
			return fmt.Sprintf("%s %s %q", codeName(err), resp.GetStatus(), md.Get("ratelimit"))
		}, `OK SERVING []`},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Errorf("%s:\n got %s\nwant %s", s.name, got, s.want)
		}
	}
	// demo grpc-call through nginx, from 127.0.0.1: the demo's own
	// client, keyed as nginx's source.
	var out, errb bytes.Buffer
	code := run([]string{"grpc-call", "-addr", proxy, "-token", tok}, &out, &errb)
	want := "status: OK\nratelimit-policy: \"per-network\";q=3;w=180\nratelimit: \"per-network\";r=2;t=60\n" +
		`response: {"served":{"client":"127.0.0.1","principal":{"account":"alice","credential_id":"e2e-app","issuer":"https://issuer.e2e.invalid","method":"jwt","tenant":"e2e"}}}` + "\n"
	if code != 0 || out.String() != want {
		t.Errorf("grpc-call: exit %d\n%s%s\nwant\n%s", code, out.String(), errb.String(), want)
	}
	if strings.Contains(logs.String(), tok) {
		t.Errorf("the demo's log holds the token")
	}
}
