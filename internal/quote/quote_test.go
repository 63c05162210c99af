package quote_test

import (
	"strings"
	"testing"

	"github.com/ratekey/ratekey/internal/quote"
)

func TestValue(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `""`},
		{"per-account", `"per-account"`},
		{"a\x00b\xff", `"a\x00b\xff"`},
		{"\x1b[31mred", `"\x1b[31mred"`},
		{"é", `"\u00e9"`},
		{strings.Repeat("A", 64), `"` + strings.Repeat("A", 64) + `"`},
		{strings.Repeat("A", 1<<20), `"` + strings.Repeat("A", 64) + `"… (1048576 bytes)`},
		// A rune across the 64-byte cut is dropped whole.
		{strings.Repeat("A", 63) + "éz", `"` + strings.Repeat("A", 63) + `"… (66 bytes)`},
		// Invalid UTF-8 across the cut: cut at the byte limit, escaped.
		{strings.Repeat("A", 62) + "\x80\x80\x80\x80", `"` + strings.Repeat("A", 62) + `\x80\x80"… (66 bytes)`},
	} {
		if got := quote.Value(c.in); got != c.want {
			t.Errorf("Value(%.20q…) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestValueIsBounded(t *testing.T) {
	// The longest output: 64 bytes each escaped as \xNN, plus the quotes and the length.
	if got := quote.Value(strings.Repeat("\x00", 1<<24)); len(got) > 4*quote.MaxBytes+32 {
		t.Errorf("len(Value(16 MiB of NUL)) = %d", len(got))
	}
}
