package ratekey

import (
	"errors"
	"net/http"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/trustedproxy"
)

// PerClient returns middleware that limits each client network to rate
// ("10/s", "600/m", "1000/h"; limiter.ParseRate) with bursts of burst
// requests, in memory. The client is the TCP peer, or, when the peer is one
// of proxies (addresses or CIDRs of your load balancers themselves, not
// whole LAN ranges), the rightmost X-Forwarded-For entry that is not a
// proxy: a client cannot name another by writing the header itself. The
// network is the client's IPv4 address or IPv6 /64. router is the chi
// router the middleware is mounted on (the root or a sub-router) or the
// *http.ServeMux it wraps (see Config.Router). Errors name the argument
// (rate, burst, proxies). It is [New] with one policy named
// "per-client" keyed by network; use New for anything more.
func PerClient(router http.Handler, rate string, burst int64, proxies ...string) (func(http.Handler) http.Handler, error) {
	return shortcut(router, nil, "per-client", []limitkey.Dimension{limitkey.DimNetwork}, rate, burst, proxies)
}

// PerAccount returns middleware that limits each verified account to rate
// ("10/s"; limiter.ParseRate) with bursts of burst requests per operation,
// in memory. auth verifies the credential; a request without one gets 401
// with a `WWW-Authenticate: Bearer` challenge, an invalid one 401
// invalid_token (RFC 6750 §3.1), and neither is ever charged to someone
// else. The key is (tenant, account, operation): the tenant comes from the
// issuer record (or API key) that verified the credential, so accounts of
// two tenants never share a bucket, and the operation is the route
// template ("GET /v1/reports/{id}"). proxies are your load balancers, as in
// [PerClient]. It is [New] with one policy named "per-account"; use New to
// add a pre-auth network limit, anonymous access, or Redis.
func PerAccount(router http.Handler, auth identity.Authenticator, rate string, burst int64, proxies ...string) (func(http.Handler) http.Handler, error) {
	if isNil(auth) {
		return nil, errors.New("auth: required: PerAccount limits verified accounts (identity.NewJWTAuthenticator, identity.NewAPIKeyAuthenticator)")
	}
	return shortcut(router, auth, "per-account", []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount, limitkey.DimOperation}, rate, burst, proxies)
}

// shortcut builds the one-policy Middleware of PerClient and PerAccount.
func shortcut(router http.Handler, auth identity.Authenticator, name string, key []limitkey.Dimension, rate string, burst int64, proxies []string) (func(http.Handler) http.Handler, error) {
	r, err := limiter.ParseRate(rate)
	if err != nil {
		return nil, prefixed("rate: ", err)[0]
	}
	cfg := Config{
		Router:        router,
		Authenticator: auth,
		Policies:      []Policy{{Name: name, Key: key, Limit: limiter.Limit{Rate: r, Burst: burst}}},
	}
	if len(proxies) > 0 {
		cfg.Proxies = trustedproxy.Config{Rules: []trustedproxy.Rule{{From: proxies, Header: "X-Forwarded-For"}}}
	}
	m, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return m.Handler, nil
}
