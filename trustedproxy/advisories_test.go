package trustedproxy

import (
	"errors"
	"net/http"
	"net/netip"
	"reflect"
	"testing"
)

// Regression tests named after the advisories and issues of other
// resolvers. Each states, in its first comment line, what it pins.

// allHeaderConfigs is every way a rule can read a header, for tests that
// must hold whatever the operator configured.
var allHeaderConfigs = []Config{
	{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}}},
	{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "Forwarded"}}},
	{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Real-IP"}}},
	{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "True-Client-IP"}}},
	{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For", Hops: 3}}},
	{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "Forwarded", Hops: 2}}},
}

// forgedHeaders is what chi RealIP read, all forged by the client.
func forgedHeaders() http.Header {
	return http.Header{
		"True-Client-Ip":  {"10.0.0.66"},
		"X-Real-Ip":       {"10.0.0.67"},
		"X-Forwarded-For": {"10.0.0.68, 10.0.0.69"},
		"Forwarded":       {"for=10.0.0.70, for=10.0.0.71"},
	}
}

// TestGHSA_3fxj_6jh8_hvhx pins: a client connecting directly cannot set its
// address with True-Client-IP, X-Real-IP, X-Forwarded-For or Forwarded
// (chi RealIP believed them from anyone), whatever header is configured.
func TestGHSA_3fxj_6jh8_hvhx(t *testing.T) {
	for _, cfg := range allHeaderConfigs {
		r := mustNew(t, cfg)
		res, err := r.Explain("203.0.113.9:41000", forgedHeaders(), nil)
		if err != nil || res.Client != netip.MustParseAddr("203.0.113.9") || res.Derivation.PeerTrusted || res.Derivation.Header != "" || res.Derivation.Hops != nil {
			t.Errorf("%+v: direct client resolved to %+v, %v", cfg, res, err)
		}
	}
}

// TestGHSA_rjr7_jggh_pgcp pins: behind a trusted proxy the leftmost
// X-Forwarded-For entry, which the client writes, is never the client
// unless every entry right of it is trusted (chi RealIP took the leftmost).
func TestGHSA_rjr7_jggh_pgcp(t *testing.T) {
	r := mustNew(t, cfgXFF10)
	// The advisory's proof of concept: the client sends "192.0.2.2", the
	// proxy appends the real client 192.0.2.1.
	res, err := r.Explain("10.0.0.1:80", xff("192.0.2.2, 192.0.2.1"), nil)
	if err != nil || res.Client != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("got %v, %v; want the appended 192.0.2.1", res.Client, err)
	}
}

// TestGHSA_9g5q_2w5x_hmxf pins: the peer gate uses RemoteAddr itself, and
// Resolve rewrites nothing (chi RealIP overwrote r.RemoteAddr from
// X-Forwarded-For, so later checks trusted a forged address): naming a
// trusted proxy in the header does not make a direct client trusted.
func TestGHSA_9g5q_2w5x_hmxf(t *testing.T) {
	r := mustNew(t, cfgXFF10)
	h := xff("10.0.0.1")
	before := h.Clone()
	res, err := r.Explain("203.0.113.9:1", h, nil)
	if err != nil || res.Client != netip.MustParseAddr("203.0.113.9") || res.Derivation.PeerTrusted || res.Derivation.Peer != "203.0.113.9" {
		t.Errorf("got %+v, %v", res, err)
	}
	if !reflect.DeepEqual(h, before) {
		t.Error("Resolve modified the header")
	}
}

// TestCVE_2020_28483 pins: nothing is trusted by default, and trusting
// everyone must be asked for (gin trusted every proxy by default, so
// X-Forwarded-For chose ClientIP for direct clients).
func TestCVE_2020_28483(t *testing.T) {
	for name, r := range map[string]*Resolver{"zero Config": mustNew(t, Config{}), "nil": nil, "zero value": {}, "header, peer untrusted": mustNew(t, Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"}}})} {
		res, err := r.Explain("198.51.100.7:1", xff("1.2.3.4"), nil)
		if err != nil || res.Client != netip.MustParseAddr("198.51.100.7") || res.Derivation.Reason != reasonPeerUntrusted {
			t.Errorf("%s: got %+v, %v", name, res, err)
		}
	}
	for _, all := range []string{"0.0.0.0/0", "::/0", "::ffff:0:0/96"} {
		if _, err := New(Config{Rules: []Rule{{From: []string{all}, Header: "X-Forwarded-For"}}}); err == nil {
			t.Errorf("%s accepted without AllowAll", all)
		}
		if _, err := New(Config{Rules: []Rule{{From: []string{all}, Header: "X-Forwarded-For"}}}); err == nil {
			t.Errorf("rule %s accepted without AllowAll", all)
		}
	}
}

// TestRealclientipGoIssue4 pins: a remote address outside the trusted set
// is returned as the client, never an empty result or a header value
// (realclientip-go's RightmostTrustedRangeStrategy ignored remoteAddr).
func TestRealclientipGoIssue4(t *testing.T) {
	for _, cfg := range allHeaderConfigs {
		r := mustNew(t, cfg)
		res, err := r.Resolve("[2001:db8:c1::5]:1", forgedHeaders())
		if err != nil || res.Client != netip.MustParseAddr("2001:db8:c1::5") || res.Network != netip.MustParsePrefix("2001:db8:c1::/64") {
			t.Errorf("%+v: got %v %v %v", cfg, res.Client, res.Network, err)
		}
	}
}

// TestCaddyIssue5804 pins: with a trusted peer the client is the first
// untrusted entry from the right, not the leftmost valid one (Caddy's
// default trusted_proxies mode took the leftmost, which the client writes).
func TestCaddyIssue5804(t *testing.T) {
	r := mustNew(t, Config{Rules: []Rule{{From: []string{"173.245.48.0/20", "10.0.0.0/8"}, Header: "X-Forwarded-For"}}})
	// Cloudflare appends the real client; the client prepended a forgery.
	res, err := r.Explain("10.0.0.1:1", xff("6.6.6.6, 203.0.113.7, 173.245.48.5"), nil)
	if err != nil || res.Client != netip.MustParseAddr("203.0.113.7") {
		t.Errorf("got %v, %v; want 203.0.113.7", res.Client, err)
	}
}

// TestTraefikIssue8586 pins: every line of the header is read, so a client
// address a proxy appended as a new line is found (Traefik read only the
// first X-Forwarded-For line, which the client controls).
func TestTraefikIssue8586(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		h   http.Header
	}{
		{cfgXFF10, xff("6.6.6.6", "203.0.113.7")},
		{Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "Forwarded"}}}, hdr("Forwarded", "for=6.6.6.6", "for=203.0.113.7")},
		{Config{Rules: []Rule{{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For", Hops: 2}}}, xff("6.6.6.6, 203.0.113.7", "192.0.2.10")},
	} {
		r := mustNew(t, tc.cfg)
		if res, err := r.Resolve("10.0.0.1:1", tc.h); err != nil || res.Client != netip.MustParseAddr("203.0.113.7") {
			t.Errorf("%v: got %v, %v", tc.h, res.Client, err)
		}
	}
}

// TestTraefikIssue7884 pins: a trusted peer that sent no forwarding header
// yields the peer with a reason saying so (or a typed error when
// configured), never an empty address (Traefik's depth and excludedIPs
// strategies returned "" and answered 403).
func TestTraefikIssue7884(t *testing.T) {
	for _, cfg := range allHeaderConfigs {
		r := mustNew(t, cfg)
		res, err := r.Explain("10.0.0.1:1", http.Header{"Accept": {"*/*"}}, nil)
		if err != nil || res.Client != netip.MustParseAddr("10.0.0.1") || res.Derivation.Reason != reasonHeaderAbsent || !res.Derivation.PeerTrusted {
			t.Errorf("%+v: got %+v, %v", cfg, res, err)
		}
		cfg.RejectMissingHeader = true
		r = mustNew(t, cfg)
		res, err = r.Resolve("10.0.0.1:1", nil)
		if !errors.Is(err, ErrMissingHeader) || res.Client.IsValid() {
			t.Errorf("%+v reject: got %v, %v", cfg, res.Client, err)
		}
	}
}
