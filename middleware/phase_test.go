package middleware_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// TestEmptyPhase: a phase without policies (PreAuthHandler when no policy
// has PreAuth, Handler when every one has) passes requests on without
// evaluating, and nothing shows it: the same status, response fields and
// Record as the other phase alone would give, the Record saying the
// limiter ran (limited, the operation) even for a request the credential
// check refuses right after the empty phase.
func TestEmptyPhase(t *testing.T) {
	const rec = `"operation":"GET /v1/reports/{id}","limited":true,"decision":`
	cases := []struct {
		name    string
		preAuth bool // the policy is PreAuth (Handler's phase is empty)
		token   string
		status  int
		fields  string // RateLimit and RateLimit-Decision, each line
		record  string // the Record's JSON from "operation" to "replicas"
	}{
		{"pre-auth phase empty, refused by the credential check", false, "", http.StatusUnauthorized, "[] []",
			rec + `"","delay_seconds":null,"policies":[],"round_trips":0,"replicas":1}`},
		{"pre-auth phase empty, admitted", false, "acme:free:alice", http.StatusOK,
			`["per-account";r=2;t=1] [PASSED]`,
			rec + `"PASSED","delay_seconds":null,"policies":[{"name":"per-account","key":"per-account|account=alice","decision":"PASSED","dry_run":false,"cost":1,"rate":"1/s","burst":3,"remaining":2,"retry_after_seconds":null,"store":"memory","fail_mode":null,"delay_after":3,"delay_seconds":null,"skipped_reason":null,"error":null,"override":null,"max_in_flight":null,"in_flight":null,"cached":false,"slot":null,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}],"round_trips":0,"replicas":1}`},
		{"main phase empty, admitted", true, "acme:free:alice", http.StatusOK,
			`["per-network";r=2;t=1] [PASSED]`,
			rec + `"PASSED","delay_seconds":null,"policies":[{"name":"per-network","key":"per-network|network=198.51.100.7/32","decision":"PASSED","dry_run":false,"cost":1,"rate":"1/s","burst":3,"remaining":2,"retry_after_seconds":null,"store":"memory","fail_mode":null,"delay_after":3,"delay_seconds":null,"skipped_reason":null,"error":null,"override":null,"max_in_flight":null,"in_flight":null,"cached":false,"slot":null,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}],"round_trips":0,"replicas":1}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := policy.Policy{Name: "per-account", Key: []limitkey.Dimension{limitkey.DimAccount}, Limit: limit("1/s", 3)}
			if tc.preAuth {
				p = perNetwork("1/s", 3)
				p.PreAuth = true
			}
			r := chi.NewRouter()
			rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
				Operation: middleware.RouteOperation(r), Policies: []policy.Policy{p}, DecisionHeader: true})
			if err != nil {
				t.Fatal(err)
			}
			r.Use(middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{}), rl.PreAuthHandler,
				middleware.Authenticate(fakeAuth{}, middleware.AuthOptions{}), rl.Handler)
			r.Get("/v1/reports/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
			req := httptest.NewRequest(http.MethodGet, "/v1/reports/7", nil)
			req.RemoteAddr = "198.51.100.7:1"
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			ctx, record := middleware.WithRecord(req.Context())
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req.WithContext(ctx))
			if w.Code != tc.status {
				t.Errorf("status %d; want %d", w.Code, tc.status)
			}
			fields := lines(w.Header()["Ratelimit"]) + " " + lines(w.Header()["Ratelimit-Decision"])
			if fields != tc.fields {
				t.Errorf("RateLimit and RateLimit-Decision lines %s; want %s", fields, tc.fields)
			}
			b, err := json.Marshal(record)
			if err != nil {
				t.Fatal(err)
			}
			if _, got, _ := strings.Cut(string(b), `"authentication":`); !strings.HasSuffix(got, tc.record) {
				t.Errorf("record JSON\n%s\nwant it to end with\n%s", b, tc.record)
			}
		})
	}
}

// lines writes the lines of a response field as [line|line].
func lines(lines []string) string {
	return "[" + strings.Join(lines, "|") + "]"
}
