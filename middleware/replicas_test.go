package middleware_test

import (
	"cmp"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// TestReplicasStateTheShare: on a memory store shared by 3 processes
// (Replicas 3), a policy of 10/s burst 9 is enforced and stated as its
// share, 10 per 3 s burst 3: the RateLimit fields, the problem body, the
// debug JSON (with "replicas": 3) all say so.
func TestReplicasStateTheShare(t *testing.T) {
	s := newStack(t, stackOptions{anonymous: true, replicas: 3, policies: []policy.Policy{perNetwork("10/s", 9)}})
	for i := range 3 {
		w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"})
		if w.Code != 200 {
			t.Fatalf("request %d of a share of 3: %d", i, w.Code)
		}
		if got, want := w.Header().Get("RateLimit-Policy"), `"per-network";q=3;w=1`; got != want {
			t.Errorf("RateLimit-Policy %q; want %q (burst 3 refilled in 0.9 s)", got, want)
		}
	}
	w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"})
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || w.Header().Get("RateLimit") != `"per-network";r=0;t=1` {
		t.Errorf("4th request: %d, Retry-After %q, RateLimit %q; want 429, 1, r=0;t=1", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
	if p := decodeProblem(t, w.Body.String()); !strings.Contains(p.Detail, "(burst 3, refill 10/3s)") {
		t.Errorf("problem detail %q; want the share, burst 3, refill 10/3s", p.Detail)
	}
	// The admin's own network: a full share, 3 tokens, 2 after it.
	rec := getDebug(t, s, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1"})
	pol := rec["policies"].([]any)[0].(map[string]any)
	if rec["replicas"] != 3.0 || pol["burst"] != 3.0 || pol["rate"] != "10/3s" || pol["remaining"] != 2.0 {
		t.Errorf("debug: replicas %v, burst %v, rate %v, remaining %v; want 3, 3, 10/3s, 2", rec["replicas"], pol["burst"], pol["rate"], pol["remaining"])
	}
	// A policy skipped for a missing dimension states the share too.
	s2 := newStack(t, stackOptions{anonymous: true, replicas: 3, policies: []policy.Policy{perAccountSkip(t)}})
	pol2 := getDebug(t, s2, req{path: "?path=/v1/reports/1", peer: "192.0.2.10:1"})["policies"].([]any)[0].(map[string]any)
	if pol2["decision"] != "SKIPPED" || pol2["burst"] != 3.0 || pol2["rate"] != "10/3s" {
		t.Errorf("skipped policy: %v %v %v; want SKIPPED, burst 3, rate 10/3s", pol2["decision"], pol2["burst"], pol2["rate"])
	}
	s.clock.Advance(300 * time.Millisecond) // one token of the share
	if w := s.do(req{path: "/v1/reports/1", peer: "198.51.100.7:1"}); w.Code != 200 {
		t.Errorf("after 300 ms: %d; want 200", w.Code)
	}
}

// TestReplicasRefused: a limit whose share is below one token or slot, or
// whose cost exceeds its share, is refused naming the policy, the field and
// the numbers; overrides too.
func TestReplicasRefused(t *testing.T) {
	bucket := perNetwork("10/s", 2)
	costly := perNetwork("10/s", 9)
	costly.Cost = 4
	capped := policy.Policy{Name: "cap", Key: perNetwork("1/s", 1).Key, Limit: limiter.Limit{MaxInFlight: 2}}
	ovr := perNetwork("10/s", 9)
	ovr.Key = append(ovr.Key, limitkey.DimTenant)
	ovr.Overrides = []policy.Override{{Tenant: "acme", Limit: limiter.Limit{Burst: 1}}}
	slow := perNetwork("1/s", 130)
	slow.Limit.DelayAfter = 100
	for _, tc := range []struct {
		p    policy.Policy
		want string
		n    int // replicas; 0 means 3
	}{
		// Whole, its longest wait is 30 s; a share of 65 is burst 2 with
		// delay_after 1 (100/65 rounded down), one token per 65 s.
		{slow, `policies[0] ("per-network").delay_after: its share over 65 replicas (1/65s, burst 2): a request may have to wait up to 1m5s (burst beyond delay_after at 1/65s), longer than 50s (RateLimitConfig.MaxWait): set max_delay, a larger delay_after or a faster rate`, 65},
		{bucket, `policies[0] ("per-network").burst: 2 shared by 3 replicas is 0 per process, below one: raise it to at least 3 or run fewer replicas`, 0},
		{costly, `policies[0] ("per-network").cost: 4 exceeds the burst of 3 per process (9 shared by 3 replicas), so no request could ever pass`, 0},
		{capped, `policies[0] ("cap").max_in_flight: 2 shared by 3 replicas is 0 per process, below one: raise it to at least 3 or run fewer replicas`, 0},
		{ovr, `policies[0] ("per-network").overrides[0].burst: 1 shared by 3 replicas is 0 per process, below one: raise it to at least 3 or run fewer replicas`, 0},
	} {
		_, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
			Limiter:   memory.New(memory.Options{Replicas: cmp.Or(tc.n, 3)}),
			Policies:  []policy.Policy{tc.p},
			Operation: func(*http.Request) string { return "GET /" },
		})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v\nwant %s", tc.p.Name, err, tc.want)
		}
	}
}

// perAccountSkip is a policy of 10/s burst 9 keyed by account, skipped
// for anonymous requests.
func perAccountSkip(t *testing.T) policy.Policy {
	t.Helper()
	return policy.Policy{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimAccount}, Limit: limit("10/s", 9), OnMissing: policy.OnMissingSkip}
}
