package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekey/ratekey/limiter/memory"
)

// replicasBase is a demo config for 3 processes sharing burst 9 at 9/m.
const replicasBase = `
limiter:
  replicas: 3
policies:
  - name: shared
    key: [network]
    rate: 9/m
    burst: 9
    operations: ["GET /v1/reports/{id}"]
  - name: slots
    key: [network]
    max_in_flight: 6
    operations: ["GET /v1/slow"]
decision_header: true
`

// TestCheckPrintsShares: demo check lists each process's share when
// limiter.replicas > 1, and refuses a share below one token or slot,
// naming the policy and the numbers; replicas on Redis or out of range are
// refused.
func TestCheckPrintsShares(t *testing.T) {
	code, out, errOut := runDemo(t, "check", "-config", writeConfig(t, replicasBase))
	want := `limiter.replicas 3: each process enforces its share of every limit:
  shared: rate 9/3m0s, burst 3 (of 9/m, burst 9)
  slots: max_in_flight 2 (of 6)
`
	if code != 0 || !strings.HasSuffix(out, want) {
		t.Errorf("check: %d\n%s%s\nwant the output to end with\n%s", code, out, errOut, want)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"burst: 9", "burst: 2", `policies[0] ("shared").burst: 2 shared by 3 replicas is 0 per process, below one: raise it to at least 3 or run fewer replicas`},
		{"max_in_flight: 6", "max_in_flight: 2", `policies[1] ("slots").max_in_flight: 2 shared by 3 replicas is 0 per process, below one: raise it to at least 3 or run fewer replicas`},
		{"replicas: 3", "replicas: -1", `limiter.replicas: -1 must be 0 to 10000 (the processes that share every budget; 0 or 1: this one alone)`},
		{"replicas: 3", "replicas: 3\n  store: redis\n  redis:\n    url: redis://127.0.0.1:1/0", `limiter.replicas: with store redis it is the share of the local fallback (on_store_error: local), and no policy has it`},
		{"burst: 9", "burst: 9\n    on_store_error: local", `policies[0].on_store_error: local decides on this process's memory while a shared store cannot; it needs limiter.store: redis`},
		{"replicas: 3", "replicas: -5\n  store: redis\n  redis:\n    url: redis://127.0.0.1:1/0", `limiter.replicas: -5 must be 0 to 10000`},
	} {
		cfg := strings.Replace(replicasBase, tc.from, tc.to, 1)
		code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, cfg))
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: %d\n%s\nwant %s", tc.to, code, errOut, tc.want)
		}
	}
}

// TestCheckLocalFallback: on Redis, a policy with on_store_error local
// and limiter.replicas passes demo check (which does no I/O).
func TestCheckLocalFallback(t *testing.T) {
	cfg := strings.Replace(replicasBase, "replicas: 3", "replicas: 3\n  store: redis\n  redis:\n    url: redis://127.0.0.1:1/0", 1)
	cfg = strings.Replace(cfg, "burst: 9", "burst: 9\n    on_store_error: local", 1)
	wantOut := `limiter.replicas 3: while Redis cannot decide, each process enforces on its local fallback:
  shared: rate 9/3m0s, burst 3 (of 9/m, burst 9)
`
	if code, out, errOut := runDemo(t, "check", "-config", writeConfig(t, cfg)); code != 0 || !strings.HasSuffix(out, wantOut) {
		t.Errorf("check: %d\n%s%s\nwant the output to end with\n%s", code, out, errOut, wantOut)
	}
	// The local policy's share on the fallback keeps a token: 9 over 10 does not.
	cfg = strings.Replace(cfg, "replicas: 3", "replicas: 10", 1)
	want := `policies[0] ("shared").burst: 9 shared by 10 replicas is 0 per process, below one: raise it to at least 10 or run fewer replicas`
	if code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, cfg)); code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("check with replicas 10: %d\n%s\nwant %s", code, errOut, want)
	}
}

// TestReloadKeepsReplicas: limiter.replicas is a store setting: a reload
// that changes it is refused (a restart applies it), and the running
// share stays, with its buckets. (Applying it on reload checked the new
// config against a store already rescaled: a refused reload could turn
// every decision into a store error meanwhile.)
func TestReloadKeepsReplicas(t *testing.T) {
	s, path, _ := reloadServer(t, replicasBase)
	if code, _ := hit(s, http.MethodGet, "/v1/reports/1"); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	for _, n := range []string{"1", "20", "-1"} {
		if err := os.WriteFile(path, []byte(strings.Replace(replicasBase, "replicas: 3", "replicas: "+n, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.reload(); err == nil || !strings.Contains(err.Error(), "restart the demo") {
			t.Errorf("reload to replicas %s: %v; want refused (restart the demo)", n, err)
		}
		if got := s.app.store.limiter.(*memory.Limiter).Replicas(); got != 3 {
			t.Errorf("replicas after the refused reload to %s: %d; want 3", n, got)
		}
	}
	for i, want := range []int{200, 200, 429} {
		if code, _ := hit(s, http.MethodGet, "/v1/reports/1"); code != want {
			t.Fatalf("request %d after the refused reloads: %d; want %d (the share of 3 kept)", i+2, code, want)
		}
	}
}

// TestReferenceConfigChecks: the reference config of docs/configuration.md
// passes demo check (its key files taken from the repository's testdata).
func TestReferenceConfigChecks(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "## Configuration reference\n\n```yaml\n")
	yaml, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("docs/configuration.md has no reference config")
	}
	keys, err := filepath.Abs("../../testdata/keys")
	if err != nil {
		t.Fatal(err)
	}
	yaml = strings.ReplaceAll(yaml, "testdata/keys", keys)
	if code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, yaml)); code != 0 {
		t.Errorf("the reference config of docs/configuration.md: %d\n%s", code, errOut)
	}
}
