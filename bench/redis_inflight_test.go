package bench

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// BenchmarkRedisInFlight measures an in-flight cap on one Redis server,
// per request: Take (a slot leased, in the script that also decides the
// request's token bucket) then Release (ZREM of the lease), sequentially,
// batching off. It reports the Redis script calls per request
// (redis-calls/op, from INFO commandstats): 1 for a token bucket alone, 2
// for a cap alone or a cap with a token bucket (the acquire shared with
// the bucket, plus the release), whatever the number of policies.
func BenchmarkRedisInFlight(b *testing.B) {
	srv := redistest.Start(b)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { client.Close() })
	l, err := rkredis.New(client, rkredis.Options{Prefix: "bench-inflight:", Timeout: time.Second, MaxBatch: 1, DenyCache: -1})
	if err != nil {
		b.Fatal(err)
	}
	bucket := limiter.Request{Key: "tenant=acme", Limit: limiter.Limit{Rate: limiter.Rate{Count: 1 << 40, Per: time.Second}, Burst: 1 << 20}, Cost: 1}
	capR := limiter.Request{Key: "tenant=acme", Limit: limiter.Limit{MaxInFlight: 1 << 20}, Cost: 1}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		reqs []limiter.Request
	}{
		{"rate", []limiter.Request{bucket}},
		{"cap", []limiter.Request{capR}},
		{"rate+cap", []limiter.Request{bucket, capR}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var ds []limiter.Decision
			calls0 := srv.ScriptCalls(b)
			b.ResetTimer()
			for range b.N {
				ds, err = l.Take(ctx, ds[:0], tc.reqs)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx, tc.reqs, ds); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(srv.ScriptCalls(b)-calls0)/float64(b.N), "redis-calls/op")
		})
	}
}
