package trustedproxy

import (
	"net/netip"
	"strings"
)

// This file parses RFC 7239 Forwarded field lines. Grammar (RFC 7239 §4,
// §6, with RFC 9110 §5.6 for the list, token and quoted-string rules):
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//	node              = nodename [ ":" node-port ]
//	nodename          = IPv4address / "[" IPv6address "]" / "unknown" / obfnode
//	obfnode           = "_" 1*( ALPHA / DIGIT / "." / "_" / "-" )
//	node-port         = port / obfport
//	port              = 1*5DIGIT
//	obfport           = "_" 1*( ALPHA / DIGIT / "." / "_" / "-" )
//
// Whitespace (OWS) is allowed only around the commas of the list; none is
// allowed around ";" or "=" (the grammar has none, and tolerating it would
// make this parser disagree with stricter ones about what a trusted proxy
// wrote). Parameter names are case-insensitive (RFC 7239 §4), and so is the
// ABNF literal "unknown".

// tchar marks the RFC 9110 §5.6.2 token characters.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// qdtext reports whether c may appear unescaped in a quoted-string
// (RFC 9110 §5.6.4: HTAB, SP, %x21, %x23-5B, %x5D-7E, obs-text).
func qdtext(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5b) || (c >= 0x5d && c <= 0x7e) || c >= 0x80
}

// quotedPairChar reports whether c may follow a backslash in a quoted-string
// (HTAB, SP, VCHAR, obs-text).
func quotedPairChar(c byte) bool {
	return c == '\t' || c == ' ' || (c >= 0x21 && c <= 0x7e) || c >= 0x80
}

// escapedQuote reports whether the '"' at s[i] is preceded by an odd run of
// backslashes, that is, whether it is the second half of a quoted-pair.
// Inside a quoted string backslashes pair off from the left, so an odd run
// ends with the backslash that escapes this quote. (Outside quoted strings
// a backslash is a syntax error, which the element parser reports.)
func escapedQuote(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// lastForwardedElem splits the rightmost list element off one Forwarded
// field line: elem is the text right of the last comma that lies outside
// quoted strings (OWS not trimmed), rest the text left of it, more whether
// there was such a comma.
//
// Scanning from the right is what bounds the work to the entries examined,
// and it is exact for the part of the line written by trusted proxies: the
// line ends outside any quoted string, so the quote state is known at every
// byte walking left, with escaped quotes recognised by escapedQuote. Bytes
// left of the client's element (written by whoever the client is) are never
// looked at, exactly as for X-Forwarded-For.
func lastForwardedElem(s string) (elem, rest string, more bool) {
	inQuote := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			if !inQuote {
				inQuote = true
			} else if !escapedQuote(s, i) {
				inQuote = false
			}
		case ',':
			if !inQuote {
				return s[i+1:], s[:i], true
			}
		}
	}
	return s, "", false
}

// forwardedSeparators returns the number of list separators in one
// Forwarded field line, as repeated calls of lastForwardedElem would find
// them (the line then has that many elements plus one). Quote-free lines,
// the common case, are counted with strings.Count.
func forwardedSeparators(s string) int {
	if strings.IndexByte(s, '"') < 0 {
		return strings.Count(s, ",")
	}
	n := 0
	for {
		_, rest, more := lastForwardedElem(s)
		if !more {
			return n
		}
		s = rest
		n++
	}
}

// Registered parameters (RFC 7239 §5), as bits.
const (
	paramFor = 1 << iota
	paramBy
	paramHost
	paramProto
)

// forwardedFor parses one forwarded-element (OWS already trimmed) strictly
// per the grammar and returns the raw value of its for parameter (a token,
// or a quoted-string with its quotes). On error raw is "" and detail says
// what is wrong, in fixed text.
//
// A registered parameter (for, by, host, proto) appearing twice is an error
// (RFC 7239 §4: "Each parameter MUST NOT occur more than once per
// forwarded-element"); a duplicate for is the case that matters, since two
// for values leave the element's node ambiguous. Repeated extension
// parameters are not looked for: nothing reads them, and finding them
// would cost time quadratic in an attacker-written element. An element with
// no for parameter (including the empty element the grammar allows) names
// no node and is an error too.
func forwardedFor(e string) (raw, detail string) {
	seen := 0
	for i := 0; i < len(e); {
		if e[i] == ';' { // empty pair: allowed by the grammar
			i++
			continue
		}
		name, j, k, why := scanParam(e, i)
		if why != "" {
			return "", why
		}
		if k < len(e) && e[k] != ';' {
			return "", "syntax error: expected ';' or ',' after a parameter value"
		}
		bit := paramBit(name)
		if seen&bit != 0 {
			return "", repeatedParam(bit)
		}
		seen |= bit
		if bit == paramFor {
			raw = e[j:k]
		}
		i = k
	}
	if seen&paramFor == 0 {
		return "", "no for parameter"
	}
	return raw, ""
}

// scanParam reads the forwarded-pair starting at e[i], name "=" value,
// the value being a token or a quoted-string. It returns the name and the
// value's bounds e[j:k], or what is wrong.
func scanParam(e string, i int) (name string, j, k int, why string) {
	j = i
	for j < len(e) && tchar[e[j]] {
		j++
	}
	if j == i {
		return "", 0, 0, "syntax error: expected a parameter name"
	}
	if j == len(e) || e[j] != '=' {
		return "", 0, 0, "syntax error: expected '=' after a parameter name"
	}
	name, j = e[i:j], j+1
	if j < len(e) && e[j] == '"' {
		k, why = scanQuoted(e, j+1)
		return name, j, k, why
	}
	k = j
	for k < len(e) && tchar[e[k]] {
		k++
	}
	if k == j {
		return "", 0, 0, "syntax error: parameter value is neither a token nor a quoted string"
	}
	return name, j, k, ""
}

// scanQuoted reads the rest of a quoted-string whose opening quote is
// e[k-1] and returns the index just past its closing quote, or what is
// wrong.
func scanQuoted(e string, k int) (end int, why string) {
	for {
		if k >= len(e) {
			return 0, "syntax error: unterminated quoted string"
		}
		switch c := e[k]; {
		case c == '"':
			return k + 1, ""
		case c == '\\':
			if k+1 >= len(e) || !quotedPairChar(e[k+1]) {
				return 0, "syntax error: bad quoted-pair"
			}
			k += 2
		case !qdtext(c):
			return 0, "syntax error: character not allowed in a quoted string"
		default:
			k++
		}
	}
}

// paramBit returns the bit of a registered parameter name (any case), 0
// for an extension parameter. Names are tchar, so ASCII: a name of another
// length cannot fold to a registered one.
func paramBit(name string) int {
	switch len(name) {
	case 3:
		if strings.EqualFold(name, "for") {
			return paramFor
		}
	case 2:
		if strings.EqualFold(name, "by") {
			return paramBy
		}
	case 4:
		if strings.EqualFold(name, "host") {
			return paramHost
		}
	case 5:
		if strings.EqualFold(name, "proto") {
			return paramProto
		}
	}
	return 0
}

// repeatedParam is the detail for a registered parameter seen twice.
func repeatedParam(bit int) string {
	switch bit {
	case paramFor:
		return "parameter for repeated"
	case paramBy:
		return "parameter by repeated"
	case paramHost:
		return "parameter host repeated"
	}
	return "parameter proto repeated"
}

// maxNodeLen bounds a node decoded from a quoted-string with quoted-pairs:
// the longest address node,
// "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535", has 53 bytes. A
// longer escaped node is reported as malformed rather than decoded.
const maxNodeLen = 64

// unquoteNode returns the node a raw for value stands for: a token as is, a
// quoted-string without its quotes and with its quoted-pairs resolved. A
// quoted-string without backslashes (the normal case) is sliced, not
// copied; one with quoted-pairs is decoded through a fixed buffer and
// copied (one allocation). ok is false for an over-long escaped node.
func unquoteNode(raw string) (node string, ok bool) {
	if raw == "" || raw[0] != '"' {
		return raw, true
	}
	in := raw[1 : len(raw)-1] // forwardedFor guarantees the closing quote
	if strings.IndexByte(in, '\\') < 0 {
		return in, true
	}
	var buf [maxNodeLen]byte
	n := 0
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c == '\\' {
			i++
			c = in[i]
		}
		if n == len(buf) {
			return "", false
		}
		buf[n] = c
		n++
	}
	return string(buf[:n]), true
}

// nodeKind classifies a node or an X-Forwarded-For entry.
type nodeKind uint8

const (
	nodeMalformed nodeKind = iota // not an address
	nodeAddr                      // an IP address
	nodeUnknown                   // "unknown" or an obfuscated node
)

// isObf reports whether s is 1*( ALPHA / DIGIT / "." / "_" / "-" ), the
// tail of an obfnode or obfport.
func isObf(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// isUnknownName reports whether s is the nodename "unknown" (any case) or
// an obfnode.
func isUnknownName(s string) bool {
	return strings.EqualFold(s, "unknown") || (len(s) > 1 && s[0] == '_' && isObf(s[1:]))
}

// parseNode parses an RFC 7239 §6 node strictly. For an address it returns
// the canonical address and the textual address it was read from (brackets
// and port removed, a substring of s). IPv6 must be bracketed and carries no
// zone (RFC 3986 IPv6address has none); IPv4 is dotted-quad without
// leading zeros; a port is 1 to 5 digits up to 65535, or obfuscated.
func parseNode(s string) (a netip.Addr, text string, kind nodeKind) {
	if s == "" {
		return netip.Addr{}, "", nodeMalformed
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, "", nodeMalformed
		}
		host, port := s[1:end], s[end+1:]
		if port != "" && (port[0] != ':' || !validNodePort(port[1:])) {
			return netip.Addr{}, "", nodeMalformed
		}
		if strings.IndexByte(host, '%') >= 0 {
			return netip.Addr{}, "", nodeMalformed
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return netip.Addr{}, "", nodeMalformed
		}
		return canonical(a), host, nodeAddr
	}
	name, port, hasPort := strings.Cut(s, ":")
	if hasPort && !validNodePort(port) {
		return netip.Addr{}, "", nodeMalformed
	}
	if isUnknownName(name) {
		return netip.Addr{}, "", nodeUnknown
	}
	a, err := netip.ParseAddr(name)
	if err != nil || !a.Is4() {
		return netip.Addr{}, "", nodeMalformed
	}
	return a, name, nodeAddr
}

// validNodePort reports whether p is a node-port: a port (parsePort rules:
// 1 to 5 digits, at most 65535) or an obfport.
func validNodePort(p string) bool {
	return validPort(p) || (len(p) > 1 && p[0] == '_' && isObf(p[1:]))
}

// classifyXFF reads one X-Forwarded-For entry (or single-address header
// value), OWS trimmed: an address in any parseEntry form, "unknown" or an
// obfuscated name (spelled as in RFC 7239 §6, so that one chain written in
// either header gives the same answer), or malformed.
func classifyXFF(raw string) (netip.Addr, string, nodeKind) {
	if a, text, ok := parseEntry(raw); ok {
		return a, text, nodeAddr
	}
	if isUnknownName(raw) {
		return netip.Addr{}, "", nodeUnknown
	}
	return netip.Addr{}, "", nodeMalformed
}
