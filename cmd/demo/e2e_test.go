package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/servertest"
)

// The end-to-end test runs the demo binary behind a real nginx on loopback.
// Clients connect to nginx from 127.0.0.7 / 127.0.0.8 (not nginx's own
// 127.0.0.1, which the demo trusts as a proxy) and forge X-Forwarded-For.

const e2eConfig = `
listen: 127.0.0.1:0
trusted_proxies:
  cidrs: [127.0.0.1, "::1"]
  header: X-Forwarded-For
auth:
  anonymous: allow
  issuers:
    - issuer: https://issuer.e2e.invalid
      tenant: e2e
      audiences: [ratekey-e2e]
      algorithms: [EdDSA]
      keys:
        - kid: e2e-1
          public_key_file: %[1]s/demo-ed25519.pub.pem
          private_key_file: %[1]s/demo-ed25519.key.pem
policies:
  - name: per-network
    key: [network]
    rate: 1/m
    burst: 3
    operations: ["GET /v1/reports/{id}"]
  - name: per-account
    key: [tenant, account]
    rate: 1/m
    burst: 2
    operations: ["POST /v1/export"]
debug:
  enabled: true
  path: /debug/ratekey
  allow: [127.0.0.0/8]
limiter:
  store: memory
`

const nginxConfig = `
daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 64; }
http {
  access_log %[1]s/access.log;
  client_body_temp_path %[1]s/client_body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen 127.0.0.1:%[2]d;
    location / {
      proxy_pass http://%[3]s;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }
}
`

// startDemo builds and starts the demo with cfg and returns its address and
// its stderr (the JSON log).
func startDemo(t *testing.T, dir, cfg string) (string, *servertest.Buffer) {
	t.Helper()
	addr, logs, _ := startDemoProcess(t, dir, cfg)
	return addr, logs
}

// startDemoProcess is startDemo that also returns the process, for tests
// that signal it. The config is written to dir/ratekey.yaml.
func startDemoProcess(t *testing.T, dir, cfg string, args ...string) (string, *servertest.Buffer, *exec.Cmd) {
	t.Helper()
	bin := filepath.Join(dir, "demo")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfgPath := filepath.Join(dir, "ratekey.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "-config", cfgPath}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &servertest.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { servertest.Stop(cmd) })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(line, "ratekey demo listening on http://")
		if !ok {
			t.Fatalf("unexpected first line %q", line)
		}
		return addr, logs, cmd
	case <-time.After(30 * time.Second):
		t.Fatalf("demo did not start; log:\n%s", logs)
	}
	return "", nil, nil
}

func startNginx(t *testing.T, nginx, dir, upstream string) string {
	t.Helper()
	return servertest.StartNginx(t, nginx, dir, func(port int) string { return fmt.Sprintf(nginxConfig, dir, port, upstream) })
}

// clientFrom returns an HTTP client whose connections come from source.
func clientFrom(source string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}}
}

type e2eResponse struct {
	code   int
	header http.Header
	body   string
}

func send(t *testing.T, c *http.Client, method, url string, headers map[string]string) e2eResponse {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return e2eResponse{resp.StatusCode, resp.Header, string(b)}
}

func mintToken(t *testing.T, cfgPath, sub string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run([]string{"token", "-config", cfgPath, "-issuer", "https://issuer.e2e.invalid", "-sub", sub, "-client-id", "e2e-app"}, &out, &errb); code != 0 {
		t.Fatalf("token: %d %s", code, errb.String())
	}
	return strings.TrimSpace(out.String())
}

func TestEndToEndBehindNginx(t *testing.T) {
	nginx := servertest.RequireNginx(t)
	dir := t.TempDir()
	keys, err := filepath.Abs("../../testdata/keys")
	if err != nil {
		t.Fatal(err)
	}
	demoAddr, logs := startDemo(t, dir, fmt.Sprintf(e2eConfig, keys))
	proxy := "http://" + startNginx(t, nginx, dir, demoAddr)
	attacker, neighbour := clientFrom("127.0.0.7"), clientFrom("127.0.0.8")
	alice, bob := mintToken(t, filepath.Join(dir, "ratekey.yaml"), "alice"), mintToken(t, filepath.Join(dir, "ratekey.yaml"), "bob")

	// 1. The debug endpoint explains a forged X-Forwarded-For: nginx appends
	// the true source, the walk stops there, the forged entry is never read.
	r := send(t, attacker, "GET", proxy+"/debug/ratekey?path=/v1/reports/1", map[string]string{"X-Forwarded-For": "1.2.3.4"})
	if r.code != 200 {
		t.Fatalf("debug: %d %s", r.code, r.body)
	}
	var dbg struct {
		Peer       string `json:"peer"`
		Client     string `json:"client"`
		Network    string `json:"network"`
		Operation  string `json:"operation"`
		Derivation struct {
			PeerTrusted bool   `json:"peer_trusted"`
			Header      string `json:"header"`
			Reason      string `json:"reason"`
			Hops        []struct {
				Position int    `json:"position"`
				Address  string `json:"address"`
				Verdict  string `json:"verdict"`
			} `json:"hops"`
		} `json:"derivation"`
		Policies []struct {
			Name      string `json:"name"`
			Key       string `json:"key"`
			Decision  string `json:"decision"`
			Remaining int    `json:"remaining"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(r.body), &dbg); err != nil {
		t.Fatal(err)
	}
	if dbg.Client != "127.0.0.7" || dbg.Network != "127.0.0.7/32" || !strings.HasPrefix(dbg.Peer, "127.0.0.1:") ||
		!dbg.Derivation.PeerTrusted || dbg.Derivation.Header != "X-Forwarded-For" || dbg.Derivation.Reason != "first_untrusted_hop" {
		t.Fatalf("derivation: %s", r.body)
	}
	if len(dbg.Derivation.Hops) != 1 || dbg.Derivation.Hops[0].Position != 1 || dbg.Derivation.Hops[0].Verdict != "client" {
		t.Errorf("hops: %s", r.body)
	}
	if dbg.Operation != "GET /v1/reports/{id}" || len(dbg.Policies) != 1 || dbg.Policies[0].Key != "per-network|network=127.0.0.7/32" || dbg.Policies[0].Remaining != 2 {
		t.Errorf("policies: %s", r.body)
	}
	t.Logf("debug for a forged XFF through nginx:\n%s", r.body)

	// 2. The per-network budget (burst 3) runs out whatever X-Forwarded-For
	// the attacker writes, and different report ids share it.
	for i := range 3 {
		r := send(t, attacker, "GET", fmt.Sprintf("%s/v1/reports/%d", proxy, i), map[string]string{"X-Forwarded-For": fmt.Sprintf("10.9.9.%d", i)})
		if r.code != 200 || !strings.Contains(r.body, `"client":"127.0.0.7"`) {
			t.Fatalf("report %d: %d %s", i, r.code, r.body)
		}
	}
	r = send(t, attacker, "GET", proxy+"/v1/reports/99", map[string]string{"X-Forwarded-For": "203.0.113.50"})
	if r.code != 429 || r.header.Get("Retry-After") != "60" || r.header.Get("Content-Type") != "application/problem+json" ||
		r.header.Get("RateLimit") != `"per-network";r=0;t=180` || r.header.Get("RateLimit-Policy") != `"per-network";q=3;w=180` {
		t.Fatalf("4th report: %d %v %s", r.code, r.header, r.body)
	}
	// The neighbour on another address has its own budget.
	if r := send(t, neighbour, "GET", proxy+"/v1/reports/1", nil); r.code != 200 {
		t.Fatalf("neighbour: %d %s", r.code, r.body)
	}

	// 3. Per-account budgets (burst 2) on POST /v1/export; accounts do not share.
	for i := range 2 {
		if r := send(t, attacker, "POST", proxy+"/v1/export", map[string]string{"Authorization": "Bearer " + alice}); r.code != 202 {
			t.Fatalf("alice export %d: %d %s", i, r.code, r.body)
		}
	}
	r = send(t, neighbour, "POST", proxy+"/v1/export", map[string]string{"Authorization": "Bearer " + alice})
	if r.code != 429 || r.header.Get("Retry-After") != "60" || !strings.Contains(r.body, `"policy":"per-account"`) {
		t.Fatalf("alice 3rd export (from another address): %d %v %s", r.code, r.header, r.body)
	}
	if r := send(t, attacker, "POST", proxy+"/v1/export", map[string]string{"Authorization": "Bearer " + bob}); r.code != 202 {
		t.Fatalf("bob export: %d %s", r.code, r.body)
	}
	r = send(t, attacker, "GET", proxy+"/debug/ratekey?method=POST&path=/v1/export", map[string]string{"Authorization": "Bearer " + alice})
	if !strings.Contains(r.body, `"key": "per-account|tenant=e2e|account=alice"`) || !strings.Contains(r.body, `"decision": "REJECTED"`) ||
		!strings.Contains(r.body, `"credential_id": "e2e-app"`) {
		t.Errorf("debug for alice's export: %s", r.body)
	}
	// An anonymous export is refused: the per-account policy needs an account.
	if r := send(t, attacker, "POST", proxy+"/v1/export", nil); r.code != 401 || r.header.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("anonymous export: %d %v", r.code, r.header)
	}
	// A bad token is 401 invalid_token, never anonymous.
	if r := send(t, attacker, "POST", proxy+"/v1/export", map[string]string{"Authorization": "Bearer " + alice + "x"}); r.code != 401 ||
		r.header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` {
		t.Errorf("tampered token: %d %v", r.code, r.header)
	}

	// 4. Straight to the demo, bypassing nginx: 127.0.0.7 is not a trusted
	// proxy, so its X-Forwarded-For is not read at all.
	r = send(t, attacker, "GET", "http://"+demoAddr+"/debug/ratekey", map[string]string{"X-Forwarded-For": "127.0.0.1"})
	if !strings.Contains(r.body, `"client": "127.0.0.7"`) || !strings.Contains(r.body, `"reason": "peer_untrusted"`) {
		t.Errorf("direct: %s", r.body)
	}

	// 5. Nothing secret reached the log.
	out := logs.String()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out, `"decision":"REJECTED"`); out = logs.String() {
		if time.Now().After(deadline) { // the log arrives through a pipe
			t.Fatalf("no REJECTED line in the demo log:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, tok := range []string{alice, bob} {
		for _, part := range strings.Split(tok, ".") {
			if strings.Contains(out, part) {
				t.Errorf("demo log contains a token part")
			}
		}
	}
}
