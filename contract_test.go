package ratekey_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limiter/redis"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
	"github.com/ratekey/ratekey/trustedproxy"
)

// update rewrites testdata/contract/*.txt from the current code: run it
// only for a change meant to alter a public contract, and say so in
// CHANGELOG.md.
var update = flag.Bool("update", false, "rewrite testdata/contract from the current output")

// contractSecret signs the contract scenarios' tokens (HS256).
var contractSecret = []byte("the contract secret of 32 bytes!")

// contractToken returns a token of https://issuer.example for sub, with
// the given plan ("" for none: then of https://partner.example) and a fixed expiry far ahead, so the
// scenarios' output never depends on the day they run.
func contractToken(sub, plan string) string {
	claims := jwt.MapClaims{"iss": "https://issuer.example", "aud": "api", "sub": sub, "exp": int64(4102444800)}
	if plan != "" {
		claims["plan"] = plan
	} else {
		claims["iss"] = "https://partner.example" // its principals carry no plan
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(contractSecret)
	if err != nil {
		panic(err)
	}
	return s
}

// contractStack is the front door the scenarios run through: a chi router
// with a route per limit shape, trusted proxies 10.0.0.0/8
// (X-Forwarded-For) and 10.1.0.0/16 (Forwarded), a JWT issuer with plans,
// the memory store on a clock that never moves (or a Redis that never
// answers, with down), and the debug endpoint open to contractAdmin only.
// contractAdmin is the address the scenarios' debug requests come from.
const contractAdmin = "192.0.2.1"

type contractStack struct {
	h, debug http.Handler
	hold     chan struct{} // a /v1/cap request waits on it
	held     chan struct{} // closed once a /v1/cap request holds its slot
}

func newContractStack(t *testing.T, down bool) *contractStack {
	t.Helper()
	auth, err := identity.NewJWTAuthenticator(identity.JWTConfig{Issuers: []identity.IssuerRecord{{
		Issuer: "https://issuer.example", Tenant: "acme", Audiences: []string{"api"}, Algorithms: []string{"HS256"},
		PlanClaim: "plan", Plans: []string{"free", "pro"},
		Keys: []identity.VerificationKey{{KID: "k1", Key: contractSecret}},
	}, {
		Issuer: "https://partner.example", Tenant: "partner", Audiences: []string{"api"}, Algorithms: []string{"HS256"},
		Keys: []identity.VerificationKey{{KID: "k1", Key: contractSecret}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var store limiter.Limiter = memory.New(memory.Options{Now: func() time.Time { return epoch }})
	if down {
		client := goredis.NewClient(&goredis.Options{Addr: silentServer(t), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		if store, err = redis.New(client, redis.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	perMin := func(n, burst int64) limiter.Limit {
		return limiter.Limit{Rate: limiter.Rate{Count: n, Per: time.Minute}, Burst: burst}
	}
	acct := []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount}
	op := []limitkey.Dimension{limitkey.DimOperation}
	r := chi.NewRouter()
	s := &contractStack{hold: make(chan struct{}), held: make(chan struct{})}
	m, err := ratekey.New(ratekey.Config{Router: r,
		Proxies: trustedproxy.Config{Rules: []trustedproxy.Rule{
			{From: []string{"10.0.0.0/8"}, Header: "X-Forwarded-For"},
			{From: []string{"10.1.0.0/16"}, Header: "Forwarded"},
		}},
		Authenticator:  auth,
		DecisionHeader: true,
		DebugAllow:     []string{contractAdmin + "/32"},
		Logger:         slog.New(slog.DiscardHandler),
		Limiter:        store,
		Costs: map[string]func(*http.Request) (int64, error){"uploads": func(r *http.Request) (int64, error) {
			var n int64
			if _, err := fmt.Sscan(r.Header.Get("X-Units"), &n); err != nil {
				return 0, errors.New("X-Units is not a number")
			}
			return n, nil
		}},
		Policies: []ratekey.Policy{
			{Name: "per-network", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: perMin(600, 3), PreAuth: true,
				Operations: []string{"GET /v1/flood"}},
			{Name: "per-account", Key: append(acct[:2:2], limitkey.DimPlan), Limit: perMin(60, 2), Operations: []string{"GET /v1/reports/{id}"},
				Overrides: []policy.Override{{Plan: "pro", Limit: perMin(600, 4)}}},
			{Name: "per-plan", Key: []limitkey.Dimension{limitkey.DimPlan}, Limit: perMin(600, 100), Operations: []string{"GET /v1/plan"}},
			{Name: "uploads", Key: acct, Limit: perMin(60, 5), Operations: []string{"POST /v1/upload"}},
			{Name: "trial", Key: acct, Limit: perMin(60, 1), DryRun: true, Operations: []string{"GET /v1/trial"}},
			{Name: "paced", Key: acct, Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 3, DelayAfter: 1},
				Operations: []string{"GET /v1/paced"}},
			{Name: "one-at-a-time", Key: append(acct[:2:2], limitkey.DimOperation), Limit: limiter.Limit{MaxInFlight: 1}, Operations: []string{"GET /v1/cap"}},
			{Name: "service", Key: op, Limit: perMin(6000, 1000), Operations: []string{"GET /v1/reports/{id}"}, OnStoreError: policy.OnStoreErrorAllow},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
	r.Use(m.Handler)
	for _, p := range []string{"/v1/reports/{id}", "/v1/plan", "/v1/trial", "/v1/paced", "/v1/flood"} {
		r.Get(p, ok)
	}
	r.Post("/v1/upload", ok)
	r.Get("/v1/cap", func(w http.ResponseWriter, _ *http.Request) {
		close(s.held)
		<-s.hold
		w.WriteHeader(http.StatusOK)
	})
	s.h, s.debug = r, m.Debug()
	return s
}

// silentServer returns the address of a TCP server that accepts
// connections and never answers: a Redis that hangs, so each call ends at
// the limiter's timeout, always the same way.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return ln.Addr().String()
}

// contractRequest is one request of a scenario.
type contractRequest struct {
	method, path, peer string
	header             map[string]string
}

// contractScenario is a sequence of requests on a fresh stack; the last
// is the one whose response and debug JSON are recorded (the earlier ones
// spend budget first).
type contractScenario struct {
	name string
	down bool              // the store is a Redis nobody answers
	reqs []contractRequest // the last one is recorded
	// heldCap: a first /v1/cap request of the same headers holds its slot
	// while the last request runs.
	heldCap bool
}

func (rq contractRequest) build(target string) *http.Request {
	method := rq.method
	if method == "" {
		method = http.MethodGet
	}
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = rq.peer
	if r.RemoteAddr == "" {
		r.RemoteAddr = "10.0.0.1:41234"
	}
	for k, v := range rq.header {
		r.Header.Set(k, v)
	}
	return r
}

// bearer is the header set of a request through the load balancer for
// sub's token of plan.
func bearer(sub, plan string) map[string]string {
	return map[string]string{"X-Forwarded-For": "198.51.100.7", "Authorization": "Bearer " + contractToken(sub, plan)}
}

func with(h map[string]string, k, v string) map[string]string {
	h[k] = v
	return h
}

// contractScenarios are the 20 requests whose answers and debug JSON are
// public contracts (header names and values, problem types and members,
// debug JSON fields): testdata/contract holds them byte for byte.
var contractScenarios = []contractScenario{
	{name: "passed", reqs: []contractRequest{{path: "/v1/reports/1", header: bearer("alice", "free")}}},
	{name: "rejected-after-burst", reqs: []contractRequest{
		{path: "/v1/reports/1", header: bearer("alice", "free")},
		{path: "/v1/reports/2", header: bearer("alice", "free")},
		{path: "/v1/reports/3", header: bearer("alice", "free")}}},
	{name: "plan-override", reqs: []contractRequest{
		{path: "/v1/reports/1", header: bearer("carol", "pro")},
		{path: "/v1/reports/2", header: bearer("carol", "pro")},
		{path: "/v1/reports/3", header: bearer("carol", "pro")}}},
	{name: "no-credential", reqs: []contractRequest{{path: "/v1/reports/1", header: map[string]string{"X-Forwarded-For": "198.51.100.7"}}}},
	{name: "invalid-token", reqs: []contractRequest{{path: "/v1/reports/1", header: map[string]string{"Authorization": "Bearer a.b.c"}}}},
	{name: "malformed-authorization", reqs: []contractRequest{{path: "/v1/reports/1", header: map[string]string{"Authorization": "Bearer"}}}},
	{name: "unsupported-scheme", reqs: []contractRequest{{path: "/v1/reports/1", header: map[string]string{"Authorization": "Basic YTpi"}}}},
	{name: "forged-xff-untrusted-peer", reqs: []contractRequest{{path: "/v1/reports/1", peer: "192.0.2.10:5555",
		header: with(bearer("alice", "free"), "X-Forwarded-For", "203.0.113.1")}}},
	{name: "trusted-chain-hops", reqs: []contractRequest{{path: "/v1/reports/1",
		header: with(bearer("alice", "free"), "X-Forwarded-For", "203.0.113.9, 198.51.100.7, 10.0.0.3")}}},
	{name: "malformed-chain", reqs: []contractRequest{{path: "/v1/reports/1",
		header: with(bearer("alice", "free"), "X-Forwarded-For", "203.0.113.9, not-an-address")}}},
	{name: "rfc7239-forwarded", reqs: []contractRequest{{path: "/v1/reports/1", peer: "10.1.2.3:8080",
		header: map[string]string{"Forwarded": `for="[2001:db8::7]:4711";proto=https`, "Authorization": "Bearer " + contractToken("dave", "free")}}}},
	{name: "unmatched-route", reqs: []contractRequest{{path: "/v1/nowhere/42", header: bearer("alice", "free")}}},
	{name: "pre-auth-flood", reqs: []contractRequest{
		{path: "/v1/flood", header: map[string]string{"X-Forwarded-For": "198.51.100.8", "Authorization": "Bearer a.b.c"}},
		{path: "/v1/flood", header: map[string]string{"X-Forwarded-For": "198.51.100.8", "Authorization": "Bearer a.b.c"}},
		{path: "/v1/flood", header: map[string]string{"X-Forwarded-For": "198.51.100.8", "Authorization": "Bearer a.b.c"}},
		{path: "/v1/flood", header: map[string]string{"X-Forwarded-For": "198.51.100.8", "Authorization": "Bearer a.b.c"}}}},
	{name: "cost-exceeds-burst", reqs: []contractRequest{{method: http.MethodPost, path: "/v1/upload",
		header: with(bearer("alice", "free"), "X-Units", "6")}}},
	{name: "invalid-cost", reqs: []contractRequest{{method: http.MethodPost, path: "/v1/upload",
		header: with(bearer("alice", "free"), "X-Units", "many")}}},
	{name: "dry-run-rejected", reqs: []contractRequest{
		{path: "/v1/trial", header: bearer("alice", "free")},
		{path: "/v1/trial", header: bearer("alice", "free")}}},
	{name: "missing-plan", reqs: []contractRequest{{path: "/v1/plan",
		header: map[string]string{"X-Forwarded-For": "198.51.100.7", "Authorization": "Bearer " + contractToken("erin", "")}}}},
	{name: "delayed-would-be", reqs: []contractRequest{
		{path: "/v1/paced", header: bearer("alice", "free")}}},
	{name: "concurrency-limited", heldCap: true, reqs: []contractRequest{{path: "/v1/cap", header: bearer("alice", "free")}}},
	{name: "store-unavailable", down: true, reqs: []contractRequest{{path: "/v1/reports/1", header: bearer("alice", "free")}}},
}

var redisCause = regexp.MustCompile(`outcome unknown\): [^"]*`)

// contractOutput is what a scenario records: the last request's status,
// the response fields a client reads, its body, and the debug JSON of the
// same request (GET on the debug endpoint with its peer and headers).
func contractOutput(t *testing.T, sc contractScenario) string {
	t.Helper()
	s := newContractStack(t, sc.down)
	if sc.heldCap {
		first := sc.reqs[0].build(sc.reqs[0].path)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.h.ServeHTTP(httptest.NewRecorder(), first)
		}()
		<-s.held
		defer func() { close(s.hold); <-done }()
	}
	var w *httptest.ResponseRecorder
	for _, rq := range sc.reqs {
		w = httptest.NewRecorder()
		s.h.ServeHTTP(w, rq.build(rq.path))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "status: %d\n", w.Code)
	for _, f := range []string{"Cache-Control", "Content-Type", "RateLimit", "RateLimit-Policy", "RateLimit-Decision", "Retry-After", "WWW-Authenticate"} {
		if v := w.Header().Values(f); len(v) > 0 {
			fmt.Fprintf(&b, "%s: %s\n", f, strings.Join(v, " | "))
		}
	}
	fmt.Fprintf(&b, "body: %s\n", bytes.TrimSpace(w.Body.Bytes()))
	d := httptest.NewRecorder()
	s.debug.ServeHTTP(d, simulated(t, sc.reqs[len(sc.reqs)-1]))
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, d.Body.Bytes(), "", "  "); err != nil {
		pretty.Write(d.Body.Bytes())
	}
	fmt.Fprintf(&b, "debug %d: %s\n", d.Code, bytes.TrimSpace(pretty.Bytes()))
	// The network's own words after a Redis timeout (go-redis's "i/o
	// timeout" or the context's "deadline exceeded", whichever timer fires
	// first) are not ratekey's.
	return redisCause.ReplaceAllString(b.String(), "outcome unknown): …")
}

// simulated returns the debug endpoint's POST, from contractAdmin,
// describing rq.
func simulated(t *testing.T, rq contractRequest) *http.Request {
	t.Helper()
	r := rq.build(rq.path)
	headers := map[string][]string{}
	for k, v := range rq.header {
		headers[k] = []string{v}
	}
	body, err := json.Marshal(map[string]any{"peer": r.RemoteAddr, "method": r.Method, "path": rq.path, "headers": headers})
	if err != nil {
		t.Fatal(err)
	}
	d := httptest.NewRequest(http.MethodPost, "/debug", bytes.NewReader(body))
	d.RemoteAddr = contractAdmin + ":9999"
	d.Header.Set("Content-Type", "application/json")
	return d
}

// TestPublicContracts runs 20 scenarios through the front door and
// compares each answer (status, RateLimit fields, Retry-After,
// WWW-Authenticate, problem body) and the debug JSON of the same request
// with testdata/contract byte for byte: a refactoring must leave them as
// they are (config fields, headers, problem types and debug JSON are
// public contracts). go test -run TestPublicContracts -update rewrites
// them, for a change that means to.
func TestPublicContracts(t *testing.T) {
	if len(contractScenarios) != 20 {
		t.Fatalf("%d scenarios, want 20", len(contractScenarios))
	}
	for _, sc := range contractScenarios {
		t.Run(sc.name, func(t *testing.T) {
			got := contractOutput(t, sc)
			file := "testdata/contract/" + sc.name + ".txt"
			if *update {
				if err := os.MkdirAll("testdata/contract", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("%s changed:\n--- got\n%s\n--- want\n%s", file, got, want)
			}
		})
	}
}
