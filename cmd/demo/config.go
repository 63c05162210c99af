package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/ratekey/ratekey/internal/regularfile"
)

// Config is the demo's YAML configuration. Field names are a public contract
// (users script against them): add fields, never rename them.
type Config struct {
	Listen         string               `yaml:"listen"`
	TrustedProxies TrustedProxiesConfig `yaml:"trusted_proxies"`
	Auth           AuthConfig           `yaml:"auth"`
	Policies       []PolicyConfig       `yaml:"policies"`
	Debug          DebugConfig          `yaml:"debug"`
	Metrics        MetricsConfig        `yaml:"metrics"`
	Log            LogConfig            `yaml:"log"`
	Limiter        LimiterConfig        `yaml:"limiter"`
	// GRPC serves the demo's gRPC services (off unless grpc.listen or
	// -grpc-addr is set).
	GRPC GRPCConfig `yaml:"grpc"`
	// DryRun puts every policy in dry run (nginx limit_req_dry_run on).
	DryRun bool `yaml:"dry_run"`
	// DecisionHeader adds the RateLimit-Decision response field.
	DecisionHeader bool `yaml:"decision_header"`

	// dir resolves relative key file paths: the config file's directory, or
	// the working directory for the embedded default.
	dir string
}

// TrustedProxiesConfig maps onto trustedproxy.Config. The v0 form (cidrs +
// header) is one rule; rules lists several, evaluated in order.
type TrustedProxiesConfig struct {
	CIDRs  []string     `yaml:"cidrs"`
	Header string       `yaml:"header"`
	Rules  []RuleConfig `yaml:"rules"`
	// MissingHeader: what a trusted peer that sent no forwarding header
	// gets: peer (keyed as the peer, reported; default) or reject (400).
	MissingHeader string `yaml:"missing_header"`
	// Aliases: header names some stacks fold into the real one
	// (X_Forwarded_For, X-Forwarded_For): ignore (default; never read) or
	// reject (400).
	Aliases string `yaml:"aliases"`
	// Refresh re-reads rules' file and url sources this often (Go duration).
	Refresh    string  `yaml:"refresh"`
	IPv4Prefix integer `yaml:"ipv4_prefix"`
	IPv6Prefix integer `yaml:"ipv6_prefix"`
	AllowAll   bool    `yaml:"allow_all"`
}

// RuleConfig is one trusted-proxy rule: when the peer is in from, read
// header (a list header like X-Forwarded-For or Forwarded, skipping trusted
// hops and then trusting hops more; or a single-address header such as
// CF-Connecting-IP).
type RuleConfig struct {
	From   []string `yaml:"from"`   // CIDRs, addresses, or private_ranges, loopback, link_local, unix
	Files  []string `yaml:"files"`  // more trusted ranges, one per line, re-read every refresh
	URLs   []string `yaml:"urls"`   // more trusted ranges from URLs (one per line), re-read every refresh
	Header string   `yaml:"header"` // empty: the peer is the client
	Hops   integer  `yaml:"hops"`   // take the hops-th entry from the right, after skipping from's ranges
}

// AuthConfig configures credential verification.
type AuthConfig struct {
	Anonymous string         `yaml:"anonymous"` // allow | reject (default reject)
	Leeway    string         `yaml:"leeway"`    // Go duration, e.g. 30s
	Issuers   []IssuerConfig `yaml:"issuers"`
	// APIKeys enables rk_ API keys: the key file (JSON Lines of ids and
	// HMACs, never secrets) and the pepper file.
	APIKeys *APIKeysConfig `yaml:"api_keys"`
	// Sources lists where credentials are read: header (default), query,
	// cookie. query and cookie leak credentials into logs and are opt-in.
	Sources []string `yaml:"sources"`
}

// APIKeysConfig locates the API key store.
type APIKeysConfig struct {
	File       string `yaml:"file"`
	PepperFile string `yaml:"pepper_file"`
}

// IssuerConfig is one issuer record.
type IssuerConfig struct {
	Issuer      string      `yaml:"issuer"`
	Tenant      string      `yaml:"tenant"`
	TenantClaim string      `yaml:"tenant_claim"`
	Tenants     []string    `yaml:"tenants"`
	Plan        string      `yaml:"plan"`       // optional fixed plan of the record's principals
	PlanClaim   string      `yaml:"plan_claim"` // or: the claim holding the plan, which must be one of plans
	Plans       []string    `yaml:"plans"`
	Audiences   []string    `yaml:"audiences"`
	Algorithms  []string    `yaml:"algorithms"`
	Keys        []KeyConfig `yaml:"keys"`
	JWKSURL     string      `yaml:"jwks_url"`     // instead of keys: the issuer's JWK Set (https)
	JWKSRefresh string      `yaml:"jwks_refresh"` // Go duration, default 1h
	Typ         string      `yaml:"typ"`          // required JWT typ header, e.g. at+jwt (RFC 9068)
}

// KeyConfig is one verification key of an issuer record.
type KeyConfig struct {
	KID            string `yaml:"kid"`
	PublicKeyFile  string `yaml:"public_key_file"`
	SecretFile     string `yaml:"secret_file"`
	PrivateKeyFile string `yaml:"private_key_file"`
	Alg            string `yaml:"alg"` // the one algorithm this key verifies, when the record allows several
}

// PolicyConfig is one rate-limit policy.
type PolicyConfig struct {
	Name         string    `yaml:"name"`
	Key          *[]string `yaml:"key"` // required: [] is one bucket for every request
	Rate         string    `yaml:"rate"`
	Burst        integer   `yaml:"burst"`
	Cost         integer   `yaml:"cost"`
	Operations   []string  `yaml:"operations"`
	Status       integer   `yaml:"status"`
	OnMissing    string    `yaml:"on_missing"`
	OnStoreError string    `yaml:"on_store_error"`
	// DelayAfter: tokens of the burst admitted without waiting; omitted
	// means burst (nginx nodelay). nginx burst=N delay=D is burst N+1,
	// delay_after D+1; plain burst=N is delay_after 1.
	DelayAfter *integer `yaml:"delay_after"`
	// PreAuth runs the policy before credentials are verified, so a flood
	// of bad tokens is limited before any signature check or JWKS fetch.
	// Only network and operation may be in its key.
	PreAuth bool `yaml:"pre_auth"`
	// MaxDelay: a Go duration; a longer wait is a rejection up front.
	MaxDelay string `yaml:"max_delay"`
	DryRun   bool   `yaml:"dry_run"`
	// Overrides give verified tenants, plans or accounts another limit;
	// the first match wins.
	Overrides []OverrideConfig `yaml:"overrides"`
	// MaxInFlight makes the policy an in-flight cap (nginx limit_conn)
	// instead of a token bucket: at most this many requests of one key
	// run at once. >= 1; no rate, burst, cost, delay_after or max_delay
	// beside it. "auto" makes it an adaptive cap of this process, between
	// min_in_flight and max_in_flight_ceiling, moved by latency.
	MaxInFlight *inFlight `yaml:"max_in_flight"`
	// MinInFlight and MaxInFlightCeiling bound an adaptive cap
	// (max_in_flight: auto): the ceiling is required (1 to 1000000),
	// min_in_flight defaults to 1.
	MinInFlight        integer `yaml:"min_in_flight"`
	MaxInFlightCeiling integer `yaml:"max_in_flight_ceiling"`
	// Priorities sort an adaptive cap's requests into classes, the first
	// entry that matches wins; the others are sheddable.
	Priorities []PriorityConfig `yaml:"priorities"`
	// Reserved is the share of an adaptive cap kept for critical requests,
	// a percentage such as 20%.
	Reserved *percent `yaml:"reserved"`
	// LimitLogFactor: a log line when an adaptive cap's limit moved by
	// more than this factor (default 2).
	LimitLogFactor float64 `yaml:"limit_log_factor"`
	// Lease: a Go duration, 1s to 1h (default 60s): how long a shared
	// store keeps the slot of a process that died mid-request.
	Lease string `yaml:"lease"`
	// RetryAfter: a Go duration; the Retry-After of an in-flight cap's
	// rejections (none by default).
	RetryAfter string `yaml:"retry_after"`
	// Settle makes cost a reservation that the handler's reported cost
	// replaces when it returns (ratekey.Policy.Settle): a refund below
	// it, a debt above it. POST /v1/complete reports its tokens=N.
	Settle bool `yaml:"settle"`
	// MaxCost bounds what one request settles at (a report above it is
	// clamped and logged); omitted means the burst. Only with settle.
	MaxCost integer `yaml:"max_cost"`
}

// OverrideConfig is one entry of a policy's overrides: exactly one of
// tenant, plan and account (the verified attribute it matches), and any of
// the limit's fields; those omitted are the policy's.
type OverrideConfig struct {
	Tenant     string   `yaml:"tenant"`
	Plan       string   `yaml:"plan"`
	Account    string   `yaml:"account"`
	Rate       string   `yaml:"rate"`
	Burst      integer  `yaml:"burst"`
	Cost       integer  `yaml:"cost"`
	DelayAfter *integer `yaml:"delay_after"`
	MaxDelay   string   `yaml:"max_delay"`
}

// PriorityConfig is one entry of an adaptive cap's priorities: any of
// tenant, plan (verified attributes) and operation to match, and the
// class (critical or sheddable) of the requests it matches.
type PriorityConfig struct {
	Tenant    string `yaml:"tenant"`
	Plan      string `yaml:"plan"`
	Operation string `yaml:"operation"`
	Class     string `yaml:"class"`
}

// GRPCConfig configures the demo's gRPC server: the standard health
// service (not limited, as /healthz) and ratekey.demo.v1.Work, under the
// policies of the /v1 routes (package grpclimit).
type GRPCConfig struct {
	// Listen is the gRPC server's host:port; "" (the default) serves no
	// gRPC. -grpc-addr overrides it.
	Listen string `yaml:"listen"`
}

// DebugConfig configures the debug endpoint.
type DebugConfig struct {
	Enabled bool     `yaml:"enabled"`
	Path    string   `yaml:"path"`
	Allow   []string `yaml:"allow"`
}

// MetricsConfig configures where ratekey's metrics go: the Prometheus
// endpoint (the default) or an OTLP/HTTP collector.
type MetricsConfig struct {
	Enabled bool     `yaml:"enabled"`
	Path    string   `yaml:"path"`  // default /metrics; exporter prometheus only
	Allow   []string `yaml:"allow"` // admin networks, required when enabled; exporter prometheus only
	// Exporter is "prometheus" (the default: package metrics, served on
	// Path) or "otlp" (package otelmetrics, pushed to Endpoint over
	// OTLP/HTTP by the OpenTelemetry SDK's periodic reader).
	Exporter string `yaml:"exporter"`
	// Endpoint is the OTLP/HTTP collector's URL, exporter otlp only
	// (default: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
	// OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318/v1/metrics);
	// a URL without a path gets /v1/metrics.
	Endpoint string `yaml:"endpoint"`
}

// The metrics exporters (metrics.exporter).
const (
	exporterPrometheus = "prometheus"
	exporterOTLP       = "otlp"
)

// LogConfig configures the decision log.
type LogConfig struct {
	// SamplePassed is the fraction of requests whose PASSED decisions are
	// logged too (0 to 1; default 0: only non-PASSED decisions).
	SamplePassed float64 `yaml:"sample_passed"`
	// EveryDecision writes a line for every non-PASSED decision. By default
	// (false) the log is bounded: per interval, the first decision of each
	// key gets its line and the rest are summarised (RateLimitConfig.
	// LogEveryDecision), so a client rejected at will cannot fill the disk.
	EveryDecision bool `yaml:"every_decision"`
	// Interval is the bounded log's interval, a Go duration from 1ns to 1h
	// (default 1s).
	Interval string `yaml:"interval"`
}

// LimiterConfig selects the limiter store.
type LimiterConfig struct {
	Store   string  `yaml:"store"` // memory (default) | redis
	MaxKeys integer `yaml:"max_keys"`
	// Replicas is the number of demo processes that share every budget,
	// each with its own memory store: each enforces its share of every
	// limit (limiter.Limit.Share: rate and burst / N, max_in_flight / N,
	// rounded down). 0 or 1: one process, the whole limit. With redis,
	// the local fallback's share (on_store_error: local). A reload may
	// change it (buckets keep their debt: memory.Limiter.WithReplicas).
	Replicas integer     `yaml:"replicas"`
	Redis    RedisConfig `yaml:"redis"`
}

// RedisConfig locates the Redis store shared by every demo process.
type RedisConfig struct {
	URL string `yaml:"url"` // redis://[user:password@]host:port/db, rediss://..., unix://...
	// ClusterURL is a Redis Cluster, instead of URL: go-redis
	// ParseClusterURL, redis://host:port?addr=host2:port2&addr=host3:port3.
	ClusterURL string `yaml:"cluster_url"`
	Prefix     string `yaml:"prefix"`  // key prefix, default "ratekey:"; no '{' or '}'
	Timeout    string `yaml:"timeout"` // per-decision bound, Go duration, default 100ms
	// HashTag names the key dimension whose value picks a bucket's Redis
	// Cluster slot (tenant, account, credential, network, operation; ""
	// spreads every key on its own).
	HashTag string `yaml:"hash_tag"`
	// HashSecretFile keys the HMAC that shortens over-long keys; every
	// process sharing budgets must use the same secret.
	HashSecretFile string `yaml:"hash_secret_file"`
	// DenyCache is the number of entries of the local deny cache, which
	// answers the requests of a bucket Redis rejected until Redis could
	// admit one again; omitted: 4096; 0 turns it off; at most 1000000.
	DenyCache *integer `yaml:"deny_cache"`
	// Prefetch is K, the most tokens the process takes from a bucket in
	// one script call and then admits locally for at most 50 ms (see
	// limiter/redis, "Prefetch"); omitted or 0: off; at most 1000000.
	Prefetch *integer `yaml:"prefetch"`
}

// integer is a YAML integer written in decimal. Go's YAML decoders turn
// 1.9 into 1, "5" into 5 and 0x10 into 16 without a word; a limit is no
// place for such guesses, so anything but a plain decimal integer is an error.
type integer int64

// UnmarshalYAML implements yaml.NodeUnmarshaler; errors name the field and line.
func (n *integer) UnmarshalYAML(node ast.Node) error {
	s := strings.TrimSpace(node.String())
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || node.Type() != ast.IntegerType || (len(s) > 1 && (s[0] == '0' || s[0] == '+' || strings.HasPrefix(s, "-0"))) {
		field := strings.TrimPrefix(node.GetPath(), "$.")
		line := 0
		if tok := node.GetToken(); tok != nil && tok.Position != nil {
			line = tok.Position.Line
		}
		if errors.Is(err, strconv.ErrRange) {
			return fmt.Errorf("%s (line %d): %s is out of range (at most %d)", field, line, shownValue(node), int64(math.MaxInt64))
		}
		return fmt.Errorf("%s (line %d): %s is not a decimal integer", field, line, shownValue(node))
	}
	*n = integer(v)
	return nil
}

// inFlight is max_in_flight: a decimal integer (a fixed cap), or auto (an
// adaptive one).
type inFlight struct {
	n    integer
	auto bool
}

// UnmarshalYAML implements yaml.NodeUnmarshaler: "auto", else an integer
// (whose errors name the field and line).
func (f *inFlight) UnmarshalYAML(node ast.Node) error {
	if node.Type() == ast.StringType && strings.TrimSpace(node.String()) == "auto" {
		f.auto = true
		return nil
	}
	if err := f.n.UnmarshalYAML(node); err != nil {
		return fmt.Errorf("%w (or auto, for an adaptive cap)", err)
	}
	return nil
}

// percent is a percentage written as such ("20%", "12.5%"), 0 to 99%,
// kept as a fraction (0.2). A bare number is refused: 0.2 could mean 20%
// or 0.2%.
type percent float64

// UnmarshalYAML implements yaml.NodeUnmarshaler; errors name the field and
// line.
func (p *percent) UnmarshalYAML(node ast.Node) error {
	s := strings.TrimSpace(node.String())
	num, ok := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || v < 0 || v > 99 || strings.ContainsAny(num, "eExXpP_+") {
		field := strings.TrimPrefix(node.GetPath(), "$.")
		line := 0
		if tok := node.GetToken(); tok != nil && tok.Position != nil {
			line = tok.Position.Line
		}
		return fmt.Errorf("%s (line %d): %s is not a percentage from 0%% to 99%% such as 20%%", field, line, shownValue(node))
	}
	*p = percent(v / 100)
	return nil
}

// multiLine is an ast.Visitor that finds the first scalar (key or value)
// written over several lines: a quoted string left open, a plain value
// with a more indented line below it, a block scalar. No value of this
// config needs more than one line, and one that swallowed the lines below
// it would carry them (a password, a token in a URL) into every error
// message and log line that names it; so the parse refuses it, naming
// only the line.
type multiLine struct{ at int }

func (v *multiLine) Visit(n ast.Node) ast.Visitor {
	if v.at > 0 {
		return nil
	}
	if _, ok := n.(ast.ScalarNode); ok {
		if tok := n.GetToken(); tok != nil && strings.ContainsAny(strings.TrimSpace(tok.Origin), "\r\n") { // YAML breaks lines at CR too
			v.at = 1
			if tok.Position != nil {
				v.at = tok.Position.Line
			}
			return nil
		}
	}
	return v
}

// firstAlias is an ast.Visitor that finds the first YAML alias (*name,
// including a merge key's <<: *name). The decoder expands aliases without
// bound, so a few hundred bytes of nested aliases would expand to billions
// of values and exhaust memory (the "billion laughs"), and a reload would
// take the running server down with it; this config needs none.
type firstAlias struct{ at int }

func (v *firstAlias) Visit(n ast.Node) ast.Visitor {
	if v.at > 0 {
		return nil
	}
	if _, ok := n.(*ast.AliasNode); ok {
		v.at = 1
		if tok := n.GetToken(); tok != nil && tok.Position != nil {
			v.at = tok.Position.Line
		}
		return nil
	}
	return v
}

// shownValue names a config value in an error: a scalar as [shown] does,
// and only the kind of anything else. The text of a mapping or a sequence
// spans the lines below it, where a password may be.
func shownValue(node ast.Node) string {
	if _, ok := node.(ast.ScalarNode); ok {
		if tok := node.GetToken(); tok != nil {
			return shown(tok.Value)
		}
	}
	return "a YAML " + strings.ToLower(node.Type().String())
}

// shown quotes a config value for an error message (which a reload also
// logs) when it is at most 64 bytes of one printable ASCII word, an
// operation's "METHOD /path" counting as one; any other value is named by
// its length only. A value that spans words may be a YAML scalar that
// swallowed the lines below it (an unclosed quote, an over-indented line),
// where a password or a token may be.
func shown(s string) string {
	word := func(w string) bool {
		for i := 0; i < len(w); i++ {
			if w[i] <= ' ' || w[i] > '~' {
				return false
			}
		}
		return w != ""
	}
	method, path, two := strings.Cut(s, " ")
	if s == "" || len(s) <= 64 && (word(s) || two && word(method) && strings.HasPrefix(path, "/") && word(path)) {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("a value of %d bytes (not shown)", len(s))
}

// parseConfig decodes YAML strictly (errors name the line, never quote
// the source: a neighbouring line may hold a password): unknown fields, duplicate keys, numbers
// that are not decimal integers and further YAML documents are errors.
func parseConfig(data []byte, dir string) (*Config, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark, which YAML allows
	if err := checkYAMLBounds(data); err != nil {
		return nil, err
	}
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, yamlError(err)
	}
	if len(file.Docs) > 1 {
		return nil, fmt.Errorf("config: %d YAML documents; a config is exactly one", len(file.Docs))
	}
	if len(file.Docs) == 1 {
		var lines multiLine
		ast.Walk(&lines, file.Docs[0])
		if lines.at > 0 {
			return nil, fmt.Errorf("config: line %d: a value spans several lines (an unclosed quote, or a line indented under it); every value of this config is one line", lines.at)
		}
		var alias firstAlias
		ast.Walk(&alias, file.Docs[0])
		if alias.at > 0 {
			return nil, fmt.Errorf("config: line %d: YAML aliases (*name) are not accepted; write the value out", alias.at)
		}
	}
	var c Config
	if err := yaml.UnmarshalWithOptions(data, &c, yaml.DisallowUnknownField()); err != nil {
		return nil, yamlError(err)
	}
	c.dir = dir
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Debug.Path == "" {
		c.Debug.Path = "/debug/ratekey"
	}
	if c.Metrics.Path == "" && c.Metrics.Exporter != exporterOTLP {
		c.Metrics.Path = "/metrics" // an OTLP exporter serves nothing
	}
	return &c, nil
}

// loadConfig reads the config file at path, or the embedded default when
// path is empty.
func loadConfig(path string) (*Config, error) {
	if path == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		return parseConfig(defaultConfig, wd)
	}
	data, err := regularfile.Read(path, maxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return parseConfig(data, filepath.Dir(abs))
}

// useRedis applies the -redis flag (url) or the -redis-cluster flag
// (clusterURL): the Redis store there, whatever the
// file says (its redis prefix and timeout are kept; replicas only when a
// policy has on_store_error local, for which it is the fallback's share).
// "" changes nothing.
func (c *Config) useRedis(url, clusterURL string) {
	if url != "" || clusterURL != "" {
		local := false
		for _, p := range c.Policies {
			local = local || p.OnStoreError == "local"
		}
		if !local {
			c.Limiter.Replicas = 0
		}
	}
	if url != "" {
		c.Limiter.Store, c.Limiter.MaxKeys, c.Limiter.Redis.URL, c.Limiter.Redis.ClusterURL = "redis", 0, url, ""
	}
	if clusterURL != "" {
		c.Limiter.Store, c.Limiter.MaxKeys, c.Limiter.Redis.URL, c.Limiter.Redis.ClusterURL = "redis", 0, "", clusterURL
	}
}

// maxKeyFileBytes bounds a key or secret file named in the config: a PEM
// RSA key of 8192 bits is under 7 KiB.
const maxKeyFileBytes = 64 << 10

// file resolves a path named in the config and reads it: a regular file of
// at most maxKeyFileBytes (a device such as /dev/zero would be read until
// memory ran out).
func (c *Config) file(name string) ([]byte, error) {
	if name == "" {
		return nil, errors.New("no file named")
	}
	return regularfile.Read(c.path(name), maxKeyFileBytes)
}
