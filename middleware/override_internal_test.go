package middleware

import (
	"testing"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
)

// BenchmarkOverrideMatch measures the match alone: one map lookup per kind
// of match a policy's overrides use.
func BenchmarkOverrideMatch(b *testing.B) {
	l := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: 1e9}, Burst: 3}
	pr := identity.Principal{Tenant: "beta", Plan: "free", Account: "alice"}
	for _, tc := range []struct {
		name string
		ovr  []Override
	}{
		{"tenant", []Override{{Tenant: "acme", Limit: limiter.Limit{Burst: 6}}}},
		{"three-kinds", []Override{{Tenant: "acme"}, {Plan: "pro"}, {Tenant: "acme", Account: "vip"}}},
	} {
		p := Policy{Name: "p", Limit: l, Cost: 1, Overrides: tc.ovr}
		t := compileOverrides(&p, func(l limiter.Limit) limiter.Limit { return l })
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if t.match(&pr) != nil {
					b.Fatal("match")
				}
			}
		})
	}
}
