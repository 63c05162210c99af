//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runDemoWithin runs the demo in-process and fails the test when it has not
// returned within 10 s (a FIFO would block an open forever).
func runDemoWithin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	type result struct {
		code   int
		errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, _, errOut := runDemo(t, args...)
		done <- result{code, errOut}
	}()
	select {
	case r := <-done:
		return r.code, r.errOut
	case <-time.After(10 * time.Second):
		t.Fatalf("demo %v still running after 10 s", args)
		return 0, ""
	}
}

// TestCheckNamesLibraryFieldsAsYAML: identity and trustedproxy name fields
// the way the YAML writes them; the demo only prefixes the section
// (auth., trusted_proxies.) and keeps each line of theirs whole.
func TestCheckNamesLibraryFieldsAsYAML(t *testing.T) {
	keys, _ := filepath.Abs("../../testdata/keys")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ranges.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	keysFIFO := filepath.Join(dir, "keys.fifo")
	if err := syscall.Mkfifo(keysFIFO, 0o600); err != nil {
		t.Fatal(err)
	}
	pepper := filepath.Join(dir, "pepper")
	if err := os.WriteFile(pepper, []byte(strings.Repeat("p", 43)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, "long.txt")
	if err := os.WriteFile(long, []byte(strings.Repeat("9", 100<<10)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badKeys := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(badKeys, []byte(strings.Repeat("{}\n", 50000)), 0o600); err != nil {
		t.Fatal(err)
	}
	const policy = "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 2}\n"
	issuer := "auth:\n  issuers:\n    - issuer: https://a.invalid\n      audiences: [x]\n      algorithms: [EdDSA]\n" +
		"      keys:\n        - kid: k\n          public_key_file: " + keys + "/demo-ed25519.pub.pem\n"
	apiKeys := func(file string) string {
		return "auth:\n  api_keys: {file: " + file + ", pepper_file: " + pepper + "}\n" + policy
	}
	tests := []struct {
		name, config string
		want         []string // whole lines of the output, after "  - "
	}{
		{"tenant_claim without tenants", issuer + "      tenant_claim: org\n" + policy, []string{
			`auth.issuers[0] ("https://a.invalid").tenant_claim: "org" requires a non-empty tenants list`}},
		{"alg and typ", issuer + "          alg: ES256\n      tenant: a\n      typ: \"at jwt\"\n" + policy, []string{
			`auth.issuers[0] ("https://a.invalid").typ: "at jwt" is not a media type such as at+jwt`,
			`auth.issuers[0] ("https://a.invalid").keys[0] ("k").alg: "ES256" is not one of the record's algorithms usable with a Ed25519 key [EdDSA]`}},
		{"jwks_url and keys", issuer + "      tenant: a\n      jwks_url: https://a.invalid/jwks\n" + policy, []string{
			`auth.issuers[0] ("https://a.invalid"): set either keys or jwks_url, not both`}},
		{"rules", "trusted_proxies:\n  rules:\n    - {from: [10.0.0.0/8], header: X-Forwarded-For}\n" +
			"    - {from: [10.0.0.1, loopback, 10.0.0.0/33], header: \"X Y\", hops: 2}\n" + policy, []string{
			`trusted_proxies.rules[1].from[2] "10.0.0.0/33": not a CIDR prefix: the length must be 0..32 for IPv4`,
			`trusted_proxies.rules[1].header: "X Y" is not a valid header name`,
			`trusted_proxies.rules[1].hops: 2 needs a list header (X-Forwarded-For or Forwarded), not "X Y"`}},
		{"rule catch-all", "trusted_proxies:\n  rules:\n    - {from: [\"::/0\"]}\n" + policy, []string{
			`trusted_proxies.rules[0].from[0] "::/0": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`}},
		{"v0 header", "trusted_proxies:\n  cidrs: [10.0.0.0/8]\n  header: \"X Y\"\n" + policy, []string{
			`trusted_proxies.header: "X Y" is not a valid header name`}},
		{"v0 union", "trusted_proxies:\n  cidrs: [0.0.0.0/1, 128.0.0.0/1]\n" + policy, []string{
			`trusted_proxies.cidrs: the union of the 2 entries trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`}},
		{"rules file a FIFO", "trusted_proxies:\n  rules:\n    - {files: [" + fifo + "], header: X-Forwarded-For}\n" + policy, []string{
			`trusted_proxies.rules[0].sources[0]: FileSource: ` + fifo + `: not a regular file (a named pipe)`}},
		{"rules file /dev/zero", "trusted_proxies:\n  rules:\n    - {files: [/dev/zero], header: X-Forwarded-For}\n" + policy, []string{
			`trusted_proxies.rules[0].sources[0]: FileSource: /dev/zero: not a regular file (a device)`}},
		{"rules file with a 100 KB line", "trusted_proxies:\n  rules:\n    - {files: [" + long + "], header: X-Forwarded-For}\n" + policy, []string{
			`trusted_proxies.rules[0].sources[0]: FileSource ` + long + `: line 1 "` + strings.Repeat("9", 64) + `"… (102400 bytes): not an IP address or CIDR prefix`}},
		{"API key file a FIFO", apiKeys(keysFIFO), []string{
			`auth.api_keys.file: API key file: ` + keysFIFO + `: not a regular file (a named pipe)`}},
		{"API key file /dev/zero", apiKeys("/dev/zero"), []string{
			`auth.api_keys.file: API key file: /dev/zero: not a regular file (a device)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, errOut := runDemoWithin(t, "check", "-config", writeConfig(t, tt.config))
			lines := strings.Split(errOut, "\n")
			for _, w := range tt.want {
				found := false
				for _, l := range lines {
					found = found || l == "  - "+w
				}
				if code != 1 || !found {
					t.Errorf("exit %d, want 1 and the line\n  - %s\nin:\n%.3000s", code, w, errOut)
				}
			}
			if len(errOut) > 2000 {
				t.Errorf("%d bytes of errors", len(errOut))
			}
		})
	}

	// 50 000 bad lines: at most 10 errors and their count.
	code, errOut := runDemoWithin(t, "check", "-config", writeConfig(t, apiKeys(badKeys)))
	if n := strings.Count(errOut, "\n"); code != 1 || n > 12 || !strings.Contains(errOut, "\nand 49990 more bad lines\n") {
		t.Errorf("exit %d, %d lines:\n%.3000s", code, n, errOut)
	}
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) > 12 {
		t.Errorf("%d lines of output (the header, then at most 11 error lines)", len(lines))
	}
}
