package memory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
)

// TestSettleNoAllocs: a Take and a Settle of a settling request on a
// tracked bucket allocate nothing (a refund, a debt, and a settle at the
// reservation, which changes nothing).
func TestSettleNoAllocs(t *testing.T) {
	l := memory.New(memory.Options{Now: clocktest.NewManualClock().Time})
	ctx := context.Background()
	buf := make([]limiter.Decision, 0, 1)
	for _, actual := range []int64{100, 500, 900} {
		// A bucket of its own, which 1001 requests settled at 900 never fill.
		reqs := []limiter.Request{{Key: fmt.Sprint("k", actual), Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Hour}, Burst: 1 << 20}, Cost: 500, Settle: true}}
		a := []int64{actual}
		if n := testing.AllocsPerRun(1000, func() {
			ds, err := l.Take(ctx, buf[:0], reqs)
			if err != nil || ds[0].Reservation == 0 {
				t.Fatalf("Take: %+v, %v", ds, err)
			}
			if err := l.Settle(ctx, reqs, ds, a); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("settle at %d: %v allocations per Take and Settle; want 0", actual, n)
		}
	}
}

// TestSettleEvicted: a bucket evicted between its reservation and its
// settle (full again, and the store needed room) gets nothing back from a
// refund and is tracked again by a debt, when there is room; when the
// store is full of buckets still refilling, the debt fails with
// ErrCapacity and nothing else changes.
func TestSettleEvicted(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := memory.New(memory.Options{Now: clk.Time, MaxKeys: 1})
	ctx := context.Background()
	li := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 10}
	a := []limiter.Request{{Key: "a", Limit: li, Cost: 2, Settle: true}}
	b := []limiter.Request{{Key: "b", Limit: li, Cost: 5}}
	tokens := func(key string) int64 {
		d, err := l.Peek(ctx, nil, []limiter.Request{{Key: key, Limit: li, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return d[0].Remaining + 1
	}
	ds, err := l.Take(ctx, nil, a)
	if err != nil || ds[0].Reservation == 0 {
		t.Fatalf("Take a: %+v, %v", ds, err)
	}
	clk.Set(3 * time.Second) // a is full again
	if _, err := l.Take(ctx, nil, b); err != nil {
		t.Fatalf("Take b (evicting a): %v", err)
	}
	if err := l.Settle(ctx, a, ds, []int64{0}); err != nil {
		t.Fatalf("refund on an evicted bucket: %v", err)
	}
	err = l.Settle(ctx, a, ds, []int64{6})
	if !errors.Is(err, limiter.ErrCapacity) {
		t.Fatalf("debt with the store full of b (in debt): %v; want ErrCapacity", err)
	}
	clk.Set(9 * time.Second) // b is full again
	if err := l.Settle(ctx, a, ds, []int64{6}); err != nil {
		t.Fatalf("debt once b can be evicted: %v", err)
	}
	if n := tokens("a"); n != 6 {
		t.Errorf("a after a debt of 4: %d tokens; want 6", n)
	}
}

// TestSettleRefundMakesRoom: a refund that fills a bucket again makes its
// state evictable at once (the shard's eviction hint is lowered with it),
// so a full store can track a new key.
func TestSettleRefundMakesRoom(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := memory.New(memory.Options{Now: clk.Time, MaxKeys: 1})
	ctx := context.Background()
	li := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Hour}, Burst: 10}
	a := []limiter.Request{{Key: "a", Limit: li, Cost: 5, Settle: true}}
	ds, err := l.Take(ctx, nil, a)
	if err != nil {
		t.Fatal(err)
	}
	b := []limiter.Request{{Key: "b", Limit: li, Cost: 1}}
	if _, err := l.Take(ctx, nil, b); !errors.Is(err, limiter.ErrCapacity) {
		t.Fatalf("Take b with a in debt: %v; want ErrCapacity", err)
	}
	if err := l.Settle(ctx, a, ds, []int64{0}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take(ctx, nil, b); err != nil {
		t.Errorf("Take b after a was refunded to full: %v; want it admitted (a evicted)", err)
	}
}
