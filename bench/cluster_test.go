package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
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
				opts := benchOpts
				opts.HashTag = tc.hashTag
				peers := [2]decider{newRatekey(oc, opts, tc.policies), newRatekey(cc, opts, tc.policies)}
				scripts.n.Store(0)
				spent := alternate(b, peers, clients)
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
