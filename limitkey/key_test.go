package limitkey

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseDimension(t *testing.T) {
	tests := []struct {
		in      string
		ok      bool
		builtin bool
	}{
		{"tenant", true, true},
		{"account", true, true},
		{"credential", true, true},
		{"operation", true, true},
		{"network", true, true},
		{"region", true, false},
		{"a", true, false},
		{"api_key_2", true, false},
		{strings.Repeat("a", 32), true, false},
		{strings.Repeat("a", 33), false, false},
		{"", false, false},
		{"Tenant", false, false},
		{"TENANT", false, false},
		{"1abc", false, false},
		{"_abc", false, false},
		{"a-b", false, false},
		{"a b", false, false},
		{"a=b", false, false},
		{"a|b", false, false},
		{"ténant", false, false},
		{"tenant\x00", false, false},
	}
	for _, tt := range tests {
		d, err := ParseDimension(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseDimension(%q) err = %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, errDimension) {
				t.Errorf("ParseDimension(%q) err = %v, want errDimension", tt.in, err)
			}
			if tt.in != "" && strings.Contains(err.Error(), tt.in) {
				t.Errorf("ParseDimension(%q) error echoes the input: %v", tt.in, err)
			}
			continue
		}
		if string(d) != tt.in || d.Builtin() != tt.builtin {
			t.Errorf("ParseDimension(%q) = %q builtin=%v, want builtin=%v", tt.in, d, d.Builtin(), tt.builtin)
		}
	}
}

func TestKeyString(t *testing.T) {
	tests := []struct {
		name string
		key  Key
		want string
	}{
		{"policy only", Key{Policy: "global"}, "global"},
		{"empty parts slice", Key{Policy: "global", Parts: []Part{}}, "global"},
		{"design example", Key{Policy: "per-account", Parts: []Part{
			{DimTenant, "acme"}, {DimAccount, "alice"}, {DimOperation, "GET /v1/reports/{id}"},
		}}, "per-account|tenant=acme|account=alice|operation=GET /v1/reports/{id}"},
		{"ipv6 network needs no escape", Key{Policy: "net", Parts: []Part{{DimNetwork, "2001:db8::/64"}}},
			"net|network=2001:db8::/64"},
		{"pipe in value", Key{Policy: "p", Parts: []Part{{DimAccount, "a|b"}}}, "p|account=a%7Cb"},
		{"equals in value", Key{Policy: "p", Parts: []Part{{DimAccount, "a=b"}}}, "p|account=a%3Db"},
		{"percent in value", Key{Policy: "p", Parts: []Part{{DimAccount, "100%"}}}, "p|account=100%25"},
		{"escaped-looking value", Key{Policy: "p", Parts: []Part{{DimAccount, "%7C"}}}, "p|account=%257C"},
		{"controls", Key{Policy: "p", Parts: []Part{{DimAccount, "a\x00b\nc\x1f\x7f"}}}, "p|account=a%00b%0Ac%1F%7F"},
		{"utf-8 escaped per byte", Key{Policy: "p", Parts: []Part{{DimAccount, "é"}}}, "p|account=%C3%A9"},
		{"invalid utf-8", Key{Policy: "p", Parts: []Part{{DimAccount, "\xff"}}}, "p|account=%FF"},
		{"empty value", Key{Policy: "p", Parts: []Part{{DimTenant, ""}}}, "p|tenant="},
		{"policy escaped", Key{Policy: "a|b=c%", Parts: []Part{{DimTenant, "x"}}}, "a%7Cb%3Dc%25|tenant=x"},
		{"space and printable kept", Key{Policy: "p q", Parts: []Part{{"custom_1", "~!@#$^&*()[]{};:'\",.<>/?\\`"}}},
			"p q|custom_1=~!@#$^&*()[]{};:'\",.<>/?\\`"},
		{"repeated dimension kept in order", Key{Policy: "p", Parts: []Part{{DimTenant, "b"}, {DimTenant, "a"}}},
			"p|tenant=b|tenant=a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.key.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
			if got := string(tt.key.AppendTo([]byte("prefix:"))); got != "prefix:"+tt.want {
				t.Fatalf("AppendTo = %q", got)
			}
			if got := referenceEncode(tt.key); got != tt.want {
				t.Fatalf("reference encoder = %q, want %q", got, tt.want)
			}
			for i := 0; i < len(tt.want); i++ {
				if c := tt.want[i]; c < 0x20 || c > 0x7e {
					t.Fatalf("byte %#x at %d is not printable ASCII", c, i)
				}
			}
			back, err := Parse(tt.want)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.want, err)
			}
			if !keysEqual(back, tt.key) {
				t.Fatalf("Parse(%q) = %#v, want %#v", tt.want, back, tt.key)
			}
		})
	}
}

// TestKeyNoCollisions pins the joined-string collisions of httprate (':'),
// Envoy RLS and gubernator ('_'), tollbooth ('|') and throttled ('\n' plus
// lower-casing): each pair must encode differently.
func TestKeyNoCollisions(t *testing.T) {
	two := func(a, b string) Key {
		return Key{Policy: "p", Parts: []Part{{DimTenant, a}, {DimAccount, b}}}
	}
	pairs := [][2]Key{
		{two("a:b", "c"), two("a", "b:c")},
		{two("a|b", "c"), two("a", "b|c")},
		{two("a=b", "c"), two("a", "b=c")},
		{two("a_b", "c"), two("a", "b_c")},
		{two("a\nb", "c"), two("a", "b\nc")},
		{two("A", "b"), two("a", "b")},
		{two("a%7Cb", "c"), two("a|b", "c")},
		{two("", "b"), two("b", "")},
		{Key{Policy: "p|tenant=a"}, {Policy: "p", Parts: []Part{{DimTenant, "a"}}}},
		{Key{Policy: "p", Parts: []Part{{DimTenant, "a|account=b"}}}, two("a", "b")},
		{Key{Policy: "p", Parts: []Part{{DimTenant, "a"}}}, {Policy: "p", Parts: []Part{{DimAccount, "a"}}}},
		{two("a", "b"), {Policy: "p", Parts: []Part{{DimAccount, "b"}, {DimTenant, "a"}}}},
		{Key{Policy: "p"}, {Policy: "p", Parts: []Part{{DimTenant, ""}}}},
	}
	for _, p := range pairs {
		if a, b := p[0].String(), p[1].String(); a == b {
			t.Errorf("collision: %#v and %#v both encode to %q", p[0], p[1], a)
		}
	}
}

func TestParseKeyRejectsNonCanonical(t *testing.T) {
	bad := []string{
		"",                                    // empty policy
		"|tenant=a",                           // empty policy
		"p|",                                  // empty part
		"p|tenant",                            // no '='
		"p|=a",                                // empty dimension
		"p|Tenant=a",                          // upper-case dimension
		"p|ten%61nt=a",                        // escaped dimension
		"p|1x=a",                              // bad dimension
		"p|tenant=a=b",                        // raw '=' in value
		"p=q|tenant=a",                        // raw '=' in policy
		"p|tenant=%7c",                        // lower-case hex
		"p|tenant=%41",                        // needless escape of 'A'
		"p|tenant=%20",                        // needless escape of ' '
		"p|tenant=%7",                         // truncated escape
		"p|tenant=%",                          // truncated escape
		"p|tenant=%G0",                        // bad hex
		"p|tenant=a\x00",                      // raw control byte
		"p|tenant=a\n",                        // raw newline
		"p|tenant=\x7f",                       // raw DEL
		"p|tenant=\xc3\xa9",                   // raw UTF-8
		"p\xff",                               // raw high byte in policy
		"%70",                                 // needless escape in policy
		"p|tenant=a|",                         // trailing separator
		"p||tenant=a",                         // empty part
		"p|" + strings.Repeat("a", 33) + "=x", // dimension too long
	}
	for _, s := range bad {
		k, err := Parse(s)
		if err == nil {
			t.Errorf("Parse(%q) = %#v, want error", s, k)
			continue
		}
		if !errors.Is(err, errKey) {
			t.Errorf("Parse(%q) error %v does not wrap errKey", s, err)
		}
	}
}

func TestKeyAppendToNoAllocs(t *testing.T) {
	k := Key{Policy: "per-account", Parts: []Part{
		{DimTenant, "acme"}, {DimAccount, "al|ce\x00é"}, {DimOperation, "GET /v1/reports/{id}"},
	}}
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		buf = k.AppendTo(buf[:0])
	})
	if allocs != 0 {
		t.Fatalf("AppendTo allocated %v times per run, want 0", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = k.String() }); allocs > 1 {
		t.Fatalf("String allocated %v times per run, want <= 1", allocs)
	}
}

// referenceEncode is a slow, obviously correct encoder to cross-check
// AppendTo against.
func referenceEncode(k Key) string {
	esc := func(s string) string {
		var b strings.Builder
		for _, c := range []byte(s) {
			printable := c >= 0x20 && c <= 0x7e
			if !printable || c == '%' || c == '|' || c == '=' {
				b.WriteString("%" + strings.ToUpper(hex2(c)))
			} else {
				b.WriteByte(c)
			}
		}
		return b.String()
	}
	fields := []string{esc(k.Policy)}
	for _, p := range k.Parts {
		fields = append(fields, esc(string(p.Dimension))+"="+esc(p.Value))
	}
	return strings.Join(fields, "|")
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&15]})
}

// keysEqual compares keys, treating nil and empty Parts as equal.
func keysEqual(a, b Key) bool {
	if a.Policy != b.Policy || len(a.Parts) != len(b.Parts) {
		return false
	}
	for i := range a.Parts {
		if a.Parts[i] != b.Parts[i] {
			return false
		}
	}
	return true
}

func BenchmarkKeyAppendTo(b *testing.B) {
	k := Key{Policy: "per-account", Parts: []Part{
		{DimTenant, "acme"}, {DimAccount, "alice"}, {DimOperation, "GET /v1/reports/{id}"},
	}}
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = k.AppendTo(buf[:0])
	}
}

func BenchmarkParseKey(b *testing.B) {
	s := "per-account|tenant=acme|account=al%7Cce|operation=GET /v1/reports/{id}"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(s); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAppendEscapedEveryPosition: a byte that needs escaping is escaped at
// every position of fields of 1 to 40 bytes (appendEscaped scans eight
// bytes at a time, then the rest one by one), and nothing else is.
func TestAppendEscapedEveryPosition(t *testing.T) {
	ref := func(s string) string { // byte by byte, as the encoding is specified
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x7f || c == '%' || c == '|' || c == '=' {
				fmt.Fprintf(&b, "%%%02X", c)
			} else {
				b.WriteByte(c)
			}
		}
		return b.String()
	}
	for n := 1; n <= 40; n++ {
		field := []byte(strings.Repeat("acme-GET /v1/{id}~", 3)[:n])
		if got, want := string(appendEscaped(nil, string(field))), ref(string(field)); got != want {
			t.Errorf("%q: %q, want %q", field, got, want)
		}
		for i := range field {
			for _, c := range []byte{'%', '|', '=', 0x00, 0x1F, 0x7F, 0x80, 0xFF} {
				orig := field[i]
				field[i] = c
				if got, want := string(appendEscaped(nil, string(field))), ref(string(field)); got != want {
					t.Errorf("%q: %q, want %q", field, got, want)
				}
				field[i] = orig
			}
		}
	}
}
