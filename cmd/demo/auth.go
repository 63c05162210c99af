package main

import (
	"crypto"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/apikeyfile"
	"github.com/ratekey/ratekey/internal/jwkey"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/middleware"
)

// defaultLeeway is identity's default JWTConfig.Leeway (auth.leeway
// omitted).
const defaultLeeway = 30 * time.Second

// authSetup is the demo's credential verification: JWTs of the configured
// issuers and, optionally, API keys, read from the configured sources.
type authSetup struct {
	jwt     *identity.JWTAuthenticator // nil without issuers
	authn   identity.Authenticator     // nil when nothing is configured
	apiKeys int                        // API keys loaded from auth.api_keys.file
	// keyTenants and keyPlans are the tenants and plans of those keys.
	keyTenants, keyPlans map[string]bool
}

// close stops the JWT authenticator's background key-set refreshes.
func (s authSetup) close() {
	if s.jwt != nil {
		_ = s.jwt.Close()
	}
}

// buildAuth validates the auth section and builds its authenticators,
// reporting every problem found.
func buildAuth(cfg *Config, logger *slog.Logger, m middleware.Metrics) (authSetup, []error) {
	var errs []error
	var out authSetup
	jwtAuth, jerrs := buildJWT(cfg, logger, m)
	errs = append(errs, jerrs...)
	out.jwt = jwtAuth

	var keys *identity.APIKeyAuthenticator
	if ak := cfg.Auth.APIKeys; ak != nil {
		var kerrs []error
		var recs []identity.APIKeyRecord
		keys, recs, kerrs = buildAPIKeys(cfg, ak)
		out.apiKeys = len(recs)
		out.keyTenants, out.keyPlans = map[string]bool{}, map[string]bool{}
		for _, rec := range recs {
			out.keyTenants[rec.Tenant] = true
			if rec.Plan != "" {
				out.keyPlans[rec.Plan] = true
			}
		}
		errs = append(errs, kerrs...)
	}
	var sources []identity.Source
	for i, name := range cfg.Auth.Sources {
		switch src := identity.Source(name); src {
		case identity.SourceHeader, identity.SourceQuery, identity.SourceCookie:
			sources = append(sources, src)
		default:
			errs = append(errs, fmt.Errorf("auth.sources[%d]: %s is not header, query or cookie", i, shown(name)))
		}
	}
	if len(errs) > 0 {
		out.close()
		return authSetup{}, errs
	}
	if jwtAuth == nil && keys == nil {
		if len(sources) > 0 {
			return authSetup{}, []error{errors.New("auth.sources: no issuers and no api_keys: there is no credential to read")}
		}
		return out, nil
	}
	authn, err := identity.NewCombinedAuthenticator(identity.CombinedConfig{JWT: jwtAuth, APIKeys: keys, Sources: sources})
	if err != nil {
		out.close()
		return authSetup{}, fieldErrors("auth", err) // "auth.sources[1]: ..."
	}
	out.authn = authn
	return out, nil
}

// buildJWT builds the issuer records' authenticator; nil without issuers.
func buildJWT(cfg *Config, logger *slog.Logger, m middleware.Metrics) (*identity.JWTAuthenticator, []error) {
	var errs []error
	jc := identity.JWTConfig{Logger: logger}
	if m != nil {
		jc.JWKS.OnFetch = m.JWKSFetch
	}
	if cfg.Auth.Leeway != "" {
		d, err := time.ParseDuration(cfg.Auth.Leeway)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("auth.leeway: %s is not a positive duration such as 30s (omit it for the %v default)", shown(cfg.Auth.Leeway), defaultLeeway))
		}
		jc.Leeway = d
	}
	for i, ic := range cfg.Auth.Issuers {
		rec := identity.IssuerRecord{Issuer: ic.Issuer, Tenant: ic.Tenant, TenantClaim: ic.TenantClaim,
			Tenants: ic.Tenants, Plan: ic.Plan, PlanClaim: ic.PlanClaim, Plans: ic.Plans, Audiences: ic.Audiences, Algorithms: ic.Algorithms, JWKSURL: ic.JWKSURL, Typ: ic.Typ}
		if ic.JWKSRefresh != "" {
			d, err := time.ParseDuration(ic.JWKSRefresh)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("auth.issuers[%d].jwks_refresh: %s is not a positive duration such as 1h", i, shown(ic.JWKSRefresh)))
			}
			rec.JWKSRefresh = d
		}
		complete := true
		for j, kc := range ic.Keys {
			k, err := loadKey(cfg, fmt.Sprintf("auth.issuers[%d].keys[%d]", i, j), kc)
			if err != nil {
				errs = append(errs, err...)
				complete = false
				continue
			}
			rec.Keys = append(rec.Keys, k)
		}
		// A record whose key file failed is reported once, above; checking
		// it again would only add knock-on errors ("no keys").
		if complete {
			jc.Issuers = append(jc.Issuers, rec)
		}
	}
	if len(jc.Issuers) == 0 {
		return nil, errs
	}
	// Validate the records even when a key file failed, so that every
	// problem is reported in one pass. Nothing is fetched here: JWK Sets are
	// fetched on first use.
	// identity names fields as the YAML does (issuers[0] (...).tenant_claim,
	// keys[1] (...).alg, leeway), so its errors are only prefixed.
	auth, err := identity.NewJWTAuthenticator(jc)
	if err != nil {
		errs = append(errs, fieldErrors("auth", err)...)
	}
	if len(errs) > 0 {
		if auth != nil {
			_ = auth.Close()
		}
		return nil, errs
	}
	return auth, nil
}

// buildAPIKeys loads the API key file and the pepper; it returns the
// authenticator and the records.
func buildAPIKeys(cfg *Config, ak *APIKeysConfig) (*identity.APIKeyAuthenticator, []identity.APIKeyRecord, []error) {
	var errs []error
	if ak.File == "" {
		errs = append(errs, errors.New("auth.api_keys.file: required (JSON Lines written by `demo apikey`)"))
	}
	if ak.PepperFile == "" {
		errs = append(errs, fmt.Errorf("auth.api_keys.pepper_file: required (at least %d random bytes; `demo apikey` creates it)", apikeyfile.MinPepperBytes))
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	pepper, err := apikeyfile.ReadPepper(cfg.path(ak.PepperFile))
	if err != nil {
		errs = append(errs, fmt.Errorf("auth.api_keys.pepper_file: %w", err))
	}
	recs, err := apikeyfile.Load(cfg.path(ak.File))
	if err != nil {
		errs = append(errs, fmt.Errorf("auth.api_keys.file: %w", err))
	} else {
		for _, rec := range recs {
			if iss := tenantIssuer(cfg, rec.Tenant); iss != "" {
				errs = append(errs, fmt.Errorf("auth.api_keys.file: key %s: tenant %s is vouched for by issuer %s; API keys and that issuer's tokens would share its accounts' budgets", rec.ID, quote.Value(rec.Tenant), quote.Value(iss)))
			}
		}
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	store, err := identity.NewMemoryAPIKeyStore(recs)
	if err != nil {
		return nil, nil, prefixErrors("auth.api_keys.file", err) // "[2].tenant: ..." (apikeyfile.Load checked them already)
	}
	keys, err := identity.NewAPIKeyAuthenticator(identity.APIKeyConfig{Store: store, Pepper: pepper})
	if err != nil {
		return nil, nil, fieldErrors("auth.api_keys", err) // "auth.api_keys.pepper: ..." (ReadPepper checked it already)
	}
	return keys, recs, nil
}

// tenantIssuer returns the issuer that vouches for tenant (a fixed tenant or
// one of a claim's allowed tenants), or "".
func tenantIssuer(cfg *Config, tenant string) string {
	for _, ic := range cfg.Auth.Issuers {
		if ic.Tenant == tenant || slices.Contains(ic.Tenants, tenant) {
			return ic.Issuer
		}
	}
	return ""
}

// path resolves a file named in the config against its directory.
func (c *Config) path(name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(c.dir, name)
}

// loadKey reads one verification key; a private_key_file must be the
// private half of the public key, or `demo token` would mint tokens the
// server rejects.
func loadKey(cfg *Config, where string, kc KeyConfig) (identity.VerificationKey, []error) {
	fail := func(format string, a ...any) (identity.VerificationKey, []error) {
		return identity.VerificationKey{}, []error{fmt.Errorf(where+format, a...)}
	}
	switch {
	case kc.PublicKeyFile != "" && kc.SecretFile != "":
		return fail(": set public_key_file or secret_file, not both")
	case kc.SecretFile != "":
		if kc.PrivateKeyFile != "" {
			return fail(": private_key_file goes with public_key_file, not secret_file")
		}
		data, err := cfg.file(kc.SecretFile)
		if err != nil {
			return fail(".secret_file: %v", err)
		}
		return identity.VerificationKey{KID: kc.KID, Key: []byte(strings.TrimRight(string(data), "\r\n")), Alg: kc.Alg}, nil
	case kc.PublicKeyFile == "":
		return fail(": public_key_file or secret_file is required")
	}
	data, err := cfg.file(kc.PublicKeyFile)
	if err != nil {
		return fail(".public_key_file: %v", err)
	}
	pub, err := identity.ParsePublicKeyPEM(data)
	if err != nil {
		return fail(".public_key_file %s: %v", kc.PublicKeyFile, err)
	}
	if kc.PrivateKeyFile != "" {
		data, err := cfg.file(kc.PrivateKeyFile)
		if err != nil {
			return fail(".private_key_file: %v", err)
		}
		signer, err := jwkey.ParsePrivateKeyPEM(data)
		if err != nil {
			return fail(".private_key_file %s: %v", kc.PrivateKeyFile, err)
		}
		if eq, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !eq.Equal(pub) {
			return fail(".private_key_file %s: not the private half of public_key_file %s", kc.PrivateKeyFile, kc.PublicKeyFile)
		}
	}
	return identity.VerificationKey{KID: kc.KID, Key: pub, Alg: kc.Alg}, nil
}
