package main

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// sharedConfig: one per-network budget of 5, nothing refilling within the
// test, and a second policy that fails open.
const sharedConfig = `
listen: 127.0.0.1:0
trusted_proxies: {cidrs: []}
auth: {anonymous: allow}
policies:
  - {name: shared, key: [network], rate: 1/h, burst: 5, operations: ["GET /v1/reports/{id}"]}
  - {name: open, key: [network], rate: 1/h, burst: 5, operations: ["POST /v1/export"], on_store_error: allow}
limiter:
  redis: {prefix: "e2e:", timeout: 200ms}
`

// TestTwoDemosShareOneRedisBudget: two demo processes on one Redis admit
// exactly one burst between them, however the requests are spread; with
// Redis down a fail-closed policy answers 503 within the timeout and a
// fail-open one lets requests through; when Redis is back, decisions resume
// without restarting the demos.
func TestTwoDemosShareOneRedisBudget(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	// The deny cache off: every answer below is Redis's (or its error's).
	config := strings.Replace(sharedConfig, "timeout: 200ms}", "timeout: 200ms, deny_cache: 0}", 1)
	addrA, logsA, _ := startDemoProcess(t, filepath.Join(dir), config, "-redis", srv.URL())
	dirB := t.TempDir()
	addrB, _, _ := startDemoProcess(t, dirB, config, "-redis", srv.URL())

	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range 20 {
		addr := addrA
		if i%2 == 1 {
			addr = addrB
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get("http://" + addr + "/v1/reports/1")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[200] != 5 || codes[429] != 15 {
		t.Fatalf("statuses %v; want exactly 5 × 200 and 15 × 429 across both demos", codes)
	}

	srv.Stop()
	start := time.Now()
	resp, err := http.Get("http://" + addrA + "/v1/reports/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("Redis down, on_store_error deny: %d (Retry-After %q); want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the fail-closed answer took %v; the timeout is 200ms", d)
	}
	resp, err = http.Post("http://"+addrB+"/v1/export", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("Redis down, on_store_error allow: %d; want 202", resp.StatusCode)
	}

	srv.Restart(t) // same port, empty
	resp, err = http.Get("http://" + addrA + "/v1/reports/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after Redis came back (empty): %d; want 200", resp.StatusCode)
	}
	if strings.Contains(logsA.String(), "panic") {
		t.Errorf("demo log holds a panic:\n%s", logsA)
	}
}

// TestDenyCacheWhileRedisDown: with the deny cache on (the default), a
// bucket Redis rejected is still answered 429 by the process while Redis
// is down (it is known to be in debt for an hour), while another bucket
// gets the store error's 503.
func TestDenyCacheWhileRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	addr, _, _ := startDemoProcess(t, t.TempDir(), sharedConfig, "-redis", srv.URL())
	get := func(path string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 6 {
		want := 200
		if i == 5 {
			want = 429
		}
		if code := get("/v1/reports/1"); code != want {
			t.Fatalf("request %d: %d; want %d", i+1, code, want)
		}
	}
	srv.Stop()
	if code := get("/v1/reports/1"); code != 429 {
		t.Errorf("Redis down, a bucket known in debt: %d; want 429 from the deny cache", code)
	}
}

// TestWarnsWhenRedisDoesNotAnswer: at start-up a Redis store that does not
// answer a PING is logged as a warning (the demo still starts); a memory
// store is not pinged.
func TestWarnsWhenRedisDoesNotAnswer(t *testing.T) {
	logs := &strings.Builder{}
	logger := newJSONLogger(logs)
	mem, errs := buildStore(LimiterConfig{}, func(p string) string { return p }, logger)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	warnIfUnreachable(mem, logger)
	if logs.Len() != 0 {
		t.Fatalf("memory store: %s", logs)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a port nothing listens on
	rs, errs := buildStore(LimiterConfig{Store: "redis", Redis: RedisConfig{URL: "redis://" + addr + "/0"}}, func(p string) string { return p }, logger)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	defer rs.close()
	warnIfUnreachable(rs, logger)
	if want := `"msg":"ratekey: the Redis store does not answer`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs)
	}
}

// TestCheckRedisCluster: demo check validates limiter.redis.cluster_url
// (parsed, never shown: it may hold a password; exclusive with url) and
// limiter.redis.hash_tag (a key dimension), and accepts a valid cluster
// without connecting to it.
func TestCheckRedisCluster(t *testing.T) {
	for _, tt := range []struct{ name, config, want string }{
		{"url and cluster_url", "limiter: {store: redis, redis: {url: \"redis://127.0.0.1:1/0\", cluster_url: \"redis://127.0.0.1:1?addr=127.0.0.1:2\"}}\n", "limiter.redis.cluster_url: set url (one server) or cluster_url (a Redis Cluster), not both"},
		{"bad cluster_url hides the password", "limiter: {store: redis, redis: {cluster_url: \"redis://u:hunter2@127.0.0.1:1?addr=[bad\"}}\n", "limiter.redis.cluster_url: not a valid redis:// or rediss:// cluster URL"},
		{"cluster_url with an unknown option", "limiter: {store: redis, redis: {cluster_url: \"redis://u:hunter2@127.0.0.1:1?bogus=1\"}}\n", "limiter.redis.cluster_url: not a valid"},
		{"hash_tag not a dimension", "limiter: {store: redis, redis: {cluster_url: \"redis://127.0.0.1:1\", hash_tag: plan}}\n", `limiter.redis.hash_tag: "plan" is not a key dimension (tenant, account, credential, network, operation)`},
		{"prefix with a brace", "limiter: {store: redis, redis: {cluster_url: \"redis://127.0.0.1:1\", prefix: \"rk:{rl}:\"}}\n", `limiter.redis: prefix "rk:{rl}:" holds '{' or '}'`},
		{"neither url", "limiter: {store: redis, redis: {hash_tag: tenant}}\n", "unless limiter.redis.cluster_url names a Redis Cluster"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, tt.config))
			if code != 1 || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, want 1 and %q in:\n%s", code, tt.want, errOut)
			}
			if strings.Contains(errOut, "hunter2") {
				t.Errorf("error output shows a password:\n%s", errOut)
			}
		})
	}
	ok := "limiter: {store: redis, redis: {cluster_url: \"redis://127.0.0.1:1?addr=127.0.0.1:2&addr=127.0.0.1:3\", hash_tag: tenant}}\n" +
		"policies:\n  - {name: p, key: [network], rate: 1/s, burst: 2}\n"
	if code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, ok)); code != 0 {
		t.Fatalf("a valid cluster config: exit %d\n%s", code, errOut)
	}
	for _, args := range [][]string{
		{"serve", "-redis-cluster", "redis://u:hunter2@127.0.0.1:1?addr=[bad"},
		{"serve", "-redis", "redis://127.0.0.1:1/0", "-redis-cluster", "redis://127.0.0.1:1"},
	} {
		code, _, errOut := runDemo(t, args...)
		if code != 2 || !strings.Contains(errOut, "-redis-cluster") || strings.Contains(errOut, "hunter2") {
			t.Errorf("%v: exit %d, want 2 naming -redis-cluster without the password:\n%s", args, code, errOut)
		}
	}
}

// TestCheckRedisDenyCache: limiter.redis.deny_cache is a count of entries,
// 0 (off) to 1000000; omitted is the library's default.
func TestCheckRedisDenyCache(t *testing.T) {
	policy := "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 2}\n"
	for _, tt := range []struct{ name, value, want string }{
		{"negative", "-1", "limiter.redis.deny_cache: -1 entries, want 0 (off) to 1000000"},
		{"too large", "1000001", "limiter.redis.deny_cache: 1000001 entries, want 0 (off) to 1000000"},
		{"not an integer", "1.5", "is not a decimal integer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := "limiter: {store: redis, redis: {url: \"redis://127.0.0.1:1/0\", deny_cache: " + tt.value + "}}\n" + policy
			code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, config))
			if code != 1 || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, want 1 and %q in:\n%s", code, tt.want, errOut)
			}
		})
	}
	for _, v := range []string{"0", "1", "100000"} {
		config := "limiter: {store: redis, redis: {url: \"redis://127.0.0.1:1/0\", deny_cache: " + v + "}}\n" + policy
		if code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, config)); code != 0 {
			t.Errorf("deny_cache: %s: exit %d\n%s", v, code, errOut)
		}
	}
}

// TestCheckRedisPrefetch: limiter.redis.prefetch is K, in tokens, 0 (off)
// to 1000000; with store memory it is refused like every limiter.redis
// field.
func TestCheckRedisPrefetch(t *testing.T) {
	policy := "policies:\n  - {name: p, key: [network], rate: 1/s, burst: 2}\n"
	for _, tt := range []struct{ name, limiter, want string }{
		{"negative", "{store: redis, redis: {url: \"redis://127.0.0.1:1/0\", prefetch: -1}}", "limiter.redis.prefetch: -1 tokens, want 0 (off) to 1000000"},
		{"too large", "{store: redis, redis: {url: \"redis://127.0.0.1:1/0\", prefetch: 1000001}}", "limiter.redis.prefetch: 1000001 tokens, want 0 (off) to 1000000"},
		{"not an integer", "{store: redis, redis: {url: \"redis://127.0.0.1:1/0\", prefetch: 1.5}}", `config: limiter.redis.prefetch (line 1): "1.5" is not a decimal integer`},
		{"store memory", "{redis: {prefetch: 64}}", "limiter.redis: set only with store: redis"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := "limiter: " + tt.limiter + "\n" + policy
			code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, config))
			if code != 1 || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, want 1 and %q in:\n%s", code, tt.want, errOut)
			}
		})
	}
	for _, v := range []string{"0", "1", "1000000"} {
		config := "limiter: {store: redis, redis: {url: \"redis://127.0.0.1:1/0\", prefetch: " + v + "}}\n" + policy
		if code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, config)); code != 0 {
			t.Errorf("prefetch: %s: exit %d\n%s", v, code, errOut)
		}
	}
}

// clusterConfig: a per-network budget of 5 and a shared per-operation one
// of 8 on one operation; their keys fall in different slots.
const clusterConfig = `
listen: 127.0.0.1:0
trusted_proxies: {cidrs: []}
auth: {anonymous: allow}
policies:
  - {name: per-ip, key: [network], rate: 1/h, burst: 5, operations: ["GET /v1/reports/{id}"]}
  - {name: shared, key: [operation], rate: 1/h, burst: 8, operations: ["GET /v1/reports/{id}"]}
limiter:
  redis: {prefix: "e2e:", timeout: 200ms}
`

// TestTwoDemosShareOneClusterBudget: two demo processes on a 3-master
// Redis Cluster (-redis-cluster) admit exactly one per-network burst
// between them, and the shared per-operation bucket, in another slot,
// keeps no charge for the requests the per-network policy rejected (the
// all-or-nothing contract across slots, refunds included).
func TestTwoDemosShareOneClusterBudget(t *testing.T) {
	c := redistest.StartMasters(t, 3)
	addrA, logsA, _ := startDemoProcess(t, t.TempDir(), clusterConfig, "-redis-cluster", c.URL())
	addrB, _, _ := startDemoProcess(t, t.TempDir(), clusterConfig, "-redis-cluster", c.URL())
	codes := map[int]int{}
	for i := range 20 {
		addr := addrA
		if i%2 == 1 {
			addr = addrB
		}
		resp, err := http.Get("http://" + addr + "/v1/reports/1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[200] != 5 || codes[429] != 15 {
		t.Fatalf("statuses %v; want exactly 5 × 200 and 15 × 429 across both demos", codes)
	}
	n := c.Keys(t)
	if n[0]+n[1]+n[2] != 2 || n[0] == 2 || n[1] == 2 || n[2] == 2 {
		t.Errorf("keys per master %v; want the two buckets on two masters", n)
	}
	// The shared bucket (burst 8) was charged by the 5 admitted requests
	// only: 3 more pass for another network, the 4th is rejected.
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	defer client.Close()
	lim, err := rkredis.New(client, rkredis.Options{Prefix: "e2e:"})
	if err != nil {
		t.Fatal(err)
	}
	shared := limiter.Request{Key: "shared|operation=GET /v1/reports/{id}", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Hour}, Burst: 8}, Cost: 1}
	for i := range 4 {
		d, err := lim.Take(t.Context(), nil, []limiter.Request{shared})
		if err != nil {
			t.Fatal(err)
		}
		if d[0].Allowed != (i < 3) {
			t.Fatalf("take %d of the shared bucket after the load: allowed %v; want the bucket charged 5 times only", i, d[0].Allowed)
		}
	}
	if strings.Contains(logsA.String(), "panic") {
		t.Errorf("demo log holds a panic:\n%s", logsA)
	}
}
