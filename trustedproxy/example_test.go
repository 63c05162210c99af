package trustedproxy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go4.org/netipx"

	"github.com/ratekey/ratekey/trustedproxy"
)

// A client that reaches the service directly cannot choose its address by
// forging X-Forwarded-For: the header is read only from trusted proxies, and
// then walked from the right.
func ExampleResolver_Explain() {
	r, err := trustedproxy.New(trustedproxy.Config{
		Rules: []trustedproxy.Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}}, // the load balancers
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("X-Forwarded-For", "1.2.3.4, 10.0.0.1") // forged by the client

	// Direct connection from 203.0.113.9: the forged header is ignored.
	res, _ := r.Explain("203.0.113.9:41000", h, nil)
	fmt.Println(res.Client, res.Network, res.Derivation.Reason)

	// The same forged value behind a trusted load balancer, which appended
	// the address it saw: the walk stops at the first untrusted hop.
	h.Set("X-Forwarded-For", "1.2.3.4, 10.0.0.1, 203.0.113.9")
	res, _ = r.Explain("10.0.0.2:55000", h, nil)
	fmt.Println(res.Client, res.Network, res.Derivation.Reason)
	for _, hop := range res.Derivation.Hops {
		fmt.Println(hop.Position, hop.Value, hop.Verdict)
	}
	// Output:
	// 203.0.113.9 203.0.113.9/32 peer_untrusted
	// 203.0.113.9 203.0.113.9/32 first_untrusted_hop
	// 2 203.0.113.9 client
}

// A mixed topology: a CDN in front of some traffic (it sends the client in
// CF-Connecting-IP), the load balancers in front of the rest (they append to
// X-Forwarded-For), and clients that connect directly. The first rule whose
// From contains the TCP peer decides; when none does, the peer is the client.
func ExampleNew_rules() {
	r, err := trustedproxy.New(trustedproxy.Config{Rules: []trustedproxy.Rule{
		{From: []string{"173.245.48.0/20", "2400:cb00::/32"}, Header: "CF-Connecting-IP"},
		{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"},
	}})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("CF-Connecting-IP", "203.0.113.7")
	h.Set("X-Forwarded-For", "198.51.100.9")

	for _, peer := range []string{"173.245.48.1:443", "10.0.0.2:55000", "192.0.2.44:41000"} {
		res, _ := r.Explain(peer, h, nil)
		fmt.Println(peer, "->", res.Client, "rule", res.Derivation.Rule, res.Derivation.Reason)
	}
	// Output:
	// 173.245.48.1:443 -> 203.0.113.7 rule 0 single_address_header
	// 10.0.0.2:55000 -> 198.51.100.9 rule 1 first_untrusted_hop
	// 192.0.2.44:41000 -> 192.0.2.44 rule -1 peer_untrusted
}

// RFC 7239 Forwarded is walked like X-Forwarded-For: the same chain gives
// the same client. Quoted IPv6 with a port, parameters in any order and
// case, and "unknown" or obfuscated nodes are understood; a node that
// names no address stops the walk with a typed error.
func ExampleResolver_Explain_forwarded() {
	r, err := trustedproxy.New(trustedproxy.Config{
		Rules: []trustedproxy.Rule{{From: []string{"10.0.0.0/8"}, Header: "Forwarded"}},
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("Forwarded", `for=192.0.2.43, For="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.5`)
	res, _ := r.Explain("10.0.0.1:443", h, nil)
	fmt.Println(res.Client, res.Network)
	for _, hop := range res.Derivation.Hops {
		fmt.Println(hop.Position, hop.Value, hop.Verdict)
	}

	h.Set("Forwarded", "for=192.0.2.43, for=_hidden")
	res, err = r.Explain("10.0.0.1:443", h, nil)
	fmt.Println(errors.Is(err, trustedproxy.ErrMalformedEntry), res.Derivation.Reason)
	// Output:
	// 2001:db8:cafe::17 2001:db8:cafe::/64
	// 2 10.0.0.5 trusted
	// 1 "[2001:db8:cafe::17]:4711" client
	// true unknown_node
}

// Hop counting: with Hops n the client is the n-th entry from the right
// that is not in the rule's From. Here the load balancers are listed and
// skipped, and one more hop, a CDN whose ranges we do not keep, is trusted
// by count: "skip my ranges, then trust one more hop".
func ExampleResolver_Explain_hops() {
	r, err := trustedproxy.New(trustedproxy.Config{Rules: []trustedproxy.Rule{
		{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For", Hops: 2},
	}})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	// forged by the client, then appended by the CDN edge, then by our inner load balancer
	h.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 198.51.100.20, 10.0.0.7")
	res, _ := r.Explain("10.0.0.1:443", h, nil)
	fmt.Println(res.Client, res.Derivation.Reason)
	for _, hop := range res.Derivation.Hops {
		fmt.Println(hop.Position, hop.Address, hop.Verdict)
	}
	// Output:
	// 203.0.113.7 hop_count
	// 3 10.0.0.7 trusted
	// 2 198.51.100.20 counted
	// 1 203.0.113.7 client
}

// Resolve is the allocation-free fast path when only the key matters.
func ExampleResolver_Resolve() {
	r, err := trustedproxy.New(trustedproxy.Config{
		Rules:      []trustedproxy.Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}},
		IPv6Prefix: 56,
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{"X-Forwarded-For": {"[2001:db8:1:2ff::9]:51000, 10.0.0.3"}}
	res, err := r.Resolve("10.0.0.1:443", h)
	fmt.Println(res.Client, res.Network, res.Derivation.Reason, err)
	// Output:
	// 2001:db8:1:2ff::9 2001:db8:1:200::/56 first_untrusted_hop <nil>
}

// ParseSet reads CIDRs, single addresses and the named shorthands into the
// canonical form the resolver compares in (mapped entries unmapped, zones
// dropped).
func ExampleParseSet() {
	set, err := trustedproxy.ParseSet([]string{"loopback", "::ffff:192.0.2.0/120", "fe80::1%eth0"})
	if err != nil {
		panic(err)
	}
	fmt.Println(set.Prefixes())
	_, err = trustedproxy.ParseSet([]string{"10.0.0.0/8", "localhost"})
	fmt.Println(err)
	// Output:
	// [127.0.0.0/8 192.0.2.0/24 ::1/128 fe80::1/128]
	// [1] "localhost": not an IP address or CIDR prefix
}

// A rule's Sources are reloaded by Refresh (from a timer, a signal, or a
// test); a failing load keeps the last good set and never fails a request.
func ExampleResolver_Refresh() {
	ranges := []string{"192.0.2.0/24"}
	var fail bool
	src := trustedproxy.SourceFunc(func(context.Context) (*netipx.IPSet, error) {
		if fail {
			return nil, errors.New("upstream unavailable")
		}
		return trustedproxy.ParseSet(ranges)
	})
	r, err := trustedproxy.New(trustedproxy.Config{Rules: []trustedproxy.Rule{
		{Sources: []trustedproxy.Source{src}, Header: "X-Forwarded-For"},
	}})
	if err != nil {
		panic(err)
	}
	h := http.Header{"X-Forwarded-For": {"203.0.113.7"}}
	show := func() {
		a, _ := r.Resolve("192.0.2.10:443", h)
		b, _ := r.Resolve("198.51.100.10:443", h)
		fmt.Println(a.Client, b.Client)
	}
	show()

	ranges = []string{"198.51.100.0/24"}
	fmt.Println(r.Refresh(context.Background()))
	show()

	fail = true
	fmt.Println(r.Refresh(context.Background()))
	show()
	// Output:
	// 203.0.113.7 198.51.100.10
	// <nil>
	// 192.0.2.10 203.0.113.7
	// rules[0].sources[0]: upstream unavailable
	// 192.0.2.10 203.0.113.7
}
