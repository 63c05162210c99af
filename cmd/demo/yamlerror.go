package main

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/token"

	"github.com/ratekey/ratekey/internal/quote"
)

// yamlError rewrites an error of the YAML parser or decoder for an
// operator: "config: line N: ..." with any key or text of the file quoted
// through quote.Value (at most 64 bytes, escaped), and no Go type names.
// The parser's own text repeats a key whole and raw (a 65 KB key, a
// terminal escape sequence) and names Go struct fields. An error a field's
// own UnmarshalYAML returned (an integer's) is written for the operator
// already: it is kept.
func yamlError(err error) error {
	var (
		unknown *yaml.UnknownFieldError
		dup     *yaml.DuplicateKeyError
		typ     *yaml.TypeError
		node    *yaml.UnexpectedNodeTypeError
		over    *yaml.OverflowError
		syntax  *yaml.SyntaxError
		tk      *token.Token
		msg     string
	)
	switch {
	case errors.As(err, &unknown):
		tk, msg = unknown.Token, "unknown field "+quote.Value(tokenValue(unknown.Token))
	case errors.As(err, &dup):
		tk, msg = dup.Token, "duplicate key "+quote.Value(tokenValue(dup.Token))
	case errors.As(err, &typ):
		tk, msg = typ.Token, "a value of the wrong type: want "+kindName(typ.DstType)
	case errors.As(err, &node):
		tk, msg = node.Token, fmt.Sprintf("a YAML %s where a %s is expected", node.Actual.YAMLName(), node.Expected.YAMLName())
	case errors.As(err, &over):
		tk, msg = over.Token, "a number out of range"
	case errors.As(err, &syntax):
		tk, msg = syntax.Token, "syntax error: "+printable(syntax.Message)
	default:
		return fmt.Errorf("config: %s", printable(err.Error()))
	}
	if tk != nil && tk.Position != nil {
		return fmt.Errorf("config: line %d: %s", tk.Position.Line, msg)
	}
	return fmt.Errorf("config: %s", msg)
}

// tokenValue is a token's text, or "".
func tokenValue(tk *token.Token) string {
	if tk == nil {
		return ""
	}
	return tk.Value
}

// kindName names what a config field takes, in YAML's words.
func kindName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a decimal integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "a mapping"
	}
	return "another type"
}

// printable bounds a parser message: at most 200 bytes, with control
// bytes, invalid UTF-8 and unprintable runes escaped (the message may quote
// the file).
func printable(s string) string {
	cut := ""
	if len(s) > 200 {
		s, cut = s[:200], "…"
	}
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if (r == utf8.RuneError && size == 1) || !unicode.IsPrint(r) {
			q := strconv.QuoteToASCII(s[:size])
			b.WriteString(q[1 : len(q)-1])
		} else {
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String() + cut
}
