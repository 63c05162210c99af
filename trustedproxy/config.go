package trustedproxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"golang.org/x/net/http/httpguts"

	"go4.org/netipx"
)

// Default network-key prefix lengths, in bits.
const (
	DefaultIPv4Prefix = 32 // one key per IPv4 address
	DefaultIPv6Prefix = 64 // one key per IPv6 subnet: a host usually owns a whole /64
)

// HeaderXForwardedFor is the only list header supported by v0. RFC 7239
// Forwarded is refused by [New] until a later version parses its for=
// parameters with the same walk.
const HeaderXForwardedFor = "X-Forwarded-For"

// Config describes which peers are trusted proxies and what they forward.
// The zero value trusts nobody and reads no header: every request's client is
// its TCP peer. A Config is only read by [New]; later changes to it (or to
// its Trusted slice) do not affect a Resolver already built.
type Config struct {
	// Trusted lists the trusted proxies as CIDR prefixes ("10.0.0.0/8",
	// "2001:db8::/32") or single addresses ("127.0.0.1", "::1"). Entries are
	// canonicalised: an IPv4-mapped entry ("::ffff:10.0.0.0/104",
	// "::ffff:10.0.0.1") trusts the IPv4 addresses it maps, the zone of a
	// single address is dropped, host bits right of a prefix length are
	// ignored ("10.1.2.3/8" trusts 10.0.0.0/8). Surrounding spaces, host
	// names and zoned prefixes are errors. Trusting whole private ranges
	// turns every LAN client into a "proxy" that can name any client: list
	// the proxies themselves.
	Trusted []string
	// Header is the forwarding header a trusted peer's value is read from:
	// "" (read nothing), "X-Forwarded-For" (a list, walked right to left) or
	// the name of a header carrying exactly one address, such as "X-Real-IP",
	// "CF-Connecting-IP" or "True-Client-IP". Canonicalised with
	// http.CanonicalHeaderKey, so "x-forwarded-for" is the list header.
	// "Forwarded" (RFC 7239) is refused in v0. The name must be an RFC 9110
	// token.
	Header string
	// IPv4Prefix is the network-key prefix length, in bits, for IPv4
	// clients: 1..32; 0 means DefaultIPv4Prefix (32).
	IPv4Prefix int
	// IPv6Prefix is the network-key prefix length, in bits, for IPv6
	// clients: 1..128; 0 means DefaultIPv6Prefix (64).
	IPv6Prefix int
	// AllowAll permits a trusted set that contains every IPv4 or every IPv6
	// address (0.0.0.0/0, ::/0, ::ffff:0:0/96, ::/80, or several entries
	// whose union covers a family). Refused by default: it lets any client
	// name any address as itself.
	AllowAll bool
}

// New validates cfg and builds an immutable [Resolver].
//
// Every problem is reported at once: the error is an errors.Join of one error
// per problem, each naming the offending field and value (every malformed
// Trusted entry, a refused catch-all range, an unsupported header, a prefix
// length out of range). On error the Resolver is nil. The trusted set is a
// netipx.IPSet built here once (O(log n) containment, so thousands of CDN
// ranges cost nothing per request).
func New(cfg Config) (*Resolver, error) {
	var errs []error
	r := &Resolver{}

	var b netipx.IPSetBuilder
	for i, s := range cfg.Trusted {
		ranges, err := parseTrusted(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("trustedproxy: Trusted[%d] %q: %v", i, s, err))
			continue
		}
		if !cfg.AllowAll && coversFamily(ranges) {
			errs = append(errs, fmt.Errorf("trustedproxy: Trusted[%d] %q trusts every IPv4 or every IPv6 address (anyone could name any client); set AllowAll to permit it", i, s))
			continue
		}
		for _, rg := range ranges {
			b.AddRange(rg)
		}
	}
	set, err := b.IPSet()
	if err != nil { // unreachable: every range added is valid
		errs = append(errs, fmt.Errorf("trustedproxy: building trusted set: %v", err))
	}
	if !cfg.AllowAll && (set.ContainsPrefix(allV4) || set.ContainsPrefix(allV6)) {
		errs = append(errs, fmt.Errorf("trustedproxy: Trusted: the union of the %d entries trusts every IPv4 or every IPv6 address (anyone could name any client); set AllowAll to permit it", len(cfg.Trusted)))
	}
	r.set = set

	if cfg.Header != "" {
		h := http.CanonicalHeaderKey(cfg.Header)
		switch {
		case !httpguts.ValidHeaderFieldName(cfg.Header):
			errs = append(errs, fmt.Errorf("trustedproxy: Header %q is not a valid header name", cfg.Header))
		case h == "Forwarded":
			errs = append(errs, fmt.Errorf("trustedproxy: Header %q (RFC 7239) is not supported yet; use %q or a single-address header", cfg.Header, HeaderXForwardedFor))
		default:
			r.header = h
			r.list = h == HeaderXForwardedFor
		}
	}

	r.v4bits = DefaultIPv4Prefix
	if cfg.IPv4Prefix != 0 {
		if cfg.IPv4Prefix < 1 || cfg.IPv4Prefix > 32 {
			errs = append(errs, fmt.Errorf("trustedproxy: IPv4Prefix %d out of range 1..32 (0 means %d)", cfg.IPv4Prefix, DefaultIPv4Prefix))
		}
		r.v4bits = cfg.IPv4Prefix
	}
	r.v6bits = DefaultIPv6Prefix
	if cfg.IPv6Prefix != 0 {
		if cfg.IPv6Prefix < 1 || cfg.IPv6Prefix > 128 {
			errs = append(errs, fmt.Errorf("trustedproxy: IPv6Prefix %d out of range 1..128 (0 means %d)", cfg.IPv6Prefix, DefaultIPv6Prefix))
		}
		r.v6bits = cfg.IPv6Prefix
	}

	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

var (
	allV4 = netip.MustParsePrefix("0.0.0.0/0")
	allV6 = netip.MustParsePrefix("::/0")
	// mapped is ::ffff:0:0/96, the IPv4-mapped IPv6 addresses.
	mapped = netipx.IPRangeFrom(
		netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff}),
		netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}),
	)
)

// parseTrusted parses one Config.Trusted entry into the canonical ranges it
// trusts.
//
// Canonicalisation, as for request addresses (see parseEntry): Resolve only
// ever asks the set about unmapped addresses without zone. An entry written
// in mapped form, or an IPv6 prefix overlapping ::ffff:0:0/96, would
// otherwise be partly dead (never matched) while the operator believes it
// trusts those hosts. So the part of an IPv6 entry that lies in the mapped
// range is also added as the IPv4 range it maps. This is also what makes
// "::ffff:0:0/96" (or "::/80") count as "every IPv4 address" for AllowAll.
func parseTrusted(s string) ([]netipx.IPRange, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		p, err = netip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, err
		}
		a = a.WithZone("") // a zone is not part of the address
		p = netip.PrefixFrom(a, a.BitLen())
	}
	r := netipx.RangeOfPrefix(p.Masked())
	if !r.From().Is6() {
		return []netipx.IPRange{r}, nil
	}
	from, to := r.From(), r.To()
	if from.Less(mapped.From()) {
		from = mapped.From()
	}
	if mapped.To().Less(to) {
		to = mapped.To()
	}
	if to.Less(from) { // no overlap with the mapped range
		return []netipx.IPRange{r}, nil
	}
	v4 := netipx.IPRangeFrom(from.Unmap(), to.Unmap())
	if from == r.From() && to == r.To() { // entirely mapped: IPv4 only
		return []netipx.IPRange{v4}, nil
	}
	return []netipx.IPRange{r, v4}, nil
}

// coversFamily reports whether the ranges of one entry contain every IPv4 or
// every IPv6 address.
func coversFamily(ranges []netipx.IPRange) bool {
	for _, r := range ranges {
		if r == netipx.RangeOfPrefix(allV4) || r == netipx.RangeOfPrefix(allV6) {
			return true
		}
	}
	return false
}
