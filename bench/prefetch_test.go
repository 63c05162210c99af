package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// BenchmarkHotBucket measures one hot bucket (a global policy: one key,
// 1M/s, burst 100k, every request one call of one request) under 64 callers
// in one process (RunParallel with 64 goroutines), on the memory store,
// on Redis decided per request (the direct path, batching and the deny
// cache at their defaults) and on Redis with Prefetch K (issue 25, item
// 2). ns/op is wall time per decision over all callers; redis-calls/op
// is the script calls per decision (INFO commandstats), admitted/op the
// share of decisions admitted, admitted/call the admissions per script
// call (target: at least K/2). Each sub-benchmark starts on a fresh key
// prefix: a full bucket, drained as the run goes on. A held token is
// valid for H = min(PrefetchHold, window) after its fetch was sent (see
// limiter/redis, "Prefetch"); hold= runs H 5 ms and the default 50 ms.
func BenchmarkHotBucket(b *testing.B) {
	srv := redistest.Start(b)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	b.Cleanup(func() { client.Close() })
	r := limiter.Request{Key: "global|operation=GET /v1/reports/{id}",
		Limit: limiter.Limit{Rate: limiter.Rate{Count: 1_000_000, Per: time.Second}, Burst: 100_000}, Cost: 1}
	stores := []struct {
		name string
		l    func() limiter.Limiter
	}{
		{"store=memory", func() limiter.Limiter { return memory.New(memory.Options{}) }},
		{"store=redis/prefetch=0", func() limiter.Limiter { return mustRedis(b, client, 0, 0) }},
	}
	for _, k := range []int64{64, 256, 1024} {
		for _, hold := range []time.Duration{5 * time.Millisecond, 50 * time.Millisecond} {
			stores = append(stores, struct {
				name string
				l    func() limiter.Limiter
			}{fmt.Sprintf("store=redis/prefetch=%d/hold=%v", k, hold), func() limiter.Limiter { return mustRedis(b, client, k, hold) }})
		}
	}
	for _, s := range stores {
		b.Run(s.name, func(b *testing.B) {
			l := s.l()
			var admitted atomic.Int64
			calls0 := srv.ScriptCalls(b)
			b.SetParallelism(64 / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				reqs := []limiter.Request{r}
				dst := make([]limiter.Decision, 0, 1)
				for pb.Next() {
					d, err := l.Take(context.Background(), dst[:0], reqs)
					if err != nil {
						b.Error(err)
						return
					}
					if d[0].Allowed {
						admitted.Add(1)
					}
				}
			})
			b.StopTimer()
			calls := float64(srv.ScriptCalls(b) - calls0)
			b.ReportMetric(calls/float64(b.N), "redis-calls/op")
			b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
			if calls > 0 {
				b.ReportMetric(float64(admitted.Load())/calls, "admitted/call")
			}
			if rl, ok := l.(*rkredis.Limiter); ok {
				if err := rl.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func mustRedis(b *testing.B, c goredis.UniversalClient, k int64, hold time.Duration) *rkredis.Limiter {
	l, err := rkredis.New(c, rkredis.Options{Prefix: fmt.Sprintf("bench-hot%d-%v:", k, hold), Timeout: time.Second, Prefetch: k, PrefetchHold: hold})
	if err != nil {
		b.Fatal(err)
	}
	return l
}
