package main

import (
	"fmt"
	"io"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/internal/jwkey"
)

// cmdToken mints a development token signed with a private key file that the
// config names for the issuer. It refuses when the issuer has none: it is a
// tool for trying the demo, not an identity provider.
func cmdToken(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("token", stderr)
	path := fs.String("config", "", "config file (default: the embedded default)")
	issuer := fs.String("issuer", "", "issuer record to sign for (required when the config has several)")
	sub := fs.String("sub", "", "subject: the account (required)")
	clientID := fs.String("client-id", "", "client_id claim: the credential id (optional)")
	tenant := fs.String("tenant", "", "tenant claim, for issuer records that take the tenant from a claim")
	plan := fs.String("plan", "", "plan claim, for issuer records that take the plan from a claim (any value: the server checks it against plans)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime of the token; negative: a token that expired that long ago, to try expiry")
	if !parseFlags(fs, args) {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "demo token: "+format+"\n", a...)
		return 1
	}
	if *sub == "" {
		return fail("-sub is required")
	}
	if *ttl == 0 {
		return fail("-ttl must not be 0")
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return fail("%v", err)
	}
	if *ttl < 0 {
		leeway := defaultLeeway
		if d, err := time.ParseDuration(cfg.Auth.Leeway); err == nil && d > 0 {
			leeway = d
		}
		if *ttl >= -leeway { // not -*ttl <= leeway: -ttl overflows for the most negative duration
			return fail("-ttl %v: the config accepts a token up to %v (auth.leeway) past its expiry; use -ttl -%v or less to mint one it refuses", *ttl, leeway, 2*leeway)
		}
	}
	if *issuer == "" {
		if len(cfg.Auth.Issuers) != 1 {
			return fail("-issuer is required: the config has %d issuers", len(cfg.Auth.Issuers))
		}
		*issuer = cfg.Auth.Issuers[0].Issuer
	}
	var rec *IssuerConfig
	for i := range cfg.Auth.Issuers {
		if cfg.Auth.Issuers[i].Issuer == *issuer {
			rec = &cfg.Auth.Issuers[i]
		}
	}
	if rec == nil {
		return fail("issuer %q is not in the config", *issuer)
	}
	if len(rec.Audiences) == 0 || len(rec.Algorithms) == 0 {
		return fail("issuer %q has no audiences or algorithms", *issuer)
	}
	for _, k := range rec.Keys {
		if k.PrivateKeyFile == "" {
			continue
		}
		data, err := cfg.file(k.PrivateKeyFile)
		if err != nil {
			return fail("private_key_file: %v", err)
		}
		signer, err := jwkey.ParsePrivateKeyPEM(data)
		if err != nil {
			return fail("private_key_file %s: %v", k.PrivateKeyFile, err)
		}
		now := time.Now()
		exp, issued := now.Add(*ttl), now
		if *ttl < 0 {
			issued = exp.Add(-time.Hour) // an hour-long token, expired -ttl ago
		}
		claims := jwt.MapClaims{
			"iss": rec.Issuer,
			"sub": *sub,
			"aud": rec.Audiences[0],
			"iat": issued.Unix(),
			"nbf": issued.Unix(),
			"exp": exp.Unix(),
		}
		if *clientID != "" {
			claims["client_id"] = *clientID
		}
		if *tenant != "" {
			if rec.TenantClaim == "" {
				return fail("issuer %q has a fixed tenant; -tenant applies only with tenant_claim", *issuer)
			}
			claims[rec.TenantClaim] = *tenant
		}
		if *plan != "" {
			if rec.PlanClaim == "" {
				return fail("issuer %q has no plan_claim; -plan applies only with plan_claim", *issuer)
			}
			claims[rec.PlanClaim] = *plan
		}
		// The key's own alg, or the first of the record's algorithms that
		// signs with this key (a record may allow ES256 and EdDSA, with
		// the private key of only one of them).
		algs := rec.Algorithms
		if k.Alg != "" {
			algs = []string{k.Alg}
		}
		var s string
		for _, alg := range algs {
			method, err := jwkey.SigningMethodFor(alg)
			if err != nil {
				return fail("%v", err)
			}
			tok := jwt.NewWithClaims(method, claims)
			if k.KID != "" {
				tok.Header["kid"] = k.KID
			}
			if s, err = tok.SignedString(signer); err == nil {
				break
			}
		}
		if s == "" {
			return fail("private_key_file %s: none of the algorithms %v signs with this key", k.PrivateKeyFile, algs)
		}
		fmt.Fprintln(stdout, s)
		return 0
	}
	return fail("issuer %q names no private_key_file: refusing to mint", *issuer)
}
