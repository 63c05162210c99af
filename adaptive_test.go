package ratekey_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/internal/logtest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// TestNewRefusesAdaptive: ratekey.New refuses what cannot be an adaptive
// cap, naming the policy, the field and why: a key other than the
// operation (the cap moves with the process's latency, which every
// client shares), a priority on a verified attribute without an
// Authenticator, a priority's operation the router can never name.
func TestNewRefusesAdaptive(t *testing.T) {
	auto := limiter.Limit{MaxInFlightCeiling: 64}
	for _, tc := range []struct {
		name string
		p    ratekey.Policy
		want string
	}{
		{"keyed on the network", ratekey.Policy{Name: "protect", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: auto},
			`policies[0] ("protect").key: an adaptive cap moves with this process's latency, which every client's requests share: key it on nothing ([]) or on operation (a cap per route)`},
		{"a plan without an Authenticator", ratekey.Policy{Name: "protect", Limit: auto, Reserved: 0.2,
			Priorities: []policy.Priority{{Plan: "pro", Class: policy.ClassCritical}}},
			`policies[0] ("protect").priorities[0]: a tenant or plan comes from a verified credential, but no Authenticator is configured`},
		{"a priority's operation without its method", ratekey.Policy{Name: "protect", Limit: auto,
			Priorities: []policy.Priority{{Operation: "/v1/work", Class: policy.ClassCritical}}},
			`policies[0] ("protect").priorities[0].operation: "/v1/work" is not an operation: write the method, a space and the route's template`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ratekey.New(ratekey.Config{Router: chi.NewRouter(), Policies: []ratekey.Policy{tc.p}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant it to contain %s", err, tc.want)
			}
		})
	}
}

// TestAdaptive64: 64 clients at once, over real HTTP, against an adaptive
// cap whose limit cannot move (min = ceiling = 8): 8 are served, the
// handler never sees more than 8 at once, 56 get 503 with Retry-After 1
// and the problem urn:ratekey:problem:overloaded; the in-flight gauge is 0
// once they end, and the debug JSON shows the limit and the class.
func TestAdaptive64(t *testing.T) {
	var p peak
	var refused atomic.Int64
	gate := make(chan struct{})
	rig := newSlowRig(t, []ratekey.Policy{{Name: "protect", Limit: limiter.Limit{MinInFlight: 8, MaxInFlightCeiling: 8}}},
		func(w http.ResponseWriter, r *http.Request) {
			p.enter()
			defer p.leave()
			<-gate
		})
	statuses := make([]int, 64)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			resp, err := http.Get(rig.srv.URL + "/slow")
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
			if resp.StatusCode != http.StatusOK {
				if resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"type":"urn:ratekey:problem:overloaded"`) {
					t.Errorf("refusal %d %v %s", resp.StatusCode, resp.Header, b)
				}
				if refused.Add(1) == 56 {
					close(gate) // every surplus request was refused: let the 8 end
				}
			}
		})
	}
	wg.Wait()
	if ok, no := count(statuses, 200), count(statuses, 503); ok != 8 || no != 56 {
		t.Fatalf("%d served, %d refused; want 8 and 56 (%v)", ok, no, statuses)
	}
	if m := p.max.Load(); m > 8 {
		t.Errorf("the handler saw %d requests at once; want at most 8", m)
	}
	rig.waitInFlight(t, "protect", 0)
	if n := rig.metrics.get(rig.metrics.inFlight, "protect"); n != 0 {
		t.Errorf("ratekey_in_flight{policy=protect} = %d after the load; want 0", n)
	}
	pol := rig.policy(t, "protect")
	for k, want := range map[string]any{"adaptive_limit": 8.0, "max_in_flight": 8.0, "class": "sheddable", "store": "process", "rate": nil} {
		if pol[k] != want {
			t.Errorf("debug JSON %s = %v; want %v (%v)", k, pol[k], want, pol)
		}
	}
}

// TestAdaptivePriorityOperationNotServed: a priority whose operation no
// route serves never matches: the first request logs it, naming the
// field, as it does for a policy's operations.
func TestAdaptivePriorityOperationNotServed(t *testing.T) {
	r := chi.NewRouter()
	var logs logtest.Lines
	rk, err := ratekey.New(ratekey.Config{Router: r, Logger: slog.New(&logs), Policies: []ratekey.Policy{{Name: "p",
		Limit: limiter.Limit{MaxInFlightCeiling: 8}, Priorities: []policy.Priority{{Operation: "GET /v1/gone", Class: policy.ClassCritical}}}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(rk.Handler)
	r.Get("/v1/work", func(http.ResponseWriter, *http.Request) {})
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/work", nil))
	want := `ERROR ratekey operation served by no route policy=p operation=GET /v1/gone error=policies[0] ("p").priorities[0].operation: "GET /v1/gone" is served by no route of the router: the entry never matches`
	if got := logs.Get(); len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Errorf("logged %q\nwant one line starting %s", got, want)
	}
}
