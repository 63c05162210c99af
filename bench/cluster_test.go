package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// BenchmarkCluster compares ratekey's Redis limiter on one master and on a
// 3-master Redis Cluster, in one run, interleaved as
// BenchmarkPeersInterleaved does (slices of 200 decisions per client,
// alternating which goes first). The workload is that of BenchmarkPeers:
// Zipf-skewed accounts, and with 3 policies a tenant and a shared
// per-operation bucket too. With hashtag=tenant the account and tenant
// buckets share a slot, so a 3-policy request spans 2 slots instead of up
// to 3. It reports decisions/s of each store, their ratio (cluster / one),
// and the cluster's script commands per decision (1 within one slot; one
// per slot across slots, plus refunds).
//
// All servers and the benchmark share this machine's cores: a cluster's
// masters add capacity only when each has a core of its own, so here the
// ratio shows the cost of the cluster's extra round trips and client-side
// routing, not its scaling.
func BenchmarkCluster(b *testing.B) {
	one := redistest.Start(b)
	c := redistest.StartMasters(b, 3)
	keys()
	for _, tc := range []struct {
		policies int
		hashTag  string
	}{{1, ""}, {3, ""}, {3, "tenant"}} {
		for _, clients := range []int{1, 16} {
			name := fmt.Sprintf("policies=%d/hashtag=%s/clients=%d", tc.policies, tc.hashTag, clients)
			b.Run(name, func(b *testing.B) {
				if _, err := one.Do("FLUSHALL"); err != nil {
					b.Fatal(err)
				}
				c.Flush(b)
				oc := goredis.NewClient(&goredis.Options{Addr: one.Addr, ContextTimeoutEnabled: true, PoolSize: clients, MinIdleConns: clients})
				defer oc.Close()
				cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, PoolSize: clients, MinIdleConns: clients})
				defer cc.Close()
				scripts := &scriptCounter{}
				cc.AddHook(scripts)
				peers := [2]decider{newRatekeyOn(oc, tc.policies, tc.hashTag), newRatekeyOn(cc, tc.policies, tc.hashTag)}
				zipfs := make([]*rand.Zipf, clients)
				for g := range zipfs {
					zipfs[g] = rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 7919)), 1.1, 1, accounts-1)
				}
				var spent [2]time.Duration
				const slice = 200
				scripts.n.Store(0)
				b.ResetTimer()
				for done, turn := 0, 0; done < b.N; turn++ {
					n := min(slice*clients, b.N-done)
					for k := range 2 {
						p := (k + turn) % 2
						spent[p] += burst(b, peers[p], zipfs, n)
					}
					done += n
				}
				b.StopTimer()
				single := float64(b.N) / spent[0].Seconds()
				cluster := float64(b.N) / spent[1].Seconds()
				b.ReportMetric(single, "one-master-decisions/s")
				b.ReportMetric(cluster, "cluster-decisions/s")
				b.ReportMetric(cluster/single, "ratio")
				b.ReportMetric(float64(scripts.n.Load())/float64(b.N), "cluster-scripts/decision")
			})
		}
	}
}

// newRatekeyOn is newRatekey on any client, with Options.HashTag.
func newRatekeyOn(c goredis.UniversalClient, policies int, hashTag string) decider {
	l, err := rkredis.New(c, rkredis.Options{Prefix: "rk:", Timeout: time.Second, HashTag: hashTag})
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

// scriptCounter counts the script commands (EVALSHA, EVAL) a client sends.
type scriptCounter struct{ n atomic.Int64 }

func (*scriptCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (s *scriptCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			s.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (s *scriptCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	// Batched calls travel in pipelines.
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				s.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}
