// Command demo is ratekey's reference deployment: a chi server whose /v1 API
// is keyed and limited by ratekey, configured from YAML.
//
// Usage:
//
//	demo [serve] [-config FILE] [-addr HOST:PORT] [-grpc-addr HOST:PORT] [-redis URL | -redis-cluster URL]
//	                                                 serve (embedded default config without -config);
//	                                                 SIGHUP reloads the config, keeping unchanged budgets
//	demo check -config FILE                          validate a config, like nginx -t
//	demo token [-config FILE] [-issuer I] -sub S [-client-id C] [-tenant T] [-plan P] [-ttl D]
//	                                                 mint a dev token with a private key file named in the config
//	demo apikey [-config FILE] -tenant T -account A [-plan P]
//	                                                 create an API key in auth.api_keys.file
//	demo grpc-call [-addr HOST:PORT] [-method M] [-token T] [-x-forwarded-for X] [-timeout D]
//	                                                 call the demo's gRPC server, print status, details, ratelimit
//	demo help                                        this usage and every command's flags
package main

import (
	_ "embed"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/policy"
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
	case "grpc-call":
		return cmdGRPCCall(args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		for _, c := range flagCommands {
			fmt.Fprint(stdout, flagHelp(c.name, c.run))
		}
		return 0
	default:
		fmt.Fprintf(stderr, "demo: unknown command %q\n%s", cmd, usage)
		return 2
	}
}

const usage = `usage:
  demo [serve] [-config FILE] [-addr HOST:PORT] [-grpc-addr HOST:PORT] [-redis URL | -redis-cluster URL]
                                                   serve (the embedded default config without -config;
                                                   -grpc-addr: serve gRPC too, under the same policies;
                                                   -redis: share budgets in Redis, -redis-cluster:
                                                   in a Redis Cluster);
                                                   kill -HUP reloads the config, keeping unchanged budgets
  demo check [-config FILE]                        validate a config, like nginx -t
  demo token [-config FILE] [-issuer I] -sub S [-client-id C] [-tenant T] [-plan P] [-ttl D]
                                                   mint a dev token with a private_key_file from the config
  demo apikey [-config FILE] -tenant T -account A [-plan P]
                                                   create an API key (printed once; only its hash is stored)
  demo grpc-call [-addr HOST:PORT] [-method M] [-token T] [-x-forwarded-for X] [-timeout D]
                                                   call the demo's gRPC server (no grpcurl needed): print the
                                                   status, its details and the ratelimit metadata
  demo help                                        this usage and every command's flags
`

// flagCommands are the commands with flags, in the order usage lists them.
var flagCommands = []struct {
	name string
	run  func(args []string, stdout, stderr io.Writer) int
}{{"serve", cmdServe}, {"check", cmdCheck}, {"token", cmdToken}, {"apikey", cmdAPIKey}, {"grpc-call", cmdGRPCCall}}

// flagHelp returns the flag list of command name, taken from its flag set:
// what `demo name -h` prints after the usage ("\nflags of demo name:\n"
// and flag.PrintDefaults), so that help never lacks a flag. -h stops a
// command at flag parsing, before it does anything.
func flagHelp(name string, run func(args []string, stdout, stderr io.Writer) int) string {
	var b strings.Builder
	run([]string{"-h"}, io.Discard, &b)
	return strings.TrimPrefix(b.String(), usage)
}

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	path := fs.String("config", "", "config file to validate (default: the embedded default)")
	if !parseFlags(fs, args) {
		return 2
	}
	cfg, err := loadConfig(*path)
	var a *app
	if err == nil {
		a, err = build(cfg, discardLogger(), nil)
	}
	if err != nil {
		printConfigErrors(stderr, *path, err)
		return 1
	}
	discardOTLP(a.otel)
	fmt.Fprintf(stdout, "configuration %s is valid: %s, %s\n", configName(*path), plural(len(cfg.Policies), "policy", "policies"), plural(len(cfg.Auth.Issuers), "issuer", "issuers"))
	printShares(stdout, cfg.Limiter, a.policies)
	printAdaptive(stdout, cfg.Limiter, a.policies)
	return 0
}

// printAdaptive lists the adaptive caps (max_in_flight: auto): each is
// this process's (its latency is), whatever the store: with Redis, or
// limiter.replicas, every process runs its own, and the store is never
// asked.
func printAdaptive(w io.Writer, lc LimiterConfig, policies []ratekey.Policy) {
	header := "adaptive caps, each this process's own (moved by its latency; never shared, never in the store):\n"
	if lc.Store == "redis" {
		header = "adaptive caps, each this process's own (moved by its latency): with Redis too, every process runs its own and Redis is not asked:\n"
	}
	for i := range policies {
		p := &policies[i]
		l := p.Limit
		if l.MaxInFlightCeiling == 0 {
			continue
		}
		fmt.Fprint(w, header)
		header = ""
		per := "one cap"
		if len(p.Key) > 0 {
			per = "a cap per operation"
		}
		fmt.Fprintf(w, "  %s: %s, %d to %d requests at once (starts at %d)", p.Name, per, max(l.MinInFlight, 1), l.MaxInFlightCeiling, max(l.MinInFlight, 1))
		if len(p.Priorities) > 0 {
			fmt.Fprintf(w, "; %s, %g%% reserved for critical requests", plural(len(p.Priorities), "priority", "priorities"), p.Reserved*100)
		}
		fmt.Fprintln(w)
	}
}

// printShares lists, when n > 1 processes share every budget
// (limiter.replicas), the limit each process enforces per policy and
// override (limiter.Limit.Share; build has checked that each keeps a
// token or a slot): on Redis, only the local fallback's, of the policies
// with on_store_error local.
func printShares(w io.Writer, lc LimiterConfig, policies []ratekey.Policy) {
	n := lc.Replicas
	if n <= 1 {
		return
	}
	redis := lc.Store == "redis"
	if redis {
		fmt.Fprintf(w, "limiter.replicas %d: while Redis cannot decide, each process enforces on its local fallback:\n", n)
	} else {
		fmt.Fprintf(w, "limiter.replicas %d: each process enforces its share of every limit:\n", n)
	}
	for i := range policies {
		p := &policies[i]
		if redis && p.OnStoreError != policy.OnStoreErrorLocal {
			continue
		}
		fmt.Fprintf(w, "  %s: %s\n", p.Name, shareText(p.Limit, int64(n)))
		for j := range p.Overrides {
			o := &p.Overrides[j]
			l := o.Limit
			if l.Rate == (limiter.Rate{}) {
				l.Rate = p.Limit.Rate
			}
			if l.Burst == 0 {
				l.Burst = p.Limit.Burst
			}
			fmt.Fprintf(w, "    overrides[%d]: %s\n", j, shareText(l, int64(n)))
		}
	}
}

// shareText describes l's share of n: "rate 10 per 3s, burst 6 (of 10/s,
// burst 20)", "max_in_flight 3 (of 10)", or "adaptive: not shared".
func shareText(l limiter.Limit, n int64) string {
	s, err := l.Share(n)
	if err != nil {
		return err.Error()
	}
	if l.MaxInFlightCeiling != 0 {
		return "adaptive: not shared (each process caps itself from its own latency)"
	}
	if l.MaxInFlight != 0 {
		return fmt.Sprintf("max_in_flight %d (of %d)", s.MaxInFlight, l.MaxInFlight)
	}
	return fmt.Sprintf("rate %v, burst %d (of %v, burst %d)", s.Rate, s.Burst, l.Rate, l.Burst)
}

// plural returns "n one" or "n many" as n is 1 or not.
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
