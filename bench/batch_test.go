package bench

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

// BenchmarkBatching compares, in one run against one redis-server, one
// policy per request (the Zipf accounts of BenchmarkPeers), 1, 16, 64, 128
// and 256 concurrent callers (the targets are at 64; with more,
// the batched path has the concurrency to keep Redis busy):
//
//   - batched: ratekey's Redis limiter with micro-batching (the default)
//     and the deny cache off, so every decision is a script call;
//   - defaults: batching and the deny cache on (what New gives);
//   - unbatched: MaxBatch 1, every call its own round trip (the path
//     before batching);
//   - redis_rate: go-redis/redis_rate v10, one script call per decision;
//   - pipeline: the same script call as ratekey's (EVALSHA of its
//     one-request script, the SHA captured from its first call), written
//     by hand: each caller's requests go out in go-redis pipelines of
//     64, 4 pipelines in flight at a time (the batcher's senders), no
//     limiter around them: the ceiling of batching on this machine.
//
// Each reports decisions/s (and allowed/op: every contender sees the same
// keys in the same order per caller). All share the machine's cores with
// redis-server.
func BenchmarkBatching(b *testing.B) {
	srv := redistest.Start(b)
	keys()
	for _, callers := range []int{1, 16, 64, 128, 256} {
		for _, name := range []string{"batched", "defaults", "unbatched", "redis_rate", "pipeline"} {
			b.Run(fmt.Sprintf("callers=%d/%s", callers, name), func(b *testing.B) {
				if _, err := srv.Do("FLUSHALL"); err != nil {
					b.Fatal(err)
				}
				c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: callers, MinIdleConns: min(callers, 16)})
				defer c.Close()
				switch name {
				case "batched":
					run(b, callers, newRatekey(c, rkredis.Options{Prefix: "rk:", Timeout: time.Second, DenyCache: -1}, 1))
				case "defaults":
					run(b, callers, newRatekey(c, rkredis.Options{Prefix: "rk:", Timeout: time.Second}, 1))
				case "unbatched":
					run(b, callers, newRatekey(c, rkredis.Options{Prefix: "rk:", Timeout: time.Second, DenyCache: -1, MaxBatch: 1}, 1))
				case "redis_rate":
					run(b, callers, newRedisRate(c, 1))
				case "pipeline":
					handPipeline(b, c, callers)
				}
			})
		}
	}
}

var benchAccountLimit = limiter.Limit{Rate: limiter.Rate{Count: accountRate, Per: time.Second}, Burst: accountBurst}

// shaHook records the SHA of the first EVALSHA a client sends.
type shaHook struct{ sha atomic.Value }

func (*shaHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *shaHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}
func (h *shaHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			h.record(cmd)
		}
		return next(ctx, cmds)
	}
}
func (h *shaHook) record(cmd goredis.Cmder) {
	if cmd.Name() == "evalsha" && h.sha.Load() == nil {
		h.sha.Store(cmd.Args()[1])
	}
}

// handPipeline sends b.N EVALSHAs of ratekey's one-request script (as
// ratekey sends them: the bucket's Redis key, mode "1", charge, ceiling)
// in pipelines of 64 from callers goroutines, at most 4 pipelines in
// flight.
func handPipeline(b *testing.B, c *goredis.Client, callers int) {
	hook := &shaHook{}
	probe := goredis.NewClient(&goredis.Options{Addr: c.Options().Addr, ContextTimeoutEnabled: true})
	defer probe.Close()
	probe.AddHook(hook)
	l, err := rkredis.New(probe, rkredis.Options{Prefix: "rk:", Timeout: time.Second, DenyCache: -1, MaxBatch: 1})
	if err != nil {
		b.Fatal(err)
	}
	k := keys()
	if _, err := l.Take(context.Background(), nil, []limiter.Request{{Key: k.accounts[0], Limit: benchAccountLimit, Cost: 1}}); err != nil {
		b.Fatal(err)
	}
	sha := hook.sha.Load()
	charge := int64(benchAccountLimit.Rate.Interval())
	ceiling := charge * benchAccountLimit.Burst
	// The buckets' Redis keys in the package documentation's layout,
	// <Prefix>{<tag>}<Burst>x<Interval>ns:<Key>: the tag only places a key
	// on a Cluster slot, so on one server any 8 hex digits do (here the
	// account's index); the names are as long as ratekey's.
	names := make([]string, accounts)
	for i := range names {
		names[i] = fmt.Sprintf("rk:{%08x}%dx%dns:%s", uint32(i), benchAccountLimit.Burst, charge, k.accounts[i])
	}
	const per = 64
	sem := make(chan struct{}, 4)
	var next, allowed atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for g := range callers {
		wg.Go(func() {
			z := rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 7919)), 1.1, 1, accounts-1)
			ok := int64(0)
			for {
				n := min(int64(per), int64(b.N)-next.Add(per)+per)
				if n <= 0 {
					break
				}
				sem <- struct{}{}
				pipe := c.Pipeline()
				cmds := make([]*goredis.Cmd, n)
				for j := range cmds {
					cmds[j] = pipe.EvalSha(ctx, sha.(string), []string{names[z.Uint64()]}, "1", charge, ceiling)
				}
				_, err := pipe.Exec(ctx)
				<-sem
				if err != nil {
					b.Error(err)
					return
				}
				for _, cmd := range cmds {
					if v, _ := cmd.Int64(); v >= 0 {
						ok++
					}
				}
			}
			allowed.Add(ok)
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
}

// BenchmarkFloodedKey floods one account's bucket (rate 100/s, burst 50)
// from 16 callers for one second per iteration, with the deny cache on
// (the default) and off, and reports the script calls Redis ran per
// second (INFO commandstats: evalsha + eval), the calls per emission
// interval (10 ms), decisions/s and the admissions per second. Both
// should admit rate × t + burst; the cache should cut the calls to at
// most 2 per interval.
func BenchmarkFloodedKey(b *testing.B) {
	srv := redistest.Start(b)
	lim := limiter.Limit{Rate: limiter.Rate{Count: 100, Per: time.Second}, Burst: 50}
	for _, cache := range []string{"on", "off"} {
		b.Run("deny_cache="+cache, func(b *testing.B) {
			if _, err := srv.Do("FLUSHALL"); err != nil {
				b.Fatal(err)
			}
			c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 16})
			defer c.Close()
			o := rkredis.Options{Prefix: "flood:", Timeout: time.Second}
			if cache == "off" {
				o.DenyCache = -1
			}
			l, err := rkredis.New(c, o)
			if err != nil {
				b.Fatal(err)
			}
			var decisions, admitted atomic.Int64
			calls0 := srv.ScriptCalls(b)
			b.ResetTimer()
			for range b.N {
				stop := time.Now().Add(time.Second)
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						dst := make([]limiter.Decision, 0, 1)
						reqs := []limiter.Request{{Key: "per-account|account=mallory", Limit: lim, Cost: 1}}
						for time.Now().Before(stop) {
							d, err := l.Take(context.Background(), dst[:0], reqs)
							if err != nil {
								b.Error(err)
								return
							}
							decisions.Add(1)
							if d[0].Allowed {
								admitted.Add(1)
							}
						}
					})
				}
				wg.Wait()
			}
			b.StopTimer()
			secs := b.Elapsed().Seconds()
			calls := float64(srv.ScriptCalls(b) - calls0)
			b.ReportMetric(calls/secs, "redis-calls/s")
			b.ReportMetric(calls/secs/100, "redis-calls/interval")
			b.ReportMetric(float64(decisions.Load())/secs, "decisions/s")
			b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/run")
		})
	}
}
