package memory

import (
	"context"
	"fmt"
	"sync"
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

// The races on one burst and on all-or-nothing calls are in the
// conformance suite (limitertest), which TestConformance runs on this store.

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
