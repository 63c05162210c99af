package trustedproxy

import (
	"errors"
	"net/http"
	"net/netip"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// This file holds the slow, obviously correct reference resolver for rules,
// hop counts and RFC 7239 Forwarded, and the fuzz targets that hold the
// real resolver to it.
//
// The reference reads every header forward, splits with strings.Split, and
// parses Forwarded elements with regular expressions transcribed from the
// ABNF. It examines the whole header, so it is compared with the real
// resolver only where both must agree: always for X-Forwarded-For and
// single-address headers, and for Forwarded when every element of every
// line is well-formed (the real resolver never looks left of the client,
// so it may succeed where the reference finds a malformed prefix).

type refRule struct {
	prefixes []netip.Prefix // canonical
	unix     bool
	header   string // canonical; "" for none
	hops     int    // >= 1
}

type refPolicy struct {
	rules         []refRule
	rejectMissing bool
}

// refResolved is the reference's answer.
type refResolved struct {
	client netip.Addr
	reason string
	rule   int
	err    error // sentinel
	pos    int   // position of the chosen or failing entry, -1 for none
	// wellFormed is false when a Forwarded header has a malformed element
	// anywhere (the comparison is then skipped).
	wellFormed bool
}

func (p refPolicy) resolve(peer string, h http.Header) refResolved {
	out := refResolved{rule: -1, pos: -1, wellFormed: true}
	unix := peer == "" || peer[0] == '@' || peer[0] == '/'
	p0, ok := refParse(peer)
	if unix {
		ok = false
	}
	if !ok && !unix {
		out.reason, out.err = reasonMalformedPeer, ErrMalformedPeer
		return out
	}
	if ok && refNonSource(p0) { // before any rule: trust cannot make it a sender
		out.reason, out.err = reasonMalformedPeer, errNonSourcePeer
		return out
	}
	var ru *refRule
	for i := range p.rules {
		r := &p.rules[i]
		if unix && r.unix {
			ru, out.rule = r, i
			break
		}
		if !unix && refIn(r.prefixes, p0) {
			ru, out.rule = r, i
			break
		}
	}
	if ru == nil {
		if unix {
			out.reason, out.err = reasonUnixPeerUntrusted, errUnixPeer
			return out
		}
		out.client, out.reason = p0, reasonPeerUntrusted
		return out
	}
	peerResult := func(reason string) refResolved {
		out.reason = reason
		if unix {
			out.err = errUnixPeer
		} else {
			out.client = p0
		}
		return out
	}
	if ru.header == "" {
		return peerResult(reasonNoHeaderConfigured)
	}
	lines := h[ru.header]
	var nonBlank []string
	for _, l := range lines {
		if strings.Trim(l, " \t") != "" {
			nonBlank = append(nonBlank, l)
		}
	}
	if len(nonBlank) == 0 {
		if p.rejectMissing {
			out.reason, out.err = reasonHeaderAbsent, ErrMissingHeader
			return out
		}
		return peerResult(reasonHeaderAbsent)
	}

	type entry struct {
		addr netip.Addr
		kind nodeKind
	}
	var entries []entry
	switch ru.header {
	case headerXForwardedFor:
		for _, e := range strings.Split(strings.Join(nonBlank, ","), ",") {
			e = strings.Trim(e, " \t")
			a, ok := refParse(e)
			switch {
			case ok:
				entries = append(entries, entry{a, nodeAddr})
			case refUnknown(e):
				entries = append(entries, entry{kind: nodeUnknown})
			default:
				entries = append(entries, entry{kind: nodeMalformed})
			}
		}
	case headerForwarded:
		for _, l := range nonBlank {
			elems, ok := refSplitForwarded(l)
			if !ok {
				out.wellFormed = false
				return out
			}
			for _, e := range elems {
				a, kind, ok := refForwardedElement(strings.Trim(e, " \t"))
				if !ok {
					out.wellFormed = false
				}
				entries = append(entries, entry{a, kind})
			}
		}
	default: // single-address header: the last line
		last := len(lines) - 1
		v := strings.Trim(lines[last], " \t")
		a, ok := refParse(v)
		out.pos = last
		switch {
		case ok && !strings.Contains(v, ",") && refNonSource(a):
			out.reason, out.err = reasonMalformedEntry, errNonSourceEntry
		case ok && !strings.Contains(v, ","):
			out.client, out.reason = a, reasonSingleAddressHeader
		case !strings.Contains(v, ",") && refUnknown(v):
			out.reason, out.err = reasonUnknownNode, errUnknownNode
		default:
			out.reason, out.err = reasonMalformedEntry, ErrMalformedEntry
		}
		return out
	}

	budget, examined := ru.hops, 0
	for i := len(entries) - 1; i >= 0; i-- {
		if examined == MaxHops {
			out.reason, out.err, out.pos = reasonChainTooLong, ErrChainTooLong, i
			return out
		}
		examined++
		e := entries[i]
		switch e.kind {
		case nodeMalformed:
			out.reason, out.err, out.pos = reasonMalformedEntry, ErrMalformedEntry, i
			return out
		case nodeUnknown:
			out.reason, out.err, out.pos = reasonUnknownNode, errUnknownNode, i
			return out
		}
		if refNonSource(e.addr) { // before the trusted set
			out.reason, out.err, out.pos = reasonMalformedEntry, errNonSourceEntry, i
			return out
		}
		if refIn(ru.prefixes, e.addr) {
			continue
		}
		budget--
		if budget == 0 {
			out.client, out.pos = e.addr, i
			out.reason = reasonFirstUntrustedHop
			if ru.hops > 1 {
				out.reason = reasonHopCount
			}
			return out
		}
	}
	return peerResult(reasonAllHopsTrusted)
}

func refIn(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refSplitForwarded splits one Forwarded line into elements reading
// forward; ok is false when a quoted string is left open.
func refSplitForwarded(l string) ([]string, bool) {
	var elems []string
	start, inQuote := 0, false
	for i := 0; i < len(l); i++ {
		switch c := l[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			elems = append(elems, l[start:i])
			start = i + 1
		}
	}
	return append(elems, l[start:]), !inQuote
}

// The RFC 7239 grammar as regular expressions (ASCII input only: Go's
// regexp reads bytes >= 0x80 as runes, so non-ASCII input is compared by
// the invariants alone).
const (
	reToken  = "[!#$%&'*+.^_`|~0-9A-Za-z-]+"
	reQuoted = `"(?:[\t \x21\x23-\x5b\x5d-\x7e]|\\[\t \x21-\x7e])*"`
	rePair   = "(" + reToken + ")=(" + reToken + "|" + reQuoted + ")"
)

var (
	refElementRE    = regexp.MustCompile("^(?:" + rePair + ")?(?:;(?:" + rePair + ")?)*$")
	refPairRE       = regexp.MustCompile(rePair)
	refQuotedPairRE = regexp.MustCompile(`\\(.)`)
	refNodeRE       = regexp.MustCompile(`^(?:([0-9.]+)|\[([0-9A-Fa-f:.]+)\]|((?i:unknown))|(_[A-Za-z0-9._-]+))(?::([0-9]{1,5}|_[A-Za-z0-9._-]+))?$`)
)

// refForwardedElement parses one element: the for node, or ok false when
// the element is not well-formed (syntax, repeats, no for).
func refForwardedElement(e string) (netip.Addr, nodeKind, bool) {
	if !refElementRE.MatchString(e) {
		return netip.Addr{}, nodeMalformed, false
	}
	seen := map[string]bool{}
	var forValue string
	found := false
	for _, m := range refPairRE.FindAllStringSubmatch(e, -1) {
		name := strings.ToLower(m[1])
		if seen[name] && (name == "for" || name == "by" || name == "host" || name == "proto") {
			return netip.Addr{}, nodeMalformed, false
		}
		seen[name] = true
		if name == "for" {
			forValue, found = m[2], true
		}
	}
	if !found {
		return netip.Addr{}, nodeMalformed, false
	}
	node := forValue
	if strings.HasPrefix(node, `"`) {
		node = refQuotedPairRE.ReplaceAllString(node[1:len(node)-1], "$1")
		if len(node) > maxNodeLen && strings.Contains(forValue, `\`) {
			return netip.Addr{}, nodeMalformed, true
		}
	}
	m := refNodeRE.FindStringSubmatch(node)
	if m == nil {
		return netip.Addr{}, nodeMalformed, true
	}
	if p := m[5]; p != "" && p[0] != '_' {
		if n, _ := strconv.Atoi(p); n > 65535 {
			return netip.Addr{}, nodeMalformed, true
		}
	}
	switch {
	case m[3] != "" || m[4] != "":
		return netip.Addr{}, nodeUnknown, true
	case m[1] != "":
		a, err := netip.ParseAddr(m[1])
		if err != nil || !a.Is4() {
			return netip.Addr{}, nodeMalformed, true
		}
		return a, nodeAddr, true
	default:
		a, err := netip.ParseAddr(m[2])
		if err != nil || !a.Is6() {
			return netip.Addr{}, nodeMalformed, true
		}
		return a.Unmap(), nodeAddr, true
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// The fuzzed policies. Each mode is one Config and its reference.
var fuzzRulesModes = []struct {
	cfg Config
	ref refPolicy
}{
	{
		Config{Rules: []Rule{{From: fuzzTrusted, Header: "X-Forwarded-For", Hops: 2}}},
		refPolicy{rules: []refRule{{prefixes: fuzzTrustedCanonical, header: headerXForwardedFor, hops: 2}}},
	},
	{
		Config{Rules: []Rule{{From: fuzzTrusted, Header: "Forwarded"}}},
		refPolicy{rules: []refRule{{prefixes: fuzzTrustedCanonical, header: headerForwarded, hops: 1}}},
	},
	{
		Config{Rules: []Rule{{From: fuzzTrusted, Header: "Forwarded", Hops: 3}}, RejectMissingHeader: true},
		refPolicy{rules: []refRule{{prefixes: fuzzTrustedCanonical, header: headerForwarded, hops: 3}}, rejectMissing: true},
	},
	{
		Config{Rules: []Rule{
			{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For", Hops: 2},
			{From: []string{"2001:db8::/32", "127.0.0.1"}, Header: "Forwarded"},
			{From: []string{"unix", "fe80::/10"}, Header: "X-Real-IP"},
			{From: []string{"192.168.0.0/16"}},
		}},
		refPolicy{rules: []refRule{
			{prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, header: headerXForwardedFor, hops: 2},
			{prefixes: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("127.0.0.1/32")}, header: headerForwarded, hops: 1},
			{prefixes: []netip.Prefix{netip.MustParsePrefix("fe80::/10")}, unix: true, header: "X-Real-Ip", hops: 1},
			{prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}, hops: 1},
		}},
	},
	{
		Config{Rules: []Rule{{From: []string{"unix", "10.0.0.0/8"}, Header: "Forwarded", Hops: 2}}},
		refPolicy{rules: []refRule{{prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, unix: true, header: headerForwarded, hops: 2}}},
	},
}

// FuzzRules holds Resolve to the reference over rules, hop counts,
// Forwarded and single-address headers, and checks the invariants:
//   - no panic;
//   - agreement with refPolicy.resolve on client, reason, rule, error
//     sentinel and the position of the chosen or failing entry (for
//     Forwarded: when the whole header is well-formed ASCII);
//   - the client of a walk (first_untrusted_hop, hop_count) is never in the
//     matched rule's trusted set; only the peer, a single-address header
//     value, or a walk that ran out may be trusted;
//   - the client round-trips through its text form (netip.ParseAddr of
//     Client.String(), netip.ParsePrefix of Network.String()), is
//     canonical, and Network is masked and contains it;
//   - Resolve and Explain(buf) agree with Explain(nil).
//
// Inputs: peer, header value (lines separated by '\n'; the header is the
// one each rule of the mode reads), mode.
func FuzzRules(f *testing.F) {
	for _, s := range []struct {
		peer, value string
		mode        byte
	}{
		{"10.0.0.1:1", "6.6.6.6, 203.0.113.7, 192.0.2.10", 0},
		{"10.0.0.1:1", `for=203.0.113.7;proto=https, for="[2001:db8:cafe::17]:4711"`, 1},
		{"10.0.0.1:1", `for=a;ext="x,\"y", FOR=unknown, for=_obf, for=10.0.0.2`, 2},
		{"[2001:db8::1]:443", "for=203.0.113.7\nfor=127.0.0.1", 3},
		{"@", "203.0.113.7", 3},
		{"", `for=203.0.113.7, for="192.0.2.1:_p"`, 4},
		{"10.0.0.1:1", "for=1.2.3.4;for=5.6.7.8", 1},
		{"10.0.0.1:1", " \n\t", 2},
		{"192.168.1.1:1", "1.2.3.4", 3},
	} {
		f.Add(s.peer, s.value, s.mode)
	}
	resolvers := make([]*Resolver, len(fuzzRulesModes))
	for i, m := range fuzzRulesModes {
		resolvers[i] = mustNew(f, m.cfg)
	}
	f.Fuzz(func(t *testing.T, peer, value string, mode byte) {
		m := int(mode) % len(fuzzRulesModes)
		r, ref := resolvers[m], fuzzRulesModes[m].ref
		lines := strings.Split(value, "\n")
		h := http.Header{}
		if value != "" {
			for _, rr := range ref.rules {
				if rr.header != "" {
					h[rr.header] = lines
				}
			}
		}
		res, err := r.Explain(peer, h, nil)
		d := res.Derivation
		want := ref.resolve(peer, h)
		compare := want.wellFormed && isASCII(value)
		if compare {
			if errorName(err) != errorName(want.err) || res.Client != want.client || d.Reason != want.reason || d.Rule != want.rule {
				t.Fatalf("Resolve(%q, %q) = %v %q rule %d err %v; reference %v %q rule %d err %v",
					peer, lines, res.Client, d.Reason, d.Rule, err, want.client, want.reason, want.rule, want.err)
			}
			var ce *ChainError
			if errors.As(err, &ce) && ce.Position != want.pos {
				t.Fatalf("ChainError position %d, reference %d (%v)", ce.Position, want.pos, err)
			}
			if d.Chosen >= 0 && d.Hops[d.Chosen].Position != want.pos {
				t.Fatalf("chosen position %d, reference %d", d.Hops[d.Chosen].Position, want.pos)
			}
		}
		checkInvariants(t, r, peer, h, res, err)
	})
}

// checkInvariants asserts the properties every resolution has.
func checkInvariants(t *testing.T, r *Resolver, peer string, h http.Header, res Result, err error) {
	t.Helper()
	d := res.Derivation
	res2, err2 := r.Resolve(peer, h)
	if want := withoutHops(res); !reflect.DeepEqual(res2, want) || errorName(err2) != errorName(err) {
		t.Fatalf("Resolve %+v %v; Explain without its hops %+v %v", res2, err2, want, err)
	}
	var buf [MaxHops]Hop
	res3, err3 := r.Explain(peer, h, buf[:0])
	if res3.Client != res.Client || res3.Derivation.Reason != d.Reason || len(res3.Derivation.Hops) != len(d.Hops) || errorName(err3) != errorName(err) {
		t.Fatalf("Explain(buf) %+v %v; Explain %+v %v", res3, err3, res, err)
	}
	if len(d.Peer) > maxValueLen || len(d.Hops) > MaxHops {
		t.Fatalf("derivation too big: peer %d bytes, %d hops", len(d.Peer), len(d.Hops))
	}
	for i, hop := range d.Hops {
		if len(hop.Value) > maxValueLen {
			t.Fatalf("hop value of %d bytes", len(hop.Value))
		}
		if i > 0 && hop.Position >= d.Hops[i-1].Position {
			t.Fatalf("hops out of walk order: %+v", d.Hops)
		}
		if (hop.Verdict == verdictMalformed || hop.Verdict == verdictUnknown) != (hop.Address == "") {
			t.Fatalf("hop %+v: address and verdict disagree", hop)
		}
	}
	if err != nil {
		if res.Client.IsValid() || res.Network.IsValid() || d.Chosen != -1 || d.Error != err.Error() {
			t.Fatalf("error result %+v", res)
		}
		return
	}
	c := res.Client
	if !c.IsValid() || c.Is4In6() || c.Zone() != "" {
		t.Fatalf("client %v not canonical", c)
	}
	if refNonSource(c) {
		t.Fatalf("client %v can never be a source", c)
	}
	if back, perr := netip.ParseAddr(c.String()); perr != nil || back != c {
		t.Fatalf("client %v does not round-trip through %q", c, c.String())
	}
	if back, perr := netip.ParsePrefix(res.Network.String()); perr != nil || back != res.Network || !res.Network.Contains(c) || res.Network != res.Network.Masked() {
		t.Fatalf("network %v for client %v", res.Network, c)
	}
	switch d.Reason {
	case reasonFirstUntrustedHop, reasonHopCount:
		if set := r.trustedSet(d.Rule); set == nil || set.Contains(c) {
			t.Fatalf("walk chose %v, which rule %d trusts", c, d.Rule)
		}
		if d.Chosen != len(d.Hops)-1 || d.Hops[d.Chosen].Verdict != verdictClient || d.Hops[d.Chosen].Address != c.String() {
			t.Fatalf("chosen hop inconsistent: %+v", d)
		}
	case reasonPeerUntrusted:
		if d.PeerTrusted || d.Header != "" || d.Hops != nil || r.trusts(c) {
			t.Fatalf("untrusted peer, yet %+v", d)
		}
	case reasonSingleAddressHeader:
	default: // the client is the trusted peer
		if !d.PeerTrusted || d.Chosen != -1 || d.Peer != c.String() {
			t.Fatalf("reason %q, client %v, derivation %+v", d.Reason, c, d)
		}
	}
}

// FuzzForwardedXFF checks that one chain written as X-Forwarded-For and as
// Forwarded resolves alike: same client, network, reason, error sentinel,
// positions and verdicts. The X-Forwarded-For lines are the input; each
// entry becomes a for= element, decorated (by the bits of deco) with other
// parameters before or after for, upper-case parameter names and empty
// pairs, none of which may change the outcome. Entries with no Forwarded
// equivalent (zoned IPv6) skip the input.
func FuzzForwardedXFF(f *testing.F) {
	f.Add("203.0.113.7, 10.0.0.2", byte(0), byte(0))
	f.Add("[2001:db8::7]:443, 2001:db8::2\n10.0.0.3:80", byte(1), byte(7))
	f.Add("6.6.6.6,, 203.0.113.7, unknown, ::ffff:10.0.0.9", byte(2), byte(3))
	f.Add("_obf, 192.0.2.1\n \n127.0.0.1", byte(3), byte(5))
	f.Add("garbage x, 1.2.3.4:_x, 10.0.0.2", byte(0), byte(6))
	pairs := make([][2]*Resolver, 4)
	for i, hops := range []int{1, 2, 3, MaxHops} {
		pairs[i] = [2]*Resolver{
			mustNew(f, Config{Rules: []Rule{{From: fuzzTrusted, Header: headerXForwardedFor, Hops: hops}}}),
			mustNew(f, Config{Rules: []Rule{{From: fuzzTrusted, Header: headerForwarded, Hops: hops}}}),
		}
	}
	f.Fuzz(func(t *testing.T, value string, mode, deco byte) {
		lines := strings.Split(value, "\n")
		fl, ok := xffLinesToForwarded(lines)
		if !ok {
			return
		}
		for i, l := range fl {
			fl[i] = decorate(l, deco)
		}
		p := pairs[int(mode)%len(pairs)]
		ox := outcomeOf(p[0], "10.0.0.1:1", http.Header{headerXForwardedFor: lines})
		of := outcomeOf(p[1], "10.0.0.1:1", http.Header{headerForwarded: fl})
		if ox.Client != of.Client || ox.Network != of.Network || ox.Reason != of.Reason || ox.Err != of.Err || ox.ErrPos != of.ErrPos ||
			strings.Join(ox.Hops, "|") != strings.Join(of.Hops, "|") {
			t.Fatalf("X-Forwarded-For %q: %+v\nForwarded %q: %+v", lines, ox, fl, of)
		}
	})
}

// decorate adds parameters that must not change a Forwarded element's
// meaning: bit 0 proto before for, bit 1 by after for, bit 2 upper-case
// FOR, bit 3 empty pairs. Empty elements stay empty.
func decorate(line string, deco byte) string {
	if trimOWS(line) == "" {
		return line
	}
	elems := strings.Split(line, ", ") // xffLinesToForwarded's own joints; quoted nodes hold no ", "
	for i, e := range elems {
		if !strings.HasPrefix(e, "for=") {
			continue
		}
		if deco&4 != 0 {
			e = "FOR" + e[3:]
		}
		if deco&1 != 0 {
			e = "proto=https;" + e
		}
		if deco&2 != 0 {
			e += `;by="[2001:db8::1]:80"`
		}
		if deco&8 != 0 {
			e = ";" + e + ";;"
		}
		elems[i] = e
	}
	return strings.Join(elems, ", ")
}
