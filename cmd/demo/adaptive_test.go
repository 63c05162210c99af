package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const workConfig = `
listen: 127.0.0.1:0
auth:
  anonymous: allow
policies:
  - name: work
    key: []
    max_in_flight: auto
    min_in_flight: 2
    max_in_flight_ceiling: 64
    operations: ["GET /v1/work"]
debug:
  enabled: true
  allow: [192.0.2.0/24]
metrics:
  enabled: true
  allow: [192.0.2.0/24]
limiter:
  store: memory
`

// TestCheckAdaptive: demo check accepts max_in_flight: auto with its
// bounds and says the cap is the process's own (with Redis too: Redis is
// not asked), and refuses each mistake once, naming its field: no
// ceiling, a key other than the operation (naming why), a token bucket's
// fields or a lease, bounds or priorities without auto, a reserve that is
// not a percentage, a priority on a plan no credential carries or on an
// operation the demo does not serve.
func TestCheckAdaptive(t *testing.T) {
	p := writeConfig(t, workConfig)
	want := "configuration " + p + " is valid: 1 policy, 0 issuers\n" +
		"adaptive caps, each this process's own (moved by its latency; never shared, never in the store):\n" +
		"  work: one cap, 2 to 64 requests at once (starts at 2)\n"
	if code, out, errOut := runDemo(t, "check", "-config", p); code != 0 || out != want {
		t.Errorf("check: %d %q %q\nwant %q", code, out, errOut, want)
	}
	redis := writeConfig(t, strings.Replace(workConfig, "store: memory", "store: redis\n  redis:\n    url: redis://127.0.0.1:1/0", 1))
	if code, out, errOut := runDemo(t, "check", "-config", redis); code != 0 ||
		!strings.Contains(out, "adaptive caps, each this process's own (moved by its latency): with Redis too, every process runs its own and Redis is not asked:\n  work: one cap") {
		t.Errorf("check with Redis: %d %q %q", code, out, errOut)
	}
	for _, tc := range []struct{ name, policy, want string }{
		{"no ceiling", `{name: p, key: [], max_in_flight: auto}`,
			`policies[0] ("p").max_in_flight_ceiling: required with max_in_flight: auto (the most requests this process runs at once, whatever latency says; 1 to 1000000)`},
		{"keyed on the network", `{name: p, key: [network], max_in_flight: auto, max_in_flight_ceiling: 8}`,
			`policies[0] ("p").key: an adaptive cap moves with this process's latency, which every client's requests share: key it on nothing ([]) or on operation (a cap per route); "network" would split one protection into many that each see the same latency (a per-client cap is a fixed max_in_flight)`},
		{"a rate", `{name: p, key: [], max_in_flight: auto, max_in_flight_ceiling: 8, rate: 1/s}`,
			`policies[0] ("p").rate: an adaptive cap (max_in_flight: auto) caps this process's requests running at once and has no rate`},
		{"a lease", `{name: p, key: [], max_in_flight: auto, max_in_flight_ceiling: 8, lease: 5s}`,
			`policies[0] ("p").lease: an adaptive cap (max_in_flight: auto) caps this process's requests running at once and has no lease`},
		{"a ceiling on a fixed cap", `{name: p, key: [], max_in_flight: 4, max_in_flight_ceiling: 8}`,
			`policies[0] ("p").max_in_flight_ceiling: bounds an adaptive cap: set max_in_flight: auto`},
		{"priorities on a token bucket", `{name: p, key: [], rate: 1/s, burst: 1, priorities: [{operation: "GET /v1/work", class: critical}]}`,
			`policies[0] ("p").priorities: priorities, reserved and limit_log_factor are for adaptive caps (max_in_flight: auto); a fixed cap of this process that sheds by class is one with min_in_flight = max_in_flight_ceiling`},
		{"a reserve without %", `{name: p, key: [], max_in_flight: auto, max_in_flight_ceiling: 8, reserved: 20}`,
			`config: policies[0].reserved (line 3): "20" is not a percentage from 0% to 99% such as 20%`},
		{"a reserve of 100%", `{name: p, key: [], max_in_flight: auto, max_in_flight_ceiling: 8, reserved: 100%}`,
			`config: policies[0].reserved (line 3): "100%" is not a percentage from 0% to 99% such as 20%`},
		{"max_in_flight neither a number nor auto", `{name: p, key: [], max_in_flight: many}`,
			`config: policies[0].max_in_flight (line 3): "many" is not a decimal integer (or auto, for an adaptive cap)`},
		{"a priority on a plan without credentials", `{name: p, key: [], max_in_flight: auto, max_in_flight_ceiling: 8, reserved: 20%, priorities: [{plan: pro, class: critical}]}`,
			`policies[0] ("p").priorities[0]: tenant and plan come from a verified credential, but neither auth.issuers nor auth.api_keys is configured`},
		{"a priority on an operation the demo does not serve", `{name: p, key: [], max_in_flight: auto, max_in_flight_ceiling: 8, priorities: [{operation: "GET /v1/nope", class: critical}]}`,
			`policies[0] ("p").priorities[0].operation: "GET /v1/nope" is not a rate-limited route of the demo`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, "listen: 127.0.0.1:0\npolicies:\n  - "+tc.policy+"\n")
			code, _, errOut := runDemo(t, "check", "-config", p)
			if want := "configuration " + p + " is invalid:\n  - " + tc.want; code != 1 || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n  - ") != 1 {
				t.Errorf("check: %d\n%s\nwant one error:\n%s", code, errOut, want)
			}
		})
	}
}

// TestCheckAdaptivePriorityPlans: a priority on a plan or a tenant no
// issuer vouches for never matches: check refuses it, as it does an
// override's.
func TestCheckAdaptivePriorityPlans(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(string(defaultConfig), "testdata/", root+"/testdata/")
	cfg = strings.Replace(cfg, "- {tenant: demo, class: critical}", "- {tenant: nobody, class: critical}\n      - {plan: gold, class: critical}", 1)
	p := writeConfig(t, cfg)
	code, _, errOut := runDemo(t, "check", "-config", p)
	for _, want := range []string{
		`policies[5] ("work").priorities[0].tenant: "nobody" is not a tenant of any issuer (tenant, tenants) or API key, so it never matches`,
		`policies[5] ("work").priorities[1].plan: "gold" is not a plan of any issuer (plan, plans) or API key, so it never matches`,
	} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("check: %d, lacks %s:\n%s", code, want, errOut)
		}
	}
}

// TestWorkRoute: GET /v1/work?units=N runs N units of 20 ms on the demo's
// resource (1 to 100, default 1; anything else is 400).
func TestWorkRoute(t *testing.T) {
	h := serveConfig(t, t.TempDir(), workConfig)
	for _, q := range []string{"units=0", "units=101", "units=abc", "units=", "units=1&units=2", "units=1e1"} {
		if w := call(h, "192.0.2.1:1000", "/v1/work?"+q, nil); w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s; want 400", q, w.Code, w.Body)
		}
	}
	for _, q := range []string{"", "?units=1", "?units=2"} {
		w := call(h, "192.0.2.1:1000", "/v1/work"+q, nil)
		var body struct{ Units, Ms int }
		if err := json.Unmarshal(w.Body.Bytes(), &body); w.Code != http.StatusOK || err != nil || body.Ms < 20*body.Units {
			t.Errorf("%q: %d %s; want 200 after 20 ms per unit", q, w.Code, w.Body)
		}
	}
}

// TestWorkOverload drives GET /v1/work of the demo's resource (8 at once,
// 20 ms) with 48 clients at once for 2 s, each from its own address: the
// adaptive cap refuses the surplus with 503 overloaded and Retry-After,
// keeps the latency of those it admits within 2 × 20 ms at the median, and
// the debug endpoint and the metrics show its limit.
func TestWorkOverload(t *testing.T) {
	h := serveConfig(t, t.TempDir(), workConfig)
	var mu sync.Mutex
	codes := map[int]int{}
	var served []int
	var wg sync.WaitGroup
	start := time.Now()
	for c := range 48 {
		wg.Go(func() {
			peer := fmt.Sprintf("192.0.2.%d:1000", 10+c)
			for time.Since(start) < 2*time.Second {
				w := call(h, peer, "/v1/work", nil)
				var body struct{ Ms int }
				_ = json.Unmarshal(w.Body.Bytes(), &body)
				mu.Lock()
				codes[w.Code]++
				if w.Code == http.StatusOK {
					served = append(served, body.Ms)
				} else if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"type":"urn:ratekey:problem:overloaded"`) {
					t.Errorf("refusal %d %v %s", w.Code, w.Header(), w.Body)
				}
				mu.Unlock()
				if w.Code != http.StatusOK {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	if codes[http.StatusOK] == 0 || codes[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("statuses %v; want both 200 and 503", codes)
	}
	half := served[len(served)/2:] // the second second: the cap has settled
	slow := 0
	for _, ms := range half {
		if ms > 40 {
			slow++
		}
	}
	if slow > len(half)/2 {
		t.Errorf("%d of %d requests served in the second second took over 40 ms; want at most half", slow, len(half))
	}
	if pol := workPolicy(t, h, nil); pol["store"] != "process" || pol["class"] != "sheddable" || pol["adaptive_limit"] == nil {
		t.Errorf("debug JSON: %v", pol)
	}
	if m := call(h, "192.0.2.1:1000", "/metrics", nil); !strings.Contains(m.Body.String(), `ratekey_adaptive_limit{operation="",policy="work"}`) {
		t.Errorf("metrics lack the adaptive limit:\n%.3000s", m.Body)
	}
	t.Logf("statuses %v", codes)
}

// workPolicy returns the debug JSON entry of policy work for GET /v1/work,
// of a request with headers.
func workPolicy(t *testing.T, h http.Handler, headers map[string]string) map[string]any {
	t.Helper()
	w := call(h, "192.0.2.1:1000", "/debug/ratekey?method=GET&path=/v1/work", headers)
	var rec struct{ Policies []map[string]any }
	if err := json.Unmarshal(w.Body.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	for _, p := range rec.Policies {
		if p["name"] == "work" {
			return p
		}
	}
	t.Fatalf("no policy work in %s", w.Body)
	return nil
}

// TestDefaultWorkClasses: under the embedded default, a caller with a
// verified token of the demo's tenant is critical under the work cap, an
// anonymous one sheddable.
func TestDefaultWorkClasses(t *testing.T) {
	t.Chdir("../..") // the embedded default names key files relative to the repository root
	c, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	c.Debug.Allow = []string{"192.0.2.0/24"}
	a, err := build(c, discardLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.auth.close)
	h, err := newServer("", discardLogger(), a)
	if err != nil {
		t.Fatal(err)
	}
	code, token, errOut := runDemo(t, "token", "-sub", "alice")
	if code != 0 {
		t.Fatalf("token: %d %s", code, errOut)
	}
	if pol := workPolicy(t, h, map[string]string{"Authorization": "Bearer " + strings.TrimSpace(token)}); pol["class"] != "critical" || pol["adaptive_limit"] != 2.0 {
		t.Errorf("a verified caller: %v; want class critical, adaptive_limit 2 (min_in_flight, before any window)", pol)
	}
	if pol := workPolicy(t, h, nil); pol["class"] != "sheddable" {
		t.Errorf("an anonymous caller: %v; want class sheddable", pol)
	}
}

// TestReloadKeepsAdaptiveCap: a reload keeps the adaptive cap's state (it
// belongs to the store the demo keeps, whose view a reload with the same
// limiter.replicas does not replace): the limit 1 s of overload raised
// from min_in_flight is still in force after a reload.
func TestReloadKeepsAdaptiveCap(t *testing.T) {
	s, _, _ := reloadServer(t, workConfig)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range 24 {
		wg.Go(func() {
			peer := fmt.Sprintf("192.0.2.%d:1000", 10+c)
			for time.Since(start) < time.Second {
				if w := call(s, peer, "/v1/work", nil); w.Code != http.StatusOK {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	before := workPolicy(t, s, nil)["adaptive_limit"].(float64)
	if before <= 2 {
		t.Fatalf("limit %v after 1 s of overload, want above min_in_flight 2", before)
	}
	if err := s.reload(); err != nil {
		t.Fatal(err)
	}
	if after := workPolicy(t, s, nil)["adaptive_limit"].(float64); after != before {
		t.Errorf("limit %v after the reload, want %v (kept)", after, before)
	}
}
