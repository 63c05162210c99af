package bench

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
)

// reserved is address space no CDN range list contains: private, shared,
// loopback, link-local, documentation, benchmarking, multicast, reserved,
// 6to4, Teredo. Generated prefixes and client addresses avoid it.
var reserved = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
		"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/3",
		"2001::/32", "2001:db8::/32", "2002::/16", "3fff::/20",
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

func overlapsAny(p netip.Prefix, ps []netip.Prefix) bool {
	for _, q := range ps {
		if p.Overlaps(q) {
			return true
		}
	}
	return false
}

// trustList2000 is 2 000 disjoint, non-adjacent public prefixes, generated
// deterministically (seeded PCG), shaped like a large CDN or cloud range
// list: 1 400 IPv4 prefixes of /16 to /24 and 600 IPv6 prefixes of /29 to
// /48 in 2000::/3, in generation (random) order. Non-adjacent: no two can
// merge into one range, so the trust set really holds 2 000 ranges.
var trustList2000 = sync.OnceValue(func() []netip.Prefix {
	r := rand.New(rand.NewPCG(2000, 0xc1d))
	var out []netip.Prefix
	ok := func(p netip.Prefix) bool {
		if overlapsAny(p, reserved) {
			return false
		}
		for _, q := range out {
			// Overlapping, or adjacent (they would merge): compare the
			// prefixes widened by one bit.
			if p.Overlaps(q) || widen(p).Overlaps(widen(q)) {
				return false
			}
		}
		return true
	}
	for len(out) < 1400 {
		var a [4]byte
		v := r.Uint32()
		a[0], a[1], a[2], a[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
		p := netip.PrefixFrom(netip.AddrFrom4(a), 16+r.IntN(9)).Masked()
		if ok(p) {
			out = append(out, p)
		}
	}
	for len(out) < 2000 {
		var a [16]byte
		hi := r.Uint64()
		a[0] = 0x20 | byte(hi>>56)&0x1f // 2000::/3
		for i := 1; i < 8; i++ {
			a[i] = byte(hi >> (56 - 8*i))
		}
		p := netip.PrefixFrom(netip.AddrFrom16(a), 29+r.IntN(20)).Masked()
		if ok(p) {
			out = append(out, p)
		}
	}
	return out
})

func widen(p netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(p.Addr(), p.Bits()-1).Masked()
}

// trustList3 is three of them: two IPv4 and one IPv6, a small deployment
// (two load-balancer subnets and one IPv6 range).
func trustList3() []netip.Prefix {
	all := trustList2000()
	return []netip.Prefix{all[0], all[1], all[1400]}
}

// randomIn returns a random address inside p.
func randomIn(r *rand.Rand, p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		b[i] ^= byte(r.Uint32())
	}
	a, _ := netip.AddrFromSlice(b)
	// Keep the first p.Bits() bits of the prefix, the rest from a.
	pb := p.Addr().AsSlice()
	ab := a.AsSlice()
	for i := range ab {
		keep := min(max(p.Bits()-8*i, 0), 8)
		mask := byte(0xff << (8 - keep))
		if keep == 0 {
			mask = 0
		}
		ab[i] = pb[i]&mask | ab[i]&^mask
	}
	out, _ := netip.AddrFromSlice(ab)
	return out
}

// TestTrustList2000 pins the generated list: 2 000 prefixes, pairwise
// disjoint, none reserved, and randomIn stays inside.
func TestTrustList2000(t *testing.T) {
	ps := trustList2000()
	if len(ps) != 2000 {
		t.Fatalf("%d prefixes", len(ps))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i, p := range ps {
		if overlapsAny(p, reserved) || overlapsAny(p, ps[i+1:]) {
			t.Fatalf("%v overlaps", p)
		}
		for range 4 {
			if a := randomIn(r, p); !p.Contains(a) {
				t.Fatalf("%v not in %v", a, p)
			}
		}
	}
}
