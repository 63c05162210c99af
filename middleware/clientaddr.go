package middleware

import (
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
				writeProblem(w, problem{
					Type:   ProblemInvalidForwarding,
					Status: http.StatusBadRequest,
					Title:  "Invalid forwarding chain",
					Detail: "the forwarding header written by a trusted proxy holds an entry that is not an IP address",
				})
				return
			}
			next.ServeHTTP(w, r.WithContext(withClient(r.Context(), &result)))
		})
	}
}
