package main

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCheckCIDRWithSurroundingSpace: a CIDR or address written with
// leading or trailing space is refused, not trimmed, and the error says
// why (issue 26), in every list of the config that takes CIDRs. The
// trusted proxies' lists quote the value (trustedproxy escapes it); the
// admin lists name it by its length, as every demo error names a value
// that spans words.
func TestCheckCIDRWithSurroundingSpace(t *testing.T) {
	tests := []struct {
		name, config, want string
	}{
		{"trusted_proxies.cidrs, trailing space", "trusted_proxies:\n  cidrs: [\"10.0.0.0/8 \"]\n",
			`trusted_proxies.cidrs[0] "10.0.0.0/8 ": has leading or trailing space: remove it (entries are not trimmed)`},
		{"trusted_proxies.cidrs, leading tab", "trusted_proxies:\n  cidrs: [\"\\t192.0.2.1\"]\n",
			`trusted_proxies.cidrs[0] "\t192.0.2.1": has leading or trailing space: remove it (entries are not trimmed)`},
		{"trusted_proxies.rules from", "trusted_proxies:\n  rules:\n    - {from: [\"2001:db8::/32 \"], header: X-Forwarded-For}\n",
			`trusted_proxies.rules[0].from[0] "2001:db8::/32 ": has leading or trailing space: remove it (entries are not trimmed)`},
		{"debug.allow", "debug: {enabled: true, path: /debug/ratekey, allow: [\"127.0.0.0/8 \"]}\n",
			`debug.allow[0] "127.0.0.0/8 ": has leading or trailing space: remove it (entries are not trimmed)`},
		{"metrics.allow", "metrics: {enabled: true, path: /metrics, allow: [\" ::1\"]}\n",
			`metrics.allow[0] " ::1": has leading or trailing space: remove it (entries are not trimmed)`},
		{"admin list, space inside", "debug: {enabled: true, path: /debug/ratekey, allow: [\"127.0.0.0 /8\"]}\n",
			`debug.allow[0] "127.0.0.0 /8": not an IP address or CIDR prefix`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, tt.config))
			if code != 1 || !strings.Contains(errOut, tt.want+"\n") {
				t.Fatalf("exit %d, want 1 and the line\n%s\nin:\n%s", code, tt.want, errOut)
			}
			if strings.Contains(errOut, "prefix length") || strings.Contains(errOut, "the length must be") {
				t.Errorf("the space is blamed on the prefix length:\n%s", errOut)
			}
		})
	}
}

// TestHelpListsEveryFlag: `demo help` lists every flag of every command
// (issue 26: it lacked -plan of token and apikey), in the command's
// synopsis and in its flag list. The table is checked against the flag
// sets themselves (what `demo X -h` prints), so a flag added to a command
// fails here until the synopsis names it.
func TestHelpListsEveryFlag(t *testing.T) {
	tests := []struct {
		cmd, synopsis string // synopsis: how the command's usage line starts
		flags         []string
	}{
		{"serve", "  demo [serve] ", []string{"-addr", "-config", "-grpc-addr", "-redis", "-redis-cluster"}},
		{"check", "  demo check ", []string{"-config"}},
		{"token", "  demo token ", []string{"-client-id", "-config", "-issuer", "-plan", "-sub", "-tenant", "-ttl"}},
		{"apikey", "  demo apikey ", []string{"-account", "-config", "-plan", "-tenant"}},
		{"grpc-call", "  demo grpc-call ", []string{"-addr", "-method", "-timeout", "-token", "-x-forwarded-for"}},
	}
	code, help, _ := runDemo(t, "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	defined := regexp.MustCompile(`(?m)^  (-[a-z-]+)`)
	for _, tt := range tests {
		_, _, out := runDemo(t, tt.cmd, "-h")
		var got []string
		for _, m := range defined.FindAllStringSubmatch(out, -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, tt.flags) {
			t.Errorf("demo %s -h defines %q, the table says %q", tt.cmd, got, tt.flags)
		}
		synopsis := synopsisOf(help, tt.synopsis)
		if synopsis == "" {
			t.Errorf("help has no line starting %q:\n%s", tt.synopsis, help)
		}
		_, list, _ := strings.Cut(help, "\nflags of demo "+tt.cmd+":\n")
		list, _, _ = strings.Cut(list, "\nflags of demo ")
		for _, f := range tt.flags {
			if !regexp.MustCompile(`[\s\[|]` + regexp.QuoteMeta(f) + `[\s\]]`).MatchString(synopsis) {
				t.Errorf("help's synopsis of demo %s lacks %s:\n%s", tt.cmd, f, synopsis)
			}
			if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(f) + `[\s]`).MatchString(list) {
				t.Errorf("help's flag list of demo %s lacks %s", tt.cmd, f)
			}
		}
	}
}

// synopsisOf returns the lines of help that describe one command: the
// line starting with start and the indented lines continuing it.
func synopsisOf(help, start string) string {
	var b strings.Builder
	in := false
	for line := range strings.Lines(help) {
		switch {
		case strings.HasPrefix(line, start):
			in = true
		case in && !strings.HasPrefix(line, "    "):
			return b.String()
		}
		if in {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestREADMEListenAddress: README says how to change the demo's address
// (issue 26), with a flag and a config field that exist, and keeps its
// first two commands as they are.
func TestREADMEListenAddress(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, want string }{
		{"first command", "go run ./cmd/demo                 # the demo on its embedded default config: in-memory limiter, no Redis, 127.0.0.1:8080\n"},
		{"second command", "go test -race -count=1 ./...      # the tests (some need apt-get install nginx redis-server chromium)\n"},
		{"address", "`-addr 127.0.0.1:9090` changes the address (or `listen:` in the config)"},
	}
	text := strings.Join(strings.Fields(string(readme)), " ") // the README's lines wrap anywhere
	for _, tt := range tests {
		if !strings.Contains(string(readme), tt.want) && !strings.Contains(text, strings.Join(strings.Fields(tt.want), " ")) {
			t.Errorf("README lacks the %s: %q", tt.name, tt.want)
		}
	}
	if _, _, out := runDemo(t, "serve", "-h"); !strings.Contains(out, "\n  -addr string\n") {
		t.Errorf("demo serve has no -addr flag:\n%s", out)
	}
	if f, ok := reflect.TypeFor[Config]().FieldByName("Listen"); !ok || f.Tag.Get("yaml") != "listen" {
		t.Errorf("the config has no listen field")
	}
}
