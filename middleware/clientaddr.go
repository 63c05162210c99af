package middleware

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ratekey/ratekey/trustedproxy"
)

// ClientAddress returns middleware that resolves the client address of every
// request with res and stores the [trustedproxy.Result] in the request
// context (read it with [ClientFrom]).
//
// A malformed forwarding chain written by a trusted proxy is answered with
// 400 and an RFC 9457 problem (type [ProblemInvalidForwarding]); the request
// never falls back to the peer address, which would key it by the proxy and
// let one client exhaust everybody's budget. res is immutable, so the
// middleware is safe for concurrent use.
func ClientAddress(res *trustedproxy.Resolver) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			result, err := res.Resolve(r.RemoteAddr, r.Header)
			if err != nil {
				writeProblem(w, forwardingProblem(err))
				return
			}
			next.ServeHTTP(w, r.WithContext(withClient(r.Context(), &result)))
		})
	}
}

// forwardingProblem describes a failed derivation without echoing header
// bytes (the debug endpoint shows the entry to operators).
func forwardingProblem(err error) problem {
	p := problem{Type: ProblemInvalidForwarding, Status: http.StatusBadRequest, Title: "Invalid forwarding chain"}
	switch {
	case errors.Is(err, trustedproxy.ErrChainTooLong):
		p.Detail = fmt.Sprintf("the forwarding chain needs more than %d entries examined", trustedproxy.MaxHops)
	case errors.Is(err, trustedproxy.ErrMalformedPeer):
		// The server's own RemoteAddr is unusable: not the client's fault.
		p.Status, p.Title = http.StatusInternalServerError, "Unusable peer address"
		p.Detail = "the connection's peer address is not an IP address"
	default:
		p.Detail = "the forwarding header written by a trusted proxy holds an entry that is not an IP address"
	}
	return p
}
