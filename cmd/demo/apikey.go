package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/apikeyfile"
)

// cmdAPIKey creates an API key for a tenant and account: it appends the
// key's record (an id and HMAC-SHA256(pepper, secret), never the secret) to
// auth.api_keys.file and prints the whole key once, on stdout. A missing
// pepper file is created with a fresh random pepper (mode 0600). A running
// demo picks the new key up on its next reload (kill -HUP).
func cmdAPIKey(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("apikey", stderr)
	path := fs.String("config", "", "config file naming auth.api_keys{file, pepper_file} (default: the embedded default)")
	tenant := fs.String("tenant", "", "tenant the key belongs to (required)")
	account := fs.String("account", "", "account the key belongs to (required)")
	plan := fs.String("plan", "", "plan of the key (optional): policies' overrides may match it")
	if !parseFlags(fs, args) {
		return 2
	}
	if *tenant == "" || *account == "" {
		fmt.Fprintln(stderr, "demo apikey: -tenant and -account are required")
		fs.Usage()
		return 2
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ak := cfg.Auth.APIKeys
	if ak == nil || ak.File == "" || ak.PepperFile == "" {
		fmt.Fprintln(stderr, "demo apikey: the config has no auth.api_keys{file, pepper_file}")
		return 1
	}
	if iss := tenantIssuer(cfg, *tenant); iss != "" {
		fmt.Fprintf(stderr, "demo apikey: tenant %q is vouched for by issuer %q; give API keys a tenant of their own, or their accounts would share budgets with that issuer's tokens\n", *tenant, iss)
		return 1
	}
	pepperPath := cfg.path(ak.PepperFile)
	if err := ensurePepper(pepperPath); err != nil {
		fmt.Fprintf(stderr, "demo apikey: pepper_file: %v\n", err)
		return 1
	}
	pepper, err := apikeyfile.ReadPepper(pepperPath)
	if err != nil {
		fmt.Fprintf(stderr, "demo apikey: %v\n", err)
		return 1
	}
	key, rec, err := identity.NewAPIKey(pepper, *tenant, *account)
	if err == nil && *plan != "" {
		rec.Plan = *plan
		if err = rec.Validate(); err != nil {
			err = fmt.Errorf("-plan: %w", err) // "-plan: plan: contains a control character"
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "demo apikey: %v\n", err)
		return 1
	}
	if err := apikeyfile.Append(cfg.path(ak.File), rec); err != nil {
		fmt.Fprintf(stderr, "demo apikey: %v\n", err)
		return 1
	}
	if rec.Plan != "" {
		fmt.Fprintf(stderr, "created API key %s for tenant %q, account %q, plan %q; it is shown once, below, and stored only as a hash\n", rec.ID, rec.Tenant, rec.Account, rec.Plan)
	} else {
		fmt.Fprintf(stderr, "created API key %s for tenant %q, account %q; it is shown once, below, and stored only as a hash\n", rec.ID, rec.Tenant, rec.Account)
	}
	fmt.Fprintln(stdout, key)
	return 0
}

// ensurePepper creates the pepper file with a new random pepper if it does
// not exist yet. An existing file is left alone.
func ensurePepper(path string) error {
	if _, err := os.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	pepper := apikeyfile.GeneratePepper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(pepper); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
