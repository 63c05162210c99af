package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestNewJWTAuthenticatorValid(t *testing.T) {
	k := getKeys(t)
	if _, err := NewJWTAuthenticator(testConfig(k)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(k)
	cfg.Leeway = maxLeeway
	cfg.Now = nil
	if _, err := NewJWTAuthenticator(cfg); err != nil {
		t.Fatalf("max leeway, nil Now: %v", err)
	}
}

// TestNewJWTAuthenticatorReportsAllProblems: every problem is reported in
// one error, each naming its issuer and kid.
func TestNewJWTAuthenticatorReportsAllProblems(t *testing.T) {
	k := getKeys(t)
	short := make([]byte, 16)
	cfg := JWTConfig{
		Leeway: 10 * time.Minute,
		Issuers: []IssuerRecord{
			{
				Issuer: "https://weak.example/", Tenant: "w", Audiences: []string{"api"},
				Algorithms: []string{"RS256", "HS256"},
				Keys: []VerificationKey{
					{KID: "rsa1024", Key: &k.rsa1024.PublicKey},
					{KID: "short", Key: short},
				},
			},
			{
				Issuer: "https://confused.example/", Tenant: "c", Audiences: []string{"api"},
				Algorithms: []string{"HS256"},
				Keys:       []VerificationKey{{KID: "confused", Key: &k.rsa.PublicKey}},
			},
			{
				Issuer: "https://pem.example/", Tenant: "p", Audiences: []string{"api"},
				Algorithms: []string{"HS256"},
				Keys:       []VerificationKey{{KID: "pem", Key: pkixPEM(t, &k.rsa.PublicKey)}},
			},
			{Issuer: "https://dup.example/", Tenant: "d", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
				Keys: []VerificationKey{{Key: k.ed.Public()}}},
			{Issuer: "https://dup.example/", Tenant: "d", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
				Keys: []VerificationKey{{Key: k.ed.Public()}}},
			{Issuer: "https://bare.example/", Tenant: "b", Keys: []VerificationKey{{Key: k.ed.Public()}}},
			{Issuer: "https://none.example/", Tenant: "n", Audiences: []string{"api"}, Algorithms: []string{"none", "EdDSA", "EdDSA"},
				Keys: []VerificationKey{{Key: k.ed.Public()}}},
			{Issuer: "https://kids.example/", Tenant: "k", Audiences: []string{"api"}, Algorithms: []string{"EdDSA", "ES256"},
				Keys: []VerificationKey{
					{KID: "", Key: k.ed.Public()},
					{KID: "x", Key: k.ed.Public()},
					{KID: "x", Key: k.ed.Public()},
					{KID: "p384", Key: &k.es384.PublicKey},
					{KID: "priv", Key: k.ed},
				}},
			{Issuer: "https://tenants.example/", Tenant: "fixed", TenantClaim: "tenant",
				Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, Keys: []VerificationKey{{Key: k.ed.Public()}}},
			{Issuer: "https://claim.example/", TenantClaim: "tenant",
				Audiences: []string{"api"}, Algorithms: []string{"EdDSA"}, Keys: []VerificationKey{{Key: k.ed.Public()}}},
			{Issuer: "https://hs512.example/", Tenant: "h", Audiences: []string{"api"}, Algorithms: []string{"HS512"},
				Keys: []VerificationKey{{KID: "h", Key: k.hmac}}},
			{Issuer: "", Tenant: "e", Audiences: []string{"api"}, Algorithms: []string{"EdDSA"},
				Keys: []VerificationKey{{Key: k.ed.Public()}}},
		},
	}
	_, err := NewJWTAuthenticator(cfg)
	if err == nil {
		t.Fatal("NewJWTAuthenticator accepted an invalid config")
	}
	msg := err.Error()
	want := []string{
		`leeway 10m0s exceeds 5m0s`,
		`issuer "https://weak.example/" key "rsa1024": RSA key is 1024 bits, need at least 2048`,
		`issuer "https://weak.example/" key "short": HMAC secret is 16 bytes, HS256 needs at least 32`,
		`issuer "https://confused.example/" key "confused": key type RSA matches none of the algorithms [HS256]`,
		`issuer "https://confused.example/": algorithm HS256 has no compatible key`,
		`issuer "https://pem.example/" key "pem": HMAC secret looks like a PEM block`,
		`issuer "https://dup.example/": duplicate issuer`,
		`issuer "https://bare.example/": no audiences configured`,
		`issuer "https://bare.example/": no algorithms configured`,
		`issuer "https://none.example/": unknown or unsupported algorithm "none"`,
		`issuer "https://none.example/": algorithm "EdDSA" listed twice`,
		`issuer "https://kids.example/" key "": kid may be empty only when the issuer has exactly one key`,
		`issuer "https://kids.example/" key "x": duplicate kid`,
		`issuer "https://kids.example/" key "p384": key type ECDSA P-384 matches none of the algorithms [EdDSA ES256]`,
		`issuer "https://kids.example/" key "priv": unsupported key type ed25519.PrivateKey`,
		`issuer "https://kids.example/": algorithm ES256 has no compatible key`,
		`issuer "https://tenants.example/": set either Tenant or TenantClaim, not both`,
		`issuer "https://claim.example/": TenantClaim "tenant" requires a non-empty Tenants list`,
		`issuer "https://hs512.example/" key "h": HMAC secret is 32 bytes, HS512 needs at least 64`,
		`issuers[11]: issuer is empty`,
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q", w)
		}
	}
	if n := strings.Count(msg, "\n") + 1; n != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", n, len(want), msg)
	}
	// Key material never appears in configuration errors.
	if strings.Contains(msg, "BEGIN") || strings.Contains(msg, string(k.hmac)) {
		t.Error("configuration error contains key material")
	}
}

func TestNewJWTAuthenticatorSingleProblems(t *testing.T) {
	k := getKeys(t)
	good := func() IssuerRecord {
		return IssuerRecord{Issuer: "i", Tenant: "t", Audiences: []string{"api"},
			Algorithms: []string{"EdDSA"}, Keys: []VerificationKey{{Key: k.ed.Public()}}}
	}
	tests := []struct {
		name string
		mod  func(*JWTConfig)
		want string
	}{
		{"no issuers", func(c *JWTConfig) { c.Issuers = nil }, "no issuers"},
		{"negative leeway", func(c *JWTConfig) { c.Leeway = -time.Second }, "is negative"},
		{"no keys", func(c *JWTConfig) { c.Issuers[0].Keys = nil }, "no keys configured"},
		{"percent in names", func(c *JWTConfig) {
			c.Issuers[0].Issuer = "https://x/%d%s"
			c.Issuers[0].Keys[0].KID = "%v"
			c.Issuers[0].Keys[0].Key = []byte("short")
		}, `identity: issuer "https://x/%d%s" key "%v": key type HMAC secret matches none of the algorithms [EdDSA]`},
		{"no tenant", func(c *JWTConfig) { c.Issuers[0].Tenant = "" }, "one of Tenant or TenantClaim is required"},
		{"tenants with fixed tenant", func(c *JWTConfig) { c.Issuers[0].Tenants = []string{"x"} }, "Tenants is only allowed with TenantClaim"},
		{"empty tenant in list", func(c *JWTConfig) {
			c.Issuers[0].Tenant, c.Issuers[0].TenantClaim, c.Issuers[0].Tenants = "", "tenant", []string{"a", ""}
		}, "Tenants contains an empty tenant"},
		{"empty audience", func(c *JWTConfig) { c.Issuers[0].Audiences = []string{""} }, "empty audience"},
		{"nil key", func(c *JWTConfig) { c.Issuers[0].Keys[0].Key = nil }, "key is nil"},
		{"short ed25519", func(c *JWTConfig) { c.Issuers[0].Keys[0].Key = ed25519.PublicKey(make([]byte, 31)) }, "Ed25519 public key is 31 bytes"},
		{"ecdsa private key", func(c *JWTConfig) {
			c.Issuers[0].Algorithms = []string{"ES256"}
			c.Issuers[0].Keys[0].Key = k.es
		}, "unsupported key type *ecdsa.PrivateKey"},
		{"ecdsa off-curve", func(c *JWTConfig) {
			c.Issuers[0].Algorithms = []string{"ES256"}
			// An invalid point can only be built from raw coordinates,
			// which Go 1.26 deprecates for exactly that reason.
			x := new(big.Int).Add(k.es.X, big.NewInt(1)) // (x+1, y) is off the curve
			//lint:ignore SA1019 the test needs a key that is off the curve
			c.Issuers[0].Keys[0].Key = &ecdsa.PublicKey{Curve: k.es.Curve, X: x, Y: k.es.Y}
		}, "not a valid curve point"},
		{"ecdsa without coordinates", func(c *JWTConfig) {
			c.Issuers[0].Algorithms = []string{"ES256"}
			c.Issuers[0].Keys[0].Key = &ecdsa.PublicKey{Curve: k.es.Curve}
		}, "ECDSA public key is nil or incomplete"},
		{"nil ecdsa key", func(c *JWTConfig) {
			c.Issuers[0].Algorithms = []string{"ES256"}
			c.Issuers[0].Keys[0].Key = (*ecdsa.PublicKey)(nil)
		}, "ECDSA public key is nil or incomplete"},
		{"two issuers, one fixed tenant", func(c *JWTConfig) {
			other := good()
			other.Issuer = "j"
			c.Issuers = append(c.Issuers, other)
		}, `identity: issuer "j": tenant "t" is already vouched for by issuer "i"`},
		{"fixed tenant inside another issuer's claim list", func(c *JWTConfig) {
			other := good()
			other.Issuer, other.Tenant, other.TenantClaim, other.Tenants = "j", "", "org", []string{"a", "t"}
			c.Issuers = append(c.Issuers, other)
		}, `identity: issuer "j": tenant "t" is already vouched for by issuer "i"`},
		{"RS256 with secret", func(c *JWTConfig) {
			c.Issuers[0].Algorithms = []string{"RS256"}
			c.Issuers[0].Keys[0].Key = k.hmac
		}, "algorithm RS256 has no compatible key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := JWTConfig{Issuers: []IssuerRecord{good()}}
			tt.mod(&cfg)
			_, err := NewJWTAuthenticator(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestLeewayDefault pins the 30s default: a token expired 29s ago passes,
// one expired 31s ago does not; with a 1s leeway neither passes.
func TestLeewayDefault(t *testing.T) {
	k := getKeys(t)
	for _, tt := range []struct {
		leeway time.Duration
		ago    time.Duration
		ok     bool
	}{
		{0, 29 * time.Second, true},
		{0, 31 * time.Second, false},
		{time.Second, 29 * time.Second, false},
		{maxLeeway, 4 * time.Minute, true},
	} {
		cfg := testConfig(k)
		cfg.Leeway = tt.leeway
		a, err := NewJWTAuthenticator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tok := mint(t, "EdDSA", k.ed, obj{"kid": "a-ed"}, baseClaims(issA).with("exp", testNow.Add(-tt.ago).Unix()))
		_, err = a.verifyToken(context.Background(), tok)
		if (err == nil) != tt.ok {
			t.Errorf("leeway %v, expired %v ago: err = %v, want ok=%v", tt.leeway, tt.ago, err, tt.ok)
		}
	}
}
