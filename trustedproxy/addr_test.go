package trustedproxy

import (
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseEntry(t *testing.T) {
	tests := []struct {
		in   string
		want string // canonical address, "" for malformed
	}{
		// IPv4.
		{"198.51.100.7", "198.51.100.7"},
		{"198.51.100.7:5555", "198.51.100.7"},
		{"198.51.100.7:0", "198.51.100.7"},
		{"198.51.100.7:65535", "198.51.100.7"},
		{"198.51.100.7:65536", ""},
		{"198.51.100.7:123456", ""},
		{"198.51.100.7:", ""},
		{"198.51.100.7:http", ""},
		{"198.51.100.7:+80", ""},
		{"198.51.100.7%eth0", ""},
		{"198.51.100.7%eth0:80", ""},
		{"[198.51.100.7]", ""},
		{"[198.51.100.7]:80", ""},
		{"198.051.100.7", ""}, // leading zeros are ambiguous (octal), netip refuses
		{"198.51.100", ""},
		{"1.2.3.4.5", ""},
		// IPv6.
		{"2001:db8::1", "2001:db8::1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:db8::1]:80", "2001:db8::1"},
		{"[2001:db8::1]:", ""},
		{"[2001:db8::1]80", ""},
		{"[2001:db8::1", ""},
		{"2001:db8::1]", ""},
		{"[]", ""},
		{"[]:80", ""},
		{"[:80", ""},
		{"2001:db8::1:80", "2001:db8::1:80"}, // no brackets: the whole thing is an address
		{"fe80::1%eth0", "fe80::1"},
		{"[fe80::1%eth0]:80", "fe80::1"},
		{"[fe80::1%25eth0]", "fe80::1"}, // RFC 6874 form: zone "25eth0", dropped all the same
		{"fe80::1%", ""},
		{"%eth0", ""},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1"},
		{"::FFFF:10.0.0.1%x", "10.0.0.1"},
		{"::", "::"},
		{"::1", "::1"},
		// Garbage.
		{"", ""},
		{" ", ""},
		{" 1.2.3.4", ""}, // callers trim, parseEntry does not
		{"unknown", ""},
		{"_hidden", ""},
		{"localhost", ""},
		{"localhost:80", ""},
		{"@", ""},
		{"1.2.3.4, 5.6.7.8", ""},
	}
	for _, tc := range tests {
		a, text, ok := parseEntry(tc.in)
		if ok != (tc.want != "") {
			t.Errorf("parseEntry(%q) ok = %v, want %v", tc.in, ok, !ok)
			continue
		}
		if !ok {
			continue
		}
		if a.String() != tc.want || a.Is4In6() || a.Zone() != "" {
			t.Errorf("parseEntry(%q) = %v, want %v (canonical)", tc.in, a, tc.want)
		}
		if !strings.Contains(tc.in, text) {
			t.Errorf("parseEntry(%q) text %q is not a substring", tc.in, text)
		}
		if got := addrText(a, text); got != tc.want {
			t.Errorf("addrText(%v, %q) = %q, want %q", a, text, got, tc.want)
		}
	}
}

// TestParseIPv4Head: the fast path agrees with netip.ParseAddr on every
// string of up to 8 bytes over digits, dots and a colon.
func TestParseIPv4Head(t *testing.T) {
	alphabet := "0129.:"
	var rec func(s string)
	rec = func(s string) {
		a4, n, ok := parseIPv4Head(s)
		want, err := netip.ParseAddr(s)
		wantOK := err == nil && want.Is4()
		if (ok && n == len(s)) != wantOK || (wantOK && netip.AddrFrom4(a4) != want) {
			t.Fatalf("parseIPv4Head(%q) = %v, %d, %v; netip %v, %v", s, a4, n, ok, want, err)
		}
		if ok {
			if w, err := netip.ParseAddr(s[:n]); err != nil || w != netip.AddrFrom4(a4) {
				t.Fatalf("parseIPv4Head(%q) head %q = %v; netip %v, %v", s, s[:n], a4, w, err)
			}
		}
		if len(s) >= 8 {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			rec(s + alphabet[i:i+1])
		}
	}
	rec("")
	for _, s := range []string{"255.255.255.255", "256.1.1.1", "1.2.3.04", "0.0.0.0", "1.2.3.4.5", "01.2.3.4", "1..2.3"} {
		rec(s)
	}
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("a", 63) + "é" + "zzz" // é straddles the 64-byte limit
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"abc", "abc"},
		{strings.Repeat("x", 64), strings.Repeat("x", 64)},
		{strings.Repeat("x", 65), strings.Repeat("x", 64)},
		{long, strings.Repeat("a", 63)},
		{strings.Repeat("a", 60) + "😀", strings.Repeat("a", 60) + "😀"},
		{strings.Repeat("a", 61) + "😀", strings.Repeat("a", 61)},
		{strings.Repeat("a", 63) + "😀", strings.Repeat("a", 63)},
		{strings.Repeat("\x80", 100), strings.Repeat("\x80", 64)}, // invalid UTF-8: byte cut
	}
	for _, tc := range tests {
		got := truncate(tc.in)
		if got != tc.want {
			t.Errorf("truncate(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if len(got) > maxValueLen {
			t.Errorf("truncate(%q) has %d bytes", tc.in, len(got))
		}
		if utf8.ValidString(tc.in) && !utf8.ValidString(got) {
			t.Errorf("truncate(%q) = %q broke UTF-8", tc.in, got)
		}
	}
}

func TestTrimOWS(t *testing.T) {
	for in, want := range map[string]string{"": "", " \t ": "", " a b\t": "a b", "\na\n": "\na\n", "a": "a"} {
		if got := trimOWS(in); got != want {
			t.Errorf("trimOWS(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestParseEntryMatchesReference compares parseEntry with the fuzz
// reference (refParse, built on netip.ParseAddr and netip.ParseAddrPort) on
// every concatenation of up to four fragments chosen to hit the grammar's
// edges: brackets, colons, ports, zones, mapped and compatible forms.
func TestParseEntryMatchesReference(t *testing.T) {
	frags := []string{"", "[", "]", ":", "::", "%", "%eth0", "1.2.3.4", "::1", "::ffff:", "fe80::1",
		"80", "65535", "65536", "000080", "a", ",", " ", ".", "0"}
	var rec func(prefix string, depth int)
	n := 0
	rec = func(prefix string, depth int) {
		n++
		a, _, ok := parseEntry(prefix)
		ra, rok := refParse(prefix)
		if ok != rok || a != ra {
			t.Errorf("parseEntry(%q) = %v, %v; reference %v, %v", prefix, a, ok, ra, rok)
		}
		if depth == 4 {
			return
		}
		for _, f := range frags[1:] {
			rec(prefix+f, depth+1)
		}
	}
	rec("", 0)
	t.Logf("%d inputs compared", n)
}
