package limitkey

import (
	"errors"
	"fmt"
	"strings"
)

// Key encoding
//
// A Key is written as its escaped policy name followed, for each part in
// order, by '|', the dimension name, '=' and the escaped value:
//
//	per-account|tenant=acme|account=alice|operation=GET /v1/reports/{id}
//	global                                      (zero parts: policy-global bucket)
//	p|account=a%7Cb                             (value "a|b")
//	p|network=2001:db8::/64                     (':' needs no escaping)
//
// Escaping (policy, dimension and value alike) replaces each of these bytes
// with '%' and two upper-case hex digits, and no other byte:
//
//	'%' (0x25), '=' (0x3D), '|' (0x7C), 0x00-0x1F, 0x7F, 0x80-0xFF
//
// Every byte of the output is therefore printable ASCII (0x20-0x7E), so a
// key can be logged and used as a Redis key verbatim, and multi-byte UTF-8
// is escaped byte by byte ("é" is "%C3%A9").
//
// Injectivity: '|' occurs only as the part separator and '=' only between a
// dimension and its value, because both are always escaped inside fields;
// splitting on '|' and then on the first '=' recovers the fields, and
// unescaping is injective. Hence two different Keys never share an encoding
// (the ("a:b","c") / ("a","b:c") and ("a|b","c") / ("a","b|c") collisions of
// joined-string keys cannot happen).
//
// Canonical form: Parse accepts only what String produces: upper-case hex,
// no escape of a byte that needs none, no raw byte that needs one, a
// non-empty policy and valid dimension names. So Parse(s) succeeding
// implies Parse(s).String() == s.

const upperHex = "0123456789ABCDEF"

// errKey is wrapped by every error [Parse] returns.
var errKey = errors.New("limitkey: malformed key")

// needsEscape reports whether byte c must be percent-escaped in a key field.
func needsEscape(c byte) bool {
	return escapeByte[c]
}

// escapeByte marks the bytes a key field escapes: every key of every
// request is scanned with it.
var escapeByte = func() (t [256]bool) {
	for c := range t {
		t[c] = c < 0x20 || c >= 0x7f || c == '%' || c == '|' || c == '='
	}
	return t
}()

// appendEscaped appends s to b with the key-field escaping applied. Runs
// of bytes that need no escape (usually the whole field) are copied at
// once.
func appendEscaped(b []byte, s string) []byte {
	for {
		i := 0
		for i < len(s) && !needsEscape(s[i]) {
			i++
		}
		b = append(b, s[:i]...)
		if i == len(s) {
			return b
		}
		c := s[i]
		b = append(b, '%', upperHex[c>>4], upperHex[c&0x0f])
		s = s[i+1:]
	}
}

// escapedLen returns the number of bytes appendEscaped adds for s.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n += 2
		}
	}
	return n
}

// encodedLen returns len(k.String()).
func (k Key) encodedLen() int {
	n := escapedLen(k.Policy)
	for _, p := range k.Parts {
		n += 2 + escapedLen(string(p.Dimension)) + escapedLen(p.Value)
	}
	return n
}

// AppendTo appends the encoding of k (see [Key.String]) to b and returns the
// extended slice. It allocates only if b lacks capacity, so a caller reusing
// a buffer encodes keys without allocating. Safe for concurrent use on
// distinct buffers.
func (k Key) AppendTo(b []byte) []byte {
	b = appendEscaped(b, k.Policy)
	for _, p := range k.Parts {
		b = append(b, '|')
		b = appendEscaped(b, string(p.Dimension))
		b = append(b, '=')
		b = appendEscaped(b, p.Value)
	}
	return b
}

// String returns the injective, printable-ASCII encoding of k:
// the escaped policy, then "|dimension=value" for each part in order, with
// '%', '|', '=', bytes below 0x20, 0x7F and bytes from 0x80 escaped as
// "%XX" (upper-case hex). Example:
//
//	per-account|tenant=acme|account=alice|operation=GET /v1/reports/{id}
//
// No two Keys share an encoding, whatever bytes they hold. [Parse] is the
// inverse for valid keys (non-empty policy, valid dimension names).
func (k Key) String() string {
	var stack [256]byte // typical keys encode without a heap buffer
	b := stack[:0]
	if n := k.encodedLen(); n > len(stack) {
		b = make([]byte, 0, n)
	}
	return string(k.AppendTo(b))
}

// Parse parses the encoding produced by [Key.String]. It accepts only the
// canonical form: a non-empty policy, dimensions matching
// ^[a-z][a-z0-9_]{0,31}$, escapes written "%XX" with upper-case hex and used
// exactly for the bytes that need them. Therefore, when Parse(s) returns
// k without error, k.String() == s. A key with no parts returns a Key whose
// Parts is nil. Errors wrap an unexported sentinel, give the byte offset of
// the problem and never echo the input. Safe for concurrent use.
func Parse(s string) (Key, error) {
	field, rest, more := strings.Cut(s, "|")
	policy, err := unescapeField(field, 0)
	if err != nil {
		return Key{}, err
	}
	if policy == "" {
		return Key{}, fmt.Errorf("%w: empty policy name", errKey)
	}
	k := Key{Policy: policy}
	off := len(field) + 1
	if more {
		k.Parts = make([]Part, 0, strings.Count(rest, "|")+1)
	}
	for more {
		field, rest, more = strings.Cut(rest, "|")
		dim, val, ok := strings.Cut(field, "=")
		if !ok {
			return Key{}, fmt.Errorf("%w: part at offset %d has no '='", errKey, off)
		}
		if !validDimension(dim) {
			return Key{}, fmt.Errorf("%w: invalid dimension name at offset %d", errKey, off)
		}
		v, err := unescapeField(val, off+len(dim)+1)
		if err != nil {
			return Key{}, err
		}
		k.Parts = append(k.Parts, Part{Dimension: Dimension(dim), Value: v})
		off += len(field) + 1
	}
	return k, nil
}

// unescapeField reverses appendEscaped, rejecting every non-canonical form.
// off is the offset of field within the whole key, for error messages.
func unescapeField(field string, off int) (string, error) {
	clean := true
	for i := 0; i < len(field); i++ {
		if c := field[i]; c == '%' {
			clean = false
		} else if needsEscape(c) {
			return "", fmt.Errorf("%w: unescaped byte 0x%02X at offset %d", errKey, c, off+i)
		}
	}
	if clean {
		return field, nil
	}
	b := make([]byte, 0, len(field))
	for i := 0; i < len(field); i++ {
		c := field[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(field) {
			return "", fmt.Errorf("%w: truncated escape at offset %d", errKey, off+i)
		}
		hi, ok1 := upperHexVal(field[i+1])
		lo, ok2 := upperHexVal(field[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: escape at offset %d is not %%XX with upper-case hex", errKey, off+i)
		}
		d := hi<<4 | lo
		if !needsEscape(d) {
			return "", fmt.Errorf("%w: needless escape at offset %d", errKey, off+i)
		}
		b = append(b, d)
		i += 2
	}
	return string(b), nil
}

// upperHexVal decodes one upper-case hexadecimal digit.
func upperHexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
