package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

const reloadBase = `
listen: 127.0.0.1:0
trusted_proxies:
  cidrs: []
auth:
  anonymous: allow
policies:
  - name: kept
    key: [network]
    rate: 1/m
    burst: 2
    operations: ["GET /v1/reports/{id}"]
  - name: changed
    key: [network]
    rate: 1/m
    burst: 2
    operations: ["POST /v1/export"]
decision_header: true
`

// reloadServer builds a server from a config file in a temp dir.
func reloadServer(t *testing.T, cfg string) (*server, string, *strings.Builder) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ratekey.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s, logs := serverAt(t, path)
	return s, path, logs
}

// serverAt builds the demo's server from the config file at path, logging
// JSON into the returned builder.
func serverAt(t *testing.T, path string) (*server, *strings.Builder) {
	t.Helper()
	logs := &strings.Builder{}
	return startServer(t, path, newJSONLogger(logs)), logs
}

// startServer builds the demo's server from the config file at path,
// logging to logger.
func startServer(t *testing.T, path string, logger *slog.Logger) *server {
	t.Helper()
	c, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := build(c, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(path, logger, a)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hit(s http.Handler, method, path string) (int, string) {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w.Code, w.Header().Get("RateLimit-Decision")
}

// TestReloadKeepsUnchangedBudgets (the export route answers 202): a reload keeps the budgets of policies
// whose name, rate and burst are unchanged, restarts changed ones, logs each
// change, and refuses an invalid config or a store change, keeping the
// running one.
func TestReloadKeepsUnchangedBudgets(t *testing.T) {
	s, path, logs := reloadServer(t, reloadBase)
	for _, target := range []string{"/v1/reports/1", "/v1/export"} {
		method := http.MethodGet
		if target == "/v1/export" {
			method = http.MethodPost
		}
		for i, want := range []int{200, 200, 429} {
			if code, _ := hit(s, method, target); code != want && !(code == 202 && want == 200) {
				t.Fatalf("%s %s request %d: %d; want %d", method, target, i+1, code, want)
			}
		}
	}
	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// Invalid: refused, the running config and budgets stay.
	write(strings.Replace(reloadBase, "burst: 2\n    operations: [\"POST", "burst: 0\n    operations: [\"POST", 1))
	if err := s.reload(); err == nil || !strings.Contains(err.Error(), "burst: 0 must be >= 1") {
		t.Fatalf("invalid reload: %v", err)
	}
	if code, _ := hit(s, http.MethodGet, "/v1/reports/1"); code != 429 {
		t.Errorf("after a refused reload: %d; want 429", code)
	}
	if !strings.Contains(logs.String(), "ratekey reload refused") {
		t.Errorf("refusal not logged:\n%s", logs)
	}

	// A store change needs a restart.
	write(reloadBase + "limiter:\n  max_keys: 10\n")
	if err := s.reload(); err == nil || !strings.Contains(err.Error(), "restart the demo") {
		t.Fatalf("store change: %v", err)
	}

	// Valid: "changed" gets a new burst and starts fresh; "kept" is
	// untouched and keeps its budget.
	write(strings.Replace(reloadBase, "burst: 2\n    operations: [\"POST", "burst: 3\n    operations: [\"POST", 1))
	if err := s.reload(); err != nil {
		t.Fatal(err)
	}
	if code, _ := hit(s, http.MethodGet, "/v1/reports/1"); code != 429 {
		t.Errorf("kept after reload: %d; want 429 (budget kept)", code)
	}
	if code, _ := hit(s, http.MethodPost, "/v1/export"); code != http.StatusAccepted {
		t.Errorf("changed after reload: %d; want 202 (fresh bucket)", code)
	}
	for _, want := range []string{`"policy":"changed","change":"restarted","detail":"burst 2 -> 3"`, `"msg":"ratekey config reloaded"`,
		`"changes":1,"issuers":0,"api_keys":0`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}

// TestSIGHUPReloads: the demo process reloads its config on SIGHUP.
func TestSIGHUPReloads(t *testing.T) {
	dir := t.TempDir()
	addr, logs, cmd := startDemoProcess(t, dir, reloadBase)
	get := func() int {
		resp, err := http.Get("http://" + addr + "/v1/reports/1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, want := range []int{200, 200, 429} {
		if code := get(); code != want {
			t.Fatalf("request %d: %d; want %d", i+1, code, want)
		}
	}
	cfg := strings.Replace(reloadBase, "burst: 2\n    operations: [\"GET", "burst: 5\n    operations: [\"GET", 1)
	if err := os.WriteFile(filepath.Join(dir, "ratekey.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// Wait for the reload's log line (a signal is asynchronous).
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "ratekey config reloaded"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged:\n%s", logs)
		}
	}
	if code := get(); code != 200 {
		t.Errorf("after SIGHUP with a larger burst: %d; want 200 (fresh bucket)", code)
	}
	if !strings.Contains(logs.String(), `"policy":"kept","change":"restarted","detail":"burst 2 -> 5"`) {
		t.Errorf("change not logged:\n%s", logs)
	}
}

// TestMetricsEndpoint: /metrics answers admins only, exposes ratekey_*
// series, and survives a reload (one registry per process).
func TestMetricsEndpoint(t *testing.T) {
	cfg := reloadBase + "metrics: {enabled: true, allow: [192.0.2.0/24]}\n"
	s, _, _ := reloadServer(t, cfg)
	hit(s, http.MethodGet, "/v1/reports/1")
	scrape := func(peer string) (int, string) {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.RemoteAddr = peer
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, _ := scrape("203.0.113.9:1"); code != http.StatusNotFound {
		t.Errorf("outsider: %d; want 404", code)
	}
	code, body := scrape("192.0.2.1:1")
	if code != 200 || !strings.Contains(body, `ratekey_decisions_total{decision="PASSED",policy="kept"} 1`) {
		t.Fatalf("admin scrape: %d\n%s", code, body)
	}
	if err := s.reload(); err != nil {
		t.Fatal(err)
	}
	hit(s, http.MethodGet, "/v1/reports/1")
	if _, body := scrape("192.0.2.1:1"); !strings.Contains(body, `ratekey_decisions_total{decision="PASSED",policy="kept"} 2`) {
		t.Errorf("after a reload the counters restarted:\n%s", body)
	}
}

// TestReloadFlushesTheDecisionLog: a reload writes the replaced chain's
// pending decision-log summaries at once (Middleware.FlushLog), not when
// its interval ends; a refused reload writes none and keeps the chain.
func TestReloadFlushesTheDecisionLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "ratekey.yaml")
		cfg := "log: {interval: 1h}\npolicies:\n  - {name: tight, key: [network], rate: 1/m, burst: 1}\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		s := startServer(t, path, newJSONLogger(&logs))
		defer s.close()
		for range 6 { // one admitted, five rejected: a line, then counts
			call(s, "203.0.113.1:1", "/v1/reports/1", nil)
		}
		if strings.Contains(logs.String(), "ratekey decisions summarised") {
			t.Fatalf("a summary before the interval ended:\n%s", logs.String())
		}
		if err := os.WriteFile(path, []byte("policies: [{name: tight}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if s.reload() == nil || strings.Contains(logs.String(), "ratekey decisions summarised") {
			t.Fatalf("a refused reload flushed the running chain's log:\n%s", logs.String())
		}
		if w := call(s, "203.0.113.1:1", "/v1/reports/1", nil); w.Code != http.StatusTooManyRequests {
			t.Errorf("after a refused reload: %d; want 429 (the running chain and its budgets stay)", w.Code)
		}
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.reload(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), "ratekey decisions summarised") {
			t.Errorf("no summary after the reload:\n%s", logs.String())
		}
	})
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (a logger's
// output) and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
