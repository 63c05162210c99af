package trustedproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"go4.org/netipx"

	"github.com/ratekey/ratekey/internal/quote"
)

// Named shorthands accepted by [ParseSet] and Rule.From.
// Each names a fixed list of ranges and is used only when listed
// explicitly: no configuration ever trusts one by default. Names are exact
// and lower case.
const (
	// shorthandPrivateRanges is RFC 1918 (10.0.0.0/8, 172.16.0.0/12,
	// 192.168.0.0/16) and RFC 4193 unique local addresses (fc00::/7). Unlike
	// Caddy's private_ranges it holds neither loopback (list
	// shorthandLoopback too) nor only fd00::/8. Trusting it turns every
	// host of those networks into a proxy that can name any client.
	shorthandPrivateRanges = "private_ranges"
	// shorthandLoopback is 127.0.0.0/8 and ::1/128 (RFC 1122 §3.2.1.3,
	// RFC 4291 §2.5.3).
	shorthandLoopback = "loopback"
	// shorthandLinkLocal is 169.254.0.0/16 (RFC 3927) and fe80::/10
	// (RFC 4291 §2.5.6). Zones are dropped before comparison, so fe80::1
	// on any interface matches.
	shorthandLinkLocal = "link_local"
	// shorthandUnix, in Rule.From only, makes the rule
	// accept peers connected over a Unix-domain socket (http.Request
	// RemoteAddr "", "@..." or "/..."). It names no address, so ParseSet
	// refuses it. Without it such peers are an error (errUnixPeer).
	shorthandUnix = "unix"
)

var shorthands = map[string][]netip.Prefix{
	shorthandPrivateRanges: {
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("fc00::/7"),
	},
	shorthandLoopback: {
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("::1/128"),
	},
	shorthandLinkLocal: {
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fe80::/10"),
	},
}

// ParseSet parses a list of trusted-set entries into an immutable
// netipx.IPSet holding canonical addresses only (IPv4 unmapped, no zone),
// the form [Resolver] compares peers and hops in. It is what Rule.From,
// [FileSource] and [URLSource] use, exported so that other address lists
// (an admin allow-list, say) parse the same way.
//
// Entries: a CIDR prefix ("10.0.0.0/8", "2001:db8::/32"; host bits right of
// the length are ignored), a single address ("192.0.2.1", "::1"; a zone is
// dropped), or a shorthand used only when listed: "private_ranges" (RFC
// 1918 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 and RFC 4193 fc00::/7;
// unlike Caddy's, without loopback), "loopback" (127.0.0.0/8, ::1/128;
// RFC 1122 §3.2.1.3, RFC 4291 §2.5.3) or "link_local" (169.254.0.0/16, RFC
// 3927, and fe80::/10, RFC 4291 §2.5.6). Names are exact and lower case.
// IPv4-mapped entries ("::ffff:10.0.0.0/104") also add the IPv4 range they
// map, and an IPv6 prefix overlapping
// ::ffff:0:0/96 adds the IPv4 addresses it covers, so that a set never
// holds an entry that canonical lookups cannot reach. Surrounding spaces,
// host names, zoned prefixes and "unix" (which names Unix-socket peers in
// Rule.From, not addresses) are errors.
//
// ParseSet does not refuse sets covering every address of a family; [New]
// does, unless Config.AllowAll. On error the set is nil and the error is an
// errors.Join of one error per bad entry, each starting with its index and
// value and with no package prefix, so that a caller prefixes the name of
// its own field: `[1] "localhost": not an IP address or CIDR prefix` (the
// value quoted, escaped and cut to 64 bytes). An empty list gives an empty
// set. Safe for concurrent use.
func ParseSet(entries []string) (*netipx.IPSet, error) {
	var b netipx.IPSetBuilder
	var errs []error
	for i, s := range entries {
		ranges, err := parseSetEntry(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("[%d] %s: %v", i, quote.Value(s), err))
			continue
		}
		for _, rg := range ranges {
			b.AddRange(rg)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return b.IPSet()
}

// parseSetEntry parses one ParseSet entry (not "unix") into canonical ranges.
func parseSetEntry(s string) ([]netipx.IPRange, error) {
	if strings.TrimSpace(s) != s {
		// "10.0.0.0/8 " would otherwise read as a bad prefix length.
		return nil, errSurroundingSpace
	}
	if s == shorthandUnix {
		return nil, errors.New(`"unix" names Unix-socket peers, not addresses: list it in a rule's from`)
	}
	if ps, ok := shorthands[s]; ok {
		out := make([]netipx.IPRange, len(ps))
		for i, p := range ps {
			out[i] = netipx.RangeOfPrefix(p)
		}
		return out, nil
	}
	return parseTrusted(s)
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

// parseTrusted parses one CIDR or address entry into the canonical ranges it
// trusts.
//
// Canonicalisation, as for request addresses (see parseEntry): Resolve only
// ever asks the set about unmapped addresses without zone. An entry written
// in mapped form, or an IPv6 prefix overlapping ::ffff:0:0/96, would
// otherwise be partly dead (never matched) while the operator believes it
// trusts those hosts. So the part of an IPv6 entry that lies in the mapped
// range is also added as the IPv4 range it maps. This is also what makes
// "::ffff:0:0/96" (or "::/80") count as "every IPv4 address" for AllowAll.
//
// Its errors are fixed text: netip's would quote the whole entry again,
// past the 64 bytes the caller quotes.
func parseTrusted(s string) ([]netipx.IPRange, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		p, err = netip.ParsePrefix(s)
		if err != nil {
			return nil, prefixError(s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, errNotAddress
		}
		a = a.WithZone("") // a zone is not part of the address
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return canonicalRanges(netipx.RangeOfPrefix(p.Masked())), nil
}

// errSurroundingSpace is the error of an entry with leading or trailing
// space (Unicode White_Space, as strings.TrimSpace): refused, not trimmed,
// as every other malformed entry.
var errSurroundingSpace = errors.New("has leading or trailing space: remove it (entries are not trimmed)")

// errNotAddress is the error of an entry that is neither an address nor a
// prefix (a host name, an empty string, ...).
var errNotAddress = errors.New("not an IP address or CIDR prefix")

// prefixError says, in fixed text, why s (holding a '/') is not a prefix.
func prefixError(s string) error {
	i := strings.LastIndexByte(s, '/')
	a, err := netip.ParseAddr(s[:i])
	switch {
	case err != nil:
		return errNotAddress
	case a.Zone() != "" || strings.Contains(s[i:], "%"):
		return errors.New("not a CIDR prefix: a prefix cannot carry an IPv6 zone")
	case a.Is4():
		return errors.New("not a CIDR prefix: the length must be 0..32 for IPv4")
	}
	return errors.New("not a CIDR prefix: the length must be 0..128 for IPv6")
}

// canonicalRanges returns the ranges that trust what r trusts when looked
// up with canonical (unmapped) addresses: r itself, and the IPv4 range
// mapped by its part inside ::ffff:0:0/96 (only that IPv4 range when r
// lies entirely inside it).
func canonicalRanges(r netipx.IPRange) []netipx.IPRange {
	if !r.From().Is6() {
		return []netipx.IPRange{r}
	}
	from, to := r.From(), r.To()
	if from.Less(mapped.From()) {
		from = mapped.From()
	}
	if mapped.To().Less(to) {
		to = mapped.To()
	}
	if to.Less(from) { // no overlap with the mapped range
		return []netipx.IPRange{r}
	}
	v4 := netipx.IPRangeFrom(from.Unmap(), to.Unmap())
	if from == r.From() && to == r.To() { // entirely mapped: IPv4 only
		return []netipx.IPRange{v4}
	}
	return []netipx.IPRange{r, v4}
}

// canonicalSet adds to b the canonical ranges of every range of s (a set a
// [Source] loaded, written in whatever form its publisher chose).
func canonicalSet(b *netipx.IPSetBuilder, s *netipx.IPSet) {
	for _, r := range s.Ranges() {
		for _, c := range canonicalRanges(r) {
			b.AddRange(c)
		}
	}
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

// setCoversFamily reports whether s contains every IPv4 or every IPv6 address.
func setCoversFamily(s *netipx.IPSet) bool {
	return s.ContainsPrefix(allV4) || s.ContainsPrefix(allV6)
}

// table is the lookup form of a trusted set: the IPSet's ranges as sorted,
// disjoint integer intervals, one slice per family, searched with a
// hand-written binary search. netipx.IPSet.Contains does the same search
// through sort.Search and netip.Addr comparisons; this form is several
// times faster and allocation-free, which is what lets a 2 000-range CDN
// list cost about as much per request as 3 ranges.
type table struct {
	v4 []v4range
	v6 []v6range
}

type v4range struct{ lo, hi uint32 }

type v6range struct{ lo, hi u128 }

// u128 is an IPv6 address as a big-endian 128-bit integer.
type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

func u128Of(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func u32Of(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

// newTable compiles s. IPSet ranges are sorted and disjoint; a range that
// spans families cannot occur (IPRange From and To share a family).
func newTable(s *netipx.IPSet) table {
	var t table
	if s == nil {
		return t
	}
	for _, r := range s.Ranges() {
		if r.From().Is4() {
			t.v4 = append(t.v4, v4range{u32Of(r.From()), u32Of(r.To())})
		} else {
			t.v6 = append(t.v6, v6range{u128Of(r.From()), u128Of(r.To())})
		}
	}
	return t
}

// contains reports whether the canonical address a (unmapped, no zone) is
// in the table. Zoned or mapped addresses must be canonicalised first.
func (t *table) contains(a netip.Addr) bool {
	if a.Is4() {
		x := u32Of(a)
		rs := t.v4
		// Find the first range with lo > x; the one before it is the only
		// candidate.
		i, j := 0, len(rs)
		for i < j {
			h := int(uint(i+j) >> 1)
			if rs[h].lo <= x {
				i = h + 1
			} else {
				j = h
			}
		}
		return i > 0 && x <= rs[i-1].hi
	}
	if !a.Is6() {
		return false
	}
	x := u128Of(a)
	rs := t.v6
	i, j := 0, len(rs)
	for i < j {
		h := int(uint(i+j) >> 1)
		if !x.less(rs[h].lo) {
			i = h + 1
		} else {
			j = h
		}
	}
	return i > 0 && !rs[i-1].hi.less(x)
}
