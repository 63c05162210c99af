package main

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/redistest"
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
	addrA, logsA, _ := startDemoProcess(t, filepath.Join(dir), sharedConfig, "-redis", srv.URL())
	dirB := t.TempDir()
	addrB, _, _ := startDemoProcess(t, dirB, sharedConfig, "-redis", srv.URL())

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
