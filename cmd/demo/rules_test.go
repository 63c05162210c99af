package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestTrustedProxyRules: trusted_proxies.rules are evaluated in order (a
// CDN's single-address header, a load balancer's X-Forwarded-For with one
// more trusted hop, anyone else keyed by the peer), missing_header and
// aliases can refuse requests, and rules read ranges from files.
func TestTrustedProxyRules(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cdn.txt"), []byte("# CDN egress ranges\n192.0.2.0/24\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := `
trusted_proxies:
  rules:
    - {from: [198.51.100.0/24], files: [cdn.txt], header: CF-Connecting-IP}
    - {from: [10.0.0.0/8], header: X-Forwarded-For, hops: 2}
  missing_header: reject
  aliases: reject
  refresh: 1m
auth: {anonymous: allow}
policies:
  - {name: per-network, key: [network], rate: 1/s, burst: 5}
debug: {enabled: true, allow: [0.0.0.0/0]}
`
	h := serveConfig(t, dir, cfg)
	tests := []struct {
		name    string
		peer    string
		headers map[string]string
		status  int
		client  string
		reason  string
	}{
		{"CDN single-address header", "198.51.100.1:1", map[string]string{"CF-Connecting-IP": "203.0.113.5"}, 200, "203.0.113.5", "single_address_header"},
		{"CDN range from the file", "192.0.2.9:1", map[string]string{"CF-Connecting-IP": "203.0.113.6"}, 200, "203.0.113.6", "single_address_header"},
		{"load balancer, one more hop", "10.0.0.1:1", map[string]string{"X-Forwarded-For": "6.6.6.6, 1.1.1.1, 203.0.113.9, 10.0.0.2"}, 200, "1.1.1.1", "hop_count"},
		{"anyone else: the peer", "203.0.113.50:1", map[string]string{"X-Forwarded-For": "1.2.3.4", "CF-Connecting-IP": "1.2.3.4"}, 200, "203.0.113.50", "peer_untrusted"},
		{"trusted peer without its header", "10.0.0.1:1", nil, 400, "", "trusted_peer_without_header"},
		{"header alias", "10.0.0.1:1", map[string]string{"X-Forwarded-For": "1.1.1.1, 10.0.0.2", "X_Forwarded_For": "9.9.9.9"}, 400, "", "header_alias"},
	}
	for _, tt := range tests {
		if w := call(h, tt.peer, "/v1/reports/1", tt.headers); w.Code != tt.status {
			t.Errorf("%s: %d; want %d (%s)", tt.name, w.Code, tt.status, w.Body)
		}
		// Described by POST from an outside admin: a live request whose
		// derivation fails is not admitted to the debug endpoint.
		sim := map[string]any{"peer": tt.peer, "path": "/v1/reports/1", "headers": map[string][]string{}}
		for k, v := range tt.headers {
			sim["headers"].(map[string][]string)[k] = []string{v}
		}
		body, _ := json.Marshal(sim)
		r := httptest.NewRequest(http.MethodPost, "/debug/ratekey", bytes.NewReader(body))
		r.RemoteAddr = "203.0.113.99:1"
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var view struct {
			Client     *string `json:"client"`
			Derivation struct {
				Reason string `json:"reason"`
			} `json:"derivation"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &view); err != nil {
			t.Fatalf("%s: debug %d %s", tt.name, w.Code, w.Body)
		}
		client := ""
		if view.Client != nil {
			client = *view.Client
		}
		if client != tt.client || view.Derivation.Reason != tt.reason {
			t.Errorf("%s: client %q reason %q; want %q %q", tt.name, client, view.Derivation.Reason, tt.client, tt.reason)
		}
	}
	// The v0 form and rules together are refused, naming YAML fields.
	code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, "trusted_proxies:\n  cidrs: [10.0.0.0/8]\n  rules: [{from: [10.0.0.0/8], header: X-Forwarded-For, hops: 0}]\n"))
	if code != 1 || !strings.Contains(errOut, "trusted_proxies: rules and the v0 form (cidrs, header) cannot be combined") {
		t.Errorf("v0 and rules together: %d %s", code, errOut)
	}
}

// TestTrustedProxySourcesRefreshWhileServing: the demo runs the refresh
// loop of the resolver it gives ratekey.New (Config.Resolver), so that a
// rule's file, re-read every trusted_proxies.refresh, changes whom the
// running chain trusts; a reload's new app gets the loop, and the old
// one's stops.
func TestTrustedProxySourcesRefreshWhileServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		ranges := filepath.Join(dir, "cdn.txt")
		if err := os.WriteFile(ranges, []byte("192.0.2.0/24\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "ratekey.yaml")
		if err := os.WriteFile(path, []byte(`
trusted_proxies:
  rules: [{files: [cdn.txt], header: CF-Connecting-IP}]
  refresh: 1m
policies:
  - {name: per-network, key: [network], rate: 100/s, burst: 100}
`), 0o600); err != nil {
			t.Fatal(err)
		}
		s := startServer(t, path, discardLogger())
		defer s.close()
		client := func() string {
			w := call(s, "192.0.2.9:1", "/v1/reports/1", map[string]string{"CF-Connecting-IP": "203.0.113.6"})
			var body struct {
				Served struct {
					Client string `json:"client"`
				} `json:"served"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			return body.Served.Client
		}
		if got := client(); got != "203.0.113.6" {
			t.Fatalf("behind the file's CDN range: client %q; want 203.0.113.6", got)
		}
		if err := os.WriteFile(ranges, []byte("198.51.100.0/24\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.reload(); err != nil { // the new app's loop; the old one's stops
			t.Fatal(err)
		}
		if got := client(); got != "192.0.2.9" {
			t.Errorf("after a reload re-read the file: client %q; want the peer 192.0.2.9", got)
		}
		if err := os.WriteFile(ranges, []byte("192.0.2.0/24\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if got := client(); got != "192.0.2.9" {
			t.Errorf("before the refresh interval: client %q; want the peer 192.0.2.9", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := client(); got != "203.0.113.6" {
			t.Errorf("after the refresh interval: client %q; want 203.0.113.6", got)
		}
	})
}
