// Package quote renders a configuration value inside an error message. An
// operator's config is read by check, logged by a reload and printed to a
// terminal: a value quoted whole could be a megabyte long, hold a NUL or an
// escape sequence, or carry what a YAML scalar swallowed from the lines
// below it. So every library and demo error that names a config value
// quotes it through [Value]: at most [MaxBytes] of it, escaped.
package quote

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxBytes is how many bytes of a value an error message quotes.
const MaxBytes = 64

// Value returns the string v (of any string type, such as a policy
// dimension) as a Go-syntax ASCII string literal (strconv.QuoteToASCII:
// a NUL, a control byte, invalid UTF-8 and every non-ASCII rune escaped) when
// it is at most MaxBytes long. A longer one is cut to its first MaxBytes bytes
// (backing off to a rune boundary, so a multi-byte rune is never split) and
// followed by its length: "abc…"… (1048576 bytes). Safe for concurrent use.
func Value[S ~string](v S) string {
	s := string(v)
	if len(s) <= MaxBytes {
		return strconv.QuoteToASCII(s)
	}
	n := MaxBytes
	// A valid rune that starts before the cut and ends after it is dropped
	// whole; invalid UTF-8 is cut at the byte limit (its escapes show it).
	for p := n - 1; p >= n-(utf8.UTFMax-1); p-- {
		if utf8.RuneStart(s[p]) {
			if r, size := utf8.DecodeRuneInString(s[p:]); r != utf8.RuneError && p+size > n {
				n = p
			}
			break
		}
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.QuoteToASCII(s[:n]), len(s))
}
