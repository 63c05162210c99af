package trustedproxy

import (
	"net/netip"
	"strings"
	"unicode/utf8"
)

// maxValueLen is the most bytes of an attacker-controlled value that the
// package ever copies into a [Hop], a [Derivation] or an error.
const maxValueLen = 64

// parseEntry parses one address as it appears in http.Request.RemoteAddr, in
// an X-Forwarded-For element or in a single-address header, and returns it in
// canonical form together with the textual address it was read from
// (brackets, port and zone removed; a substring of s, so nothing is copied).
//
// Accepted forms (the grammar of netip.ParseAddr and netip.ParseAddrPort):
//
//	198.51.100.7              IPv4
//	198.51.100.7:5555         IPv4 and port
//	2001:db8::1               IPv6 (upper or lower case hex, optional %zone)
//	[2001:db8::1]             bracketed IPv6
//	[2001:db8::1]:80          bracketed IPv6 and port
//
// A port is 1 to 5 ASCII digits with a value of at most 65535. Brackets hold
// IPv6 only (RFC 3986 IP-literal); a zone belongs to IPv6 only and must be
// non-empty. Anything else (empty strings, host names, "unknown", a v4 zone,
// a v6 address with a port but no brackets) is malformed.
//
// Canonical form: why it matters. netip and netipx compare addresses by
// family and zone. netipx.IPSet.Contains returns false for any zoned address,
// and a set built from 10.0.0.0/8 does not contain ::ffff:10.0.0.1, which is
// the same host as seen by a dual-stack socket. So before any trust decision:
//
//   - Unmap: ::ffff:a.b.c.d becomes a.b.c.d, the only form trust sets hold.
//   - Drop the zone: fe80::1%eth0 becomes fe80::1. The zone names a local
//     interface of the host that wrote the value; it is not part of the
//     address and must not make a trusted address look untrusted (nor the
//     reverse). The zone is cut off textually before parsing, so an attacker
//     cannot make the resolver intern arbitrary zone strings.
//
// The returned address therefore always has Is4In6() == false and Zone() == "".
func parseEntry(s string) (a netip.Addr, text string, ok bool) {
	if s == "" {
		return netip.Addr{}, "", false
	}
	// Fast path for the common forms "a.b.c.d" and "a.b.c.d:port". Any
	// other input, including near misses, takes the general path below, so
	// the fast path only ever agrees with it.
	if a4, n, ok := parseIPv4Head(s); ok {
		if n == len(s) {
			return netip.AddrFrom4(a4), s, true
		}
		if s[n] == ':' && validPort(s[n+1:]) {
			return netip.AddrFrom4(a4), s[:n], true
		}
	}
	host, bracketed := s, false
	if s[0] == '[' {
		bracketed = true
		if s[len(s)-1] == ']' {
			host = s[1 : len(s)-1] // "[v6]"
		} else {
			// "[v6]:port": the port follows the last colon, which must
			// directly follow the closing bracket.
			i := strings.LastIndexByte(s, ':')
			if i < 2 || s[i-1] != ']' || !validPort(s[i+1:]) {
				return netip.Addr{}, "", false
			}
			host = s[1 : i-1]
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.LastIndexByte(s, ':') == i {
		// Exactly one colon: "v4:port". (A valid IPv6 address has at least
		// two colons before any zone, so this cannot be a bare IPv6.)
		if !validPort(s[i+1:]) {
			return netip.Addr{}, "", false
		}
		host = s[:i]
	}
	// Zero colons: bare IPv4. Two or more outside brackets: bare IPv6.

	text, zone, zoned := strings.Cut(host, "%")
	if zoned && zone == "" {
		return netip.Addr{}, "", false
	}
	a, err := netip.ParseAddr(text)
	if err != nil {
		return netip.Addr{}, "", false
	}
	if (zoned || bracketed) && !a.Is6() {
		// Zones and brackets are IPv6 syntax (netip refuses "1.2.3.4%eth0"
		// and "[1.2.3.4]:80" for the same reason).
		return netip.Addr{}, "", false
	}
	return canonical(a), text, true
}

// parseIPv4Head parses the dotted-quad IPv4 address at the start of s with
// netip.ParseAddr's rules (four decimal fields of one to three digits, each
// at most 255, no leading zeros) and returns it with the number of bytes it
// spans. ok is false when s does not start with one; what follows the
// address (a fifth digit, a port, anything) is the caller's business.
func parseIPv4Head(s string) (a [4]byte, n int, ok bool) {
	for f := 0; f < 4; f++ {
		if f > 0 {
			if n >= len(s) || s[n] != '.' {
				return a, 0, false
			}
			n++
		}
		if n >= len(s) || s[n]-'0' > 9 {
			return a, 0, false
		}
		v := uint(s[n] - '0')
		n++
		if v != 0 { // a leading 0 is the whole field
			for i := 0; i < 2 && n < len(s) && s[n]-'0' <= 9; i++ {
				v = v*10 + uint(s[n]-'0')
				n++
			}
			if v > 255 {
				return a, 0, false
			}
		}
		a[f] = byte(v)
	}
	return a, n, true
}

// canonical returns a unmapped and without zone: the only form in which
// addresses are compared with a trust set or reported (see parseEntry).
func canonical(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}

// nonSource returns what kind of address the canonical address a is when no
// connection can come from it ("unspecified address", "multicast address"
// or "limited broadcast address"), and "" for any other address. The
// resolver refuses such an address as the peer (wrapping [ErrMalformedPeer]) and as
// a header entry (wrapping [ErrMalformedEntry]):
//
//   - unspecified 0.0.0.0 (RFC 1122 §3.2.1.3 (a)) and :: (RFC 4291 §2.5.2)
//     are sent as a source only by a host still learning its own address
//     (DHCP, duplicate address detection), never on a TCP connection;
//   - multicast 224.0.0.0/4 and ff00::/8 name a group, never a sender:
//     RFC 4291 §2.7 forbids it as a source, and RFC 1112 has hosts discard
//     an IPv4 datagram whose source is a group address;
//   - the limited broadcast 255.255.255.255 "MUST NOT be used as a source
//     address" (RFC 1122 §3.2.1.3 (c)).
//
// Other reserved ranges stay addresses: 0.0.0.0/8 and 240.0.0.0/4 are
// assignable on some stacks (Linux accepts both as unicast), and a directed
// broadcast cannot be told from a host address without the subnet's mask.
// a is canonical, so ::ffff:0.0.0.0 and the other mapped forms are caught
// as their IPv4 address; NAT64 and IPv4-compatible embeddings stay IPv6
// (64:ff9b::e000:1 is not multicast), as everywhere in the package.
func nonSource(a netip.Addr) string {
	// Fast path: an IPv4 address whose first byte is 1 to 223 is none of
	// them (every resolution checks the peer and each entry it examines;
	// TestNonSourceFastPath holds it to the switch below).
	if a.Is4() && a.As4()[0]-1 < 223 {
		return ""
	}
	switch {
	case a.IsUnspecified():
		return "unspecified address"
	case a.IsMulticast():
		return "multicast address"
	case a == limitedBroadcast:
		return "limited broadcast address"
	}
	return ""
}

var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// validPort reports whether p is 1 to 5 ASCII digits with value <= 65535.
func validPort(p string) bool {
	if len(p) == 0 || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

// addrText returns the canonical text of a. When text (the form a was read
// from) is already canonical, which is the common case for addresses written
// by proxies, or ends with the canonical text (an IPv4-mapped address such
// as ::ffff:192.0.2.1), a substring of text is returned and nothing is
// allocated.
func addrText(a netip.Addr, text string) string {
	if a.Is4() && strings.IndexByte(text, ':') < 0 {
		// The only IPv4 text parseEntry and parseNode accept, besides the
		// mapped form, is the dotted quad without leading zeros: canonical.
		return text
	}
	var buf [64]byte // longest canonical IPv6 text is 39 bytes
	c := a.AppendTo(buf[:0])
	if len(text) >= len(c) && text[len(text)-len(c):] == string(c) {
		return text[len(text)-len(c):]
	}
	return a.String()
}

// trimOWS removes leading and trailing spaces and horizontal tabs (RFC 9110
// optional whitespace), the only padding allowed around list elements.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// truncate returns at most maxValueLen bytes of s, cut on a UTF-8 rune
// boundary so the result stays valid text when s was. Used for every
// attacker-controlled value the package reports.
func truncate(s string) string {
	if len(s) <= maxValueLen {
		return s
	}
	// Back off over at most UTFMax-1 continuation bytes: a rune cut in
	// half is dropped whole; invalid UTF-8 is cut at the byte limit.
	n := maxValueLen
	for n > maxValueLen-(utf8.UTFMax-1) && !utf8.RuneStart(s[n]) {
		n--
	}
	if !utf8.RuneStart(s[n]) {
		n = maxValueLen
	}
	return s[:n]
}
