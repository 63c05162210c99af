package trustedproxy

import (
	"net/netip"
	"testing"
)

func TestNewValid(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		wantHeader string
	}{
		{"zero", Config{}, ""},
		{"XFF lower case", Config{Rules: []Rule{{From: []string{"192.0.2.1"}, Header: "x-forwarded-for"}}}, "X-Forwarded-For"},
		{"X-Real-IP", Config{Rules: []Rule{{From: []string{"192.0.2.1"}, Header: "X-Real-IP"}}}, "X-Real-Ip"},
		{"CF-Connecting-IP", Config{Rules: []Rule{{From: []string{"192.0.2.1"}, Header: "CF-Connecting-IP"}}}, "Cf-Connecting-Ip"},
		{"True-Client-IP", Config{Rules: []Rule{{From: []string{"192.0.2.1"}, Header: "True-Client-IP"}}}, "True-Client-Ip"},
		{"Forwarded (RFC 7239)", Config{Rules: []Rule{{From: []string{"192.0.2.1"}, Header: "forwarded"}}}, "Forwarded"},
		{"Forwarded with a trusted peer", Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "FORWARDED"}}}, "Forwarded"},
		{"prefix bounds", Config{IPv4Prefix: 1, IPv6Prefix: 128}, ""},
		{"prefix bounds 2", Config{IPv4Prefix: 32, IPv6Prefix: 1}, ""},
		{"all v4 with AllowAll", Config{Rules: []Rule{{From: []string{"0.0.0.0/0"}}}, AllowAll: true}, ""},
		{"all v6 with AllowAll", Config{Rules: []Rule{{From: []string{"::/0"}}}, AllowAll: true}, ""},
		{"mapped all with AllowAll", Config{Rules: []Rule{{From: []string{"::ffff:0.0.0.0/96"}}}, AllowAll: true}, ""},
		{"many entries", Config{Rules: []Rule{{From: []string{"10.0.0.0/8", "192.0.2.1", "2001:db8::/32", "::1", "fe80::1%eth0", "::ffff:172.16.0.0/108", "10.1.2.3/8"}}}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if r.header() != tc.wantHeader {
				t.Errorf("Header() = %q, want %q", r.header(), tc.wantHeader)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // the exact text of each joined error, in order
	}{
		{
			name: "every bad entry listed",
			cfg:  Config{Rules: []Rule{{From: []string{"10.0.0.0/8", "10.0.0.0/33", "not-an-ip", "", " 10.0.0.1", "192.168.1.1/", "fe80::/64%eth0", "example.com"}}}},
			want: []string{
				`rules[0].from[1] "10.0.0.0/33": not a CIDR prefix: the length must be 0..32 for IPv4`,
				`rules[0].from[2] "not-an-ip": not an IP address or CIDR prefix`,
				`rules[0].from[3] "": not an IP address or CIDR prefix`,
				`rules[0].from[4] " 10.0.0.1": has leading or trailing space: remove it (entries are not trimmed)`,
				`rules[0].from[5] "192.168.1.1/": not a CIDR prefix: the length must be 0..32 for IPv4`,
				`rules[0].from[6] "fe80::/64%eth0": not a CIDR prefix: a prefix cannot carry an IPv6 zone`,
				`rules[0].from[7] "example.com": not an IP address or CIDR prefix`,
			},
		},
		{
			name: "0.0.0.0/0 refused",
			cfg:  Config{Rules: []Rule{{From: []string{"0.0.0.0/0"}}}},
			want: []string{`rules[0].from[0] "0.0.0.0/0": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`},
		},
		{
			name: "::/0 refused",
			cfg:  Config{Rules: []Rule{{From: []string{"10.0.0.0/8", "::/0"}}}},
			want: []string{`rules[0].from[1] "::/0": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`},
		},
		{
			name: "mapped ::ffff:0.0.0.0/96 trick refused",
			cfg:  Config{Rules: []Rule{{From: []string{"::ffff:0.0.0.0/96"}}}},
			want: []string{`rules[0].from[0] "::ffff:0.0.0.0/96": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`},
		},
		{
			name: "::/80 covers every mapped address, refused",
			cfg:  Config{Rules: []Rule{{From: []string{"::/80"}}}},
			want: []string{`rules[0].from[0] "::/80": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`},
		},
		{
			name: "union of halves refused",
			cfg:  Config{Rules: []Rule{{From: []string{"0.0.0.0/1", "128.0.0.0/1"}}}},
			want: []string{`rules[0].from: the union of the 2 entries trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`},
		},
		{
			// ::/1 holds ::ffff:0:0/96, so it alone trusts every IPv4
			// address once unmapped; 8000::/1 alone is fine.
			name: "v6 half holding the mapped range refused",
			cfg:  Config{Rules: []Rule{{From: []string{"::/1", "8000::/1"}}}},
			want: []string{`rules[0].from[0] "::/1": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`},
		},
		{
			name: "mapped half plus v4 half refused",
			cfg:  Config{Rules: []Rule{{From: []string{"::ffff:0.0.0.0/97", "128.0.0.0/1"}}}},
			want: []string{`rules[0].from: the union of the 2 entries trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`},
		},
		{
			name: "header not a token",
			cfg:  Config{Rules: []Rule{{From: []string{"192.0.2.1"}, Header: "X Real IP"}}},
			want: []string{`rules[0].header: "X Real IP" is not a valid header name`},
		},
		{
			name: "header with colon",
			cfg:  Config{Rules: []Rule{{From: []string{"192.0.2.1"}, Header: "X-Real-IP:"}}},
			want: []string{`rules[0].header: "X-Real-IP:" is not a valid header name`},
		},
		{
			name: "prefixes out of range",
			cfg:  Config{IPv4Prefix: 33, IPv6Prefix: -1},
			want: []string{`ipv4_prefix: 33 out of range 1..32 (0 means 32)`, `ipv6_prefix: -1 out of range 1..128 (0 means 64)`},
		},
		{
			name: "prefixes out of range 2",
			cfg:  Config{IPv4Prefix: -5, IPv6Prefix: 129},
			want: []string{`ipv4_prefix: -5 out of range 1..32 (0 means 32)`, `ipv6_prefix: 129 out of range 1..128 (0 means 64)`},
		},
		{
			name: "all problems at once",
			cfg:  Config{Rules: []Rule{{From: []string{"bad", "0.0.0.0/0"}, Header: "X Forwarded"}}, IPv4Prefix: 40, IPv6Prefix: 200},
			want: []string{
				`rules[0].from[0] "bad": not an IP address or CIDR prefix`,
				`rules[0].from[1] "0.0.0.0/0": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`,
				`rules[0].header: "X Forwarded" is not a valid header name`,
				`ipv4_prefix: 40 out of range 1..32 (0 means 32)`,
				`ipv6_prefix: 200 out of range 1..128 (0 means 64)`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.cfg)
			if err == nil {
				t.Fatalf("New succeeded, want errors %q", tc.want)
			}
			if r != nil {
				t.Errorf("New returned a Resolver with an error")
			}
			joined, ok := err.(interface{ Unwrap() []error })
			if !ok {
				t.Fatalf("error %T is not an errors.Join", err)
			}
			errs := joined.Unwrap()
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i, w := range tc.want {
				if errs[i].Error() != w {
					t.Errorf("error %d = %q, want %q", i, errs[i], w)
				}
			}
		})
	}
}

func TestTrusts(t *testing.T) {
	r := mustNew(t, Config{Rules: []Rule{{From: []string{
		"10.0.0.0/8",
		"::ffff:172.16.0.0/108", // mapped form of 172.16.0.0/12
		"::ffff:192.0.2.1",      // mapped single address
		"fe80::1%eth0",          // zone dropped
		"2001:DB8::/32",         // upper case
		"198.51.100.77/24",      // host bits ignored
		"::/96",                 // IPv4-compatible range, not mapped: stays IPv6
	}}}})
	tests := []struct {
		addr string
		want bool
	}{
		{"10.1.2.3", true},
		{"::ffff:10.1.2.3", true}, // mapped form of a trusted address
		{"11.0.0.1", false},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"::ffff:172.20.0.1", true},
		{"172.32.0.1", false},
		{"192.0.2.1", true},
		{"192.0.2.2", false},
		{"fe80::1", true},
		{"fe80::1%eth1", true}, // zone of the query dropped too
		{"fe80::2", false},
		{"2001:db8::1", true},
		{"2001:db8::1%lo", true},
		{"2001:db9::1", false},
		{"198.51.100.1", true},
		{"198.51.101.1", false},
		{"::1", true},         // in ::/96
		{"::ffff:0:1", false}, // mapped 0.0.0.1, not in ::/96 once unmapped
		{"0.0.0.1", false},
		{"127.0.0.1", false},
	}
	for _, tc := range tests {
		if got := r.trusts(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Trusts(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if r.trusts(netip.Addr{}) {
		t.Error("Trusts(invalid) = true")
	}
}

// TestTrustedOverlappingMappedRange: an IPv6 prefix that covers part of the
// mapped range trusts both its IPv6 addresses and the IPv4 addresses mapped
// into it.
func TestTrustedOverlappingMappedRange(t *testing.T) {
	r := mustNew(t, Config{Rules: []Rule{{From: []string{"::ffff:0:0/95"}}}, AllowAll: true}) // ::fffe:0:0 - ::ffff:ffff:ffff
	for _, a := range []string{"::fffe:1:2", "1.2.3.4", "255.255.255.255"} {
		if !r.trusts(netip.MustParseAddr(a)) {
			t.Errorf("Trusts(%s) = false", a)
		}
	}
	if _, err := New(Config{Rules: []Rule{{From: []string{"::ffff:0:0/95"}}}}); err == nil {
		t.Error("::ffff:0:0/95 covers every IPv4 address once unmapped; want refusal without AllowAll")
	}
	r = mustNew(t, Config{Rules: []Rule{{From: []string{"::ffff:10.0.0.0/104"}}}})
	if !r.trusts(netip.MustParseAddr("10.255.0.1")) || r.trusts(netip.MustParseAddr("11.0.0.0")) {
		t.Error("::ffff:10.0.0.0/104 should trust exactly 10.0.0.0/8")
	}
}

// TestConfigNotRetained: changing the Config after New has no effect.
func TestConfigNotRetained(t *testing.T) {
	cfg := Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}}}
	r := mustNew(t, cfg)
	cfg.Rules[0].From[0] = "0.0.0.0/0"
	cfg.Rules[0].Header = "X-Real-IP"
	if r.trusts(netip.MustParseAddr("1.2.3.4")) || r.header() != "X-Forwarded-For" {
		t.Error("Resolver changed with its Config")
	}
}
