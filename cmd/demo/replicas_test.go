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
  shared: rate 9/3m, burst 3 (of 9/m, burst 9)
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
  shared: rate 9/3m, burst 3 (of 9/m, burst 9)
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

// TestCheckLocalFallbackOneError: a bad Redis setting beside a local
// policy is one error, not also "local needs a fallback store".
func TestCheckLocalFallbackOneError(t *testing.T) {
	cfg := "limiter:\n  store: redis\n  redis:\n    url: redis://127.0.0.1:1/0\n    prefetch: -1\npolicies:\n  - name: h\n    key: []\n    rate: 1/s\n    burst: 5\n    on_store_error: local\n"
	code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, cfg))
	if code != 1 || strings.Count(errOut, "\n  - ") != 1 || !strings.Contains(errOut, "limiter.redis.prefetch: -1 tokens, want 0 (off) to 1000000") {
		t.Errorf("check: %d\n%s\nwant exactly the prefetch error", code, errOut)
	}
}

// TestReloadRescalesReplicas: a reload from 3 replicas to 1 decides on a
// view of the same buckets at the new share, keeping their debt: one
// token of a share of 3 spent is a third of the window, so 6 of the whole
// 9 are left, not a fresh 9. Refused reloads (a bad burst, replicas out of
// range) change nothing: the running configuration keeps deciding at its
// share (the live store is never rescaled before the swap).
func TestReloadRescalesReplicas(t *testing.T) {
	s, path, logs := reloadServer(t, replicasBase)
	if code, _ := hit(s, http.MethodGet, "/v1/reports/1"); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ cfg, want string }{
		{strings.Replace(strings.Replace(replicasBase, "replicas: 3", "replicas: 1", 1), "burst: 9", "burst: 0", 1), "burst: 0 must be >= 1"},
		{strings.Replace(replicasBase, "replicas: 3", "replicas: -1", 1), "limiter.replicas: -1 must be 0 to 10000"},
		{strings.Replace(replicasBase, "replicas: 3", "replicas: 20", 1), `policies[0] ("shared").burst: 9 shared by 20 replicas is 0 per process`},
	} {
		write(tc.cfg)
		if err := s.reload(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("reload: %v; want refused with %q", err, tc.want)
		}
		if n := s.app.store.limiter.(*memory.Limiter).Replicas(); n != 3 {
			t.Fatalf("replicas after a refused reload: %d; want 3", n)
		}
	}
	write(strings.Replace(replicasBase, "replicas: 3", "replicas: 1", 1))
	if err := s.reload(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{200, 200, 200, 200, 200, 200, 429} {
		if code, _ := hit(s, http.MethodGet, "/v1/reports/1"); code != want {
			t.Fatalf("request %d after the reload to 1 replica: %d; want %d", i+1, code, want)
		}
	}
	if want := `"msg":"ratekey reload: limiter.replicas changed; each process enforces its new share of every limit, and every bucket keeps its debt","replicas":1,"previous":3`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s", want)
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

// TestUseRedisKeepsReplicasForTheFallback: -redis replaces the limiter
// section; limiter.replicas stays only when a policy has on_store_error
// local (the fallback's share), so a memory config with replicas runs on
// -redis as documented.
func TestUseRedisKeepsReplicasForTheFallback(t *testing.T) {
	for _, tc := range []struct {
		local bool
		want  integer
	}{{false, 0}, {true, 3}} {
		c := Config{Limiter: LimiterConfig{Replicas: 3}, Policies: []PolicyConfig{{Name: "p"}}}
		if tc.local {
			c.Policies[0].OnStoreError = "local"
		}
		c.useRedis("redis://127.0.0.1:1/0", "")
		if c.Limiter.Store != "redis" || c.Limiter.Replicas != tc.want {
			t.Errorf("local %v: store %q, replicas %d; want redis, %d", tc.local, c.Limiter.Store, c.Limiter.Replicas, tc.want)
		}
	}
}
