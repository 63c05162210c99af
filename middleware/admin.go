package middleware

import (
	"net/http"
	"net/netip"

	"go4.org/netipx"

	"github.com/ratekey/ratekey/trustedproxy"
)

// AdminOnly returns middleware that serves next only to requests whose
// derived client address (resolved with res, exactly as [ClientAddress]
// does) is in allow, and answers everyone else 404, as if the route did not
// exist. When the derivation fails, the TCP peer is checked instead: the
// walk fails only on an entry to the left of trusted hops, so such a request
// comes from trusted infrastructure. A nil allow admits nobody. The
// [Debug] endpoint applies the same rule; use AdminOnly for other operator
// routes such as /metrics. Safe for concurrent use.
func AdminOnly(res *trustedproxy.Resolver, allow *netipx.IPSet) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !adminAllowed(res, allow, r) {
				http.NotFound(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// adminAllowed is the AdminOnly rule for one request.
func adminAllowed(res *trustedproxy.Resolver, allow *netipx.IPSet, r *http.Request) bool {
	if allow == nil {
		return false
	}
	result, err := res.Resolve(r.RemoteAddr, r.Header)
	if err == nil {
		return allow.Contains(result.Client)
	}
	peer, perr := netip.ParseAddr(result.Derivation.Peer)
	return perr == nil && allow.Contains(peer.Unmap().WithZone(""))
}
