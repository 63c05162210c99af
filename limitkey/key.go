package limitkey

import (
	"errors"
	"fmt"
)

// Dimension names one component of a [Key]: where the value of that
// component comes from. The six built-in dimensions are the constants below;
// a deployment may define custom dimensions whose names match
// ^[a-z][a-z0-9_]{0,31}$ (see [ParseDimension]).
//
// Because a valid dimension name contains only lower-case ASCII letters,
// digits and '_', it never needs escaping in the key encoding.
type Dimension string

// Built-in dimensions.
const (
	// DimTenant is the tenant vouched for by the verified issuer record.
	DimTenant Dimension = "tenant"
	// DimAccount is the verified subject (`sub`) of the credential.
	DimAccount Dimension = "account"
	// DimCredential is the public credential id (OAuth client id, API key
	// id, key id or a keyed fingerprint), never a secret.
	DimCredential Dimension = "credential"
	// DimOperation is the route template that serves the request, e.g.
	// "GET /v1/reports/{id}", never the raw path.
	DimOperation Dimension = "operation"
	// DimNetwork is the client address masked to the configured prefix,
	// e.g. "203.0.113.7/32" or "2001:db8::/64".
	DimNetwork Dimension = "network"
	// DimPlan is the plan vouched for by the verified issuer record or API
	// key record (limitkey.Principal.Plan), e.g. "pro".
	DimPlan Dimension = "plan"
)

// maxDimensionLen is the longest custom dimension name, in bytes.
const maxDimensionLen = 32

// errDimension is wrapped by every error [ParseDimension] returns.
var errDimension = errors.New("limitkey: invalid dimension name")

// ParseDimension returns the [Dimension] named s: one of the built-ins
// ("tenant", "account", "credential", "operation", "network", "plan") or a custom
// name of 1 to 32 bytes matching ^[a-z][a-z0-9_]{0,31}$. Any other input
// (empty, upper case, '-', non-ASCII, too long) is an error that does not
// echo s. It is a pure function, safe for concurrent use.
func ParseDimension(s string) (Dimension, error) {
	if !validDimension(s) {
		return "", fmt.Errorf("%w: must match ^[a-z][a-z0-9_]{0,31}$", errDimension)
	}
	return Dimension(s), nil
}

// validDimension reports whether s matches ^[a-z][a-z0-9_]{0,31}$.
func validDimension(s string) bool {
	if len(s) == 0 || len(s) > maxDimensionLen {
		return false
	}
	if s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// Builtin reports whether d is one of the six built-in dimensions
// ([DimTenant], [DimAccount], [DimCredential], [DimOperation], [DimNetwork],
// [DimPlan]).
func (d Dimension) Builtin() bool {
	switch d {
	case DimTenant, DimAccount, DimCredential, DimOperation, DimNetwork, DimPlan:
		return true
	}
	return false
}

// Part is one component of a [Key]: a dimension and the value the request
// has for it. Value may hold any bytes (including '|', '=', '%', control
// bytes and invalid UTF-8); the encoding escapes what it must.
type Part struct {
	// Dimension is where the value comes from.
	Dimension Dimension
	// Value is the request's value for Dimension, any bytes.
	Value string
}

// Key names one rate-limit bucket: the policy that owns it and an ordered
// tuple of typed parts, e.g. policy "per-account" with parts
// (tenant=acme, account=alice, operation="GET /v1/reports/{id}").
//
// A Key with zero parts is valid: it is the policy-global bucket. Order is
// significant: (tenant, account) and (account, tenant) are different keys.
// A Key is valid for [Parse] when Policy is non-empty and every
// Part.Dimension satisfies [ParseDimension]; [Key.String] is injective over
// all Keys, valid or not.
//
// Key is a plain value; it holds no secrets by construction only if its
// producers put none in it (the identity rules forbid raw tokens or API key
// secrets as values).
type Key struct {
	// Policy is the name of the policy that owns the bucket; not empty
	// in a valid Key.
	Policy string
	// Parts is the ordered tuple; empty for the policy-global bucket.
	Parts []Part
}
