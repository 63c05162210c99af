package policy_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

func perMinute(n, burst int64) limiter.Limit {
	return limiter.Limit{Rate: limiter.Rate{Count: n, Per: time.Minute}, Burst: burst}
}

func perTenant(overrides ...policy.Override) policy.Policy {
	return policy.Policy{Name: "per-tenant", Key: []limitkey.Dimension{limitkey.DimTenant}, Limit: perMinute(1, 3), Overrides: overrides}
}

// TestValidateRules: what Validate refuses because of the program around
// the policies (Rules), each error written out.
func TestValidateRules(t *testing.T) {
	local := perTenant()
	local.OnStoreError = policy.OnStoreErrorLocal
	custom := perTenant()
	custom.Key = []limitkey.Dimension{"region"}
	fixed := perTenant()
	fixed.Cost = 2
	vip := perTenant(policy.Override{Account: "vip"})
	vip.Key = append(vip.Key, limitkey.DimAccount)
	preAuthFunc := perTenant()
	preAuthFunc.Key, preAuthFunc.PreAuth = []limitkey.Dimension{limitkey.DimNetwork}, true
	preAuthFunc.OverrideFunc = func(limitkey.Key) (policy.Override, bool) { return policy.Override{}, false }
	leased := perTenant()
	leased.Limit.Lease = time.Second
	tests := []struct {
		name string
		ps   []policy.Policy
		r    policy.Rules
		want string
	}{
		{"valid", []policy.Policy{perTenant()}, policy.Rules{}, ""},
		{"defined twice", []policy.Policy{perTenant(), perTenant()}, policy.Rules{}, `policies[1] ("per-tenant").name: defined twice`},
		{"local without a fallback", []policy.Policy{local}, policy.Rules{},
			`policies[0] ("per-tenant").on_store_error: local needs a fallback store (RateLimitConfig.Fallback: a memory store of this process)`},
		{"local with a fallback", []policy.Policy{local}, policy.Rules{FallbackReplicas: 1}, ""},
		{"unknown dimension", []policy.Policy{custom}, policy.Rules{},
			`policies[0] ("per-tenant").key: unknown dimension "region" (built-in: tenant, account, credential, operation, network, plan)`},
		{"custom dimension", []policy.Policy{custom}, policy.Rules{Custom: []limitkey.Dimension{"region"}}, ""},
		{"fixed cost and a cost function", []policy.Policy{fixed}, policy.Rules{Costs: []string{"per-tenant"}},
			`policies[0] ("per-tenant").cost: 2 is fixed, but the policy has a cost function: set one or the other`},
		{"share below one token", []policy.Policy{perTenant()}, policy.Rules{Replicas: 4},
			`policies[0] ("per-tenant").burst: 3 shared by 4 replicas is 0 per process, below one: raise it to at least 4 or run fewer replicas`},
		{"account without its tenant", []policy.Policy{vip}, policy.Rules{},
			`policies[0] ("per-tenant").overrides[0].account: "vip" would match the account of that name in every tenant (the credentials may name several tenants, and an account name is unique only per tenant): name its tenant too`},
		{"account of the single tenant", []policy.Policy{vip}, policy.Rules{SingleTenant: true}, ""},
		{"a cost function of no policy", []policy.Policy{perTenant()}, policy.Rules{Costs: []string{"per-tenant", "renamed"}},
			`costs["renamed"]: no policy has that name`},
		{"negative replicas", []policy.Policy{perTenant()}, policy.Rules{Replicas: -5, FallbackReplicas: -3},
			"replicas: -5 must not be negative (0 or 1: one process)\nfallback replicas: -3 must not be negative (0: no fallback store)"},
		{"an override function before authentication", []policy.Policy{preAuthFunc}, policy.Rules{},
			`policies[0] ("per-tenant").overrides: a pre_auth policy runs before any credential is verified, so its OverrideFunc would never be asked`},
		{"a lease on a token bucket", []policy.Policy{leased}, policy.Rules{},
			`policies[0] ("per-tenant").lease: lease 1s on a token bucket, want 0 (lease is for max_in_flight)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Validate(tc.ps, tc.r)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("error:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestValidateCopies: Validate fills the defaults of copies; the caller's
// policies and their lists are untouched.
func TestValidateCopies(t *testing.T) {
	in := []policy.Policy{perTenant(policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 6}})}
	out, err := policy.Validate(in, policy.Rules{})
	if err != nil {
		t.Fatal(err)
	}
	out[0].Key[0] = limitkey.DimNetwork
	out[0].Overrides[0].Tenant = "beta"
	if in[0].Cost != 0 || in[0].Status != 0 || in[0].Key[0] != limitkey.DimTenant || in[0].Overrides[0].Tenant != "acme" {
		t.Errorf("the caller's policy changed: %+v", in[0])
	}
	if out[0].Cost != 1 || out[0].Status != 429 || out[0].OnMissing != policy.OnMissingReject || out[0].OnStoreError != policy.OnStoreErrorDeny {
		t.Errorf("defaults: %+v", out[0])
	}
}

// validPerTenant returns perTenant() as Validate returns it.
func validPerTenant(t *testing.T) *policy.Policy {
	t.Helper()
	ps, err := policy.Validate([]policy.Policy{perTenant()}, policy.Rules{})
	if err != nil {
		t.Fatal(err)
	}
	return &ps[0]
}

// TestOverrideCompleteAndString: CheckOverride completes an override (its
// unset fields come from its policy); its name is what the debug JSON
// shows.
func TestOverrideCompleteAndString(t *testing.T) {
	p := validPerTenant(t)
	tests := []struct {
		o     policy.Override
		name  string
		limit limiter.Limit
		cost  int64
	}{
		{policy.Override{Tenant: "acme", Limit: limiter.Limit{Burst: 6}}, "tenant=acme", perMinute(1, 6), 1},
		{policy.Override{Plan: "pro", Cost: 2}, "plan=pro", perMinute(1, 3), 2},
		{policy.Override{Tenant: "acme", Account: "vip", Limit: limiter.Limit{Rate: limiter.Rate{Count: 5, Per: time.Second}}}, "tenant=acme|account=vip",
			limiter.Limit{Rate: limiter.Rate{Count: 5, Per: time.Second}, Burst: 3}, 1},
		{policy.Override{Account: "vip"}, "account=vip", perMinute(1, 3), 1},
		{policy.Override{}, "function", perMinute(1, 3), 1},
	}
	for _, tc := range tests {
		c, err := p.CheckOverride(tc.o, policy.Rules{})
		if err != nil {
			t.Fatal(err)
		}
		if tc.o.String() != tc.name || c.Limit != tc.limit || c.Cost != tc.cost {
			t.Errorf("%+v: %q, %+v cost %d; want %q, %+v cost %d", tc.o, tc.o.String(), c.Limit, c.Cost, tc.name, tc.limit, tc.cost)
		}
	}
}

// TestCheckOverride: an OverrideFunc's answer is checked as an entry of
// Overrides would be, against the same rules.
func TestCheckOverride(t *testing.T) {
	p := validPerTenant(t)
	tests := []struct {
		o    policy.Override
		r    policy.Rules
		want string
	}{
		{policy.Override{Tenant: "db", Limit: limiter.Limit{Burst: 5}}, policy.Rules{}, ""},
		{policy.Override{Tenant: "bad", Cost: 9}, policy.Rules{}, "override function: tenant=bad: cost: 9 exceeds burst 3, so no request could ever pass"},
		{policy.Override{Tenant: "db", Cost: 2}, policy.Rules{Costs: []string{"per-tenant"}}, "override function: tenant=db: cost: the policy's cost comes from its cost function"},
		{policy.Override{Tenant: "db"}, policy.Rules{Replicas: 4}, "override function: tenant=db: burst: 3 shared by 4 replicas is 0 per process, below one: raise it to at least 4 or run fewer replicas"},
	}
	for _, tc := range tests {
		c, err := p.CheckOverride(tc.o, tc.r)
		got := ""
		if err != nil {
			got = err.Error()
		} else if c.Limit.Burst == 0 || c.Cost == 0 {
			t.Errorf("%+v: not completed: %+v", tc.o, c)
		}
		if got != tc.want {
			t.Errorf("%+v: error %q; want %q", tc.o, got, tc.want)
		}
	}
}

// TestAppliesTo: no Operations is every operation.
func TestAppliesTo(t *testing.T) {
	all, some := perTenant(), perTenant()
	some.Operations = []string{"GET /v1/reports/{id}"}
	for _, tc := range []struct {
		p    policy.Policy
		op   string
		want bool
	}{
		{all, "GET /v1/reports/{id}", true},
		{all, "UNMATCHED", true},
		{some, "GET /v1/reports/{id}", true},
		{some, "GET /v1/reports/7", false},
	} {
		if got := tc.p.AppliesTo(tc.op); got != tc.want {
			t.Errorf("%v applies to %q: %v; want %v", tc.p.Operations, tc.op, got, tc.want)
		}
	}
}

// TestCheckOverrideAsValidate: an override a function answers is refused
// for what Validate refuses the same entry of Overrides for: the largest
// settle, a share's waits, the fallback's share, and the two phases'
// waits together.
func TestCheckOverrideAsValidate(t *testing.T) {
	perSecond := func(n, burst int64) limiter.Limit {
		return limiter.Limit{Rate: limiter.Rate{Count: n, Per: time.Second}, Burst: burst}
	}
	settling := policy.Policy{Name: "tokens", Key: []limitkey.Dimension{limitkey.DimTenant}, Limit: perSecond(1, 3), Settle: true}
	shared := policy.Policy{Name: "shared", Key: []limitkey.Dimension{limitkey.DimTenant}, Limit: perSecond(1, 8)}
	local := shared
	local.OnStoreError = policy.OnStoreErrorLocal
	pre := policy.Policy{Name: "pre", Key: []limitkey.Dimension{limitkey.DimNetwork}, PreAuth: true,
		Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 31, DelayAfter: 1}}
	tests := []struct {
		name   string
		others []policy.Policy // validated with p, before it
		p      policy.Policy
		o      policy.Override
		r      policy.Rules
		static string // Validate's error for o in p.Overrides
		want   string // CheckOverride's
	}{
		{"largest settle", nil, settling, policy.Override{Tenant: "x", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: 1000 * time.Hour}}}, policy.Rules{},
			`policies[0] ("tokens").max_cost: 3 tokens at 1/1000h (overrides[0]) exceed the largest settle, 2^53-1 ns of the rate (about 104 days): lower max_cost`,
			`override function: tenant=x: max_cost: 3 tokens at 1/1000h exceed the largest settle, 2^53-1 ns of the rate (about 104 days): lower max_cost`},
		{"a share's waits", nil, shared, policy.Override{Tenant: "x", Limit: limiter.Limit{Burst: 57, DelayAfter: 7}}, policy.Rules{Replicas: 4},
			`policies[0] ("shared").overrides[0].delay_after: its share over 4 replicas (1/4s, burst 14): a request may have to wait up to 52s (burst beyond delay_after at 1/4s), longer than 50s (RateLimitConfig.MaxWait): set max_delay, a larger delay_after or a faster rate`,
			`override function: tenant=x: delay_after: its share over 4 replicas (1/4s, burst 14): a request may have to wait up to 52s (burst beyond delay_after at 1/4s), longer than 50s (RateLimitConfig.MaxWait): set max_delay, a larger delay_after or a faster rate`},
		{"the fallback's share", nil, local, policy.Override{Tenant: "x", Limit: limiter.Limit{Burst: 3}}, policy.Rules{FallbackReplicas: 4},
			`policies[0] ("shared").overrides[0].burst: 3 shared by 4 replicas is 0 per process, below one: raise it to at least 4 or run fewer replicas`,
			`override function: tenant=x: burst: 3 shared by 4 replicas is 0 per process, below one: raise it to at least 4 or run fewer replicas`},
		{"both phases' waits", []policy.Policy{pre}, shared, policy.Override{Tenant: "x", Limit: limiter.Limit{Burst: 41, DelayAfter: 1}}, policy.Rules{},
			`policies[0] ("pre") (pre_auth) and policies[1] ("shared"): a request may wait up to 30s before authentication and 40s after it, 1m10s in all, longer than 50s (RateLimitConfig.MaxWait): lower their max_delay or delay_after's share`,
			`override function: tenant=x: delay_after: a request may have to wait up to 40s (burst beyond delay_after at 1/s), longer than 20s (RateLimitConfig.MaxWait): set max_delay, a larger delay_after or a faster rate`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			with := tc.p
			with.Overrides = []policy.Override{tc.o}
			if _, err := policy.Validate(append(slices.Clone(tc.others), with), tc.r); err == nil || err.Error() != tc.static {
				t.Errorf("Validate:\n%v\nwant:\n%s", err, tc.static)
			}
			ps, err := policy.Validate(append(slices.Clone(tc.others), tc.p), tc.r)
			if err != nil {
				t.Fatal(err)
			}
			r := tc.r
			for _, q := range ps[:len(tc.others)] {
				r.PhaseWait = max(r.PhaseWait, q.LongestWait())
			}
			c, err := ps[len(ps)-1].CheckOverride(tc.o, r)
			if err == nil || err.Error() != tc.want {
				t.Errorf("CheckOverride:\n%v\nwant:\n%s", err, tc.want)
			}
			if c.Limit.Rate.Count == 0 || c.Limit.Burst == 0 || c.Cost == 0 {
				t.Errorf("not completed with the error: %+v", c)
			}
		})
	}
}

// TestDiffOverrideFunc: an OverrideFunc set or removed is a change (a
// function cannot be compared, its presence can).
func TestDiffOverrideFunc(t *testing.T) {
	with := perTenant()
	with.OverrideFunc = func(limitkey.Key) (policy.Override, bool) { return policy.Override{}, false }
	got := policy.Diff([]policy.Policy{perTenant()}, []policy.Policy{with})
	want := []policy.Change{{Policy: "per-tenant", Change: "updated", Detail: "override_func false -> true"}}
	if !slices.Equal(got, want) {
		t.Errorf("Diff = %+v; want %+v", got, want)
	}
	if got := policy.Diff([]policy.Policy{with}, []policy.Policy{with}); len(got) != 0 {
		t.Errorf("the same function set: %+v; want no change", got)
	}
}
