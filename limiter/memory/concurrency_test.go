package memory

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/racetest"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

// The races on one burst and on all-or-nothing calls are in the
// conformance suite (limitertest), which TestConformance runs on this store.

// TestConcurrentEviction exercises sweeps under contention with a moving
// clock; run with -race.
func TestConcurrentEviction(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 4096, Now: clk.Time})
	li := lim(10, time.Second, 1)
	racetest.Run(8, func(g int) {
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
	if n := l.len(); n > 4096 {
		t.Errorf("Len = %d > MaxKeys", n)
	}
	checkCount(t, l)
}

// TestChargesWhileTablesChange races the three ways a call reaches a
// bucket (one request charged by compare-and-swap, several held together,
// and the locked path that inserts) against sweeps and table rebuilds in
// the same shards, on a clock that advances only for the churning keys'
// limit. Every hot bucket must admit exactly its burst, and the calls that
// charge two buckets must charge both or neither. Run with -race.
func TestChargesWhileTablesChange(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 2048, Now: clk.Time}) // 2 shards
	hot := lim(1, time.Hour, 4000)                  // no refill within the test
	churn := lim(1_000_000_000, time.Second, 1)     // full again 1 ns later
	const nHot = 2
	key := func(i int) string { return fmt.Sprintf("hot-%d", i) }
	var admitted [nHot]atomic.Int64
	racetest.Run(8, func(g int) {
		for i := range 10_000 {
			a, b := (g+i)%nHot, (g+3*i+1)%nHot
			switch i % 4 {
			case 0:
				d, err := l.Take(context.Background(), nil, []limiter.Request{{Key: key(a), Limit: hot, Cost: 1}})
				if err != nil {
					t.Error(err)
					return
				}
				if d[0].Allowed {
					admitted[a].Add(1)
				}
			case 1, 2:
				d, err := l.Take(context.Background(), nil, []limiter.Request{
					{Key: key(a), Limit: hot, Cost: 1}, {Key: key(b), Limit: hot, Cost: 1},
				})
				if err != nil {
					t.Error(err)
					return
				}
				if d[0].Allowed && d[1].Allowed {
					admitted[a].Add(1)
					admitted[b].Add(1)
				}
			case 3:
				clk.Advance(1)
				_, err := l.Take(context.Background(), nil, []limiter.Request{{Key: fmt.Sprintf("churn-%d-%d", g, i), Limit: churn, Cost: 1}})
				if err != nil && !isCapacity(err) {
					t.Error(err)
					return
				}
			}
		}
	})
	for i := range admitted {
		if n := admitted[i].Load(); n != hot.Burst {
			t.Errorf("%s admitted %d; want exactly %d", key(i), n, hot.Burst)
		}
	}
	if n := l.len(); n > 2048 {
		t.Errorf("Len = %d > MaxKeys", n)
	}
	checkCount(t, l)
}

// len returns the number of states currently tracked, at most MaxKeys. It
// includes states whose bucket is full again but that no sweep has evicted
// yet (sweeps run only when the store is full). Safe for concurrent use.
func (l *Limiter) len() int {
	return int(l.count.Load())
}
