package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/redistest"
)

// fleetConfig is three demo processes' config: one global bucket of 30
// an hour (nothing refills within a test) with the local fallback, on
// Redis at url.
func fleetConfig(url string) string {
	return `limiter:
  store: redis
  replicas: 3
  redis:
    url: ` + url + `
    timeout: 100ms
policies:
  - name: fleet
    key: []
    rate: 30/h
    burst: 30
    on_store_error: local
    operations: ["GET /v1/reports/{id}"]
`
}

// fleetHit sends one GET /v1/reports/1 to s and returns the status and
// the RateLimit-Policy field.
func fleetHit(s http.Handler) (int, string) {
	r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w.Code, w.Header().Get("RateLimit-Policy")
}

// TestFleetLocalFallback: three demo servers (three processes' worth:
// each its own Redis client and memory fallback) share a bucket of 30 in
// Redis. Redis killed mid-load: every request still gets a decision (no
// 503), each server admits its share (10) on its fallback and the fleet
// the budget (30) during the outage; restarted, every server decides on
// Redis again within one probe interval (1 s) plus the store timeout.
func TestFleetLocalFallback(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "ratekey.yaml")
	if err := os.WriteFile(path, []byte(fleetConfig(srv.URL())), 0o600); err != nil {
		t.Fatal(err)
	}
	var fleet []*server
	for range 3 {
		s, _ := serverAt(t, path)
		t.Cleanup(s.close)
		fleet = append(fleet, s)
	}
	const onRedis, onFallback = `"fleet";q=30;w=3600`, `"fleet";q=10;w=3600`
	for i, s := range fleet {
		for range 2 {
			if code, pol := fleetHit(s); code != 200 || pol != onRedis {
				t.Fatalf("server %d with Redis up: %d %s; want 200 %s", i, code, pol, onRedis)
			}
		}
	}

	srv.Stop()
	admitted := 0
	for i, s := range fleet {
		for range 15 {
			code, pol := fleetHit(s)
			switch {
			case code == 200 && pol == onFallback:
				admitted++
			case code == 429 && pol == onFallback:
			default:
				t.Fatalf("server %d with Redis down: %d %s; want 200 or 429 on the fallback (%s)", i, code, pol, onFallback)
			}
		}
	}
	if admitted != 30 {
		t.Errorf("the fleet admitted %d on its fallbacks while Redis was down; want 30 (10 each, the budget)", admitted)
	}

	srv.Restart(t)
	restarted := time.Now()
	for i, s := range fleet {
		for {
			if _, pol := fleetHit(s); pol == onRedis {
				break
			}
			if time.Since(restarted) > 3*time.Second {
				t.Fatalf("server %d still on its fallback %v after Redis restarted", i, time.Since(restarted))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("every server back on Redis %v after the restart", time.Since(restarted).Round(time.Millisecond))
}

// TestFleetReplicas: three demo servers with memory stores and
// limiter.replicas 3, flooded together: each admits its share (10 of 30)
// and states it, and the fleet admits the configured budget, not 3 x 30.
func TestFleetReplicas(t *testing.T) {
	cfg := strings.Replace(fleetConfig(""), "  store: redis\n", "", 1)
	cfg = strings.Replace(cfg, "  redis:\n    url: \n    timeout: 100ms\n", "", 1)
	cfg = strings.Replace(cfg, "    on_store_error: local\n", "", 1)
	path := filepath.Join(t.TempDir(), "ratekey.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	total := 0
	for i := range 3 {
		s, _ := serverAt(t, path)
		t.Cleanup(s.close)
		admitted := 0
		for range 15 {
			code, pol := fleetHit(s)
			if pol != `"fleet";q=10;w=3600` {
				t.Fatalf("server %d: RateLimit-Policy %s; want the share, q=10", i, pol)
			}
			if code == 200 {
				admitted++
			}
		}
		if admitted != 10 {
			t.Errorf("server %d admitted %d; want its share, 10", i, admitted)
		}
		total += admitted
	}
	if total != 30 {
		t.Errorf("the fleet admitted %d; want the budget, 30", total)
	}
}
