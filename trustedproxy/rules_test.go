package trustedproxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"go4.org/netipx"
)

func mustSet(t testing.TB, entries ...string) *netipx.IPSet {
	t.Helper()
	s, err := ParseSet(entries)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewRulesErrors(t *testing.T) {
	failing := SourceFunc(func(context.Context) (*netipx.IPSet, error) { return nil, errors.New("boom") })
	empty := staticSource(&netipx.IPSet{})
	all := staticSource(mustSet(t, "0.0.0.0/0"))
	tests := []struct {
		name string
		cfg  Config
		want []string // the exact text of each joined error, in order
	}{
		{"bad entries named by rule and index", Config{Rules: []Rule{
			{From: []string{"10.0.0.0/8", "bad"}},
			{From: []string{"example.com", "10.0.0.0/33"}, Header: "X Y"},
		}}, []string{`rules[0].from[1] "bad": not an IP address or CIDR prefix`, `rules[1].from[0] "example.com": not an IP address or CIDR prefix`,
			`rules[1].from[1] "10.0.0.0/33": not a CIDR prefix: the length must be 0..32 for IPv4`, `rules[1].header: "X Y" is not a valid header name`}},
		{"hops out of range", Config{Rules: []Rule{
			{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For", Hops: -1},
			{From: []string{"10.0.0.0/8"}, Header: "Forwarded", Hops: MaxHops + 1},
		}}, []string{"rules[0].hops: -1 out of range 0..32", "rules[1].hops: 33 out of range 0..32"}},
		{"hops need a list header", Config{Rules: []Rule{
			{From: []string{"10.0.0.0/8"}, Header: "X-Real-IP", Hops: 2},
			{From: []string{"10.0.0.0/8"}, Hops: 1},
		}}, []string{`rules[0].hops: 2 needs a list header (X-Forwarded-For or Forwarded), not "X-Real-IP"`, `rules[1].hops: 1 needs a list header (X-Forwarded-For or Forwarded), not ""`}},
		{"rule matching nobody", Config{Rules: []Rule{{Header: "X-Forwarded-For"}}},
			[]string{"rules[0]: from and sources are both empty: the rule would match no peer"}},
		{"catch-all in a rule", Config{Rules: []Rule{{From: []string{"::/0"}}, {From: []string{"0.0.0.0/1", "128.0.0.0/1"}}}},
			[]string{`rules[0].from[0] "::/0": trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it`, "rules[1].from: the union of the 2 entries trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it"}},
		{"sources: failing, empty, nil, catch-all", Config{Rules: []Rule{
			{Sources: []Source{failing, empty, nil}},
			{Sources: []Source{all}},
		}}, []string{"rules[0].sources[0]: boom", "rules[0].sources[1]: loaded an empty set (refused: more likely a broken source than a real change)", "rules[0].sources[2]: nil Source", "rules[1].sources: the set trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it"}},
		{"shorthand spelled wrong", Config{Rules: []Rule{{From: []string{"Private_Ranges", "localhost"}}}},
			[]string{`rules[0].from[0] "Private_Ranges": not an IP address or CIDR prefix`, `rules[0].from[1] "localhost": not an IP address or CIDR prefix`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.cfg)
			if err == nil || r != nil {
				t.Fatalf("New = %v, %v; want an error", r, err)
			}
			var errs []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			} else {
				errs = []error{err}
			}
			// A source's errors arrive joined inside one error: flatten.
			var flat []string
			for _, e := range errs {
				flat = append(flat, strings.Split(e.Error(), "\n")...)
			}
			if len(flat) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(flat), len(tc.want), err)
			}
			for i, w := range tc.want {
				if flat[i] != w {
					t.Errorf("error %d = %q, want %q", i, flat[i], w)
				}
			}
		})
	}
}

func TestNewRulesValid(t *testing.T) {
	r := mustNew(t, Config{Rules: []Rule{
		{From: []string{"192.0.2.0/24", "2001:db8:cd::/48"}, Header: "cf-connecting-ip"},
		{From: []string{"10.0.0.0/8", "loopback"}, Sources: []Source{staticSource(mustSet(t, "198.51.100.0/24"))}, Header: "forwarded", Hops: 2},
		{From: []string{"unix"}, Header: "x-forwarded-for"},
		{From: []string{"0.0.0.0/0"}}, // refused without AllowAll...
	}, AllowAll: true}) // ...and allowed here
	if r.header() != "Cf-Connecting-Ip" {
		t.Errorf("Header() = %q", r.header())
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"192.0.2.1", true}, {"2001:db8:cd::1", true}, {"10.1.1.1", true}, {"127.0.0.1", true}, {"::1", true},
		{"198.51.100.9", true}, {"::ffff:198.51.100.9", true}, {"203.0.113.1", true}, // rule 3 trusts all IPv4
		{"2001:db8::1", false}, {"fe80::1", false},
	} {
		if got := r.trusts(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Trusts(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if s := r.trustedSet(1); s == nil || !s.Contains(netip.MustParseAddr("198.51.100.1")) || !s.Contains(netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("TrustedSet(1) = %v", s)
	}
	if r.trustedSet(2) == nil || len(r.trustedSet(2).Ranges()) != 0 {
		t.Errorf("TrustedSet(2) (unix only) = %v, want empty", r.trustedSet(2))
	}
	if r.trustedSet(4) != nil || r.trustedSet(-1) != nil || (*Resolver)(nil).trustedSet(0) != nil {
		t.Error("TrustedSet out of range is not nil")
	}
	// A single rule is rule 0.
	r = mustNew(t, Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "x-real-ip"}}})
	if r.header() != "X-Real-Ip" || r.trustedSet(0) == nil || r.trustedSet(1) != nil {
		t.Errorf("one rule: Header %q sets %v %v", r.header(), r.trustedSet(0), r.trustedSet(1))
	}
}

// TestConfigRulesNotRetained: changing Rules after New has no effect.
func TestConfigRulesNotRetained(t *testing.T) {
	rules := []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}}
	r := mustNew(t, Config{Rules: rules})
	rules[0].From[0] = "0.0.0.0/0"
	rules[0].Header = "X-Real-IP"
	rules[0].Sources = append(rules[0].Sources, nil)
	if r.trusts(netip.MustParseAddr("1.2.3.4")) || r.header() != "X-Forwarded-For" {
		t.Error("Resolver changed with its Config")
	}
	if err := r.Refresh(context.Background()); err != nil {
		t.Errorf("Refresh with no sources: %v", err)
	}
}

// TestTableMatchesIPSet: the compiled lookup table agrees with
// netipx.IPSet.Contains on random sets and addresses, including range
// boundaries.
func TestTableMatchesIPSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randAddr := func(v6 bool) netip.Addr {
		if !v6 {
			return netip.AddrFrom4([4]byte{byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		}
		var b [16]byte
		b[0] = byte(rng.IntN(3))
		for i := 1; i < 16; i++ {
			b[i] = byte(rng.IntN(256))
		}
		return netip.AddrFrom16(b)
	}
	for iter := 0; iter < 300; iter++ {
		var b netipx.IPSetBuilder
		n := rng.IntN(40)
		for i := 0; i < n; i++ {
			a := randAddr(rng.IntN(2) == 0)
			b.AddPrefix(netip.PrefixFrom(a, a.BitLen()-rng.IntN(a.BitLen()/2)).Masked())
		}
		s, _ := b.IPSet()
		tab := newTable(s)
		var probes []netip.Addr
		for _, rg := range s.Ranges() {
			probes = append(probes, rg.From(), rg.To(), rg.From().Prev(), rg.To().Next())
		}
		for i := 0; i < 200; i++ {
			probes = append(probes, randAddr(rng.IntN(2) == 0))
		}
		for _, a := range probes {
			if !a.IsValid() {
				continue
			}
			if got, want := tab.contains(a), s.Contains(a); got != want {
				t.Fatalf("table.contains(%v) = %v, IPSet.Contains = %v (ranges %v)", a, got, want, s.Ranges())
			}
		}
	}
	var empty table
	if empty.contains(netip.MustParseAddr("1.2.3.4")) || empty.contains(netip.MustParseAddr("::1")) || empty.contains(netip.Addr{}) {
		t.Error("empty table contains something")
	}
}
