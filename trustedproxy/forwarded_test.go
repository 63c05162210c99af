package trustedproxy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestForwardedFor(t *testing.T) {
	tests := []struct {
		elem   string
		raw    string // for value, "" when an error is expected
		detail string
	}{
		// RFC 7239 §4 and §6 examples.
		{`for="_gazonk"`, `"_gazonk"`, ""},
		{`For="[2001:db8:cafe::17]:4711"`, `"[2001:db8:cafe::17]:4711"`, ""},
		{`for=192.0.2.60;proto=http;by=203.0.113.43`, `192.0.2.60`, ""},
		{`for=192.0.2.43`, `192.0.2.43`, ""},
		{`for=unknown`, `unknown`, ""},
		// Parameter order, case, empty pairs, extensions.
		{`proto=https;FOR=192.0.2.1`, `192.0.2.1`, ""},
		{`;;for=192.0.2.1;;`, `192.0.2.1`, ""},
		{`for=192.0.2.1;x-y=z;ext="a;b,c"`, `192.0.2.1`, ""},
		{`host="example.com:8080";for=192.0.2.1`, `192.0.2.1`, ""},
		{`for=""`, `""`, ""},                           // empty quoted value: grammar-valid, not a node
		{`ext=1;ext=2;for=192.0.2.1`, `192.0.2.1`, ""}, // extension repeats are not looked for
		{`for="a\"b"`, `"a\"b"`, ""},
		{"for=\"tab\there\"", "\"tab\there\"", ""},
		{"for=\"obs\x80text\"", "\"obs\x80text\"", ""},
		// Errors.
		{``, "", "no for parameter"},
		{`;`, "", "no for parameter"},
		{`by=192.0.2.1`, "", "no for parameter"},
		{`for=1;for=2`, "", "parameter for repeated"},
		{`by=1;BY=2;for=3`, "", "parameter by repeated"},
		{`host=a;host=b;for=3`, "", "parameter host repeated"},
		{`for=3;proto=a;Proto=b`, "", "parameter proto repeated"},
		{`=1`, "", "syntax error: expected a parameter name"},
		{`for`, "", "syntax error: expected '=' after a parameter name"},
		{`for=`, "", "syntax error: parameter value is neither a token nor a quoted string"},
		{`for=1 ;by=2`, "", "syntax error: expected ';' or ',' after a parameter value"},
		{`for =1`, "", "syntax error: expected '=' after a parameter name"},
		{`for= 1`, "", "syntax error: parameter value is neither a token nor a quoted string"},
		{`for=1; by=2`, "", "syntax error: expected a parameter name"},
		{`for="1`, "", "syntax error: unterminated quoted string"},
		{`for="1\"`, "", "syntax error: unterminated quoted string"},
		{`for="1\`, "", "syntax error: bad quoted-pair"},
		{"for=\"1\\\x01\"", "", "syntax error: bad quoted-pair"},
		{"for=\"1\x7f\"", "", "syntax error: character not allowed in a quoted string"},
		{`for="1"x`, "", "syntax error: expected ';' or ',' after a parameter value"},
		{`for=1.2.3.4:80`, "", "syntax error: expected ';' or ',' after a parameter value"},
		{`for=[::1]`, "", "syntax error: parameter value is neither a token nor a quoted string"},
		{`fo r=1`, "", "syntax error: expected '=' after a parameter name"},
		{`for=a,b`, "", "syntax error: expected ';' or ',' after a parameter value"}, // an element never holds a bare comma
	}
	for _, tc := range tests {
		raw, detail := forwardedFor(tc.elem)
		if raw != tc.raw || detail != tc.detail {
			t.Errorf("forwardedFor(%q) = %q, %q; want %q, %q", tc.elem, raw, detail, tc.raw, tc.detail)
		}
	}
}

func TestLastForwardedElem(t *testing.T) {
	tests := []struct {
		line string
		want []string // elements right to left
	}{
		{`for=a`, []string{`for=a`}},
		{`for=a, for=b`, []string{` for=b`, `for=a`}},
		{`for=a,for="b,c",for=d`, []string{`for=d`, `for="b,c"`, `for=a`}},
		{`for="a\",b", for=c`, []string{` for=c`, `for="a\",b"`}},
		{`for="a\\", for=c`, []string{` for=c`, `for="a\\"`}},
		{`for="a\\\",b", for=c`, []string{` for=c`, `for="a\\\",b"`}},
		{`,,`, []string{``, ``, ``}},
		{`x="`, []string{`x="`}},
		{`for="1.2.3.4, for=5.6.7.8`, []string{` for=5.6.7.8`, `for="1.2.3.4`}},
		{`a",b`, []string{`b`, `a"`}},
		{`a,b"`, []string{`a,b"`}}, // a quote opens, walking left, and is never closed
	}
	for _, tc := range tests {
		var got []string
		rest, more := tc.line, true
		for more {
			var e string
			e, rest, more = lastForwardedElem(rest)
			got = append(got, e)
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("split %q = %q, want %q", tc.line, got, tc.want)
		}
		if n := forwardedSeparators(tc.line) + 1; n != len(tc.want) {
			t.Errorf("forwardedSeparators(%q)+1 = %d, want %d", tc.line, n, len(tc.want))
		}
	}
}

// TestForwardedSeparatorsMatchesSplit: counting and splitting agree on
// every string over a small alphabet (the positions in a Derivation rely
// on it).
func TestForwardedSeparatorsMatchesSplit(t *testing.T) {
	alphabet := []string{`"`, `\`, `,`, `a`, `=`}
	var rec func(s string, depth int)
	rec = func(s string, depth int) {
		n, rest, more := 0, s, true
		for more {
			_, rest, more = lastForwardedElem(rest)
			n++
		}
		if got := forwardedSeparators(s) + 1; got != n {
			t.Fatalf("forwardedSeparators(%q)+1 = %d, split gives %d", s, got, n)
		}
		if depth == 7 {
			return
		}
		for _, c := range alphabet {
			rec(s+c, depth+1)
		}
	}
	rec("", 0)
}

func TestParseNode(t *testing.T) {
	tests := []struct {
		in   string
		want string // canonical address, "unknown", or "" for malformed
	}{
		{"192.0.2.1", "192.0.2.1"},
		{"192.0.2.1:80", "192.0.2.1"},
		{"192.0.2.1:_p0rt", "192.0.2.1"},
		{"192.0.2.1:65536", ""},
		{"192.0.2.1:", ""},
		{"192.0.2.1:_", ""},
		{"192.0.2.1:80:80", ""},
		{"192.000.2.1", ""},
		{"192.0.2.1%eth0", ""},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:DB8::1]:443", "2001:db8::1"},
		{"[2001:db8::1]:_x", "2001:db8::1"},
		{"[::ffff:192.0.2.1]", "192.0.2.1"},
		{"[64:ff9b::192.0.2.1]", "64:ff9b::c000:201"},
		{"[fe80::1%eth0]", ""},
		{"[192.0.2.1]", ""},
		{"[2001:db8::1]80", ""},
		{"[2001:db8::1", ""},
		{"2001:db8::1", ""},
		{"unknown", "unknown"},
		{"UnKnOwN", "unknown"},
		{"unknown:80", "unknown"},
		{"_a.b_c-d", "unknown"},
		{"_", ""},
		{"_a b", ""},
		{"", ""},
		{"localhost", ""},
	}
	for _, tc := range tests {
		a, text, kind := parseNode(tc.in)
		var got string
		switch kind {
		case nodeAddr:
			got = a.String()
			if !strings.Contains(tc.in, text) {
				t.Errorf("parseNode(%q) text %q not a substring", tc.in, text)
			}
			if a != canonical(a) {
				t.Errorf("parseNode(%q) = %v not canonical", tc.in, a)
			}
		case nodeUnknown:
			got = "unknown"
		}
		if got != tc.want {
			t.Errorf("parseNode(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestUnquoteNode(t *testing.T) {
	tests := []struct{ raw, want string }{
		{`192.0.2.1`, `192.0.2.1`},
		{`"192.0.2.1"`, `192.0.2.1`},
		{`""`, ``},
		{`"\[::1\]"`, `[::1]`},
		{`"a\\b"`, `a\b`},
		{`"` + strings.Repeat(`\a`, 64) + `"`, strings.Repeat("a", 64)},
	}
	for _, tc := range tests {
		got, ok := unquoteNode(tc.raw)
		if !ok || got != tc.want {
			t.Errorf("unquoteNode(%q) = %q, %v; want %q", tc.raw, got, ok, tc.want)
		}
	}
	if _, ok := unquoteNode(`"` + strings.Repeat(`\a`, 65) + `"`); ok {
		t.Error("unquoteNode accepted a 65-byte escaped node")
	}
}

// TestForwardedAgreesWithXFFTable: the same chain as X-Forwarded-For and as
// Forwarded, written out by hand.
func TestForwardedAgreesWithXFFTable(t *testing.T) {
	tests := []struct {
		xff, fwd string
		client   string // "" for an error
	}{
		{"203.0.113.7, 10.0.0.2", "for=203.0.113.7, for=10.0.0.2", "203.0.113.7"},
		{"[2001:db8::7]:443, 10.0.0.2:80", `for="[2001:db8::7]:443", for="10.0.0.2:80"`, "2001:db8::7"},
		{"2001:db8::7", `for="[2001:db8::7]"`, "2001:db8::7"},
		{"::ffff:203.0.113.7", `for="[::ffff:203.0.113.7]"`, "203.0.113.7"},
		{"10.0.0.3, 10.0.0.2", "for=10.0.0.3, for=10.0.0.2", "10.0.0.1"},
		{"unknown, 10.0.0.2", "for=unknown, for=10.0.0.2", ""},
		{"203.0.113.7,, 10.0.0.2", "for=203.0.113.7,, for=10.0.0.2", ""},
	}
	rx := mustNew(t, Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: headerXForwardedFor}}})
	rf := mustNew(t, Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: headerForwarded}}})
	for _, tc := range tests {
		ox := outcomeOf(rx, "10.0.0.1:1", xff(tc.xff))
		of := outcomeOf(rf, "10.0.0.1:1", hdr(headerForwarded, tc.fwd))
		if ox.Client != tc.client {
			t.Errorf("%q: client %q, want %q", tc.xff, ox.Client, tc.client)
		}
		if ox.Client != of.Client || ox.Reason != of.Reason || ox.Err != of.Err || ox.ErrPos != of.ErrPos || strings.Join(ox.Hops, "|") != strings.Join(of.Hops, "|") {
			t.Errorf("%q vs %q:\n xff %+v\n fwd %+v", tc.xff, tc.fwd, ox, of)
		}
	}
	if res, _ := rf.Resolve("10.0.0.1:1", hdr(headerForwarded, `for="[2001:db8::7]"`)); res.Client != netip.MustParseAddr("2001:db8::7") {
		t.Errorf("Resolve over Forwarded = %v", res.Client)
	}
}
