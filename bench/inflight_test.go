package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/semaphore"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
)

// BenchmarkInFlight: acquire and release one in-flight slot of a key (cap
// 8), in parallel, with ratekey's memory store vs a plain chan struct{}
// semaphore per key and golang.org/x/sync/semaphore per key (each found in
// a sync.Map, as a keyed limiter must), in the same run. keys=1 is one hot
// key shared by every goroutine; keys=10000 spreads them. A refused slot
// counts as an operation too (the cap is reached on the hot key).
func BenchmarkInFlight(b *testing.B) {
	const limit = 8
	for _, nkeys := range []int{1, 10000} {
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = "per-account|account=user" + strconv.Itoa(i)
		}
		b.Run("keys="+strconv.Itoa(nkeys), func(b *testing.B) {
			b.Run("ratekey-memory", func(b *testing.B) {
				l := memory.New(memory.Options{})
				var next atomic.Uint64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					dst := make([]limiter.Decision, 0, 1)
					reqs := make([]limiter.Request, 1)
					i := next.Add(7919)
					for pb.Next() {
						i++
						reqs[0] = limiter.Request{Key: keys[i%uint64(nkeys)], Limit: limiter.Limit{MaxInFlight: limit}, Cost: 1}
						d, err := l.Take(ctx, dst[:0], reqs)
						if err != nil {
							b.Fatal(err)
						}
						if d[0].Slot != 0 {
							if err := l.Release(ctx, reqs, d); err != nil {
								b.Fatal(err)
							}
						}
					}
				})
			})
			b.Run("chan", func(b *testing.B) {
				var m sync.Map
				var next atomic.Uint64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := next.Add(7919)
					for pb.Next() {
						i++
						k := keys[i%uint64(nkeys)]
						v, ok := m.Load(k)
						if !ok {
							v, _ = m.LoadOrStore(k, make(chan struct{}, limit))
						}
						ch := v.(chan struct{})
						select {
						case ch <- struct{}{}:
							<-ch
						default:
						}
					}
				})
			})
			b.Run("x-sync-semaphore", func(b *testing.B) {
				var m sync.Map
				var next atomic.Uint64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := next.Add(7919)
					for pb.Next() {
						i++
						k := keys[i%uint64(nkeys)]
						v, ok := m.Load(k)
						if !ok {
							v, _ = m.LoadOrStore(k, semaphore.NewWeighted(limit))
						}
						s := v.(*semaphore.Weighted)
						if s.TryAcquire(1) {
							s.Release(1)
						}
					}
				})
			})
		})
	}
}
