package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// BenchmarkTake measures Take against a local redis-server (loopback TCP,
// the server's clock) with 1 and 16 concurrent callers, each call carrying
// 1 or 3 policies: a per-account bucket among 100k accounts drawn with a
// Zipf skew (new keys keep appearing: churn), a per-tenant bucket among 100
// and one shared per-operation bucket. ns/op is wall time per call over
// all callers (so decisions/s = 1e9/ns-per-op); B/op and allocs/op are the
// client side's.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	for _, policies := range []int{1, 3} {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("policies=%d/callers=%d", policies, callers), func(b *testing.B) {
				c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: callers, MinIdleConns: callers})
				defer c.Close()
				l, err := rkredis.New(c, rkredis.Options{Timeout: time.Second})
				if err != nil {
					b.Fatal(err)
				}
				benchCalls(b, callers, func(rng *rand.Rand, z *rand.Zipf, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
					fillReqs(reqs, policies, z.Uint64())
					return l.Take(context.Background(), dst[:0], reqs[:policies])
				})
			})
		}
	}
}

var (
	benchAccount = limiter.Limit{Rate: limiter.Rate{Count: 100, Per: time.Second}, Burst: 50}
	benchTenant  = limiter.Limit{Rate: limiter.Rate{Count: 100_000, Per: time.Second}, Burst: 10_000}
	benchOp      = limiter.Limit{Rate: limiter.Rate{Count: 1_000_000, Per: time.Second}, Burst: 100_000}
)

const benchAccounts = 100_000

var benchKeys = sync.OnceValue(func() (k struct{ accounts, tenants []string }) {
	for i := range benchAccounts {
		k.accounts = append(k.accounts, fmt.Sprintf("per-account|tenant=t%03d|account=user-%07d", i%100, i))
	}
	for i := range 100 {
		k.tenants = append(k.tenants, fmt.Sprintf("per-tenant|tenant=t%03d", i))
	}
	return k
})

// fillReqs writes the requests of account i into reqs[:policies].
func fillReqs(reqs []limiter.Request, policies int, i uint64) {
	k := benchKeys()
	reqs[0] = limiter.Request{Key: k.accounts[i], Limit: benchAccount, Cost: 1}
	if policies == 3 {
		reqs[1] = limiter.Request{Key: k.tenants[i%100], Limit: benchTenant, Cost: 1}
		reqs[2] = limiter.Request{Key: "per-operation|operation=GET /v1/reports/{id}", Limit: benchOp, Cost: 1}
	}
}

// benchCalls runs b.N calls of f spread over callers goroutines and
// reports decisions/s and the share of allowed calls.
func benchCalls(b *testing.B, callers int, f func(*rand.Rand, *rand.Zipf, []limiter.Decision, []limiter.Request) ([]limiter.Decision, error)) {
	benchKeys()
	var next, allowed atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7919))
			z := rand.NewZipf(rng, 1.1, 1, benchAccounts-1)
			dst := make([]limiter.Decision, 0, 3)
			reqs := make([]limiter.Request, 3)
			ok := int64(0)
			for next.Add(1) <= int64(b.N) {
				d, err := f(rng, z, dst, reqs)
				if err != nil {
					b.Error(err)
					return
				}
				if d[0].Allowed {
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

// BenchmarkDenyCacheHit measures a rejection answered by the deny cache:
// no round trip, no allocation.
func BenchmarkDenyCacheHit(b *testing.B) {
	srv := redistest.Start(b)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := rkredis.New(c, rkredis.Options{Prefix: "hitb:", Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	reqs := []limiter.Request{{Key: "per-account|account=mallory", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Hour}, Burst: 50}, Cost: 50}}
	dst := make([]limiter.Decision, 0, 1)
	ctx := context.Background()
	for range 2 { // the first charges the whole burst, the second is rejected by Redis
		if _, err := l.Take(ctx, dst[:0], reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		d, _ := l.Take(ctx, dst[:0], reqs)
		if !d[0].Cached {
			b.Fatal("not answered by the deny cache")
		}
	}
}
