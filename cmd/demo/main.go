// Command demo is ratekey's reference deployment: a chi server whose /v1 API
// is keyed and limited by ratekey, configured from YAML.
//
// Usage:
//
//	demo [serve] [-config FILE] [-addr HOST:PORT] [-redis URL | -redis-cluster URL]
//	                                                 serve (embedded default config without -config);
//	                                                 SIGHUP reloads the config, keeping unchanged budgets
//	demo check -config FILE                          validate a config, like nginx -t
//	demo token [-config FILE] [-issuer I] -sub S [-client-id C] [-tenant T] [-ttl D]
//	                                                 mint a dev token with a private key file named in the config
//	demo apikey [-config FILE] -tenant T -account A  create an API key in auth.api_keys.file
package main

import (
	_ "embed"
	"fmt"
	"io"
	"os"
	"strings"
)

//go:embed default.yaml
var defaultConfig []byte

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return cmdServe(args, stdout, stderr)
	case "check":
		return cmdCheck(args, stdout, stderr)
	case "token":
		return cmdToken(args, stdout, stderr)
	case "apikey":
		return cmdAPIKey(args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "demo: unknown command %q\n%s", cmd, usage)
		return 2
	}
}

const usage = `usage:
  demo [serve] [-config FILE] [-addr HOST:PORT] [-redis URL | -redis-cluster URL]
                                                   serve (the embedded default config without -config;
                                                   -redis: share budgets in Redis, -redis-cluster:
                                                   in a Redis Cluster);
                                                   kill -HUP reloads the config, keeping unchanged budgets
  demo check [-config FILE]                        validate a config, like nginx -t
  demo token [-config FILE] [-issuer I] -sub S [-client-id C] [-tenant T] [-ttl D]
                                                   mint a dev token with a private_key_file from the config
  demo apikey [-config FILE] -tenant T -account A  create an API key (printed once; only its hash is stored)
`

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	path := fs.String("config", "", "config file to validate (default: the embedded default)")
	if !parseFlags(fs, args) {
		return 2
	}
	cfg, err := loadConfig(*path)
	if err == nil {
		_, err = build(cfg, discardLogger(), nil)
	}
	if err != nil {
		printConfigErrors(stderr, *path, err)
		return 1
	}
	fmt.Fprintf(stdout, "configuration %s is valid: %s, %s\n", configName(*path), plural(len(cfg.Policies), "policy", "policies"), plural(len(cfg.Auth.Issuers), "issuer", "issuers"))
	return 0
}

// plural returns "n one" or "n many" as n is 1 or not.
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
