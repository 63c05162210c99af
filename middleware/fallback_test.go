package middleware_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limiter/redis"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// TestLocalFallback: a policy with on_store_error local on Redis, with a
// memory fallback shared by 3 processes. While Redis answers, Redis
// decides. Killed, the first request's store error sends it to the
// fallback, which decides at its share (burst 9 over 3: 3 pass, then 429)
// and says so (fallback true, store memory, q=3); within the probe
// interval no request asks Redis; restarted, decisions return to Redis
// within one probe interval. A policy failing closed beside it refuses
// the request and the fallback is not charged.
func TestLocalFallback(t *testing.T) {
	srv := redistest.Start(t)
	calls := &redistest.Calls{}
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	client.AddHook(calls)
	t.Cleanup(func() { client.Close() })
	lim, err := redis.New(client, redis.Options{Timeout: 200 * time.Millisecond, DenyCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	local := perNetwork("30/m", 9)
	local.OnStoreError = policy.OnStoreErrorLocal
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Fallback: memory.New(memory.Options{Replicas: 3}),
		Policies: []policy.Policy{local}, Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	res := proxyResolver(t)
	r.With(middleware.Recorder, middleware.ClientAddress(res, middleware.ClientAddressOptions{}), rl.Handler).Get("/v1/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		rec := middleware.RecordFrom(r.Context())
		_ = json.NewEncoder(w).Encode(rec.Policies)
	})
	type result struct {
		code               int
		policy             string
		store              string
		fallback, decision string
	}
	get := func() result {
		req := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
		req.RemoteAddr = "198.51.100.7:1"
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		out := result{code: w.Code, policy: w.Header().Get("RateLimit-Policy")}
		var pols []map[string]any
		if w.Code == 200 && json.Unmarshal(w.Body.Bytes(), &pols) == nil && len(pols) == 1 {
			out.store, _ = pols[0]["store"].(string)
			out.decision, _ = pols[0]["decision"].(string)
			if pols[0]["fallback"] == true {
				out.fallback = "fallback"
			}
		}
		return out
	}
	if got, want := get(), (result{200, `"per-network";q=9;w=18`, "redis", "", "PASSED"}); got != want {
		t.Fatalf("Redis up: %+v; want %+v", got, want)
	}

	srv.Stop()
	killed := time.Now()
	want := []result{
		{200, `"per-network";q=3;w=18`, "memory", "fallback", "PASSED"},
		{200, `"per-network";q=3;w=18`, "memory", "fallback", "PASSED"},
		{200, `"per-network";q=3;w=18`, "memory", "fallback", "PASSED"},
		{429, `"per-network";q=3;w=18`, "", "", ""},
	}
	before := calls.N()
	for i, w := range want {
		if got := get(); got != w {
			t.Fatalf("Redis killed, request %d: %+v; want %+v", i+1, got, w)
		}
	}
	if n := calls.N() - before; time.Since(killed) < middleware.ProbeInterval && n != 1 {
		t.Errorf("Redis asked %d times within the probe interval after it failed; want 1 (the failing call)", n)
	}

	srv.Restart(t)
	restarted := time.Now()
	for {
		got := get()
		if got.store == "redis" {
			t.Logf("back on Redis %v after the restart", time.Since(restarted).Round(time.Millisecond))
			break
		}
		if time.Since(restarted) > 2*middleware.ProbeInterval+time.Second {
			t.Fatalf("still %+v %v after Redis restarted; want Redis within one probe interval", got, time.Since(restarted))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLocalFallbackNeedsStore: a local policy without a Fallback is
// refused, naming the field; a local policy whose share on the Fallback
// is below one token is refused.
func TestLocalFallbackNeedsStore(t *testing.T) {
	local := perNetwork("30/m", 2)
	local.OnStoreError = policy.OnStoreErrorLocal
	for _, tc := range []struct {
		fallback *memory.Limiter
		want     string
	}{
		{nil, `policies[0] ("per-network").on_store_error: local needs a fallback store (RateLimitConfig.Fallback: a memory store of this process)`},
		{memory.New(memory.Options{Replicas: 3}), `policies[0] ("per-network").burst: 2 shared by 3 replicas is 0 per process, below one: raise it to at least 3 or run fewer replicas`},
	} {
		cfg := middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Policies: []policy.Policy{local}, Operation: func(*http.Request) string { return "GET /" }}
		if tc.fallback != nil {
			cfg.Fallback = tc.fallback
		}
		_, err := middleware.NewRateLimiter(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v\nwant %s", err, tc.want)
		}
	}
}

// TestLocalFallbackAllOrNothing: with the store down, a policy failing
// closed (deny) beside a local one refuses the request (503), and the
// fallback is asked without charging: the local policy's bucket is full.
func TestLocalFallbackAllOrNothing(t *testing.T) {
	srv := redistest.Start(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	lim, err := redis.New(client, redis.Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	fallback := memory.New(memory.Options{})
	local := perNetwork("30/m", 3)
	local.OnStoreError = policy.OnStoreErrorLocal
	strict := policy.Policy{Name: "strict", Key: []limitkey.Dimension{}, Limit: limit("30/m", 5)}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Fallback: fallback,
		Policies: []policy.Policy{local, strict}, Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.With(middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}), rl.Handler).Get("/v1/reports/{id}", func(http.ResponseWriter, *http.Request) {})
	for i := range 2 {
		req := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
		req.RemoteAddr = "198.51.100.7:1"
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if w.Code != 503 {
			t.Fatalf("request %d with a deny policy on a dead store: %d; want 503", i+1, w.Code)
		}
	}
	d, err := fallback.Peek(context.Background(), nil, []limiter.Request{{Key: "per-network|network=198.51.100.7/32", Limit: local.Limit, Cost: 1}})
	if err != nil || !d[0].Allowed || d[0].Remaining != 2 {
		t.Errorf("the fallback's bucket after two refused requests: %+v, %v; want full (2 left after this peek)", d, err)
	}
}

// TestLocalFallbackCachedProbe: while Redis is stalled, a probe that the
// Redis limiter's deny cache answers (no round trip) says nothing of
// Redis: the store stays down, and the next request does not ask it (the
// request after a false "up" waited the whole timeout).
func TestLocalFallbackCachedProbe(t *testing.T) {
	srv := redistest.Start(t)
	calls := &redistest.Calls{}
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	client.AddHook(calls)
	t.Cleanup(func() { client.Close() })
	lim, err := redis.New(client, redis.Options{Timeout: 100 * time.Millisecond}) // deny cache on
	if err != nil {
		t.Fatal(err)
	}
	hot := policy.Policy{Name: "hot", Key: []limitkey.Dimension{}, Limit: limit("1/m", 1), OnStoreError: policy.OnStoreErrorLocal, Operations: []string{"GET /hot"}}
	other := perNetwork("60/m", 10)
	other.OnStoreError, other.Operations = policy.OnStoreErrorLocal, []string{"GET /other"}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Fallback: memory.New(memory.Options{}),
		Policies: []policy.Policy{hot, other}, Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.With(middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}), rl.Handler).Get("/hot", func(http.ResponseWriter, *http.Request) {})
	r.With(middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}), rl.Handler).Get("/other", func(http.ResponseWriter, *http.Request) {})
	get := func(path, peer string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = peer
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w.Code
	}
	if a, b := get("/hot", "198.51.100.1:1"), get("/hot", "198.51.100.1:1"); a != 200 || b != 429 {
		t.Fatalf("hot on Redis: %d, %d; want 200 then 429 (now in the deny cache)", a, b)
	}
	srv.Pause()
	defer srv.Resume()
	if c := get("/other", "198.51.100.2:1"); c != 200 { // times out: the store is down
		t.Fatalf("other with Redis stalled: %d; want 200 on the fallback", c)
	}
	time.Sleep(middleware.ProbeInterval + 50*time.Millisecond) // the next call is the probe
	if c := get("/hot", "198.51.100.1:1"); c != 429 {
		t.Fatalf("the probe on the cached bucket: %d; want 429 from the deny cache", c)
	}
	before := calls.N()
	if c := get("/other", "198.51.100.3:1"); c != 200 {
		t.Fatalf("other after the cached probe: %d; want 200 on the fallback", c)
	}
	if n := calls.N() - before; n != 0 {
		t.Errorf("Redis asked %d times after a probe the deny cache answered; want 0 (still down)", n)
	}
}

// TestLocalFallbackSurvivesReload: a RateLimiter built anew on the same
// store (a reload) knows the store is down: its first request does not
// ask the dead store (it waited the whole timeout before).
func TestLocalFallbackSurvivesReload(t *testing.T) {
	srv := redistest.Start(t)
	calls := &redistest.Calls{}
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	client.AddHook(calls)
	t.Cleanup(func() { client.Close() })
	lim, err := redis.New(client, redis.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	local := perNetwork("60/m", 9)
	local.OnStoreError = policy.OnStoreErrorLocal
	fallback := memory.New(memory.Options{})
	build := func() http.Handler {
		r := chi.NewRouter()
		rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: lim, Fallback: fallback,
			Policies: []policy.Policy{local}, Operation: middleware.RouteOperation(r), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		r.With(middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}), rl.Handler).Get("/v1/reports/{id}", func(http.ResponseWriter, *http.Request) {})
		return r
	}
	get := func(h http.Handler) int {
		req := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
		req.RemoteAddr = "198.51.100.7:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	first := build()
	srv.Pause()
	defer srv.Resume()
	if c := get(first); c != 200 { // times out: the store is down
		t.Fatalf("with Redis stalled: %d; want 200 on the fallback", c)
	}
	reloaded := build()
	before := calls.N()
	if c := get(reloaded); c != 200 {
		t.Fatalf("after the reload: %d; want 200 on the fallback", c)
	}
	if n := calls.N() - before; n != 0 {
		t.Errorf("the reloaded RateLimiter asked the stalled Redis %d times; want 0 (it is known down)", n)
	}
}
