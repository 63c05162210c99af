package engine

import (
	"testing"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// BenchmarkOverrideMatch measures the match alone: one map lookup per kind
// of match a policy's overrides use.
func BenchmarkOverrideMatch(b *testing.B) {
	l := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: 1e9}, Burst: 3}
	pr := limitkey.Principal{Tenant: "beta", Plan: "free", Account: "alice"}
	for _, tc := range []struct {
		name string
		ovr  []policy.Override
	}{
		{"tenant", []policy.Override{{Tenant: "acme", Limit: limiter.Limit{Burst: 6}}}},
		{"three-kinds", []policy.Override{{Tenant: "acme"}, {Plan: "pro"}, {Tenant: "acme", Account: "vip"}}},
	} {
		p := policy.Policy{Name: "p", Limit: l, Cost: 1, Overrides: tc.ovr}
		t := compileOverrides(&p, policy.Rules{})
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if t.match(&pr) != nil {
					b.Fatal("match")
				}
			}
		})
	}
}
