package identity

import (
	"errors"
	"net/http"
	"testing"
)

// TestPlanConfig: the plan settings of an issuer record, their errors named
// as the YAML writes them.
func TestPlanConfig(t *testing.T) {
	k := getKeys(t)
	tests := []struct {
		name string
		mut  func(r *IssuerRecord)
		want string
	}{
		{"fixed plan", func(r *IssuerRecord) { r.Plan = "pro" }, ""},
		{"plan claim", func(r *IssuerRecord) { r.PlanClaim, r.Plans = "plan", []string{"free", "pro"} }, ""},
		{"both", func(r *IssuerRecord) { r.Plan, r.PlanClaim, r.Plans = "pro", "plan", []string{"pro"} },
			`issuers[0] ("i"): set either plan or plan_claim, not both`},
		{"claim without list", func(r *IssuerRecord) { r.PlanClaim = "plan" },
			`issuers[0] ("i").plan_claim: "plan" requires a non-empty plans list`},
		{"list with fixed plan", func(r *IssuerRecord) { r.Plan, r.Plans = "pro", []string{"pro"} },
			`issuers[0] ("i").plans: only allowed with plan_claim`},
		{"list alone", func(r *IssuerRecord) { r.Plans = []string{"pro"} },
			`issuers[0] ("i").plans: only allowed with plan_claim`},
		{"empty plan in list", func(r *IssuerRecord) { r.PlanClaim, r.Plans = "plan", []string{"pro", ""} },
			`issuers[0] ("i").plans[1]: empty`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := IssuerRecord{Issuer: "i", Tenant: "t", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
				Keys: []VerificationKey{{Key: k.ed.Public()}}}
			tc.mut(&rec)
			a, err := NewJWTAuthenticator(JWTConfig{Issuers: []IssuerRecord{rec}, Now: testConfig(k).Now})
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				_ = a.Close()
			}
			if got != tc.want {
				t.Errorf("error = %q; want %q", got, tc.want)
			}
		})
	}
}

// TestPlanFromToken: the plan comes from the record (fixed) or from its
// plan claim checked against its plans; anything else is invalid_token.
func TestPlanFromToken(t *testing.T) {
	k := getKeys(t)
	cfg := testConfig(k)
	cfg.Issuers[0].Plan = "enterprise"                                               // issA: fixed
	cfg.Issuers[1].PlanClaim, cfg.Issuers[1].Plans = "plan", []string{"free", "pro"} // issB: claim
	a, err := NewJWTAuthenticator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := baseClaims(issB).with("tenant", "t1")
	tests := []struct {
		name     string
		token    string
		wantPlan string
		wantDesc string // invalid_token description; "" for success
	}{
		{"fixed plan", mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA)), "enterprise", ""},
		{"fixed plan ignores a claim", mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("plan", "free")), "enterprise", ""},
		{"claimed plan", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, b.with("plan", "pro")), "pro", ""},
		{"claimed plan free", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, b.with("plan", "free")), "free", ""},
		{"plan outside plans", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, b.with("plan", "enterprise")), "", "token plan is not accepted"},
		{"plan differs in case", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, b.with("plan", "Pro")), "", "token plan is not accepted"},
		{"plan missing", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, b), "", "token plan is not accepted"},
		{"plan not a string", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, b.with("plan", []string{"pro"})), "", "token plan is not accepted"},
		{"plan case-variant PLAN", mint(t, "RS256", k.rsa, obj{"kid": "b-rsa"}, b.with("plan", "free", "PLAN", "pro")), "", "token claims are malformed"},
		{"no plan on a record without one", mint(t, "HS256", k.hmac, nil, baseClaims(issH).with("plan", "pro")), "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Authorization": {"Bearer " + tc.token}}
			p, err := a.Authenticate(headerRequest(h))
			if tc.wantDesc != "" {
				var ae *AuthError
				if !errors.As(err, &ae) || ae.Code != "invalid_token" || ae.Description != tc.wantDesc {
					t.Fatalf("err = %v; want invalid_token %q", err, tc.wantDesc)
				}
				if tc.wantDesc == "token plan is not accepted" && !errors.Is(err, errPlan) {
					t.Errorf("err = %v; want errPlan", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Plan != tc.wantPlan {
				t.Errorf("Plan = %q; want %q", p.Plan, tc.wantPlan)
			}
		})
	}
}

// TestPlanFromAPIKey: an API key record's plan becomes the principal's.
func TestPlanFromAPIKey(t *testing.T) {
	pepper := make([]byte, 32)
	key, rec, err := NewAPIKey(pepper, "acme", "bot")
	if err != nil {
		t.Fatal(err)
	}
	rec.Plan = "pro"
	key2, rec2, err := NewAPIKey(pepper, "acme", "bot2")
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewMemoryAPIKeyStore([]APIKeyRecord{rec, rec2})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAPIKeyAuthenticator(APIKeyConfig{Store: store, Pepper: pepper})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ key, want string }{{key, "pro"}, {key2, ""}} {
		p, err := a.Authenticate(headerRequest(http.Header{"X-Api-Key": {tc.key}}))
		if err != nil || p.Plan != tc.want {
			t.Errorf("Authenticate = %+v, %v; want plan %q", p, err, tc.want)
		}
	}
	bad := rec
	bad.Plan = "a\x07"
	if err := bad.Validate(); err == nil || err.Error() != "plan: contains a control character" {
		t.Errorf("Validate = %v; want plan: contains a control character", err)
	}
}
