package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/internal/regularfile"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// store is the demo's limiter store and how to release it.
type store struct {
	limiter limiter.Limiter
	// fallback is the local store of policies with on_store_error local
	// (Redis only): a memory store at limiter.replicas' share.
	fallback limiter.Limiter
	close    func() // closes the Redis client; a no-op for memory
	// ping checks that the store answers (Redis PING); nil for memory.
	ping func(context.Context) error
}

// buildStore creates the store the limiter section names. Nothing connects
// here: a Redis client dials on first use, so `demo check` does no I/O.

// badRedisURL describes a Redis URL go-redis cannot parse, without
// quoting it (it may hold a password).
const badRedisURL = "not a valid redis://, rediss:// or unix:// URL (its scheme, host, port or database does not parse)"

// badClusterURL describes a Redis Cluster URL go-redis cannot parse,
// without quoting it.
const badClusterURL = "not a valid redis:// or rediss:// cluster URL such as redis://host:port?addr=host2:port2&addr=host3:port3 (its scheme, hosts, ports or options do not parse)"

// hashTagDimensions are the values of limiter.redis.hash_tag.
var hashTagDimensions = []string{"tenant", "account", "credential", "network", "operation"}

func buildStore(lc LimiterConfig, path func(string) string, logger *slog.Logger) (store, []error) {
	switch lc.Store {
	case "", "memory":
		if lc.MaxKeys < 0 {
			return store{}, []error{fmt.Errorf("limiter.max_keys: %d must be >= 0 (0 means the default)", lc.MaxKeys)}
		}
		if lc.Redis != (RedisConfig{}) {
			return store{}, []error{errors.New("limiter.redis: set only with store: redis")}
		}
		if err := checkReplicas(lc); err != nil {
			return store{}, []error{err}
		}
		return store{limiter: memory.New(memory.Options{MaxKeys: int(lc.MaxKeys), Replicas: int(lc.Replicas)}), close: func() {}}, nil
	case "redis":
		return buildRedis(lc, path, logger)
	}
	return store{}, []error{fmt.Errorf("limiter.store: %s is not supported (memory, redis)", shown(lc.Store))}
}

// maxReplicas bounds limiter.replicas.
const maxReplicas = 10_000

// checkReplicas checks limiter.replicas.
func checkReplicas(lc LimiterConfig) error {
	if lc.Replicas < 0 || lc.Replicas > maxReplicas {
		return fmt.Errorf("limiter.replicas: %d must be 0 to %d (the processes that share every budget; 0 or 1: this one alone)", lc.Replicas, maxReplicas)
	}
	return nil
}

// withReplicas returns s deciding at the share of n processes: its memory
// store (or, with Redis, its local fallback) replaced by a view of the
// same buckets at that share (memory.Limiter.WithReplicas), s itself
// untouched, so that a reload changes the share only when its
// configuration is swapped in. An unchanged count keeps the view itself:
// the adaptive caps of the rate limiter belong to the store it is given
// (one pointer), and a reload keeps them only on the same one.
func (s store) withReplicas(n int) store {
	if m, ok := s.limiter.(*memory.Limiter); ok && m.Replicas() != max(n, 1) {
		s.limiter = m.WithReplicas(n)
	}
	if m, ok := s.fallback.(*memory.Limiter); ok && m.Replicas() != max(n, 1) {
		s.fallback = m.WithReplicas(n)
	}
	return s
}

// maxDenyCache bounds limiter.redis.deny_cache: about 80 MB of entries.
const maxDenyCache = 1_000_000

// maxPrefetch bounds limiter.redis.prefetch, in tokens.
const maxPrefetch = 1_000_000

func buildRedis(lc LimiterConfig, path func(string) string, logger *slog.Logger) (store, []error) {
	var errs []error
	if lc.MaxKeys != 0 {
		errs = append(errs, errors.New("limiter.max_keys: applies to the memory store only (Redis bounds memory with its own maxmemory)"))
	}
	if err := checkReplicas(lc); err != nil {
		errs = append(errs, err)
	}
	opt, copt, uerrs := redisURLs(lc.Redis)
	o, oerrs := redisOptions(lc.Redis, path)
	if errs = append(append(errs, uerrs...), oerrs...); len(errs) > 0 {
		return store{}, errs
	}
	goredis.SetLogger(redisLog{logger})
	client := redisClient(opt, copt)
	lim, err := rkredis.New(client, o)
	if err != nil {
		_ = client.Close()
		return store{}, []error{fmt.Errorf("limiter.redis: %s", strings.TrimPrefix(err.Error(), "limiter/redis: "))}
	}
	fallback := memory.New(memory.Options{Replicas: int(max(lc.Replicas, 0))})
	// close gives the prefetched tokens back (Flush, at most a second)
	// before it closes the client.
	closeAll := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = lim.Flush(ctx)
		cancel()
		_ = client.Close()
	}
	return store{limiter: lim, fallback: fallback, close: closeAll, ping: func(ctx context.Context) error { return client.Ping(ctx).Err() }}, nil
}

// redisURLs checks limiter.redis.url and cluster_url (one of them) and
// parses the one given. The parsers' errors may quote the URL, password
// included: they are never shown.
func redisURLs(rc RedisConfig) (*goredis.Options, *goredis.ClusterOptions, []error) {
	switch {
	case rc.URL == "" && rc.ClusterURL == "":
		return nil, nil, []error{errors.New("limiter.redis.url: required, e.g. redis://127.0.0.1:6379/0 (or the -redis flag), unless limiter.redis.cluster_url names a Redis Cluster")}
	case rc.URL != "" && rc.ClusterURL != "":
		return nil, nil, []error{errors.New("limiter.redis.cluster_url: set url (one server) or cluster_url (a Redis Cluster), not both")}
	case rc.URL != "":
		opt, err := goredis.ParseURL(rc.URL)
		if err != nil {
			return nil, nil, []error{errors.New("limiter.redis.url: " + badRedisURL)}
		}
		return opt, nil, nil
	}
	copt, err := goredis.ParseClusterURL(rc.ClusterURL)
	if err != nil {
		return nil, nil, []error{errors.New("limiter.redis.cluster_url: " + badClusterURL)}
	}
	return nil, copt, nil
}

// redisOptions checks the other limiter.redis fields and returns the
// Redis limiter's options.
func redisOptions(rc RedisConfig, path func(string) string) (rkredis.Options, []error) {
	var errs []error
	o := rkredis.Options{Prefix: rc.Prefix, HashTag: rc.HashTag}
	if rc.HashTag != "" && !slices.Contains(hashTagDimensions, rc.HashTag) {
		errs = append(errs, fmt.Errorf("limiter.redis.hash_tag: %s is not a key dimension (%s)", shown(rc.HashTag), strings.Join(hashTagDimensions, ", ")))
	}
	if rc.DenyCache != nil { // omitted: the library's default size
		switch n := int64(*rc.DenyCache); {
		case n < 0 || n > maxDenyCache:
			errs = append(errs, fmt.Errorf("limiter.redis.deny_cache: %d entries, want 0 (off) to %d", n, maxDenyCache))
		case n == 0:
			o.DenyCache = -1 // off
		default:
			o.DenyCache = int(n)
		}
	}
	if rc.Prefetch != nil {
		if o.Prefetch = int64(*rc.Prefetch); o.Prefetch < 0 || o.Prefetch > maxPrefetch {
			errs = append(errs, fmt.Errorf("limiter.redis.prefetch: %d tokens, want 0 (off) to %d", o.Prefetch, maxPrefetch))
		}
	}
	if rc.Timeout != "" {
		d, err := time.ParseDuration(rc.Timeout)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("limiter.redis.timeout: %s is not a positive duration such as 100ms", shown(rc.Timeout)))
		}
		o.Timeout = d
	}
	if rc.HashSecretFile != "" {
		b, err := regularfile.Read(path(rc.HashSecretFile), maxKeyFileBytes)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("limiter.redis.hash_secret_file: %v", err))
		case len(bytes.TrimSpace(b)) < 16:
			errs = append(errs, errors.New("limiter.redis.hash_secret_file: holds fewer than 16 bytes"))
		}
		o.HashSecret = bytes.TrimSpace(b)
	}
	return o, errs
}

// redisClient makes the go-redis client of opt (one server) or copt (a
// Cluster). ContextTimeoutEnabled: the limiter's timeout bounds reads too.
// DialerRetries 1: a refused connection fails the call at once (go-redis
// dials 5 times, 100 ms apart, by default: a dead Redis cost every call its
// whole timeout, and the local fallback's first request too).
func redisClient(opt *goredis.Options, copt *goredis.ClusterOptions) goredis.UniversalClient {
	if copt != nil {
		copt.ContextTimeoutEnabled, copt.DialerRetries = true, 1
		return goredis.NewClusterClient(copt)
	}
	opt.ContextTimeoutEnabled, opt.DialerRetries = true, 1
	return goredis.NewClient(opt)
}

// checkWindows refuses limits the Redis store cannot hold exactly: a window
// (burst × interval) above 2^53-1 ns, about 104 days.
func checkWindows(lc LimiterConfig, policies []ratekey.Policy) []error {
	if lc.Store != "redis" {
		return nil
	}
	var errs []error
	for i, p := range policies {
		if w := gcra.Window(p.Limit); w > gcra.MaxWindow {
			errs = append(errs, fmt.Errorf("%s: burst %d at %v refills in %v, longer than the Redis store's %v", policyRef(i, p.Name), p.Limit.Burst, p.Limit.Rate, w.Round(time.Hour), gcra.MaxWindow.Round(time.Hour)))
		}
	}
	return errs
}

// redisLog sends go-redis's own messages (dial failures, pool events) to the
// demo's JSON log instead of plain text on stderr.
type redisLog struct{ logger *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.logger.WarnContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

// warnIfUnreachable logs a warning when the store does not answer a ping
// within a second: the demo starts anyway (the store may come up later),
// but until it answers every limited request gets its policy's
// on_store_error outcome, and the per-request log lines only say that the
// store did not answer in time, not why.
func warnIfUnreachable(st store, logger *slog.Logger) {
	if st.ping == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := st.ping(ctx); err != nil {
		logger.Warn("ratekey: the Redis store does not answer; limited requests get their on_store_error outcome until it does",
			slog.String("error", err.Error()))
	}
}
