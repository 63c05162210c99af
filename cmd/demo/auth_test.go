package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// apiKeyConfig has API keys, a query source, and a pre-auth network policy
// in front of a per-account one.
const apiKeyConfig = `
listen: 127.0.0.1:0
trusted_proxies: {cidrs: []}
auth:
  anonymous: reject
  api_keys: {file: keys.jsonl, pepper_file: pepper}
  sources: [header, query]
policies:
  - {name: pre-network, key: [network], rate: 1/m, burst: 5, pre_auth: true}
  - {name: per-account, key: [tenant, account], rate: 1/m, burst: 2}
decision_header: true
`

func serveConfig(t *testing.T, dir, cfg string) http.Handler {
	t.Helper()
	path := filepath.Join(dir, "ratekey.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, path, discardLogger())
	t.Cleanup(s.close)
	return s
}

func call(h http.Handler, peer, target string, headers map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = peer
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestAPIKeyCommandAndUse: `demo apikey` prints a key once and stores only
// its hash; the key then authenticates from X-API-Key, Authorization or the
// opted-in query source; two credentials are a 400; the pre-auth network
// policy limits a flood of bad keys before verification.
func TestAPIKeyCommandAndUse(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "ratekey.yaml")
	if err := os.WriteFile(cfgPath, []byte(apiKeyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runDemo(t, "apikey", "-config", cfgPath, "-tenant", "acme", "-account", "alice")
	if code != 0 {
		t.Fatalf("apikey: %d %s", code, errOut)
	}
	key := strings.TrimSpace(out)
	if !strings.HasPrefix(key, "rk_") || len(key) != 54 {
		t.Fatalf("key %q", key)
	}
	secret := key[16:48]
	stored, _ := os.ReadFile(filepath.Join(dir, "keys.jsonl"))
	if strings.Contains(string(stored), secret) || strings.Contains(errOut, secret) {
		t.Fatal("the secret is stored or logged")
	}
	if info, err := os.Stat(filepath.Join(dir, "pepper")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("pepper file: %v %v", info, err)
	}
	if code, _, errOut := runDemo(t, "apikey", "-config", cfgPath, "-tenant", "acme"); code != 2 || !strings.Contains(errOut, "-account are required") {
		t.Errorf("missing -account: %d %s", code, errOut)
	}

	h := serveConfig(t, dir, apiKeyConfig)
	tests := []struct {
		name    string
		target  string
		headers map[string]string
		want    int
	}{
		{"X-API-Key", "/v1/reports/1", map[string]string{"X-API-Key": key}, 200},
		{"Authorization: Bearer rk_", "/v1/reports/1", map[string]string{"Authorization": "Bearer " + key}, 200},
		{"query (opted in), account budget spent", "/v1/reports/1?access_token=" + key, nil, 429},
		{"key and bearer token", "/v1/reports/1", map[string]string{"X-API-Key": key, "Authorization": "Bearer x.y.z"}, 400},
		{"one character off", "/v1/reports/1", map[string]string{"X-API-Key": key[:20] + flip(key[20]) + key[21:]}, 401},
	}
	for _, tt := range tests {
		if w := call(h, "192.0.2.1:1", tt.target, tt.headers); w.Code != tt.want {
			t.Errorf("%s: %d; want %d (%s)", tt.name, w.Code, tt.want, w.Body)
		}
	}
	// 5 requests spent the pre-auth budget of 192.0.2.1: the next bad key is
	// refused before verification.
	if w := call(h, "192.0.2.1:1", "/v1/reports/1", map[string]string{"X-API-Key": "rk_bad"}); w.Code != 429 ||
		!strings.Contains(w.Header().Get("RateLimit"), "pre-network") {
		t.Errorf("flood: %d %q; want 429 from pre-network", w.Code, w.Header().Get("RateLimit"))
	}
	if w := call(h, "192.0.2.2:1", "/v1/reports/1", map[string]string{"X-API-Key": key}); w.Code != 429 {
		t.Errorf("alice from another network: %d; want 429 (per-account spent)", w.Code)
	}
}

func flip(c byte) string {
	if c == 'a' {
		return "b"
	}
	return "a"
}

// TestJWKSIssuer: an issuer record with jwks_url verifies tokens against the
// key set a real HTTP server publishes, requires typ when configured, and
// counts the fetch in ratekey_jwks_refreshes_total.
func TestJWKSIssuer(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var fetches atomic.Int32
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/jwk-set+json")
		fmt.Fprintf(w, `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","alg":"EdDSA","use":"sig","x":%q}]}`,
			base64.RawURLEncoding.EncodeToString(pub))
	}))
	defer jwks.Close()
	cfg := `
trusted_proxies: {cidrs: []}
auth:
  anonymous: reject
  issuers:
    - issuer: https://idp.test.invalid
      tenant: acme
      audiences: [api]
      algorithms: [EdDSA]
      jwks_url: ` + jwks.URL + `
      jwks_refresh: 10m
      typ: at+jwt
policies:
  - {name: per-account, key: [tenant, account], rate: 1/m, burst: 5}
metrics: {enabled: true, allow: [192.0.2.0/24]}
`
	h := serveConfig(t, t.TempDir(), cfg)
	mint := func(typ string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": "https://idp.test.invalid", "sub": "alice", "aud": "api",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"], tok.Header["typ"] = "k1", typ
		s, err := tok.SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if w := call(h, "192.0.2.1:1", "/v1/reports/1", map[string]string{"Authorization": "Bearer " + mint("at+jwt")}); w.Code != 200 {
		t.Fatalf("JWKS token: %d %s", w.Code, w.Body)
	}
	if w := call(h, "192.0.2.1:1", "/v1/reports/1", map[string]string{"Authorization": "Bearer " + mint("JWT")}); w.Code != 401 {
		t.Errorf("typ JWT where at+jwt is required: %d; want 401", w.Code)
	}
	if fetches.Load() != 1 {
		t.Errorf("%d JWKS fetches; want 1", fetches.Load())
	}
	w := call(h, "192.0.2.1:1", "/metrics", nil)
	if !strings.Contains(w.Body.String(), `ratekey_jwks_refreshes_total{issuer="https://idp.test.invalid",outcome="ok"} 1`) ||
		!strings.Contains(w.Body.String(), `ratekey_authentication_failures_total{reason="invalid_token"} 1`) {
		t.Errorf("metrics:\n%s", w.Body)
	}
}

// TestAPIKeyTenantOfAnIssuer: an API key may not name a tenant an issuer
// vouches for, or its accounts would share budgets with that issuer's.
func TestAPIKeyTenantOfAnIssuer(t *testing.T) {
	dir := t.TempDir()
	cfg := `
auth:
  api_keys: {file: keys.jsonl, pepper_file: pepper}
  issuers:
    - {issuer: https://a.invalid, tenant: demo, audiences: [x], algorithms: [HS256], keys: [{kid: k, secret_file: hmac}]}
`
	cfgPath := filepath.Join(dir, "ratekey.yaml")
	for name, body := range map[string]string{"ratekey.yaml": cfg, "hmac": strings.Repeat("s", 40)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errOut := runDemo(t, "apikey", "-config", cfgPath, "-tenant", "demo", "-account", "alice"); code != 1 || !strings.Contains(errOut, `tenant "demo" is vouched for by issuer "https://a.invalid"`) {
		t.Errorf("apikey for an issuer's tenant: %d %s", code, errOut)
	}
	if code, _, errOut := runDemo(t, "apikey", "-config", cfgPath, "-tenant", "keys", "-account", "alice"); code != 0 {
		t.Fatalf("apikey: %d %s", code, errOut)
	}
	// A key file edited by hand to name the issuer's tenant is refused.
	data, _ := os.ReadFile(filepath.Join(dir, "keys.jsonl"))
	if err := os.WriteFile(filepath.Join(dir, "keys.jsonl"), []byte(strings.Replace(string(data), `"tenant":"keys"`, `"tenant":"demo"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runDemo(t, "check", "-config", cfgPath); code != 1 || !strings.Contains(errOut, `tenant "demo" is vouched for by issuer`) {
		t.Errorf("check with a key naming an issuer's tenant: %d %s", code, errOut)
	}
}

// TestReloadReportsAPIKeys: a reload logs how many issuers and API keys the
// new configuration loaded, so an operator sees that a key added with
// `demo apikey` was picked up; the key works from then on.
func TestReloadReportsAPIKeys(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "ratekey.yaml")
	if err := os.WriteFile(cfgPath, []byte(apiKeyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	newKey := func(account string) string {
		t.Helper()
		code, out, errOut := runDemo(t, "apikey", "-config", cfgPath, "-tenant", "acme", "-account", account)
		if code != 0 {
			t.Fatalf("apikey: %d %s", code, errOut)
		}
		return strings.TrimSpace(out)
	}
	newKey("alice")
	s, logs := serverAt(t, cfgPath)
	bob := newKey("bob")
	if w := call(s, "192.0.2.1:1", "/v1/reports/1", map[string]string{"X-API-Key": bob}); w.Code != 401 {
		t.Fatalf("bob before the reload: %d; want 401", w.Code)
	}
	if err := s.reload(); err != nil {
		t.Fatal(err)
	}
	if want := `"changes":0,"issuers":0,"api_keys":2`; !strings.Contains(logs.String(), want) {
		t.Errorf("reload log lacks %s:\n%s", want, logs)
	}
	if w := call(s, "192.0.2.1:1", "/v1/reports/1", map[string]string{"X-API-Key": bob}); w.Code != 200 {
		t.Errorf("bob after the reload: %d; want 200", w.Code)
	}
}

// TestDebugOfAnUnauthenticatedRoute: /healthz has no Authenticate (nor
// rate limiter) in front of it, so its debug view claims no 401 even when
// anonymous requests are refused elsewhere: the credential is not_reached.
func TestDebugOfAnUnauthenticatedRoute(t *testing.T) {
	t.Chdir("../..")
	cfg := strings.Replace(string(defaultConfig), "anonymous: allow", "anonymous: reject", 1)
	h := serveConfig(t, t.TempDir(), strings.ReplaceAll(cfg, "testdata/keys/", mustAbs(t, "testdata/keys")+"/"))
	if w := call(h, "127.0.0.1:1", "/healthz", nil); w.Code != http.StatusOK {
		t.Fatalf("/healthz: %d", w.Code)
	}
	w := call(h, "127.0.0.1:1", "/debug/ratekey?path=/healthz", nil)
	if !strings.Contains(w.Body.String(), `"authentication": {
    "outcome": "not_reached"
  }`) || !strings.Contains(w.Body.String(), `"limited": false`) {
		t.Errorf("debug view of /healthz: %s; want authentication not_reached, limited false", w.Body)
	}
	if w := call(h, "127.0.0.1:1", "/debug/ratekey?path=/v1/reports/1", nil); !strings.Contains(w.Body.String(), `"outcome": "missing"`) {
		t.Errorf("debug view of /v1/reports/1 without a credential: %s; want outcome missing", w.Body)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
