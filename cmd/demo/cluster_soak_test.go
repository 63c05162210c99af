package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// soakConfig: three policies on every GET /v1/reports/{id}, all decided in
// one call (none is pre_auth, so they are all-or-nothing together):
//
//   - per-network, [network]: 5/s (interval 200 ms), burst 160;
//   - per-account, [tenant, account, operation]: 2/s (500 ms), burst 65;
//   - shared, [operation]: 20/s (50 ms), burst 610: one bucket for everyone.
//
// The bursts look large because the test first empties all but the last
// few tokens of every bucket (see soakPreCharge): what stays available at
// the start is 10, 5 and 10 tokens, small bursts that the 32 clients
// exhaust at once, so every policy rejects often. Emptying the buckets
// keeps each one in debt for the whole run (pre-charge × interval = 30 s >
// the ~22 s from the pre-charge to the last read), so every charge moves
// the bucket's TAT by exactly one interval and every refund moves it back
// by exactly one (the refund is min(charge, TAT - now) and TAT - now stays
// above the charge): TAT_after - TAT_before = spent × interval, with no
// refill term, which makes "spent == admitted" an exact check while the
// rates still refill several hundred tokens during the run.
//
// The deny cache is off (every call here has three requests, which it never
// answers anyway); the timeout is 2 s so that two loaded cores under -race
// give no store error (a 503 would leave an outcome the test cannot count).
const soakConfig = `
listen: 127.0.0.1:0
trusted_proxies: {cidrs: []}
auth:
  anonymous: reject
  issuers:
    - issuer: https://issuer.e2e.invalid
      tenant: e2e
      audiences: [ratekey-e2e]
      algorithms: [EdDSA]
      keys:
        - kid: e2e-1
          public_key_file: %[1]s/demo-ed25519.pub.pem
          private_key_file: %[1]s/demo-ed25519.key.pem
policies:
  - {name: per-network, key: [network], rate: 5/s, burst: 160, operations: ["GET /v1/reports/{id}"]}
  - {name: per-account, key: [tenant, account, operation], rate: 2/s, burst: 65, operations: ["GET /v1/reports/{id}"]}
  - {name: shared, key: [operation], rate: 20/s, burst: 610, operations: ["GET /v1/reports/{id}"]}
log: {sample_passed: 0}
limiter:
  redis: {prefix: "soak:", timeout: 2s, deny_cache: 0}
`

const (
	// soakClients is the number of concurrent clients, soakNetworks the
	// client networks they come from (127.0.0.10 to .13, one /32 each).
	soakClients, soakNetworks = 32, 4
	// soakLoad is how long the clients send; soakMaxPerClient bounds the
	// requests of one client whatever the machine's speed.
	soakLoad, soakMaxPerClient = 18 * time.Second, 20_000
	// soakMargin is added to the elapsed time in the bound burst + rate·t:
	// Redis's TIME and this process's clock are the same host clock, so
	// the margin only covers rounding.
	soakMargin = 50 * time.Millisecond
)

// soakBucket is one bucket of the test: its limiter Request (the demo's key
// and limit), the tokens taken from it before the load, what the load
// admitted, and its TAT (ns, Redis's clock) before and after the load.
type soakBucket struct {
	req        limiter.Request
	pre        int64
	admitted   int64
	rejections int64 // 429s whose body names this bucket's policy
	slot       int
	tat0, tat1 int64
}

// TestClusterSoakAllOrNothing: two demo processes on a 3-master Redis
// Cluster, 32 concurrent clients for 18 s as 33 accounts (one hot account
// every client uses for half its requests, 32 private ones) from 4
// networks, each request charging three policies whose buckets lie in
// different slots (so every call is decided slot by slot, with refunds).
// For every bucket: admitted <= burst + rate·t, and the tokens Redis says
// were spent equal the requests admitted, exactly: no charge of a rejected
// request survived (a lost refund would show as spent > admitted, a
// charge of an admitted request that went missing as spent < admitted).
func TestClusterSoakAllOrNothing(t *testing.T) {
	c := redistest.StartMasters(t, 3)
	keys, err := filepath.Abs("../../testdata/keys")
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(soakConfig, keys)
	dirA := t.TempDir()
	addrA, logsA, _ := startDemoProcess(t, dirA, config, "-redis-cluster", c.URL())
	addrB, logsB, _ := startDemoProcess(t, t.TempDir(), config, "-redis-cluster", c.URL())
	demos := []string{addrA, addrB}

	// The buckets, named as the demo names them.
	const op = "GET /v1/reports/{id}"
	lim := func(perSecond, burst int64) limiter.Limit {
		return limiter.Limit{Rate: limiter.Rate{Count: perSecond, Per: time.Second}, Burst: burst}
	}
	netLimit, acctLimit, opLimit := lim(5, 160), lim(2, 65), lim(20, 610)
	buckets := map[string]*soakBucket{}
	add := func(key string, l limiter.Limit, avail int64) *soakBucket {
		b := &soakBucket{req: limiter.Request{Key: key, Limit: l, Cost: l.Burst - avail}, pre: l.Burst - avail}
		buckets[key] = b
		return b
	}
	shared := add("shared|operation="+op, opLimit, 10)
	var nets []*soakBucket
	for j := range soakNetworks {
		nets = append(nets, add(fmt.Sprintf("per-network|network=127.0.0.%d/32", 10+j), netLimit, 10))
	}
	account := func(name string) *soakBucket {
		return add("per-account|tenant=e2e|account="+name+"|operation="+op, acctLimit, 5)
	}
	hot := account("hot")
	var private []*soakBucket
	for i := range soakClients {
		private = append(private, account(fmt.Sprintf("p%d", i)))
	}
	cfgPath := filepath.Join(dirA, "ratekey.yaml")
	hotToken := mintToken(t, cfgPath, "hot")
	var privateTokens []string
	for i := range soakClients {
		privateTokens = append(privateTokens, mintToken(t, cfgPath, fmt.Sprintf("p%d", i)))
	}

	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := t.Context()

	// Empty every bucket but its last few tokens, then read each one's TAT.
	pre, err := rkredis.New(client, rkredis.Options{Prefix: "soak:", DenyCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, b := range buckets {
		d, err := pre.Take(ctx, nil, []limiter.Request{b.req})
		if err != nil {
			t.Fatal(err)
		}
		if !d[0].Allowed {
			t.Fatalf("pre-charge of %s: %+v", b.req.Key, d[0])
		}
		b.slot = d[0].HashSlot
	}
	for key, tat := range soakTATs(t, ctx, client, buckets) {
		buckets[key].tat0 = tat
	}
	resetStats(t, ctx, client)

	// The load: client i comes from network i%4, talks to demo (i/4)%2,
	// and sends as the hot account on even requests, as its own on odd.
	type tally struct {
		ok, rejected map[*soakBucket]int64
		byPolicy     map[string]int64
		slotsSum     int64 // Σ over requests of their distinct slots
		n            int64
	}
	tallies := make([]tally, soakClients)
	known := map[string]bool{"per-network": true, "per-account": true, "shared": true}
	var wg sync.WaitGroup
	for i := range soakClients {
		wg.Go(func() {
			tl := &tallies[i]
			tl.ok, tl.rejected, tl.byPolicy = map[*soakBucket]int64{}, map[*soakBucket]int64{}, map[string]int64{}
			nb := nets[i%soakNetworks]
			hc := soakClient(fmt.Sprintf("127.0.0.%d", 10+i%soakNetworks))
			defer hc.CloseIdleConnections()
			base := "http://" + demos[(i/soakNetworks)%2] + "/v1/reports/"
			for k := 0; k < soakMaxPerClient && time.Since(start) < soakLoad; k++ {
				ab, tok := private[i], privateTokens[i]
				if k%2 == 0 {
					ab, tok = hot, hotToken
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+strconv.Itoa(k), nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := hc.Do(req)
				if err != nil {
					t.Errorf("client %d request %d: %v (its outcome is unknown)", i, k, err)
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Errorf("client %d request %d: %v", i, k, err)
					return
				}
				tl.n++
				tl.slotsSum += int64(distinct(nb.slot, ab.slot, shared.slot))
				switch resp.StatusCode {
				case http.StatusOK:
					tl.ok[nb]++
					tl.ok[ab]++
					tl.ok[shared]++
				case http.StatusTooManyRequests:
					var p struct {
						Policy string `json:"policy"`
					}
					if err := json.Unmarshal(body, &p); err != nil || !known[p.Policy] {
						t.Errorf("client %d request %d: 429 naming no known policy: %s", i, k, body)
						return
					}
					tl.byPolicy[p.Policy]++
					switch p.Policy {
					case "per-network":
						tl.rejected[nb]++
					case "per-account":
						tl.rejected[ab]++
					default:
						tl.rejected[shared]++
					}
				default:
					t.Errorf("client %d request %d: %d %s; want 200 or 429 (a store error leaves an outcome the test cannot count)", i, k, resp.StatusCode, body)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if t.Failed() {
		t.FailNow()
	}
	if elapsed > 25*time.Second {
		// The pre-charges keep the buckets in debt for 30 s only.
		t.Fatalf("the load took %v; the exact count needs it to end within 25 s of the pre-charge", elapsed)
	}
	// Every reply has arrived, so every refund has run (a call refunds
	// before it returns): the buckets have settled.
	var n, slotsSum int64
	byPolicy := map[string]int64{}
	for _, tl := range tallies {
		n += tl.n
		slotsSum += tl.slotsSum
		for b, v := range tl.ok {
			b.admitted += v
		}
		for b, v := range tl.rejected {
			b.rejections += v
		}
		for p, v := range tl.byPolicy {
			byPolicy[p] += v
		}
	}
	tats := soakTATs(t, ctx, client, buckets)
	calls := scriptCalls(t, ctx, client)

	tsec := (elapsed + soakMargin).Seconds()
	var admitted int64
	for key, b := range buckets {
		b.tat1 = tats[key]
		interval := int64(b.req.Limit.Rate.Interval())
		moved := b.tat1 - b.tat0
		if moved%interval != 0 {
			t.Errorf("%s: TAT moved %d ns, not a whole number of %d ns intervals (a partial refund, or the bucket left debt)", key, moved, interval)
		}
		spent := moved / interval
		if spent != b.admitted {
			t.Errorf("%s: Redis says %d tokens were spent by the load, %d requests were admitted (all-or-nothing broken: %+d)", key, spent, b.admitted, spent-b.admitted)
		}
		// Over [start, start+t], the pre-charge included: pre + admitted <=
		// burst + rate·t.
		bound := float64(b.req.Limit.Burst) + tsec/time.Duration(interval).Seconds()
		if float64(b.pre+b.admitted) > bound {
			t.Errorf("%s: %d taken + %d admitted in %.2fs > burst %d + rate·t = %.1f", key, b.pre, b.admitted, tsec, b.req.Limit.Burst, bound)
		}
		if b == shared {
			admitted = b.admitted
		}
	}
	refunds := calls - slotsSum
	if refunds < 0 {
		t.Errorf("%d script calls for %d slot parts of %d requests: fewer calls than parts", calls, slotsSum, n)
	}

	// The figures.
	t.Logf("%d requests in %v (%.0f/s), %d admitted, 429s by policy %v", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), admitted, byPolicy)
	t.Logf("script calls %d for %d slot parts (%.2f per request): %d refunds (%.3f%% of requests, %.2f%% of rejections)",
		calls, slotsSum, float64(slotsSum)/float64(n), refunds, 100*float64(refunds)/float64(n), 100*float64(refunds)/float64(max(n-admitted, 1)))
	usage := func(name string, b *soakBucket) {
		avail := float64(b.req.Limit.Burst-b.pre) + tsec/b.req.Limit.Rate.Interval().Seconds()
		t.Logf("%-40s slot %5d: admitted %4d = spent %4d of %.1f available (%.1f%%, %d 429s naming it)",
			name, b.slot-1, b.admitted, (b.tat1-b.tat0)/int64(b.req.Limit.Rate.Interval()), avail, 100*float64(b.admitted)/avail, b.rejections)
	}
	usage("shared", shared)
	for j, b := range nets {
		usage(fmt.Sprintf("network 127.0.0.%d", 10+j), b)
	}
	usage("account hot", hot)
	var pAdm, pRej int64
	for _, b := range private {
		pAdm += b.admitted
		pRej += b.rejections
	}
	t.Logf("32 private accounts: admitted %d in all (%.1f each; %d 429s naming them)", pAdm, float64(pAdm)/soakClients, pRej)
	for _, logs := range []fmt.Stringer{logsA, logsB} {
		if strings.Contains(logs.String(), "panic") {
			t.Errorf("demo log holds a panic:\n%s", logs)
		}
	}
}

// soakClient is an HTTP client whose connections come from source, kept
// alive between requests.
func soakClient(source string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConnsPerHost: 4,
	}}
}

// distinct returns how many distinct values a, b and c hold.
func distinct(a, b, c int) int {
	n := 1
	if b != a {
		n++
	}
	if c != a && c != b {
		n++
	}
	return n
}

// soakTATs returns the TAT (ns, the server's clock) of every key under the
// prefix "soak:", by the bucket Key its name ends with, and fails t unless
// they are exactly the buckets (so the demo named them as the test did).
func soakTATs(t *testing.T, ctx context.Context, client *goredis.ClusterClient, buckets map[string]*soakBucket) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	tats := map[string]int64{}
	var bad []string
	err := client.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		names, err := m.Keys(ctx, "soak:*").Result()
		if err != nil {
			return err
		}
		for _, name := range names {
			v, err := m.Get(ctx, name).Int64()
			if err != nil {
				return fmt.Errorf("GET %s: %w", name, err)
			}
			_, rest, _ := strings.Cut(name, "}")
			_, key, _ := strings.Cut(rest, "ns:")
			mu.Lock()
			if b := buckets[key]; b == nil || !strings.HasPrefix(rest, fmt.Sprintf("%dx%dns:", b.req.Limit.Burst, b.req.Limit.Rate.Interval())) {
				bad = append(bad, name)
			} else {
				tats[key] = v
			}
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 || len(tats) != len(buckets) {
		t.Fatalf("Redis holds %d of the %d buckets, and keys the test did not expect: %q", len(tats), len(buckets), bad)
	}
	return tats
}

// resetStats resets every master's command statistics.
func resetStats(t *testing.T, ctx context.Context, client *goredis.ClusterClient) {
	t.Helper()
	if err := client.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		return m.ConfigResetStat(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
}

// scriptCalls returns the script executions (EVALSHA and EVAL calls that
// did not fail, so a NOSCRIPT followed by its EVAL counts once) on every
// master since resetStats.
func scriptCalls(t *testing.T, ctx context.Context, client *goredis.ClusterClient) int64 {
	t.Helper()
	var mu sync.Mutex
	var total int64
	if err := client.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		info, err := m.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		calls, failed := redistest.ScriptCalls(info)
		mu.Lock()
		total += calls - failed
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return total
}
