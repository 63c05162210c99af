package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// plansConfig: one issuer vouching for two tenants and two plans by claim,
// API keys, a policy per tenant and plan with overrides (acme burst 6,
// plan pro burst 5, the default 3; plan is in the key, so a tenant's
// requests of two plans never share a bucket of two shapes) and a daily
// quota.
const plansConfig = `
listen: 127.0.0.1:0
trusted_proxies: {cidrs: []}
auth:
  anonymous: reject
  issuers:
    - issuer: https://tenants.invalid
      tenant_claim: org
      tenants: [acme, beta]
      plan_claim: plan
      plans: [free, pro]
      audiences: [api]
      algorithms: [EdDSA]
      keys:
        - kid: k1
          public_key_file: %[1]s/demo-ed25519.pub.pem
          private_key_file: %[1]s/demo-ed25519.key.pem
  api_keys: {file: keys.jsonl, pepper_file: pepper}
policies:
  - name: per-tenant
    key: [tenant, plan]
    rate: 1/m
    burst: 3
    overrides:
      - {tenant: acme, burst: 6}
      - {plan: pro, burst: 5}
  - name: daily
    key: [tenant, account]
    rate: 1000/d
    burst: 1000
debug: {enabled: true, path: /debug/ratekey, allow: [127.0.0.0/8]}
`

func keysDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../../testdata/keys")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPlansAndOverrides, end to end through the demo: tokens of two
// tenants on one policy get their own bursts (acme 6 by its override, beta
// the default 3); an API key with plan pro gets the plan's 5; a token
// claiming a plan outside plans is a 401; the debug JSON names the
// override; the daily quota advertises w=86400 and t=87 (86.4 s, rounded up).
func TestPlansAndOverrides(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "ratekey.yaml")
	cfg := fmt.Sprintf(plansConfig, keysDir(t))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	code, key, errOut := runDemo(t, "apikey", "-config", cfgPath, "-tenant", "keys", "-account", "bot", "-plan", "pro")
	if code != 0 || !strings.Contains(errOut, `for tenant "keys", account "bot", plan "pro"`) {
		t.Fatalf("apikey -plan: %d %s", code, errOut)
	}
	key = strings.TrimSpace(key)
	if stored, _ := os.ReadFile(filepath.Join(dir, "keys.jsonl")); !strings.Contains(string(stored), `"plan":"pro"`) {
		t.Fatalf("key file %s lacks the plan", stored)
	}
	if code, out, errOut := runDemo(t, "check", "-config", cfgPath); code != 0 || out != "configuration "+cfgPath+" is valid: 2 policies, 1 issuer\n" {
		t.Fatalf("check: %d %q %q", code, out, errOut)
	}
	token := func(args ...string) string {
		t.Helper()
		code, out, errOut := runDemo(t, append([]string{"token", "-config", cfgPath}, args...)...)
		if code != 0 {
			t.Fatalf("token %v: %d %s", args, code, errOut)
		}
		return "Bearer " + strings.TrimSpace(out)
	}
	acme := token("-sub", "alice", "-tenant", "acme", "-plan", "free")
	beta := token("-sub", "bob", "-tenant", "beta", "-plan", "free")
	gold := token("-sub", "carol", "-tenant", "beta", "-plan", "gold")

	h := serveConfig(t, dir, cfg)
	tests := []struct {
		name     string
		headers  map[string]string
		admitted int
		policy   string // RateLimit-Policy of the first response
		current  string // RateLimit of the first response
	}{
		{"acme (tenant override)", map[string]string{"Authorization": acme}, 6,
			`"per-tenant";q=6;w=360, "daily";q=1000;w=86400`, `"per-tenant";r=5;t=60, "daily";r=999;t=87`},
		{"beta (the policy's)", map[string]string{"Authorization": beta}, 3,
			`"per-tenant";q=3;w=180, "daily";q=1000;w=86400`, `"per-tenant";r=2;t=60, "daily";r=999;t=87`},
		{"API key of plan pro", map[string]string{"X-API-Key": key}, 5,
			`"per-tenant";q=5;w=300, "daily";q=1000;w=86400`, `"per-tenant";r=4;t=60, "daily";r=999;t=87`},
	}
	for _, tc := range tests {
		n := 0
		for i := range 10 {
			w := call(h, "192.0.2.1:1", "/v1/reports/1", tc.headers)
			if i == 0 {
				if p, c := w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"); p != tc.policy || c != tc.current {
					t.Errorf("%s: RateLimit-Policy %q, RateLimit %q; want %q, %q", tc.name, p, c, tc.policy, tc.current)
				}
			}
			if w.Code == 200 {
				n++
			}
		}
		if n != tc.admitted {
			t.Errorf("%s: %d of 10 admitted; want %d", tc.name, n, tc.admitted)
		}
	}
	if w := call(h, "192.0.2.1:1", "/v1/reports/1", map[string]string{"Authorization": gold}); w.Code != 401 ||
		!strings.Contains(w.Body.String(), `"detail":"token plan is not accepted"`) {
		t.Errorf("plan outside plans: %d %s; want 401 token plan is not accepted", w.Code, w.Body)
	}

	// The debug JSON names the override that applied, null when none did.
	for _, tc := range []struct {
		auth, want string
	}{{acme, `"tenant=acme"`}, {beta, `null`}} {
		w := call(h, "127.0.0.1:1", "/debug/ratekey?path=/v1/reports/1", map[string]string{"Authorization": tc.auth})
		var rec struct {
			Principal map[string]string            `json:"principal"`
			Policies  []map[string]json.RawMessage `json:"policies"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &rec); err != nil || len(rec.Policies) != 2 {
			t.Fatalf("debug: %d %s: %v", w.Code, w.Body, err)
		}
		if got := string(rec.Policies[0]["override"]); got != tc.want {
			t.Errorf("debug per-tenant override = %s; want %s", got, tc.want)
		}
		if got := string(rec.Policies[1]["override"]); got != "null" {
			t.Errorf("debug daily override = %s; want null", got)
		}
		if rec.Principal["plan"] != "free" || string(rec.Policies[1]["rate"]) != `"1000/d"` {
			t.Errorf("debug: principal %v, daily rate %s", rec.Principal, rec.Policies[1]["rate"])
		}
	}
}

// TestCheckOverrides: demo check refuses overrides no credential can
// match, duplicates, and invalid limits and daily rates, naming each field.
func TestCheckOverrides(t *testing.T) {
	head := fmt.Sprintf(`
listen: 127.0.0.1:0
trusted_proxies: {cidrs: []}
auth:
  issuers:
    - issuer: https://tenants.invalid
      tenant_claim: org
      tenants: [acme, beta]
      plan: free
      audiences: [api]
      algorithms: [EdDSA]
      keys: [{kid: k1, public_key_file: %s/demo-ed25519.pub.pem}]
`, keysDir(t))
	tests := []struct {
		name, policies, want string
	}{
		{"valid daily rates", `
  - {name: p, key: [tenant, plan], rate: 1000/d, burst: 1000, overrides: [{tenant: acme, rate: 5000/d}, {plan: free, burst: 500}]}`, ""},
		{"unknown tenant", `
  - {name: p, key: [tenant], rate: 1/s, burst: 3, overrides: [{tenant: acme2, burst: 6}]}`,
			`policies[0] ("p").overrides[0].tenant: "acme2" is not a tenant of any issuer (tenant, tenants) or API key, so it never matches`},
		{"unknown plan", `
  - {name: p, key: [tenant, plan], rate: 1/s, burst: 3, overrides: [{plan: pro, burst: 6}]}`,
			`policies[0] ("p").overrides[0].plan: "pro" is not a plan of any issuer (plan, plans) or API key, so it never matches`},
		{"duplicate", `
  - {name: p, key: [tenant], rate: 1/s, burst: 3, overrides: [{tenant: acme, burst: 6}, {tenant: acme, burst: 9}]}`,
			`policies[0] ("p").overrides[1].tenant: "acme" is matched by overrides[0] already (the first match wins, so this one never applies)`},
		{"no match, bad daily rate, delay_after 0", `
  - {name: p, key: [tenant, account], rate: 1/s, burst: 3, overrides: [{burst: 6}, {tenant: acme, account: x, rate: 5/days}, {tenant: beta, account: y, delay_after: 0}]}`,
			`policies[0] ("p").overrides[1].rate: limiter: invalid rate "5/days": unit "days" is not s, m, h or d` + "\n" +
				`policies[0] ("p").overrides[2].delay_after: 0 must be 1 to burst (omit it for the policy's)` + "\n" +
				`policies[0] ("p").overrides[0]: set one of tenant, plan or account, or an account with its tenant (the verified attributes it matches)`},
		{"plan override splits a tenant's quota (issue 24: 3 + 5 a day)", `
  - {name: p, key: [tenant], rate: 3/d, burst: 3, overrides: [{plan: free, rate: 5/d, burst: 5}]}`,
			`policies[0] ("p").overrides[0].plan: plan is not a dimension of the policy's key [tenant], so requests of one key with plan "free" and without it would spend two buckets, each with its own burst: add plan to the key (a bucket per plan; a request without one then meets on_missing), or match a dimension of the key`},
		{"account override in every tenant", `
  - {name: p, key: [tenant, account], rate: 1/s, burst: 3, overrides: [{account: vip, burst: 7}]}`,
			`policies[0] ("p").overrides[0].account: "vip" would match the account of that name in every tenant (the credentials may name several tenants, and an account name is unique only per tenant): name its tenant too`},
		{"account of a tenant", `
  - {name: p, key: [tenant, account], rate: 1/s, burst: 3, overrides: [{tenant: acme, account: vip, burst: 7}]}`, ""},
		{"account of a tenant no issuer names", `
  - {name: p, key: [tenant, account], rate: 1/s, burst: 3, overrides: [{tenant: acme2, account: vip, burst: 7}]}`,
			`policies[0] ("p").overrides[0].tenant: "acme2" is not a tenant of any issuer (tenant, tenants) or API key, so it never matches`},
		{"cost above the override's burst", `
  - {name: p, key: [tenant], rate: 1/s, burst: 3, overrides: [{tenant: beta, burst: 2, cost: 3}]}`,
			`policies[0] ("p").overrides[0].cost: 3 exceeds burst 2, so no request could ever pass`},
		{"plan key", `
  - {name: p, key: [tenant, plan], rate: 1/d, burst: 1}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, head+"policies:"+tc.policies+"\n")
			code, out, errOut := runDemo(t, "check", "-config", p)
			if tc.want == "" {
				if code != 0 {
					t.Errorf("check: %d %s", code, errOut)
				}
				return
			}
			want := "configuration " + p + " is invalid:\n  - " + strings.ReplaceAll(tc.want, "\n", "\n  - ") + "\n"
			if code != 1 || errOut != want {
				t.Errorf("check: %d %q\n%s\nwant:\n%s", code, out, errOut, want)
			}
		})
	}
}

// TestCheckAccountOverrides: with two issuers (one taking the tenant from
// a claim, one with a fixed tenant), an account override must name its
// tenant: it would otherwise apply to that account name in every tenant
// (issue 24). With one issuer of a fixed tenant, account names are
// global, and it need not.
func TestCheckAccountOverrides(t *testing.T) {
	issuer := func(iss, tenant string) string {
		return fmt.Sprintf(`
    - {issuer: %s, %s, audiences: [api], algorithms: [EdDSA], keys: [{kid: k1, public_key_file: %s/demo-ed25519.pub.pem}]}`, iss, tenant, keysDir(t))
	}
	two := issuer("https://claims.invalid", "tenant_claim: org, tenants: [acme, beta]") + issuer("https://solo.invalid", "tenant: solo")
	one := issuer("https://solo.invalid", "tenant: solo")
	tests := []struct {
		name, issuers, policy, want string
	}{
		{"two issuers, account alone", two, `{name: p, key: [tenant, account], rate: 1/s, burst: 3, overrides: [{account: vip, burst: 7}]}`,
			`policies[0] ("p").overrides[0].account: "vip" would match the account of that name in every tenant (the credentials may name several tenants, and an account name is unique only per tenant): name its tenant too`},
		{"two issuers, account of a tenant", two, `{name: p, key: [tenant, account], rate: 1/s, burst: 3, overrides: [{tenant: solo, account: vip, burst: 7}]}`, ""},
		{"one tenant, account alone", one, `{name: p, key: [account], rate: 1/s, burst: 3, overrides: [{account: vip, burst: 7}]}`, ""},
		{"one tenant, account of the tenant, key without tenant", one, `{name: p, key: [account], rate: 1/s, burst: 3, overrides: [{tenant: solo, account: vip, burst: 7}]}`,
			`policies[0] ("p").overrides[0].tenant: tenant is not a dimension of the policy's key [account], so requests of one key with tenant "solo" and without it would spend two buckets, each with its own burst: add tenant to the key (a bucket per tenant; a request without one then meets on_missing), or match a dimension of the key`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, "listen: 127.0.0.1:0\ntrusted_proxies: {cidrs: []}\nauth:\n  issuers:"+tc.issuers+"\npolicies:\n  - "+tc.policy+"\n")
			code, out, errOut := runDemo(t, "check", "-config", p)
			if tc.want == "" {
				if code != 0 {
					t.Errorf("check: %d %s", code, errOut)
				}
				return
			}
			if want := "configuration " + p + " is invalid:\n  - " + tc.want + "\n"; code != 1 || errOut != want {
				t.Errorf("check: %d %q\n%s\nwant:\n%s", code, out, errOut, want)
			}
		})
	}
}
