package memory

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// race starts n goroutines that each run f(g) once, released together.
func race(n int, f func(g int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for g := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			f(g)
		}()
	}
	start.Done()
	done.Wait()
}

// TestConcurrentBurst: 16 goroutines race on a burst of 5 with a frozen
// clock; exactly 5 are admitted, every time.
func TestConcurrentBurst(t *testing.T) {
	li := lim(1, time.Second, 5)
	for rep := range 100 {
		l := New(Options{Clock: NewManualClock()})
		var admitted atomic.Int64
		race(16, func(int) {
			d, err := l.Take(context.Background(), nil, []limiter.Request{{Key: "hot", Limit: li, Cost: 1}})
			if err != nil {
				t.Error(err)
				return
			}
			if d[0].Allowed {
				admitted.Add(1)
			}
		})
		if n := admitted.Load(); n != 5 {
			t.Fatalf("rep %d: %d admitted; want 5", rep, n)
		}
	}
}

// TestConcurrentAllOrNothing: goroutines take a shared bucket together
// with a private one, in both orders and across many shards; the shared
// burst is never exceeded, no private bucket is charged by a rejected call,
// and opposite lock orders do not deadlock.
func TestConcurrentAllOrNothing(t *testing.T) {
	shared := lim(1, time.Second, 5)
	private := lim(1, time.Second, 2)
	for rep := range 50 {
		l := New(Options{Clock: NewManualClock()}) // 256 shards
		var admitted atomic.Int64
		race(16, func(g int) {
			for i := range 4 {
				reqs := []limiter.Request{
					{Key: "shared", Limit: shared, Cost: 1},
					{Key: fmt.Sprintf("private-%d", g), Limit: private, Cost: 1},
				}
				if (g+i)%2 == 1 {
					reqs[0], reqs[1] = reqs[1], reqs[0]
				}
				d, err := l.Take(context.Background(), nil, reqs)
				if err != nil {
					t.Error(err)
					return
				}
				if d[0].Allowed && d[1].Allowed {
					admitted.Add(1)
				}
			}
		})
		if n := admitted.Load(); n != 5 {
			t.Fatalf("rep %d: %d admitted; want 5", rep, n)
		}
		// Private buckets were charged exactly for the admitted calls.
		var charged int64
		for g := range 16 {
			charged += 2 - remaining(t, l, fmt.Sprintf("private-%d", g), private)
		}
		if charged != 5 {
			t.Fatalf("rep %d: private buckets charged %d tokens; want 5", rep, charged)
		}
	}
}

// TestConcurrentEviction exercises sweeps under contention with a moving
// clock; run with -race.
func TestConcurrentEviction(t *testing.T) {
	clk := NewManualClock()
	l := New(Options{MaxKeys: 4096, Clock: clk})
	li := lim(10, time.Second, 1)
	race(8, func(g int) {
		for i := range 2000 {
			if i%100 == 0 {
				clk.Advance(50 * time.Millisecond)
			}
			_, err := l.Take(context.Background(), nil, []limiter.Request{
				{Key: fmt.Sprintf("g%d-%d", g, i), Limit: li, Cost: 1},
				{Key: fmt.Sprintf("g%d", g), Limit: lim(1000, time.Second, 1000), Cost: 1},
			})
			if err != nil && !isCapacity(err) {
				t.Error(err)
				return
			}
			_, _ = l.Peek(context.Background(), nil, []limiter.Request{{Key: fmt.Sprintf("g%d-%d", g, i), Limit: li, Cost: 1}})
		}
	})
	if n := l.Len(); n > 4096 {
		t.Errorf("Len = %d > MaxKeys", n)
	}
	checkCount(t, l)
}
