package main

import (
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
			`debug.allow: a value of 12 bytes (not shown) has leading or trailing space: remove it (entries are not trimmed)`},
		{"metrics.allow", "metrics: {enabled: true, path: /metrics, allow: [\" ::1\"]}\n",
			`metrics.allow: a value of 4 bytes (not shown) has leading or trailing space: remove it (entries are not trimmed)`},
		{"admin list, space inside", "debug: {enabled: true, path: /debug/ratekey, allow: [\"127.0.0.0 /8\"]}\n",
			`debug.allow: "127.0.0.0 /8" is not an IP address or CIDR`},
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
