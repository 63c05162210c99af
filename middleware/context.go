package middleware

import (
	"context"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/trustedproxy"
)

type ctxKey int

const (
	clientKey ctxKey = iota
	principalKey
	recordKey
)

// ClientFrom returns the client address resolved by [ClientAddress] for this
// request, and false when that middleware did not run. The Result is a value
// copy; its Derivation's Hops slice must not be modified.
func ClientFrom(ctx context.Context) (trustedproxy.Result, bool) {
	res, ok := ctx.Value(clientKey).(*trustedproxy.Result)
	if !ok {
		return trustedproxy.Result{}, false
	}
	return *res, true
}

// PrincipalFrom returns the principal established by [Authenticate], and false
// when that middleware did not run. An anonymous request (allowed by
// [AuthOptions].Anonymous) yields a Principal whose Method is
// identity.MethodAnonymous and whose other fields are empty.
func PrincipalFrom(ctx context.Context) (identity.Principal, bool) {
	p, ok := ctx.Value(principalKey).(*identity.Principal)
	if !ok {
		return identity.Principal{}, false
	}
	return *p, true
}

func withClient(ctx context.Context, res *trustedproxy.Result) context.Context {
	return context.WithValue(ctx, clientKey, res)
}

func withPrincipal(ctx context.Context, p *identity.Principal) context.Context {
	return context.WithValue(ctx, principalKey, p)
}
