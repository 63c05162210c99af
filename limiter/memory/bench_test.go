package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

// benchKeys returns n distinct keys shaped like encoded identity keys.
func benchKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s|tenant=acme|account=user-%07d", prefix, i)
	}
	return keys
}

// BenchmarkTakeParallel: many goroutines, 100k distinct accounts drawn with
// a Zipf skew (a few hot accounts, a long tail), on the real clock. With 3
// policies per call the request also spends a per-tenant bucket (100
// tenants) and one per-operation bucket (a single hot key shared by every
// call). Keys are tracked beforehand, so this measures the steady state;
// each goroutine reuses its []Decision, so a call allocates nothing.
func BenchmarkTakeParallel(b *testing.B) {
	const nKeys = 100_000
	accounts := benchKeys("per-account", nKeys)
	tenants := benchKeys("per-tenant", 100)
	account := lim(100, time.Second, 50)
	tenant := lim(10_000, time.Second, 1_000)
	op := lim(1_000_000, time.Second, 100_000)
	for _, policies := range []int{1, 3} {
		b.Run(fmt.Sprintf("policies=%d", policies), func(b *testing.B) {
			l := New(Options{})
			for i := range accounts { // track every key first
				reqs := []limiter.Request{{Key: accounts[i], Limit: account, Cost: 1}}
				if _, err := l.Take(context.Background(), nil, reqs); err != nil {
					b.Fatal(err)
				}
			}
			var seed atomic.Uint64
			var allowed, total atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				s := seed.Add(1)
				z := rand.NewZipf(rand.New(rand.NewPCG(s, s*7919)), 1.1, 1, nKeys-1)
				reqs := make([]limiter.Request, policies)
				buf := make([]limiter.Decision, 0, policies)
				var ok, n int64
				for pb.Next() {
					i := z.Uint64()
					reqs[0] = limiter.Request{Key: accounts[i], Limit: account, Cost: 1}
					if policies == 3 {
						reqs[1] = limiter.Request{Key: tenants[i%100], Limit: tenant, Cost: 1}
						reqs[2] = limiter.Request{Key: "per-operation|op=GET /v1/reports/{id}", Limit: op, Cost: 1}
					}
					d, err := l.Take(context.Background(), buf[:0], reqs)
					if err != nil {
						b.Error(err)
						return
					}
					if d[0].Allowed {
						ok++
					}
					n++
				}
				allowed.Add(ok)
				total.Add(n)
			})
			b.StopTimer()
			if n := total.Load(); n > 0 {
				b.ReportMetric(float64(allowed.Load())/float64(n), "allowed/op")
			}
		})
	}
}

// BenchmarkTakeTracked is the floor of a decision: one goroutine, one
// tracked key (always in cache), one request per call, on the monotonic
// clock and on a ManualClock. The difference is the cost of reading the
// clock (time.Since, a vDSO call), which every exact limiter pays once per
// decision.
func BenchmarkTakeTracked(b *testing.B) {
	li := lim(100, time.Second, 50)
	for _, c := range []struct {
		name string
		now  func() time.Time
	}{{"monotonic", nil}, {"manual", clocktest.NewManualClock().Time}} {
		b.Run("clock="+c.name, func(b *testing.B) {
			l := New(Options{Now: c.now})
			reqs := []limiter.Request{{Key: "per-account|tenant=acme|account=user-0000001", Limit: li, Cost: 1}}
			buf := make([]limiter.Decision, 0, 1)
			ctx := context.Background()
			if _, err := l.Take(ctx, nil, reqs); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Take(ctx, buf[:0], reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTakeNewKeys measures tracking a new key per call (a table
// insert), with churn: MaxKeys 100k and keys whose buckets
// refill within the benchmark, so full shards sweep.
func BenchmarkTakeNewKeys(b *testing.B) {
	keys := benchKeys("per-account", 1_000_000)
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 100_000, Now: clk.Time})
	li := lim(1000, time.Second, 1)
	reqs := make([]limiter.Request, 1)
	buf := make([]limiter.Decision, 0, 1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		clk.Advance(10 * time.Microsecond) // each state is full again 100 calls later
		reqs[0] = limiter.Request{Key: keys[i%len(keys)], Limit: li, Cost: 1}
		if _, err := l.Take(context.Background(), buf[:0], reqs); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkMemoryPerKey reports the heap bytes per tracked key with 1M keys
// of the benchKeys shape (45-byte strings, which the store does not keep:
// it keeps a 64-bit hash), measured from runtime.MemStats.HeapAlloc after
// GC. nginx documents 128 B per limit_req state; the target is 32.
func BenchmarkMemoryPerKey(b *testing.B) {
	const n = 1_000_000
	keys := benchKeys("per-account", n)
	li := lim(1, time.Hour, 10)
	reqs := make([]limiter.Request, 1)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := New(Options{MaxKeys: n})
		for _, k := range keys {
			reqs[0] = limiter.Request{Key: k, Limit: li, Cost: 1}
			if _, err := l.Take(context.Background(), nil, reqs); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if l.len() != n {
			b.Fatalf("Len = %d", l.len())
		}
		perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
		b.ReportMetric(perKey, "B/key")
		runtime.KeepAlive(l)
	}
}

// TestTakeAllocs: on tracked keys, Take and Peek allocate nothing when the
// caller's dst has room, for one request or several, dry run included.
func TestTakeAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	l := New(Options{Now: clocktest.NewManualClock().Time})
	li := lim(1_000_000, time.Second, 1_000_000)
	for _, n := range []int{1, 3, smallCall} {
		reqs := make([]limiter.Request, n)
		for i := range reqs {
			reqs[i] = limiter.Request{Key: fmt.Sprintf("key-%d", i), Limit: li, Cost: 1, DryRun: i == 1}
		}
		mustTake(t, l, reqs...)
		ctx := context.Background()
		buf := make([]limiter.Decision, 0, n)
		if a := testing.AllocsPerRun(100, func() { _, _ = l.Take(ctx, buf[:0], reqs) }); a != 0 {
			t.Errorf("Take of %d tracked keys: %v allocs; want 0", n, a)
		}
		if a := testing.AllocsPerRun(100, func() { _, _ = l.Peek(ctx, buf[:0], reqs) }); a != 0 {
			t.Errorf("Peek of %d tracked keys: %v allocs; want 0", n, a)
		}
	}
}

// BenchmarkReplicas is BenchmarkTakeTracked (manual clock) with the store
// shared by 1 (the default) and 3 processes (Options.Replicas): what a
// share costs per decision. Calls of 1 and of 3 requests.
func BenchmarkReplicas(b *testing.B) {
	li := lim(100, time.Second, 50)
	for _, n := range []int{1, 3} {
		for _, size := range []int{1, 3} {
			b.Run(fmt.Sprintf("replicas=%d/requests=%d", n, size), func(b *testing.B) {
				l := New(Options{Now: clocktest.NewManualClock().Time, Replicas: n})
				reqs := make([]limiter.Request, size)
				for i := range reqs {
					reqs[i] = limiter.Request{Key: fmt.Sprintf("per-account|tenant=acme|account=user-%07d", i), Limit: li, Cost: 1}
				}
				buf := make([]limiter.Decision, 0, size)
				ctx := context.Background()
				if _, err := l.Take(ctx, nil, reqs); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := l.Take(ctx, buf[:0], reqs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
