package main

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const slowConfig = `
listen: 127.0.0.1:0
auth:
  anonymous: allow
policies:
  - name: per-network
    key: [network]
    rate: 100/s
    burst: 100
  - name: slow
    key: [network]
    max_in_flight: 2
    lease: 30s
    operations: ["GET /v1/slow"]
limiter:
  store: memory
`

// TestSlowRoute: GET /v1/slow?ms=N sleeps N ms (0 to 10 000, else 400) and
// answers 200, under the /v1 chain; with max_in_flight 2, a third
// concurrent request of one network gets 429 concurrency-limited, without
// Retry-After or RateLimit fields for the cap.
func TestSlowRoute(t *testing.T) {
	h := serveConfig(t, t.TempDir(), slowConfig)
	for _, q := range []string{"ms=abc", "ms=10001", "ms=-1", "ms=1e3", "ms=", "ms=1&ms=2", "ms=0x10"} {
		if w := call(h, "192.0.2.1:1000", "/v1/slow?"+q, nil); w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s; want 400", q, w.Code, w.Body)
		}
	}
	for _, q := range []string{"", "?ms=0", "?ms=5"} {
		if w := call(h, "192.0.2.1:1000", "/v1/slow"+q, nil); w.Code != http.StatusOK {
			t.Errorf("%q: %d %s; want 200", q, w.Code, w.Body)
		}
	}
	var wg sync.WaitGroup
	codes := make([]int, 3)
	bodies := make([]string, 3)
	hdrs := make([]http.Header, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := "?ms=400"
			if i == 2 {
				time.Sleep(100 * time.Millisecond) // the first two hold the slots
				q = "?ms=0"
			}
			w := call(h, "192.0.2.1:1000", "/v1/slow"+q, nil)
			codes[i], bodies[i], hdrs[i] = w.Code, w.Body.String(), w.Header()
		}()
	}
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("codes %v; want 200, 200, 429", codes)
	}
	if !strings.Contains(bodies[2], `"type":"urn:ratekey:problem:concurrency-limited"`) || !strings.Contains(bodies[2], `"policy":"slow"`) || hdrs[2].Get("Retry-After") != "" {
		t.Errorf("refusal: %v %s", hdrs[2], bodies[2])
	}
	if p := hdrs[0].Get("RateLimit-Policy"); p != `"per-network";q=100;w=1` {
		t.Errorf("RateLimit-Policy %q: the cap is not a quota (draft-10)", p)
	}
	// Another network has its own slots.
	if w := call(h, "192.0.2.2:1000", "/v1/slow?ms=0", nil); w.Code != http.StatusOK {
		t.Errorf("another network: %d", w.Code)
	}
}

// TestCheckInFlight: demo check validates max_in_flight (>= 1, alone),
// lease (1s to 1h) and retry_after, naming each field.
func TestCheckInFlight(t *testing.T) {
	cfg := writeConfig(t, `
listen: 127.0.0.1:0
policies:
  - name: zero
    key: [network]
    max_in_flight: 0
  - name: mixed
    key: [network]
    max_in_flight: 2
    rate: 1/s
    burst: 2
    cost: 1
    delay_after: 1
    max_delay: 1s
  - name: short
    key: [network]
    max_in_flight: 2
    lease: 500ms
  - name: long
    key: [network]
    max_in_flight: 2
    lease: 2h
  - name: lonely-lease
    key: [network]
    rate: 1/s
    burst: 1
    lease: 10s
  - name: bucket-retry
    key: [network]
    rate: 1/s
    burst: 1
    retry_after: 2s
  - name: bad-retry
    key: [network]
    max_in_flight: 1
    retry_after: soon
limiter:
  store: memory
`)
	code, _, errOut := runDemo(t, "check", "-config", cfg)
	if code != 1 {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	for _, want := range []string{
		`policies[0] ("zero").max_in_flight: 0 must be >= 1`,
		`policies[1] ("mixed").rate: a max_in_flight policy caps requests running at once and has no rate`,
		`policies[1] ("mixed").burst:`,
		`policies[1] ("mixed").cost:`,
		`policies[1] ("mixed").delay_after:`,
		`policies[1] ("mixed").max_delay:`,
		`policies[2] ("short").lease: "500ms" must be a duration from 1s to 1h`,
		`policies[3] ("long").lease: "2h" must be a duration from 1s to 1h`,
		`policies[4] ("lonely-lease").lease: is for max_in_flight policies`,
		`policies[5] ("bucket-retry").retry_after: 2s is for max_in_flight policies`,
		`policies[6] ("bad-retry").retry_after: "soon" is not a positive duration`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check output lacks %q:\n%s", want, errOut)
		}
	}
	ok := writeConfig(t, slowConfig)
	if code, out, errOut := runDemo(t, "check", "-config", ok); code != 0 || !strings.Contains(out, "is valid: 2 policies") {
		t.Errorf("a valid in-flight config: %d %q %q", code, out, errOut)
	}
	redis := writeConfig(t, strings.Replace(slowConfig, "store: memory", "store: redis\n  redis:\n    url: redis://127.0.0.1:1/0", 1))
	if code, out, errOut := runDemo(t, "check", "-config", redis); code != 0 || !strings.Contains(out, "is valid: 2 policies") {
		t.Errorf("in-flight on Redis (leases): %d %q %q", code, out, errOut)
	}
	bad := writeConfig(t, strings.Replace(strings.Replace(slowConfig, "store: memory", "store: redis\n  redis:\n    url: redis://127.0.0.1:1/0", 1), "lease: 30s", "lease: 999ms", 1))
	if code, _, errOut := runDemo(t, "check", "-config", bad); code != 1 || !strings.Contains(errOut, `policies[1] ("slow").lease: "999ms" must be a duration from 1s to 1h`) {
		t.Errorf("a short lease on Redis: %d %s", code, errOut)
	}
}

// TestCheckOneErrorPerMistake: each config below has one mistake, and
// demo check lists exactly one error for it, naming its field (a lease on
// a token bucket was also reported as "rate: 0 per 0s is not a rate").
func TestCheckOneErrorPerMistake(t *testing.T) {
	tests := []struct {
		name, policy, want string
	}{
		{"lease on a token bucket", `{name: p, key: [network], rate: 1/s, burst: 1, lease: 5s}`,
			`policies[0] ("p").lease: is for max_in_flight policies`},
		{"bad lease on a token bucket", `{name: p, key: [network], rate: 1/s, burst: 1, lease: soon}`,
			`policies[0] ("p").lease: is for max_in_flight policies`},
		{"retry_after on a token bucket", `{name: p, key: [network], rate: 1/s, burst: 1, retry_after: 2s}`,
			`policies[0] ("p").retry_after: 2s is for max_in_flight policies (a token bucket computes its Retry-After)`},
		{"lease below 1s on a cap", `{name: p, key: [network], max_in_flight: 2, lease: 500ms}`,
			`policies[0] ("p").lease: "500ms" must be a duration from 1s to 1h (default 60s)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, "listen: 127.0.0.1:0\npolicies:\n  - "+tc.policy+"\n")
			code, _, errOut := runDemo(t, "check", "-config", p)
			if want := "configuration " + p + " is invalid:\n  - " + tc.want + "\n"; code != 1 || errOut != want {
				t.Errorf("check: %d\n%s\nwant:\n%s", code, errOut, want)
			}
		})
	}
}
