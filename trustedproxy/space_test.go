package trustedproxy

import (
	"strings"
	"testing"
)

// TestEntryWithSurroundingSpace pins the error of an entry written with
// leading or trailing space (issue 26): it is refused, never trimmed, and
// the error says why, instead of blaming the prefix length or calling a
// valid address "not an IP address". Rule.From, ParseSet and the
// FileSource text format share the parser.
func TestEntryWithSurroundingSpace(t *testing.T) {
	tests := []struct {
		entry string
		from  string // New's error for Rule.From: []string{entry}
		set   string // ParseSet's error for []string{entry}
	}{
		{"10.0.0.0/8 ",
			`rules[0].from[0] "10.0.0.0/8 ": has leading or trailing space: remove it (entries are not trimmed)`,
			`[0] "10.0.0.0/8 ": has leading or trailing space: remove it (entries are not trimmed)`},
		{" 10.0.0.0/8",
			`rules[0].from[0] " 10.0.0.0/8": has leading or trailing space: remove it (entries are not trimmed)`,
			`[0] " 10.0.0.0/8": has leading or trailing space: remove it (entries are not trimmed)`},
		{"2001:db8::/32\t",
			`rules[0].from[0] "2001:db8::/32\t": has leading or trailing space: remove it (entries are not trimmed)`,
			`[0] "2001:db8::/32\t": has leading or trailing space: remove it (entries are not trimmed)`},
		{"192.0.2.1\n",
			`rules[0].from[0] "192.0.2.1\n": has leading or trailing space: remove it (entries are not trimmed)`,
			`[0] "192.0.2.1\n": has leading or trailing space: remove it (entries are not trimmed)`},
		{" loopback",
			`rules[0].from[0] " loopback": has leading or trailing space: remove it (entries are not trimmed)`,
			`[0] " loopback": has leading or trailing space: remove it (entries are not trimmed)`},
		{"\u00a010.0.0.1",
			`rules[0].from[0] "\u00a010.0.0.1": has leading or trailing space: remove it (entries are not trimmed)`,
			`[0] "\u00a010.0.0.1": has leading or trailing space: remove it (entries are not trimmed)`},
		// Space inside is not surrounding space: the old errors stay.
		{"10.0.0.0 /8",
			`rules[0].from[0] "10.0.0.0 /8": not an IP address or CIDR prefix`,
			`[0] "10.0.0.0 /8": not an IP address or CIDR prefix`},
		{"10.0.0.0/33",
			`rules[0].from[0] "10.0.0.0/33": not a CIDR prefix: the length must be 0..32 for IPv4`,
			`[0] "10.0.0.0/33": not a CIDR prefix: the length must be 0..32 for IPv4`},
		{"", `rules[0].from[0] "": not an IP address or CIDR prefix`, `[0] "": not an IP address or CIDR prefix`},
	}
	for _, tt := range tests {
		_, err := New(Config{Rules: []Rule{{From: []string{tt.entry}, Header: "X-Forwarded-For"}}})
		if err == nil || err.Error() != tt.from {
			t.Errorf("New, From %q: error\n%v\nwant\n%s", tt.entry, err, tt.from)
		}
		if _, err := ParseSet([]string{tt.entry}); err == nil || err.Error() != tt.set {
			t.Errorf("ParseSet(%q): error\n%v\nwant\n%s", tt.entry, err, tt.set)
		}
	}
	// A FileSource line is trimmed of spaces and tabs (its format), but
	// not of other space.
	_, err := parseSetText([]byte("10.0.0.0/8  \n\u00a0192.0.2.1\n"))
	if want := `line 2 "\u00a0192.0.2.1": has leading or trailing space`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("parseSetText: error %v, want it to contain %s", err, want)
	}
}
