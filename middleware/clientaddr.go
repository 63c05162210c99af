package middleware

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ratekey/ratekey/trustedproxy"
)

// ClientAddressOptions configures [ClientAddress]. The zero value is the
// default.
type ClientAddressOptions struct {
	// Metrics counts trusted-proxy anomalies (ratekey_trusted_proxy_anomalies_total
	// by derivation reason): failed derivations, trusted peers that sent no
	// forwarding header, chains whose every hop is trusted. nil counts nothing.
	Metrics Metrics
}

// ClientAddress returns middleware that resolves the client address of every
// request with res ([trustedproxy.Resolver.Resolve]) and stores the
// [trustedproxy.Result] in the request context (read it with
// [ClientFrom]); it also fills the client-address part of the request's
// [Record], when there is one, with the examined hops listed
// ([trustedproxy.Resolver.Explain]).
//
// A malformed forwarding chain written by a trusted proxy is answered with
// 400 and an RFC 9457 problem (type urn:ratekey:problem:invalid-forwarding-chain); the request
// never falls back to the peer address, which would key it by the proxy and
// let one client exhaust everybody's budget. res is immutable, so the
// middleware is safe for concurrent use.
func ClientAddress(res *trustedproxy.Resolver, opts ClientAddressOptions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r, st := ensureState(r)
			var result trustedproxy.Result
			var err error
			if st.record != nil {
				result, err = res.Explain(r.RemoteAddr, r.Header, nil)
				st.record.recordDerivation(r.RemoteAddr, &result, err)
			} else {
				result, err = res.Resolve(r.RemoteAddr, r.Header)
			}
			if opts.Metrics != nil && (err != nil || anomalous(result.Derivation.Reason)) {
				opts.Metrics.ProxyAnomaly(result.Derivation.Reason)
			}
			if err != nil {
				writeProblem(w, forwardingProblem(err, result.Derivation.Reason, r.RemoteAddr))
				return
			}
			st.client.set(&result)
			st.hasClient = true
			next.ServeHTTP(w, r)
		})
	}
}

// anomalous reports whether a successful derivation is one a well-configured
// proxy should not produce: a trusted peer that sent no forwarding header
// (keyed as the proxy itself), or a chain whose every hop is trusted.
func anomalous(reason string) bool {
	return reason == "trusted_peer_without_header" || reason == "all_hops_trusted"
}

// unixPeer reports whether remoteAddr is how net/http reports a peer on a
// Unix-domain socket ("", "@name", a path): a malformed-peer error for such
// a peer means no trusted-proxy rule could key it.
func unixPeer(remoteAddr string) bool {
	return remoteAddr == "" || remoteAddr[0] == '@' || remoteAddr[0] == '/'
}

// forwardingProblem describes a failed derivation (its error and reason)
// without echoing header bytes (the debug endpoint shows the entry to
// operators).
func forwardingProblem(err error, reason, remoteAddr string) problem {
	p := problem{Type: problemInvalidForwarding, Status: http.StatusBadRequest, Title: "Invalid forwarding chain"}
	switch {
	case errors.Is(err, trustedproxy.ErrChainTooLong):
		p.Detail = fmt.Sprintf("the forwarding chain needs more than %d entries examined", trustedproxy.MaxHops)
	case errors.Is(err, trustedproxy.ErrMalformedPeer) && unixPeer(remoteAddr):
		// A Unix-socket peer without a rule that trusts it: server wiring.
		p.Status, p.Title = http.StatusInternalServerError, "Unusable peer address"
		p.Detail = "the connection came over a Unix socket that no trusted-proxy rule lists"
	case errors.Is(err, trustedproxy.ErrMalformedPeer):
		// The server's own RemoteAddr is unusable: not the client's fault.
		p.Status, p.Title = http.StatusInternalServerError, "Unusable peer address"
		p.Detail = "the connection's peer address is not an IP address"
	case errors.Is(err, trustedproxy.ErrMissingHeader):
		p.Title = "Missing forwarding header"
		p.Detail = "a trusted proxy forwarded the request without the forwarding header its rule requires"
	case errors.Is(err, trustedproxy.ErrHeaderAlias):
		p.Title = "Forwarding header alias"
		p.Detail = "the request carries a look-alike of the forwarding header (such as X_Forwarded_For), which is refused"
	case reason == "unknown_node":
		p.Detail = "the forwarding chain reaches an unknown or obfuscated node before an untrusted address"
	default:
		p.Detail = "the forwarding header written by a trusted proxy holds an entry that is not an IP address"
	}
	return p
}
