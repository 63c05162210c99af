package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// Policies of a request, the same for both limiters: a per-account bucket
// (100k accounts, Zipf-skewed, so new keys keep appearing), a per-tenant
// bucket (100 tenants) and one shared per-operation bucket. Both limiters
// count burst as capacity; rates are per second.
const (
	accounts      = 100_000
	tenants       = 100
	accountRate   = 100
	accountBurst  = 50
	tenantRate    = 100_000
	tenantBurst   = 10_000
	operationRate = 1_000_000
	operationBurs = 100_000
)

var keys = sync.OnceValue(func() (k struct{ accounts, tenants []string }) {
	for i := range accounts {
		k.accounts = append(k.accounts, fmt.Sprintf("per-account|tenant=t%03d|account=user-%07d", i%tenants, i))
	}
	for i := range tenants {
		k.tenants = append(k.tenants, fmt.Sprintf("per-tenant|tenant=t%03d", i))
	}
	return k
})

const operationKey = "per-operation|operation=GET /v1/reports/{id}"

// decider makes one decision for account i with 1 or 3 policies and
// reports whether the request is admitted.
type decider func(ctx context.Context, i uint64) (bool, error)

// newRatekey returns a decider on ratekey's Redis limiter over c with
// opts: one script, one round trip, all policies (1 or 3) all-or-nothing.
func newRatekey(c goredis.UniversalClient, opts rkredis.Options, policies int) decider {
	l, err := rkredis.New(c, opts)
	if err != nil {
		panic(err)
	}
	account := limiter.Limit{Rate: limiter.Rate{Count: accountRate, Per: time.Second}, Burst: accountBurst}
	tenant := limiter.Limit{Rate: limiter.Rate{Count: tenantRate, Per: time.Second}, Burst: tenantBurst}
	op := limiter.Limit{Rate: limiter.Rate{Count: operationRate, Per: time.Second}, Burst: operationBurs}
	k := keys()
	return func(ctx context.Context, i uint64) (bool, error) {
		var reqs [3]limiter.Request
		var buf [3]limiter.Decision
		reqs[0] = limiter.Request{Key: k.accounts[i], Limit: account, Cost: 1}
		if policies == 3 {
			reqs[1] = limiter.Request{Key: k.tenants[i%tenants], Limit: tenant, Cost: 1}
			reqs[2] = limiter.Request{Key: operationKey, Limit: op, Cost: 1}
		}
		d, err := l.Take(ctx, buf[:0], reqs[:policies])
		if err != nil {
			return false, err
		}
		for j := range d {
			if !d[j].Allowed {
				return false, nil
			}
		}
		return true, nil
	}
}

// benchOpts are the Redis limiter's options in the peer comparisons.
var benchOpts = rkredis.Options{Prefix: "rk:", Timeout: time.Second}

// newRedisRate returns a decider on go-redis/redis_rate v10: one script
// call per policy, so three sequential round trips for three policies (and
// no all-or-nothing: an earlier policy stays charged when a later one
// rejects).
func newRedisRate(c *goredis.Client, policies int) decider {
	l := redis_rate.NewLimiter(c)
	account := redis_rate.Limit{Rate: accountRate, Burst: accountBurst, Period: time.Second}
	tenant := redis_rate.Limit{Rate: tenantRate, Burst: tenantBurst, Period: time.Second}
	op := redis_rate.Limit{Rate: operationRate, Burst: operationBurs, Period: time.Second}
	k := keys()
	return func(ctx context.Context, i uint64) (bool, error) {
		res, err := l.Allow(ctx, k.accounts[i], account)
		if err != nil {
			return false, err
		}
		ok := res.Allowed > 0
		if policies == 3 {
			if res, err = l.Allow(ctx, k.tenants[i%tenants], tenant); err != nil {
				return false, err
			}
			ok = ok && res.Allowed > 0
			if res, err = l.Allow(ctx, operationKey, op); err != nil {
				return false, err
			}
			ok = ok && res.Allowed > 0
		}
		return ok, nil
	}
}

// BenchmarkPeers runs ratekey's Redis limiter and redis_rate v10 against
// the same redis-server in one run, for 1 and 16 concurrent clients and 1
// and 3 policies per request. ns/op is wall time per request decision over
// all clients (decisions/s = 1e9 / ns-per-op); each client is a goroutine
// with its own pooled connection.
func BenchmarkPeers(b *testing.B) {
	srv := redistest.Start(b)
	keys()
	for _, policies := range []int{1, 3} {
		for _, clients := range []int{1, 16} {
			for _, peer := range []struct {
				name string
				new  func(*goredis.Client, int) decider
			}{{"ratekey", func(c *goredis.Client, policies int) decider { return newRatekey(c, benchOpts, policies) }}, {"redis_rate", newRedisRate}} {
				b.Run(fmt.Sprintf("policies=%d/clients=%d/%s", policies, clients, peer.name), func(b *testing.B) {
					if _, err := srv.Do("FLUSHALL"); err != nil {
						b.Fatal(err)
					}
					c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: clients, MinIdleConns: clients})
					defer c.Close()
					run(b, clients, peer.new(c, policies))
				})
			}
		}
	}
}

// run makes b.N decisions spread over clients goroutines.
func run(b *testing.B, clients int, decide decider) {
	var next, allowed atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			z := rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 7919)), 1.1, 1, accounts-1)
			ok := int64(0)
			for next.Add(1) <= int64(b.N) {
				a, err := decide(ctx, z.Uint64())
				if err != nil {
					b.Error(err)
					return
				}
				if a {
					ok++
				}
			}
			allowed.Add(ok)
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
}
