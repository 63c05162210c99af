package memory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter"
)

// TestInFlightNoAllocs: acquiring and releasing a slot of a tracked
// counter, alone or beside a token bucket, allocates nothing when dst has
// room (testing.AllocsPerRun).
func TestInFlightNoAllocs(t *testing.T) {
	l := New(Options{})
	ctx := context.Background()
	one := []limiter.Request{{Key: "k", Limit: limiter.Limit{MaxInFlight: 8}, Cost: 1}}
	two := []limiter.Request{{Key: "b", Limit: lim(1000, time.Millisecond, 1_000_000), Cost: 1}, one[0]}
	dst := make([]limiter.Decision, 0, 4)
	for name, reqs := range map[string][]limiter.Request{"slot": one, "bucket and slot": two} {
		run := func() {
			d, err := l.Take(ctx, dst[:0], reqs)
			if err != nil || d[len(d)-1].Slot == 0 {
				t.Fatalf("Take: %+v, %v", d, err)
			}
			if err := l.Release(ctx, reqs, d); err != nil {
				t.Fatal(err)
			}
		}
		run() // track the keys first
		if n := testing.AllocsPerRun(1000, run); n != 0 {
			t.Errorf("%s: %v allocations per acquire and release; want 0", name, n)
		}
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := l.Peek(ctx, dst[:0], one); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Peek: %v allocations; want 0", n)
	}
}

// TestInFlightEviction: a counter with slots held is never evicted; one
// back at 0 is, like a full bucket; a store full of held counters refuses
// a new key with ErrCapacity and promises no wait (no one can tell when a
// running request ends).
func TestInFlightEviction(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 2, Now: clk.Time})
	ctx := context.Background()
	slot := func(key string) []limiter.Request {
		return []limiter.Request{{Key: key, Limit: limiter.Limit{MaxInFlight: 1}, Cost: 1}}
	}
	a := mustTake(t, l, slot("a")...)
	b := mustTake(t, l, slot("b")...)
	clk.Set(24 * time.Hour)
	_, err := l.Take(ctx, nil, slot("c"))
	var ce *limiter.CapacityError
	if !errors.As(err, &ce) || ce.RetryAfter != 0 {
		t.Fatalf("a store full of held slots: %v; want a CapacityError with RetryAfter 0", err)
	}
	if err := l.Release(ctx, slot("b"), b); err != nil {
		t.Fatal(err)
	}
	c := mustTake(t, l, slot("c")...)
	if c[0].Slot == 0 || l.len() != 2 {
		t.Fatalf("after b's release, c: %+v, %d tracked; want a slot, 2", c, l.len())
	}
	// a still holds its slot: it was not evicted.
	if d := mustTake(t, l, slot("a")...); d[0].Allowed {
		t.Errorf("a's counter was evicted while its slot was held: %+v", d[0])
	}
	// A bucket in debt is not evicted either; the error then promises
	// nothing, since the lowest state is a held counter's.
	_ = a
}

// TestInFlightReleaseLowersHint: the last release of a counter makes its
// state evictable at once, even in a shard whose other states are still
// refilling (the shard's hint is lowered with it).
func TestInFlightReleaseLowersHint(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 2, Now: clk.Time})
	ctx := context.Background()
	debt := []limiter.Request{{Key: "debt", Limit: lim(1, time.Hour, 1), Cost: 1}}
	mustTake(t, l, debt...)
	s := []limiter.Request{{Key: "s", Limit: limiter.Limit{MaxInFlight: 1}, Cost: 1}}
	d := mustTake(t, l, s...)
	if err := l.Release(ctx, s, d); err != nil {
		t.Fatal(err)
	}
	n := []limiter.Request{{Key: "new", Limit: lim(1, time.Hour, 1), Cost: 1}}
	if got := mustTake(t, l, n...); !got[0].Allowed {
		t.Fatalf("new key: %+v", got)
	}
	if _, err := l.Take(ctx, nil, []limiter.Request{{Key: "new2", Limit: lim(1, time.Hour, 1), Cost: 1}}); !errors.Is(err, limiter.ErrCapacity) {
		t.Errorf("third key with two in debt: %v; want ErrCapacity", err)
	}
}
