package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/limitkey"
)

func runDemo(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ratekey.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// defaultAdaptive is what check says of the embedded default's adaptive
// cap.
const defaultAdaptive = "adaptive caps, each this process's own (moved by its latency; never shared, never in the store):\n  work: one cap, 2 to 64 requests at once (starts at 2); 1 priority, 20% reserved for critical requests\n"

func TestCheckEmbeddedDefault(t *testing.T) {
	t.Chdir("../..") // the embedded default names key files relative to the repository root
	code, out, errOut := runDemo(t, "check")
	if code != 0 || out != "configuration embedded default is valid: 6 policies, 1 issuer\n"+defaultAdaptive {
		t.Fatalf("check: %d %q %q", code, out, errOut)
	}
}

func TestCheckListsEveryError(t *testing.T) {
	cfg := writeConfig(t, `
listen: 127.0.0.1:0
trusted_proxies:
  cidrs: [10.0.0.0/8, 300.1.2.3, 0.0.0.0/0]
  header: X-Forwarded-For
auth:
  anonymous: maybe
  issuers:
    - issuer: https://a.invalid
      tenant: a
      audiences: [x]
      algorithms: [EdDSA]
      keys:
        - kid: k
          public_key_file: /nonexistent/key.pem
policies:
  - name: p1
    key: [network, colour]
    rate: 5/s
    burst: 0
  - name: p2
    key: [account]
    rate: fast
    burst: 1
    on_missing: ignore
debug:
  enabled: true
  allow: [not-a-cidr]
limiter:
  store: memory
`)
	code, _, errOut := runDemo(t, "check", "-config", cfg)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, errOut)
	}
	for _, want := range []string{
		`trusted_proxies.cidrs[1] "300.1.2.3": not an IP address or CIDR prefix`,
		`trusted_proxies.cidrs[2] "0.0.0.0/0": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`,
		`auth.anonymous: "maybe"`,
		"auth.issuers[0].keys[0].public_key_file",
		`policies[0] ("p1").key: unknown dimension "colour"`,
		`policies[0] ("p1").burst: 0 must be >= 1`,
		`policies[1] ("p2").rate:`,
		`debug.allow[0] "not-a-cidr": not an IP address or CIDR prefix`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check output lacks %q:\n%s", want, errOut)
		}
	}
}

func TestCheckRejectsUnknownFields(t *testing.T) {
	cfg := writeConfig(t, "listen: 127.0.0.1:0\npolicies:\n  - name: p\n    key: [network]\n    rate: 1/s\n    burst: 1\n    brust: 5\n")
	code, _, errOut := runDemo(t, "check", "-config", cfg)
	if code != 1 || !strings.Contains(errOut, "brust") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
}

func TestCheckPolicyErrorsFromTheLibrary(t *testing.T) {
	cfg := writeConfig(t, "policies:\n  - name: p\n    key: [network]\n    rate: 1/s\n    burst: 1\n    on_missing: ignore\n    status: 200\n")
	code, _, errOut := runDemo(t, "check", "-config", cfg)
	if code != 1 || !strings.Contains(errOut, `policies[0] ("p").on_missing: "ignore" must be reject or skip`) || !strings.Contains(errOut, `policies[0] ("p").status: 200 is not a 4xx or 5xx code`) {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
}

func TestTokenRefusesWithoutPrivateKey(t *testing.T) {
	keys, _ := filepath.Abs("../../testdata/keys")
	cfg := writeConfig(t, `
auth:
  issuers:
    - issuer: https://a.invalid
      tenant: a
      audiences: [x]
      algorithms: [EdDSA]
      keys:
        - kid: k
          public_key_file: `+keys+`/demo-ed25519.pub.pem
`)
	code, out, errOut := runDemo(t, "token", "-config", cfg, "-issuer", "https://a.invalid", "-sub", "alice")
	if code != 1 || out != "" || !strings.Contains(errOut, "names no private_key_file") {
		t.Fatalf("token: %d %q %q", code, out, errOut)
	}
	code, _, errOut = runDemo(t, "token", "-config", cfg, "-issuer", "https://other.invalid", "-sub", "alice")
	if code != 1 || !strings.Contains(errOut, "not in the config") {
		t.Fatalf("unknown issuer: %d %q", code, errOut)
	}
}

// verifyMinted mints a token with `demo token -config cfgPath args...` and
// verifies it against the same config: the embedded default when cfgPath
// is "" (run from the repository root, where its key paths resolve).
func verifyMinted(t *testing.T, cfgPath string, args ...string) (limitkey.Principal, error) {
	t.Helper()
	if cfgPath == "" {
		t.Chdir("../..")
	} else {
		args = append([]string{"-config", cfgPath}, args...)
	}
	code, tok, errOut := runDemo(t, append([]string{"token"}, args...)...)
	if code != 0 {
		t.Fatalf("token: %d %s", code, errOut)
	}
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := build(cfg, discardLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.auth.close)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(tok))
	return a.auth.jwt.Authenticate(r)
}

func TestTokenVerifiesAgainstTheConfig(t *testing.T) {
	p, err := verifyMinted(t, "", "-issuer", "https://issuer.demo.ratekey.invalid", "-sub", "alice", "-client-id", "cli")
	if err != nil {
		t.Fatal(err)
	}
	if p.Account != "alice" || p.Tenant != "demo" || p.CredentialID != "cli" || p.Issuer != "https://issuer.demo.ratekey.invalid" {
		t.Errorf("principal = %+v", p)
	}
}

func TestCheckSemanticErrorsInOnePass(t *testing.T) {
	cfg := writeConfig(t, `
trusted_proxies:
  cidrs: [10.0.0.0/8]
  ipv4_prefix: 40
  allow_all: false
policies:
  - name: "bad name"
    key: [account, account]
    rate: 1/s
    burst: 1
    status: 200
  - name: heavy
    key: [network]
    rate: 1/s
    burst: 2
    cost: 5
  - name: typo-op
    key: [network]
    rate: 1/s
    burst: 2
    operations: ["GET /v1/report/{id}", "GET /v1/reports/{id}", "UNMATCHED"]
limiter:
  max_keys: -1
`)
	code, _, errOut := runDemo(t, "check", "-config", cfg)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, errOut)
	}
	for _, want := range []string{
		"trusted_proxies.ipv4_prefix: 40 out of range 1..32 (0 means 32)",
		`policies[0].key: dimension "account" comes from a verified credential, but neither auth.issuers nor auth.api_keys is configured`,
		`policies[0].name: "bad name" must be 1-64 letters`,
		`dimension "account" listed twice`,
		`policies[0].status: 200 is not a 4xx or 5xx code`,
		`policies[1] ("heavy").cost: 5 exceeds burst 2`,
		"limiter.max_keys: -1",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check output lacks %q:\n%s", want, errOut)
		}
	}
}

func TestCheckRefusesOperationsTheDemoDoesNotServe(t *testing.T) {
	cfg := writeConfig(t, `
policies:
  - name: typo-op
    key: [network]
    rate: 1/s
    burst: 2
    operations: ["GET /v1/report/{id}", "GET /v1/reports/{id}", "UNMATCHED", "GET /healthz"]
`)
	code, _, errOut := runDemo(t, "check", "-config", cfg)
	if code != 1 || !strings.Contains(errOut, `policies[0] ("typo-op").operations[0]: "GET /v1/report/{id}" is not a rate-limited route`) ||
		!strings.Contains(errOut, `policies[0] ("typo-op").operations[3]: "GET /healthz" is not a rate-limited route`) || strings.Contains(errOut, `"GET /v1/reports/{id}" is not`) {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	for _, args := range [][]string{{"chek", "-config", "x.yaml"}, {"help2"}} {
		code, out, errOut := runDemo(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "unknown command") || !strings.Contains(errOut, "usage:") {
			t.Errorf("%v: %d %q %q", args, code, out, errOut)
		}
	}
	if code, out, _ := runDemo(t, "help"); code != 0 || !strings.Contains(out, "demo check") {
		t.Errorf("help: %d %q", code, out)
	}
}

func TestCheckRefusesGuesses(t *testing.T) {
	keys, _ := filepath.Abs("../../testdata/keys")
	issuer := func(name, tenant string) string {
		return `
    - issuer: ` + name + `
      tenant: ` + tenant + `
      audiences: [x]
      algorithms: [EdDSA]
      keys:
        - kid: k
          public_key_file: ` + keys + `/demo-ed25519.pub.pem`
	}
	tests := []struct {
		name, config, want string
	}{
		{"fractional cost", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 2, cost: 1.9}\n", `policies[0].cost (line 2): "1.9" is not a decimal integer`},
		{"no key", "policies:\n  - {name: p, rate: 1/s, burst: 2}\n", `policies[0] ("p").key: required`},
		{"listen without port", "listen: localhost\n", `listen: "localhost" is not host:port`},
		{"listen with a service name", "listen: \"127.0.0.1:http\"\n", `listen: "127.0.0.1:http" is not host:port with a port of 0 to 65535`},
		{"listen with an escape in its port", "listen: \"127.0.0.1:\\ec\\r\\nFAKE\"\n", `listen: a value of 18 bytes (not shown) is not host:port`},
		{"listen port out of range", "listen: 127.0.0.1:65536\n", `listen: "127.0.0.1:65536" is not host:port`},
		{"private key of another pair", "auth:\n  issuers:" + issuer("https://a.invalid", "a") +
			"\n          private_key_file: " + keys + "/other-es256.key.pem\n", "not the private half of public_key_file"},
		{"tenant and tenant_claim", "auth:\n  issuers:" + issuer("https://a.invalid", "a") + "\n      tenant_claim: org\n", `auth.issuers[0] ("https://a.invalid"): set either tenant or tenant_claim, not both`},
		{"quoted burst", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: \"5\"}\n", `is not a decimal integer`},
		{"hex burst", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 0x10}\n", `"0x10" is not a decimal integer`},
		{"exponent max_keys", "limiter: {max_keys: 1e3}\n", `"1e3" is not a decimal integer`},
		{"fractional prefix", "trusted_proxies: {ipv4_prefix: 24.9}\n", `"24.9" is not a decimal integer`},
		{"mapping for a number", "policies:\n  - name: p\n    key: [network]\n    rate: 1/s\n    burst:\n      url: redis://:hunter2@10.0.0.5:6379/0\n",
			`policies[0].burst (line 6): a YAML mapping is not a decimal integer`},
		{"sequence for a number", "policies:\n  - name: p\n    key: [network]\n    rate: 1/s\n    burst: [1, hunter2]\n",
			`policies[0].burst (line 5): a YAML sequence is not a decimal integer`},
		{"unclosed quote swallows the next line", "limiter:\n  store: redis\n  redis:\n    timeout: \"100ms\n    url: redis://:hunter2@10.0.0.5:6379/0\"\n",
			`config: line 4: a value spans several lines (an unclosed quote, or a line indented under it)`},
		{"over-indented line continues a scalar", "trusted_proxies:\n  refresh: 5m\n    ?token=hunter2\n", `config: line 2: a value spans several lines`},
		{"unclosed quote, CR line ends", "trusted_proxies:\r  cidrs: [\"127.0.0.1\r  hunter2\"]\r", `a value spans several lines`},
		{"block scalar, CR line ends", "listen: |\r  127.0.0.1:8080\r  hunter2\r", `a value spans several lines`},
		{"block scalar", "listen: |\n  127.0.0.1:8080\n  hunter2\n", `a value spans several lines`},
		{"multi-line flow key", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 1, \"on_missing\n  hunter2\": x}\n", `a value spans several lines`},
		{"huge burst", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 99999999999999999999}\n", `"99999999999999999999" is out of range (at most 9223372036854775807)`},
		{"the file is named", "listen: localhost\n", `configuration /`},
		{"sample_passed NaN", "log: {sample_passed: .nan}\n", `log.sample_passed: NaN must be between 0 and 1`},
		{"delay_after zero", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 3, delay_after: 0}\n", `policies[0] ("p").delay_after: 0 must be 1 to burst 3`},
		{"delay_after above burst", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 3, delay_after: 4}\n", `delay_after: 4 must be 1 to burst 3`},
		{"max_delay not a duration", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 3, max_delay: 2}\n", `policies[0] ("p").max_delay: "2" is not a positive duration`},
		{"dry_run not a bool", "dry_run: maybe\n", `config: line 1: a value of the wrong type: want true or false`},
		{"listen a list", "listen: [a, b]\n", `config: line 1: a value of the wrong type: want a string`},
		{"unknown field with terminal escapes", "limiter:\n  \"\\e]0;pwned\\a\\e[2J clear\": 1\n", `config: line 2: unknown field "\x1b]0;pwned\a\x1b[2J clear"`},
		{"unknown field of 60 KB", "limiter:\n  " + strings.Repeat("k", 60<<10) + ": 1\n", `config: line 2: unknown field "` + strings.Repeat("k", 64) + `"… (61440 bytes)`},
		{"duplicate key", "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", `config: line 2: syntax error: mapping key "listen" already defined at [1:1]`},
		{"tab in indentation", "policies:\n\t- name: p\n", `config: line 2: syntax error: found character '\t' that cannot start any token`},
		{"redis without url", "limiter: {store: redis}\n", "limiter.redis.url: required"},
		{"redis with max_keys", "limiter: {store: redis, max_keys: 5, redis: {url: \"redis://127.0.0.1:1/0\"}}\n", "limiter.max_keys: applies to the memory store only"},
		{"redis bad url hides the password", "limiter: {store: redis, redis: {url: \"redis://u:hunter2@[bad/0\"}}\n", "limiter.redis.url: not a valid redis://"},
		{"redis bad timeout", "limiter: {store: redis, redis: {url: \"redis://127.0.0.1:1/0\", timeout: 5}}\n", `limiter.redis.timeout: "5" is not a positive duration`},
		{"redis window too long", "limiter: {store: redis, redis: {url: \"redis://127.0.0.1:1/0\"}}\npolicies:\n  - {name: p, key: [network], rate: 1/h, burst: 5000}\n", "longer than the Redis store's"},
		{"delay beyond the write timeout", "policies:\n  - {name: p, key: [network], rate: 2/m, burst: 4, delay_after: 1}\n", "a request may have to wait up to 1m30s"},
		{"pre_auth and main delays beyond the write timeout", "policies:\n" +
			"  - {name: pre, key: [network], rate: 1/s, burst: 50, delay_after: 1, pre_auth: true}\n" +
			"  - {name: dry, key: [network], rate: 1/s, burst: 50, delay_after: 1, dry_run: true}\n" +
			"  - {name: main, key: [network], rate: 1/s, burst: 50, delay_after: 2}\n",
			`policies[0] ("pre") (pre_auth) and policies[2] ("main"): a request may wait up to 49s before authentication and 48s after it, 1m37s in all`},
		{"max_delay too short for the cost", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 10, cost: 5, delay_after: 1, max_delay: 2s}\n",
			`policies[0] ("p").max_delay: 2s is too short for cost 5: even from a full bucket a request would wait 4s (its cost beyond delay_after's 1 tokens), so no request could ever pass`},
		{"redis short hash secret", "limiter: {store: redis, redis: {url: \"redis://127.0.0.1:1/0\", hash_secret_file: " + keys + "/short-hash-secret.txt}}\n", "limiter.redis.hash_secret_file: holds fewer than 16 bytes"},
		{"redis hash secret a device", "limiter: {store: redis, redis: {url: \"redis://127.0.0.1:1/0\", hash_secret_file: /dev/null}}\n", "limiter.redis.hash_secret_file: /dev/null: not a regular file (a device)"},
		{"empty file", "", "policies: at least one policy is required"},
		{"only a document start", "---\n", "policies: at least one policy is required"},
		{"custom tag", "listen: !foo 127.0.0.1:1\n", "config: line 1: YAML tags other than the core schema's (!!str, !!int, ...) are not accepted"},
		{"binary tag", "policies:\n  - {name: !!binary cA==, key: [network], rate: 1/s, burst: 2}\n", "config: line 2: YAML tags other than"},
		{"log interval not a duration", "log: {interval: 5}\n", `log.interval: "5" is not a duration from 1ns to 1h such as 1s`},
		{"log interval too long", "log: {interval: 2h}\n", `log.interval: "2h" is not a duration`},
		{"name with a NUL", "policies:\n  - {name: \"a\\0b\\e[31m\", key: [network], rate: 1/s, burst: 2}\n", `policies[0].name: "a\x00b\x1b[31m" must be`},
		{"redis settings on memory", "limiter: {redis: {url: \"redis://127.0.0.1:1/0\"}}\n", "limiter.redis: set only with store: redis"},
		{"alias", "debug:\n  allow: &nets [127.0.0.1]\nmetrics:\n  allow: *nets\n", "config: line 4: YAML aliases (*name) are not accepted"},
		{"merge key", "policies:\n  - &p {name: p, key: [network], rate: 1/s, burst: 2}\n  - <<: *p\n    name: q\n", "config: line 3: YAML aliases (*name) are not accepted"},
		{"two documents", "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n", "2 YAML documents"},
		{"anonymous reject without issuers", "auth: {anonymous: reject}\n", "auth.anonymous: reject needs auth.issuers or auth.api_keys"},
		{"zero leeway", "auth:\n  leeway: 0s\n  issuers:" + issuer("https://a.invalid", "a") + "\n", `auth.leeway: "0s" is not a positive duration`},
		{"debug path pattern", "debug: {enabled: true, path: \"/v1/*\", allow: [127.0.0.1]}\n", `debug.path: "/v1/*" must be a literal absolute path`},
		{"debug path param", "debug: {enabled: true, path: \"/debug/{x\", allow: [127.0.0.1]}\n", `must be a literal absolute path`},
		{"debug path space", "debug: {enabled: true, path: \"/debug ratekey\", allow: [127.0.0.1]}\n", `must be a literal absolute path`},
		{"debug path shadows a route", "debug: {enabled: true, path: /healthz, allow: [127.0.0.1]}\n", `debug.path: "/healthz" would shadow`},
		{"empty operations", "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 2, operations: []}\n",
			`policies[0] ("p").operations: an empty list would apply the policy to every operation`},
		{"account without tenant, two issuers", "auth:\n  issuers:" + issuer("https://a.invalid", "a") + issuer("https://b.invalid", "b") +
			"\npolicies:\n  - {name: p, key: [account], rate: 1/s, burst: 2}\n", "add tenant to the key"},
		{"account without tenant, API keys", "auth:\n  api_keys: {file: keys.jsonl, pepper_file: pepper}\n" +
			"policies:\n  - {name: p, key: [account], rate: 1/s, burst: 2}\n", "add tenant to the key"},
		{"credential without tenant, tenant claim", "auth:\n  issuers:\n    - issuer: https://a.invalid\n      tenant_claim: org\n      tenants: [acme, globex]\n" +
			"      audiences: [x]\n      algorithms: [EdDSA]\n      keys:\n        - kid: k\n          public_key_file: " + keys + "/demo-ed25519.pub.pem\n" +
			"policies:\n  - {name: p, key: [credential], rate: 1/s, burst: 2}\n", "add tenant to the key"},
		{"two issuers, one tenant", "auth:\n  issuers:" + issuer("https://a.invalid", "a") + issuer("https://b.invalid", "a") + "\n",
			`auth.issuers[1] ("https://b.invalid").tenant: "a" is already vouched for by issuer "https://a.invalid" (subjects are unique only per issuer, so their accounts would share budgets)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, tt.config))
			if code != 1 || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, want 1 and %q in:\n%s", code, tt.want, errOut)
			}
			if strings.Contains(errOut, "hunter2") {
				t.Errorf("error output shows a password:\n%s", errOut)
			}
			if strings.Contains(errOut, ".go:") {
				t.Errorf("error output carries Go source positions:\n%s", errOut)
			}
		})
	}
}

// TestPolicyNginxFields: delay_after, max_delay and dry_run reach the
// policy; dry_run and decision_header reach the rate limiter.
func TestPolicyNginxFields(t *testing.T) {
	cfg, err := parseConfig([]byte(`
dry_run: true
decision_header: true
policies:
  - {name: a, key: [network], rate: 1r/s, burst: 3, delay_after: 1, max_delay: 1500ms, dry_run: true}
  - {name: b, key: [network], rate: 1r/s, burst: 3}
`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := build(cfg, discardLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := []any{a.policies[0].Limit.DelayAfter, a.policies[0].Limit.MaxDelay, a.policies[0].DryRun, a.policies[1].Limit.DelayAfter, a.policies[1].DryRun}
	want := []any{int64(1), 1500 * time.Millisecond, true, int64(0), false}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("field %d = %v; want %v", i, got[i], want[i])
		}
	}
	h, err := a.router(discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if d := w.Header().Get("RateLimit-Decision"); d != "PASSED" {
		t.Errorf("RateLimit-Decision %q; want PASSED", d)
	}
}

// TestTokenSignsWithTheKeysAlgorithm: a record that allows ES256 and EdDSA,
// with the private key of its Ed25519 key only, mints an EdDSA token that
// the same config verifies (the first algorithm listed cannot sign with
// that key).
func TestTokenSignsWithTheKeysAlgorithm(t *testing.T) {
	keys, _ := filepath.Abs("../../testdata/keys")
	cfgPath := writeConfig(t, `
auth:
  issuers:
    - issuer: https://two-algs.invalid
      tenant: a
      audiences: [x]
      algorithms: [ES256, EdDSA]
      keys:
        - kid: es
          public_key_file: `+keys+`/other-es256.pub.pem
        - kid: ed
          public_key_file: `+keys+`/demo-ed25519.pub.pem
          private_key_file: `+keys+`/demo-ed25519.key.pem
policies:
  - {name: p, key: [network], rate: 1/s, burst: 1}
`)
	if p, err := verifyMinted(t, cfgPath, "-sub", "alice"); err != nil || p.Account != "alice" {
		t.Fatalf("verify: %+v %v", p, err)
	}
}

// TestShown: config values are quoted in errors only when they are one
// short printable word (or "METHOD /path").
func TestShown(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"5m", `"5m"`},
		{"", `""`},
		{"GET /v1/reports/{id}", `"GET /v1/reports/{id}"`},
		{"5m ?token=hunter2", "a value of 17 bytes (not shown)"},
		{"100ms url: redis://:hunter2@h:6379/0", "a value of 36 bytes (not shown)"},
		{"GET /a /b", "a value of 9 bytes (not shown)"},
		{"a\tb", "a value of 3 bytes (not shown)"},
		{"héllo", "a value of 6 bytes (not shown)"},
		{strings.Repeat("x", 65), "a value of 65 bytes (not shown)"},
	} {
		if got := shown(tt.in); got != tt.want {
			t.Errorf("shown(%q) = %s; want %s", tt.in, got, tt.want)
		}
	}
}

// TestCheckBurstZeroIsOneError: a burst below 1 is reported once, not
// again as the burst a cost exceeds.
func TestCheckBurstZeroIsOneError(t *testing.T) {
	cfg := writeConfig(t, "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 0, cost: 2}\n")
	code, _, errOut := runDemo(t, "check", "-config", cfg)
	if code != 1 || !strings.Contains(errOut, "burst: 0 must be >= 1") || strings.Contains(errOut, "exceeds burst") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
}

// TestAliasBombIsRefusedCheaply: nested aliases ("billion laughs") would
// make the decoder expand 10⁶ values from 360 bytes here (10⁹ from 464
// bytes exhausts memory); the parse refuses the first alias before
// decoding.
func TestAliasBombIsRefusedCheaply(t *testing.T) {
	var b strings.Builder
	b.WriteString("debug:\n  allow:\n    - &a0 [l,l,l,l,l,l,l,l,l,l]\n")
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&b, "    - &a%d [%s]\n", i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d,", i-1), 10), ","))
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := parseConfig([]byte(b.String()), t.TempDir())
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "line 4: YAML aliases") {
		t.Errorf("error %v; want the alias on line 4 refused", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("parsing %d bytes allocated %d MB", b.Len(), alloc>>20)
	}
}

// TestServeNamesABadRedisFlag: an unparsable -redis URL is the flag's
// fault, not the configuration's, and its password is not shown.
func TestServeNamesABadRedisFlag(t *testing.T) {
	code, _, errOut := runDemo(t, "serve", "-redis", "redis://user:hunter2@127.0.0.1:notaport/0")
	if code != 2 || !strings.Contains(errOut, "demo serve: -redis: not a valid redis://") || strings.Contains(errOut, "configuration") {
		t.Errorf("exit %d, stderr %q; want 2 and the -redis flag named", code, errOut)
	}
	if strings.Contains(errOut, "hunter2") {
		t.Errorf("stderr shows the password: %q", errOut)
	}
}

// TestServeNamesABadAddressFlag: an address flag that is not host:port is
// refused before anything listens, naming the flag (it was net.Listen's
// bare error, after the HTTP side had started).
func TestServeNamesABadAddressFlag(t *testing.T) {
	for _, tc := range []struct{ flag, value string }{{"-addr", "127.0.0.1:99999"}, {"-grpc-addr", "bad:addr:x"}} {
		code, out, errOut := runDemo(t, "serve", tc.flag, tc.value)
		want := "demo serve: " + tc.flag + ": \"" + tc.value + "\" is not host:port with a port of 0 to 65535 (e.g. 127.0.0.1:8080)\n"
		if code != 2 || errOut != want || out != "" {
			t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want 2 and %q", tc.flag, tc.value, code, out, errOut, want)
		}
	}
}

// TestTokenExpired: -ttl -1h mints a token that expired an hour ago
// (past the 30 s leeway), which the demo refuses as expired.
func TestTokenExpired(t *testing.T) {
	if _, err := verifyMinted(t, "", "-sub", "alice", "-ttl", "-1h"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an hour-expired token: %v; want refused as expired", err)
	}
	if code, _, _ := runDemo(t, "token", "-sub", "alice", "-ttl", "0s"); code != 1 {
		t.Errorf("-ttl 0s: exit %d; want 1", code)
	}
	// Within the 30 s leeway the token would still be accepted: refused.
	if code, _, errOut := runDemo(t, "token", "-sub", "alice", "-ttl", "-5s"); code != 1 || !strings.Contains(errOut, "auth.leeway") {
		t.Errorf("-ttl -5s: exit %d %q; want 1 and the leeway named", code, errOut)
	}
}

// TestCheckMapsTheLibrarysErrors: ratekey.New's errors name the YAML's
// fields and words, each problem once: the demo does not check again what
// the library checks (verified dimensions and priorities without
// credentials, debug.allow entries), and drops an account override's
// "every tenant" when no credential is configured (there is no tenant)
// and "local needs a fallback store" (the demo's own error names
// limiter.store).
func TestCheckMapsTheLibrarysErrors(t *testing.T) {
	cfg := writeConfig(t, `
policies:
  - name: p1
    key: [account, plan]
    rate: 5/s
    burst: 1
  - name: ad
    key: [operation]
    max_in_flight: auto
    max_in_flight_ceiling: 10
    priorities: [{tenant: acme, class: critical}]
  - name: p2
    key: [network]
    rate: 5/s
    burst: 1
    overrides: [{account: alice, rate: 10/s}]
  - {name: p3, key: [network], rate: 5/s, burst: 1, on_store_error: local}
debug: {enabled: true, allow: [not-a-cidr]}
`)
	code, _, errOut := runDemo(t, "check", "-config", cfg)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, errOut)
	}
	for _, want := range []string{
		`policies[0] ("p1").key: dimension "account" comes from a verified credential, but neither auth.issuers nor auth.api_keys is configured`,
		`policies[0] ("p1").key: dimension "plan" comes from a verified credential, but neither auth.issuers nor auth.api_keys is configured`,
		`policies[1] ("ad").priorities[0]: tenant and plan come from a verified credential, but neither auth.issuers nor auth.api_keys is configured`,
		`policies[2] ("p2").overrides[0].account: account is not a dimension of the policy's key [network]`,
		`debug.allow[0] "not-a-cidr": not an IP address or CIDR prefix`,
		`policies[3].on_store_error: local decides on this process's memory while a shared store cannot; it needs limiter.store: redis`,
	} {
		if n := strings.Count(errOut, want); n != 1 {
			t.Errorf("check output has %q %d times; want once:\n%s", want, n, errOut)
		}
	}
	for _, not := range []string{"Authenticator", "debug_allow", "in every tenant", "RateLimitConfig"} {
		if strings.Contains(errOut, not) {
			t.Errorf("check output names %q, which the YAML does not:\n%s", not, errOut)
		}
	}
	if lines := strings.Count(errOut, "\n  - "); lines != 6 {
		t.Errorf("%d errors; want 6:\n%s", lines, errOut)
	}
}
