package trustedproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"golang.org/x/net/http/httpguts"

	"go4.org/netipx"

	"github.com/ratekey/ratekey/internal/quote"
)

// Default network-key prefix lengths, in bits.
const (
	defaultIPv4Prefix = 32 // one key per IPv4 address
	defaultIPv6Prefix = 64 // one key per IPv6 subnet: a host usually owns a whole /64
)

// The list headers. Every other header name configured in a rule is read as
// a single-address header (X-Real-IP, CF-Connecting-IP, True-Client-IP,
// Fly-Client-IP, ...).
const (
	// headerXForwardedFor is the de-facto X-Forwarded-For list: one address
	// per comma-separated element, appended by each proxy.
	headerXForwardedFor = "X-Forwarded-For"
	// headerForwarded is the RFC 7239 list: the for= parameter of each
	// forwarded-element. The same chain written as X-Forwarded-For or as
	// Forwarded resolves to the same client.
	headerForwarded = "Forwarded"
)

// Config describes which peers are trusted proxies and what they forward.
// The zero value trusts nobody and reads no header: every request's client is
// its TCP peer. A Config is only read by [New]; later changes to it (or to
// its slices) do not affect a Resolver already built. The Sources in its
// rules are kept and reloaded by [Resolver.Refresh].
//
// One proxy setup is one rule:
//
//	trustedproxy.Config{Rules: []trustedproxy.Rule{{From: []string{"10.0.0.11", "10.0.0.12"}, Header: "X-Forwarded-For"}}}
//
// The errors of [New] name fields the way a configuration file writes them:
// the Go field Foo is written foo and FooBar foo_bar (IPv4Prefix
// ipv4_prefix, AllowAll allow_all), list elements by index, and a value
// (quoted, escaped, at most 64 bytes) after its path:
// `rules[1].from[2] "10.0.0.0/33": not a CIDR prefix: ...`,
// `rules[0].header: "X Y" is not a valid header name`,
// `ipv4_prefix: 40 out of range 1..32 (0 means 32)`. They carry no package
// prefix, so a caller prefixes the section of its own configuration
// (`trusted_proxies.rules[1].from[2] ...`).
type Config struct {
	// Rules is the ordered list of trust rules. For each request the first
	// rule whose From set (or Sources) contains the TCP peer applies; when
	// none does, the peer is the client and no header is read. Empty
	// trusts nobody.
	Rules []Rule
	// IPv4Prefix is the network-key prefix length, in bits, for IPv4
	// clients: 1..32; 0 means 32 (one key per address).
	IPv4Prefix int
	// IPv6Prefix is the network-key prefix length, in bits, for IPv6
	// clients: 1..128; 0 means 64 (one key per /64: a host usually owns a
	// whole /64).
	IPv6Prefix int
	// AllowAll permits a rule whose set contains every IPv4 or every IPv6
	// address (0.0.0.0/0, ::/0, ::ffff:0:0/96, ::/80, or several entries or
	// a Source whose union covers a family). Refused by default: it lets
	// any client name any address as itself.
	AllowAll bool
	// RejectMissingHeader says what a trusted peer that sent no value in
	// its rule's header gets: false (the default) makes the client the
	// peer, reason "trusted_peer_without_header" (which keeps load balancer health
	// checks working); true fails the resolution with [ErrMissingHeader],
	// same reason. Either way the Derivation reports it, so it can be
	// counted.
	RejectMissingHeader bool
	// RejectAliases says what happens when a trusted peer's request
	// carries a header whose name differs from its rule's header only by
	// case or by '_' for '-' ("X_Forwarded_For", "X-Forwarded_For"): false
	// (the default) ignores it; true fails the resolution with
	// [ErrHeaderAlias] (reason header_alias). Aliases are never read in
	// either mode.
	RejectAliases bool
}

// Rule is one trust rule: "when the TCP peer is in From (or one of
// Sources), read Header, trusting Hops hops". Rules are evaluated in order
// and the first whose set contains the peer wins.
//
// The walk of a list header (X-Forwarded-For, Forwarded), right to left: an
// entry whose address is in the rule's set is a trusted proxy and is
// skipped; every other entry uses up one of the rule's Hops; the entry that
// uses up the last one is the client. So Hops 0 or 1 is the classic walk
// (nginx real_ip_recursive, chi ClientIPFromXFF): the client is the first
// entry not in the set. Hops n >= 2 additionally trusts n-1 proxies whose
// addresses are not listed: with From listing nobody in the chain, the
// client is the n-th entry from the right (Envoy xff_num_trusted_hops = n,
// chi ClientIPFromXFFTrustedProxies(n)); with From listing your own load
// balancers, it is "skip my known ranges, then trust n-1 more hops" (a CDN
// whose ranges you do not maintain). See the package documentation for the
// exact unit, empty elements and chains that run out.
type Rule struct {
	// From lists the peers this rule applies to, and the addresses the
	// walk skips as trusted proxies: CIDR prefixes ("10.0.0.0/8",
	// "2001:db8::/32"), single addresses ("127.0.0.1", "::1"), and the
	// shorthands of [ParseSet] ("private_ranges", "loopback",
	// "link_local"), used only when listed. "unix", in From only, makes
	// the rule accept peers connected over a Unix-domain socket
	// (http.Request.RemoteAddr "", "@..." or "/..."); it names no address,
	// and without it such peers are an error wrapping [ErrMalformedPeer].
	// Parsed as by [ParseSet]: entries are canonicalised (an IPv4-mapped
	// entry trusts the IPv4 addresses it maps, the zone of a single address
	// is dropped, host bits right of a prefix length are ignored);
	// surrounding spaces, host names and zoned prefixes are errors.
	// Trusting whole private ranges turns every LAN client into a "proxy"
	// that can name any client: list the proxies themselves.
	From []string
	// Sources add refreshable sets to From (see [Source],
	// [Resolver.Refresh]). New loads each once and fails if a load fails.
	Sources []Source
	// Header is the forwarding header read from peers matching this rule:
	// "" (read nothing: the peer is the client, reason
	// no_header_configured), "X-Forwarded-For" or "Forwarded" (lists,
	// walked right to left), or the name of a header carrying exactly one
	// address ("X-Real-IP", "CF-Connecting-IP", ...: the last line wins and
	// names the client). An RFC 9110 token, canonicalised with
	// http.CanonicalHeaderKey, so "x-forwarded-for" is the list header.
	Header string
	// Hops is the number of trusted hops, 0..[MaxHops], for list headers
	// only: 0 and 1 mean the same (the first entry not in From is the
	// client); n >= 2 trusts n-1 entries not in From as proxies, by count.
	Hops int
}

// New validates cfg and builds a [Resolver].
//
// Every problem is reported at once: the error is an errors.Join of one error
// per problem, each naming the offending field and value (every malformed
// entry, a refused catch-all range, an invalid header name, Hops out of
// range or on a header that is not a list, a prefix length out of range, a
// Source that failed its first load). Fields are named as described on
// [Config]: "rules[1].from[0]", "rules[1].header", "rules[1].hops",
// "rules[1].sources[0]", "ipv4_prefix", ... On error the Resolver is nil.
//
// New calls Load on every Source once, with context.Background(), before
// returning; a failing or empty load is an error (no rule starts with a
// set it cannot justify). Trusted sets are netipx.IPSet values compiled
// here into a lookup table (O(log n) per lookup without allocation, so
// thousands of CDN ranges cost nothing noticeable per request).
func New(cfg Config) (*Resolver, error) {
	var errs []error
	r := &Resolver{allowAll: cfg.AllowAll}

	for i, rc := range cfg.Rules {
		ru, es := buildRule(rc, fmt.Sprintf("rules[%d]", i), cfg.AllowAll)
		errs = append(errs, es...)
		r.rules = append(r.rules, ru)
	}

	r.v4bits = defaultIPv4Prefix
	if cfg.IPv4Prefix != 0 {
		if cfg.IPv4Prefix < 1 || cfg.IPv4Prefix > 32 {
			errs = append(errs, fmt.Errorf("ipv4_prefix: %d out of range 1..32 (0 means %d)", cfg.IPv4Prefix, defaultIPv4Prefix))
		}
		r.v4bits = cfg.IPv4Prefix
	}
	r.v6bits = defaultIPv6Prefix
	if cfg.IPv6Prefix != 0 {
		if cfg.IPv6Prefix < 1 || cfg.IPv6Prefix > 128 {
			errs = append(errs, fmt.Errorf("ipv6_prefix: %d out of range 1..128 (0 means %d)", cfg.IPv6Prefix, defaultIPv6Prefix))
		}
		r.v6bits = cfg.IPv6Prefix
	}

	r.rejectMissing = cfg.RejectMissingHeader
	r.rejectAliases = cfg.RejectAliases

	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// buildRule validates one rule. prefix is its path, "rules[i]".
func buildRule(rc Rule, prefix string, allowAll bool) (*rule, []error) {
	ru := &rule{hops: max(rc.Hops, 1), sources: append([]Source(nil), rc.Sources...)}
	static, unix, errs := buildFrom(rc.From, prefix+".from", allowAll)
	ru.static, ru.unix = static, unix
	ru.label = prefix + ".sources"

	set := static
	if len(ru.sources) > 0 {
		var err error
		set, err = ru.load(context.Background(), allowAll)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(rc.From) == 0 && len(ru.sources) == 0 {
		errs = append(errs, fmt.Errorf("%s: from and sources are both empty: the rule would match no peer", prefix))
	}
	if set != nil {
		ru.cur.Store(&ruleSet{set: set, tab: newTable(set)})
	}

	if rc.Header != "" {
		h, kind, err := parseHeaderName(rc.Header, prefix+".header")
		if err != nil {
			errs = append(errs, err)
		}
		ru.header, ru.kind = h, kind
	}
	if err := checkHops(rc, ru.kind, prefix); err != nil {
		errs = append(errs, err)
	}
	return ru, errs
}

// buildFrom validates a rule's From (field is its path, "rules[i].from")
// and returns its static trusted set and whether it lists "unix".
func buildFrom(from []string, field string, allowAll bool) (static *netipx.IPSet, unix bool, errs []error) {
	var b netipx.IPSetBuilder
	for i, s := range from {
		if s == shorthandUnix {
			unix = true
			continue
		}
		ranges, err := parseSetEntry(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d] %s: %v", field, i, quote.Value(s), err))
			continue
		}
		if !allowAll && coversFamily(ranges) {
			errs = append(errs, fmt.Errorf("%s[%d] %s: trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it", field, i, quote.Value(s)))
			continue
		}
		for _, rg := range ranges {
			b.AddRange(rg)
		}
	}
	static, err := b.IPSet()
	if err != nil { // unreachable: every range added is valid
		errs = append(errs, fmt.Errorf("%s: %v", field, err))
	}
	if !allowAll && setCoversFamily(static) {
		errs = append(errs, fmt.Errorf("%s: the union of the %d entries trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it", field, len(from)))
	}
	return static, unix, errs
}

// checkHops validates a rule's Hops against its header's kind.
func checkHops(rc Rule, kind headerKind, prefix string) error {
	switch {
	case rc.Hops < 0 || rc.Hops > MaxHops:
		return fmt.Errorf("%s.hops: %d out of range 0..%d", prefix, rc.Hops, MaxHops)
	case rc.Hops > 0 && kind != kindXFF && kind != kindForwarded:
		return fmt.Errorf("%s.hops: %d needs a list header (%s or %s), not %s", prefix, rc.Hops, headerXForwardedFor, headerForwarded, quote.Value(rc.Header))
	}
	return nil
}

// parseHeaderName validates and canonicalises a configured header name.
func parseHeaderName(name, field string) (string, headerKind, error) {
	if !httpguts.ValidHeaderFieldName(name) {
		return "", kindNone, fmt.Errorf("%s: %s is not a valid header name", field, quote.Value(name))
	}
	h := http.CanonicalHeaderKey(name)
	switch h {
	case headerXForwardedFor:
		return h, kindXFF, nil
	case headerForwarded:
		return h, kindForwarded, nil
	}
	return h, kindSingle, nil
}

// load builds the rule's set from its static part and a fresh load of every
// Source. All or nothing: any failing, nil or empty load, or a union that
// covers a family without allowAll, is an error and no set is returned.
func (ru *rule) load(ctx context.Context, allowAll bool) (*netipx.IPSet, error) {
	var b netipx.IPSetBuilder
	if ru.static != nil {
		b.AddSet(ru.static)
	}
	var errs []error
	for i, src := range ru.sources {
		if src == nil {
			errs = append(errs, fmt.Errorf("%s[%d]: nil Source", ru.label, i))
			continue
		}
		s, err := src.Load(ctx)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s[%d]: %w", ru.label, i, err))
		case s == nil || len(s.Ranges()) == 0:
			errs = append(errs, fmt.Errorf("%s[%d]: loaded an empty set (refused: more likely a broken source than a real change)", ru.label, i))
		default:
			canonicalSet(&b, s) // a mapped entry must match the unmapped lookups
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	set, err := b.IPSet()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", ru.label, err)
	}
	if !allowAll && setCoversFamily(set) {
		return nil, fmt.Errorf("%s: the set trusts every IPv4 or every IPv6 address (anyone could name any client); set allow_all to permit it", ru.label)
	}
	return set, nil
}
