package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
)

// BenchmarkPeersInterleaved is BenchmarkPeers made robust to a noisy
// machine: the two limiters take turns, in slices of 200 decisions per
// client, alternating which goes first, so that both see the same
// background load. b.N is the number of decisions each limiter makes. It
// reports each one's decisions/s and their ratio (ratekey / redis_rate).
func BenchmarkPeersInterleaved(b *testing.B) {
	srv := redistest.Start(b)
	keys()
	for _, policies := range []int{1, 3} {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("policies=%d/clients=%d", policies, clients), func(b *testing.B) {
				if _, err := srv.Do("FLUSHALL"); err != nil {
					b.Fatal(err)
				}
				opts := &goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: clients, MinIdleConns: clients}
				rc, pc := goredis.NewClient(opts), goredis.NewClient(opts)
				defer rc.Close()
				defer pc.Close()
				peers := [2]decider{newRatekey(rc, benchOpts, policies), newRedisRate(pc, policies)}
				spent := alternate(b, peers, clients)
				rk := float64(b.N) / spent[0].Seconds()
				rr := float64(b.N) / spent[1].Seconds()
				b.ReportMetric(rk, "ratekey-decisions/s")
				b.ReportMetric(rr, "redis_rate-decisions/s")
				b.ReportMetric(rk/rr, "ratio")
			})
		}
	}
}

// alternate makes b.N decisions with each of peers over clients
// goroutines, in turns of 200 decisions per client, the peer that goes
// first alternating, and returns the wall time each peer took; the Zipf
// streams of the clients are the same for both peers. It resets the timer
// before the first turn and stops it after the last.
func alternate(b *testing.B, peers [2]decider, clients int) [2]time.Duration {
	zipfs := make([]*rand.Zipf, clients)
	for g := range zipfs {
		zipfs[g] = rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 7919)), 1.1, 1, accounts-1)
	}
	var spent [2]time.Duration
	const slice = 200
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
	return spent
}

// burst makes n decisions with decide over len(zipfs) goroutines and
// returns the wall time they took.
func burst(b *testing.B, decide decider, zipfs []*rand.Zipf, n int) time.Duration {
	var wg sync.WaitGroup
	ctx := context.Background()
	start := time.Now()
	for g, z := range zipfs {
		share := n / len(zipfs)
		if g < n%len(zipfs) {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range share {
				if _, err := decide(ctx, z.Uint64()); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
