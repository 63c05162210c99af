package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// completeConfig settles POST /v1/complete per client network: 1000 tokens
// an hour (3.6 s a token: nothing refills within a test), burst 1000, 500
// reserved, at most 1500 settled.
const completeConfig = `policies:
  - name: llm-tokens
    key: [network]
    rate: 1000/h
    burst: 1000
    cost: 500
    settle: true
    max_cost: 1500
    operations: ["POST /v1/complete"]
`

// complete sends POST /v1/complete?<query> to s and returns the status,
// the RateLimit and Retry-After fields and the body.
func complete(s http.Handler, query string) (code int, rl, retry, body string) {
	r := httptest.NewRequest(http.MethodPost, "/v1/complete?"+query, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"), w.Body.String()
}

// TestCompleteSettles: POST /v1/complete?tokens=N reports N. Its RateLimit
// field describes the reservation (500 of the tokens left), so the next
// response shows what the previous one settled at: 100 (400 came back),
// then 0; a report above max_cost is clamped to 1500 (logged), which puts
// the bucket 600 tokens past empty: the next request's 500 fit once 1100
// tokens are repaid, 3960 s.
func TestCompleteSettles(t *testing.T) {
	s, logs := serverAt(t, writeConfig(t, completeConfig))
	t.Cleanup(s.close)
	for i, c := range []struct {
		query, rl, retry string
		code             int
	}{
		{"tokens=100", `"llm-tokens";r=500;t=1800`, "", 200},
		{"tokens=0", `"llm-tokens";r=400;t=2160`, "", 200},
		{"tokens=2000", `"llm-tokens";r=400;t=2160`, "", 200},
		{"tokens=1", `"llm-tokens";r=0;t=5760`, "3960", 429},
	} {
		code, rl, retry, body := complete(s, c.query)
		if code != c.code || rl != c.rl || retry != c.retry {
			t.Errorf("request %d (%s): %d %s Retry-After %q; want %d %s %q\n%s", i, c.query, code, rl, retry, c.code, c.rl, c.retry, body)
		}
		if code == 200 && !strings.Contains(body, fmt.Sprintf(`"total_tokens":%s`, strings.TrimPrefix(c.query, "tokens="))) {
			t.Errorf("request %d: body %s", i, body)
		}
	}
	if !strings.Contains(logs.String(), `"msg":"ratekey settle: reported cost above max_cost, clamped (a defect of the handler)"`) ||
		!strings.Contains(logs.String(), `"reported":2000,"max_cost":1500`) {
		t.Errorf("no clamp line in the log:\n%s", logs)
	}
}

// TestCompleteBadTokens: tokens outside 0..100 000, not a whole number, or
// given twice is a 400 problem; the handler reports 0 first, so a bad
// request gives its whole reservation back.
func TestCompleteBadTokens(t *testing.T) {
	s, _ := serverAt(t, writeConfig(t, completeConfig))
	t.Cleanup(s.close)
	for _, q := range []string{"", "tokens=", "tokens=x", "tokens=-1", "tokens=100001", "tokens=1e3", "tokens=1.5", "tokens=0x10",
		"tokens=99999999999999999999", "tokens=1&tokens=2"} {
		code, rl, _, body := complete(s, q)
		var p struct {
			Type, Title, Detail string
			Status              int
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil || code != 400 || p.Status != 400 || p.Type != "about:blank" ||
			p.Detail != "tokens must be one whole number of tokens from 0 to 100000" {
			t.Errorf("%q: %d %s; want a 400 problem", q, code, body)
		}
		if rl != `"llm-tokens";r=500;t=1800` {
			t.Errorf("%q: RateLimit %s; want the reservation of a full bucket (the bad requests before gave theirs back)", q, rl)
		}
	}
	if code, _, _, body := complete(s, "tokens=100000"); code != 200 {
		t.Errorf("tokens=100000: %d %s", code, body)
	}
}

// settleFleetConfig is two demo processes' config on Redis at url: a
// settling bucket per client network (1 token an hour, burst 2000) and one
// for every client (20 an hour, burst 48 000), both reserving 50 and
// settling at most 150, so nothing refills within the test.
func settleFleetConfig(url string) string {
	return `listen: 127.0.0.1:0
limiter:
  store: redis
  redis:
    url: ` + url + `
    timeout: 500ms
policies:
  - name: llm-client
    key: [network]
    rate: 1/h
    burst: 2000
    cost: 50
    settle: true
    max_cost: 150
    operations: ["POST /v1/complete"]
  - name: llm-all
    key: []
    rate: 20/h
    burst: 48000
    cost: 50
    settle: true
    max_cost: 150
    operations: ["POST /v1/complete"]
`
}

// TestFleetSettle is the exactness proof across processes: two
// demo processes sharing one Redis, 32 clients (each its own loopback
// address, so its own bucket) sending 10 requests each to the two in
// turn, tokens=N at random from 0 to 200 (above max_cost 150: clamped).
// Every client's bucket, and the bucket of all of them, spent exactly the
// sum of what its requests settled at.
func TestFleetSettle(t *testing.T) {
	srv := redistest.Start(t)
	var addrs []string
	for i := range 2 {
		dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		addr, _, _ := startDemoProcess(t, dir, settleFleetConfig(srv.URL()))
		addrs = append(addrs, addr)
	}
	const clients, each = 32, 10
	var settled [clients]int64
	var wg sync.WaitGroup
	for g := range clients {
		wg.Go(func() {
			c := clientFrom(fmt.Sprintf("127.0.0.%d", g+10))
			rng := rand.New(rand.NewPCG(uint64(g), 27))
			for i := range each {
				n := rng.Int64N(201)
				resp := send(t, c, http.MethodPost, fmt.Sprintf("http://%s/v1/complete?tokens=%d", addrs[(g+i)%2], n), nil)
				if resp.code != http.StatusOK {
					t.Errorf("client %d: %d %s", g, resp.code, resp.body)
					return
				}
				settled[g] += min(n, 150)
			}
		})
	}
	wg.Wait()

	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	l, err := rkredis.New(client, rkredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spent := func(key string, li limiter.Limit) int64 {
		d, err := l.Peek(context.Background(), nil, []limiter.Request{{Key: key, Limit: li, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if d[0].Allowed {
			return li.Burst - d[0].Remaining - 1
		}
		return li.Burst - d[0].Remaining
	}
	perClient := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Hour}, Burst: 2000}
	var total int64
	for g, want := range settled {
		key := fmt.Sprintf("llm-client|network=127.0.0.%d/32", g+10)
		if got := spent(key, perClient); got != want {
			t.Errorf("client %d: its bucket spent %d tokens; its requests settled at %d", g, got, want)
		}
		total += want
	}
	if got := spent("llm-all", limiter.Limit{Rate: limiter.Rate{Count: 20, Per: time.Hour}, Burst: 48000}); got != total {
		t.Errorf("the shared bucket spent %d tokens; the requests settled at %d", got, total)
	}
	t.Logf("%d requests through 2 processes: %d tokens settled, every bucket exact", clients*each, total)
}

// TestCheckSettleFields: check refuses settle and max_cost where they
// cannot work, with the library's errors naming the field.
func TestCheckSettleFields(t *testing.T) {
	cfg := writeConfig(t, `policies:
  - name: p
    key: [network]
    rate: 1/s
    burst: 10
    max_cost: 5
  - name: q
    key: [network]
    max_in_flight: 2
    settle: true
  - name: r
    key: [network]
    rate: 1/s
    burst: 10
    cost: 5
    settle: true
    max_cost: 4
`)
	code, _, errOut := runDemo(t, "check", "-config", cfg)
	for _, want := range []string{
		`policies[0] ("p").max_cost: 5 is for settling policies (settle: true)`,
		`policies[1] ("q").settle: an in-flight policy's request holds one slot: nothing to settle (settle and max_cost are for token buckets)`,
		`policies[2] ("r").max_cost: 4 is below the cost 5 reserved: no request could settle at its own reservation`,
	} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, no %q in:\n%s", code, want, errOut)
		}
	}
}

// TestCompleteDefaultConfig: the embedded default settles POST
// /v1/complete per account: anonymous requests are 401 (no account), and
// an account's second completion sees the tokens its first reported
// (120 of the 500 reserved: 380 came back) in its RateLimit field, less
// what refilled meanwhile (20 000 a minute: one token per 3 ms).
func TestCompleteDefaultConfig(t *testing.T) {
	t.Chdir("../..") // the embedded default names key files relative to the repository root
	s, _ := serverAt(t, "")
	t.Cleanup(s.close)
	code, out, errOut := runDemo(t, "token", "-sub", "alice", "-ttl", "1h")
	if code != 0 {
		t.Fatalf("token: %d %s", code, errOut)
	}
	bearer := "Bearer " + strings.TrimSpace(out)
	post := func(auth string) (int, string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/complete?tokens=120", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Code, w.Header().Get("RateLimit")
	}
	if code, _ := post(""); code != http.StatusUnauthorized {
		t.Errorf("anonymous: %d; want 401 (llm-tokens needs an account)", code)
	}
	start := time.Now()
	if code, rl := post(bearer); code != 200 || !strings.HasSuffix(rl, `"llm-tokens";r=19500;t=2`) {
		t.Fatalf("first: %d %s; want 200 and llm-tokens r=19500 (500 reserved of 20 000)", code, rl)
	}
	code, rl := post(bearer)
	refilled := int64(time.Since(start) / (3 * time.Millisecond))
	var r, tt int64
	if _, err := fmt.Sscanf(rl[strings.LastIndex(rl, `"llm-tokens"`):], `"llm-tokens";r=%d;t=%d`, &r, &tt); err != nil || code != 200 || r < 19380 || r > 19380+refilled {
		t.Errorf("second: %d %s; want 200 and llm-tokens r from 19380 to 19380+%d", code, rl, refilled)
	}
}
