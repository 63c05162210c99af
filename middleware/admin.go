package middleware

import (
	"errors"
	"fmt"
	"net/http"

	"go4.org/netipx"

	"github.com/ratekey/ratekey/trustedproxy"
)

// AdminOnly returns middleware that serves next only to requests whose
// derived client address (resolved with res, exactly as [ClientAddress]
// does) is in allow, the admin networks (CIDRs or addresses, as
// [trustedproxy.Rule].From: see [trustedproxy.ParseSet]), and answers
// everyone else 404, as if the route did not exist. A request whose derivation fails is refused too: a client can
// often make it fail (a look-alike header under aliases: reject, a
// hop-counted entry it wrote, a proxy that writes unbracketed IPv6 in
// Forwarded), and the TCP peer is then a trusted proxy that may itself be
// in allow. To see why a derivation fails, simulate the request (POST to
// [Debug]) from an admin address. A nil allow admits nobody. The
// [Debug] endpoint applies the same rule; use AdminOnly for other operator
// routes such as /metrics. It fails when an entry of allow is not an
// address or CIDR prefix (each error names its index, "allow[1] ...") or
// res is nil. The middleware is safe for concurrent use.
func AdminOnly(res *trustedproxy.Resolver, allow []string) (func(http.Handler) http.Handler, error) {
	set, err := adminSet(res, allow)
	if err != nil {
		return nil, err
	}
	return adminOnly(res, set), nil
}

// adminOnly is AdminOnly with its networks parsed.
func adminOnly(res *trustedproxy.Resolver, allow *netipx.IPSet) func(http.Handler) http.Handler {
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
	got, err := res.Resolve(r.RemoteAddr, r.Header)
	return err == nil && allow.Contains(got.Client)
}

// adminSet parses the admin networks allow (nil when empty: nobody), and
// refuses a nil res.
func adminSet(res *trustedproxy.Resolver, allow []string) (*netipx.IPSet, error) {
	if res == nil {
		return nil, errors.New("resolver: required")
	}
	if len(allow) == 0 {
		return nil, nil
	}
	set, err := trustedproxy.ParseSet(allow)
	if err == nil {
		return set, nil
	}
	// ParseSet joins one error per bad entry, "[i] ...": each gets the
	// field's name.
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for i, e := range errs {
		errs[i] = fmt.Errorf("allow%w", e)
	}
	return nil, errors.Join(errs...)
}
