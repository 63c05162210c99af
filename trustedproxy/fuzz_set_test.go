package trustedproxy

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"go4.org/netipx"
)

// FuzzParseSet: the FileSource text format is ParseSet over its lines
// (each trimmed of spaces, tabs and a CR; blank lines and '#' comments
// skipped): both accept or both refuse, and accept the same set. An
// accepted entry's first and last addresses are in the set in the
// canonical (unmapped) form Resolve looks them up in (see parseTrusted).
// A refusal reports at most maxLineErrors lines
// and a count, none longer than 512 bytes (a value is cut to 64 bytes,
// each escaped to at most 4), so a hostile file cannot make an error
// message of its own size.
func FuzzParseSet(f *testing.F) {
	for _, s := range []string{
		"10.0.0.0/8\n192.0.2.1\n",
		"# comment\n\n  2001:db8::/32\r\n\tprivate_ranges\n",
		"::ffff:10.0.0.0/104\n::/80\n",
		"fe80::1%eth0\n",
		"10.0.0.0/8 \u00a0\n",
		"unix\n",
		"localhost\n10.0.0.1/33\n10.0.0.0/08\n",
		"loopback\n0.0.0.0/0\n",
		strings.Repeat("bad\n", 20),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		set, err := parseSetText(body)
		var entries []string
		for line := range bytes.SplitSeq(body, []byte("\n")) {
			s := strings.Trim(string(line), " \t\r")
			if s != "" && s[0] != '#' {
				entries = append(entries, s)
			}
		}
		want, werr := ParseSet(entries)
		if (err == nil) != (werr == nil) {
			t.Fatalf("parseSetText err = %v; ParseSet over its lines err = %v", err, werr)
		}
		if err != nil {
			lines := strings.Split(err.Error(), "\n")
			if len(lines) > maxLineErrors+1 {
				t.Fatalf("%d error lines, want at most %d", len(lines), maxLineErrors+1)
			}
			for _, l := range lines {
				if len(l) > 512 {
					t.Fatalf("error line of %d bytes: %q", len(l), l)
				}
			}
			return
		}
		if !set.Equal(want) {
			t.Fatalf("parseSetText = %v; ParseSet over its lines = %v", set.Prefixes(), want.Prefixes())
		}
		for _, s := range entries {
			for _, a := range entryEnds(s) {
				if !set.Contains(a.Unmap()) {
					t.Fatalf("entry %q accepted, but %v is not in the set", s, a.Unmap())
				}
			}
		}
	})
}

// entryEnds returns the first and last addresses of an address or prefix
// entry as netip reads it, zone dropped; nothing for a shorthand.
func entryEnds(s string) []netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil {
		return []netip.Addr{a.WithZone("")}
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return nil
	}
	r := netipx.RangeOfPrefix(p.Masked())
	return []netip.Addr{r.From(), r.To()}
}
