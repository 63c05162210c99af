package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/policy"

	"github.com/ratekey/ratekey/limiter/memory"
)

// TestStoreFullRetryAfter: a full memory store's 503 says when the store
// can next take the key (its earliest state full again, rounded up to
// whole seconds), not 1 s; the debug view agrees; once that time comes the
// new key is admitted.
func TestStoreFullRetryAfter(t *testing.T) {
	p := perNetwork("1/s", 60) // an empty bucket refills in 60 s
	p.Cost = 60                // each request empties it
	s := newStack(t, stackOptions{anonymous: true, maxKeys: 2, policies: []policy.Policy{p}})
	get := func(peer string) *httptest.ResponseRecorder {
		t.Helper()
		return s.do(req{path: "/v1/reports/1", peer: peer})
	}
	if w := get("198.51.100.7:1"); w.Code != 200 { // full again at 60 s
		t.Fatalf("first network: %d", w.Code)
	}
	s.clock.Set(15 * time.Second)
	if w := get("198.51.100.8:1"); w.Code != 200 { // full again at 75 s
		t.Fatalf("second network: %d", w.Code)
	}
	for _, tc := range []struct {
		at       time.Duration
		want     string
		wantSecs float64 // as JSON decodes it
	}{
		{15 * time.Second, "45", 45}, // the earliest state (60 s), not the latest
		{0, "60", 60},
		{59*time.Second + 500*time.Millisecond, "1", 1}, // 0.5 s, rounded up
	} {
		s.clock.Set(tc.at)
		w := get("203.0.113.9:1")
		if w.Code != 503 || w.Header().Get("Retry-After") != tc.want {
			t.Errorf("new network at %v: %d, Retry-After %q; want 503, %s", tc.at, w.Code, w.Header().Get("Retry-After"), tc.want)
		}
		if p := decodeProblem(t, w.Body.String()); p.Type != "urn:ratekey:problem:store-unavailable" {
			t.Errorf("new network at %v: problem %+v", tc.at, p)
		}
		// The admin's network is a new key too: the debug view shows the same wait.
		pol := getDebug(t, s, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1"})["policies"].([]any)[0].(map[string]any)
		if pol["decision"] != "ERROR" || pol["fail_mode"] != "deny" || pol["retry_after_seconds"] != tc.wantSecs {
			t.Errorf("debug at %v: %v; want ERROR, deny, retry_after_seconds %s", tc.at, pol, tc.want)
		}
	}
	s.clock.Set(60 * time.Second)
	if w := get("203.0.113.9:1"); w.Code != 200 {
		t.Errorf("new network at 60 s: %d; want 200 (the first state is full again)", w.Code)
	}
}

// TestStoreErrorRetryAfter: the log line of a full store's ERROR carries
// the 503's Retry-After; any other store error keeps Retry-After: 1.
func TestStoreErrorRetryAfter(t *testing.T) {
	clk := clocktest.NewManualClock()
	p := perNetwork("1/s", 60)
	p.Cost = 60
	s := newObservedStack(t, memory.New(memory.Options{MaxKeys: 1, Now: clk.Time}), p)
	if code := s.get("198.51.100.7:1"); code != 200 {
		t.Fatalf("first network: %d", code)
	}
	clk.Set(30 * time.Second)
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
	r.RemoteAddr = "198.51.100.8:1"
	s.handler.ServeHTTP(w, r)
	if w.Code != 503 || w.Header().Get("Retry-After") != "30" {
		t.Errorf("full store: %d, Retry-After %q; want 503, 30", w.Code, w.Header().Get("Retry-After"))
	}
	for _, want := range []string{`"decision":"ERROR"`, `"fail_mode":"deny"`, `"retry_after_seconds":30`} {
		if !strings.Contains(s.logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, s.logs.String())
		}
	}

	down := newObservedStack(t, failingLimiter{}, perNetwork("1/s", 60))
	w = httptest.NewRecorder()
	down.handler.ServeHTTP(w, r)
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("store down: %d, Retry-After %q; want 503, 1", w.Code, w.Header().Get("Retry-After"))
	}
	if !strings.Contains(down.logs.String(), `"retry_after_seconds":1`) {
		t.Errorf("store down: log lacks the Retry-After:\n%s", down.logs.String())
	}
}
