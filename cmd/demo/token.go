package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratekey/ratekey/internal/jwkey"
)

// tokenRequest is what `demo token`'s flags ask for.
type tokenRequest struct {
	path, issuer, sub, clientID, tenant, plan string
	ttl                                       time.Duration
}

// cmdToken mints a development token signed with a private key file that the
// config names for the issuer. It refuses when the issuer has none: it is a
// tool for trying the demo, not an identity provider.
func cmdToken(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("token", stderr)
	var tr tokenRequest
	fs.StringVar(&tr.path, "config", "", "config file (default: the embedded default)")
	fs.StringVar(&tr.issuer, "issuer", "", "issuer record to sign for (required when the config has several)")
	fs.StringVar(&tr.sub, "sub", "", "subject: the account (required)")
	fs.StringVar(&tr.clientID, "client-id", "", "client_id claim: the credential id (optional)")
	fs.StringVar(&tr.tenant, "tenant", "", "tenant claim, for issuer records that take the tenant from a claim")
	fs.StringVar(&tr.plan, "plan", "", "plan claim, for issuer records that take the plan from a claim (any value: the server checks it against plans)")
	fs.DurationVar(&tr.ttl, "ttl", time.Hour, "lifetime of the token; negative: a token that expired that long ago, to try expiry")
	if !parseFlags(fs, args) {
		return 2
	}
	s, err := tr.mint()
	if err != nil {
		fmt.Fprintf(stderr, "demo token: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, s)
	return 0
}

// mint checks the request against the config and signs the token with the
// first key of the issuer that has a private_key_file.
func (tr *tokenRequest) mint() (string, error) {
	if tr.sub == "" {
		return "", errors.New("-sub is required")
	}
	if tr.ttl == 0 {
		return "", errors.New("-ttl must not be 0")
	}
	cfg, err := loadConfig(tr.path)
	if err != nil {
		return "", err
	}
	if err := tr.checkTTL(cfg); err != nil {
		return "", err
	}
	rec, err := tr.record(cfg)
	if err != nil {
		return "", err
	}
	claims, err := tr.claims(rec)
	if err != nil {
		return "", err
	}
	for _, k := range rec.Keys {
		if k.PrivateKeyFile != "" {
			return sign(cfg, rec, k, claims)
		}
	}
	return "", fmt.Errorf("issuer %q names no private_key_file: refusing to mint", tr.issuer)
}

// checkTTL refuses a negative -ttl that the config's leeway would still
// accept.
func (tr *tokenRequest) checkTTL(cfg *Config) error {
	if tr.ttl >= 0 {
		return nil
	}
	leeway := defaultLeeway
	if d, err := time.ParseDuration(cfg.Auth.Leeway); err == nil && d > 0 {
		leeway = d
	}
	if tr.ttl >= -leeway { // not -ttl <= leeway: -ttl overflows for the most negative duration
		return fmt.Errorf("-ttl %v: the config accepts a token up to %v (auth.leeway) past its expiry; use -ttl -%v or less to mint one it refuses", tr.ttl, leeway, 2*leeway)
	}
	return nil
}

// record returns the issuer record to sign for: -issuer's, or the only one.
func (tr *tokenRequest) record(cfg *Config) (*IssuerConfig, error) {
	if tr.issuer == "" {
		if len(cfg.Auth.Issuers) != 1 {
			return nil, fmt.Errorf("-issuer is required: the config has %d issuers", len(cfg.Auth.Issuers))
		}
		tr.issuer = cfg.Auth.Issuers[0].Issuer
	}
	var rec *IssuerConfig
	for i := range cfg.Auth.Issuers {
		if cfg.Auth.Issuers[i].Issuer == tr.issuer {
			rec = &cfg.Auth.Issuers[i]
		}
	}
	if rec == nil {
		return nil, fmt.Errorf("issuer %q is not in the config", tr.issuer)
	}
	if len(rec.Audiences) == 0 || len(rec.Algorithms) == 0 {
		return nil, fmt.Errorf("issuer %q has no audiences or algorithms", tr.issuer)
	}
	return rec, nil
}

// claims returns the token's claims for rec.
func (tr *tokenRequest) claims(rec *IssuerConfig) (jwt.MapClaims, error) {
	now := time.Now()
	exp, issued := now.Add(tr.ttl), now
	if tr.ttl < 0 {
		issued = exp.Add(-time.Hour) // an hour-long token, expired -ttl ago
	}
	claims := jwt.MapClaims{
		"iss": rec.Issuer,
		"sub": tr.sub,
		"aud": rec.Audiences[0],
		"iat": issued.Unix(),
		"nbf": issued.Unix(),
		"exp": exp.Unix(),
	}
	if tr.clientID != "" {
		claims["client_id"] = tr.clientID
	}
	if tr.tenant != "" {
		if rec.TenantClaim == "" {
			return nil, fmt.Errorf("issuer %q has a fixed tenant; -tenant applies only with tenant_claim", tr.issuer)
		}
		claims[rec.TenantClaim] = tr.tenant
	}
	if tr.plan != "" {
		if rec.PlanClaim == "" {
			return nil, fmt.Errorf("issuer %q has no plan_claim; -plan applies only with plan_claim", tr.issuer)
		}
		claims[rec.PlanClaim] = tr.plan
	}
	return claims, nil
}

// sign signs claims with k's private key: under the key's own alg, or the
// first of the record's algorithms that signs with this key (a record may
// allow ES256 and EdDSA, with the private key of only one of them).
func sign(cfg *Config, rec *IssuerConfig, k KeyConfig, claims jwt.MapClaims) (string, error) {
	data, err := cfg.file(k.PrivateKeyFile)
	if err != nil {
		return "", fmt.Errorf("private_key_file: %w", err)
	}
	signer, err := jwkey.ParsePrivateKeyPEM(data)
	if err != nil {
		return "", fmt.Errorf("private_key_file %s: %w", k.PrivateKeyFile, err)
	}
	algs := rec.Algorithms
	if k.Alg != "" {
		algs = []string{k.Alg}
	}
	for _, alg := range algs {
		method, err := jwkey.SigningMethodFor(alg)
		if err != nil {
			return "", err
		}
		tok := jwt.NewWithClaims(method, claims)
		if k.KID != "" {
			tok.Header["kid"] = k.KID
		}
		if s, err := tok.SignedString(signer); err == nil {
			return s, nil
		}
	}
	return "", fmt.Errorf("private_key_file %s: none of the algorithms %v signs with this key", k.PrivateKeyFile, algs)
}
