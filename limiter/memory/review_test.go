package memory

// Review of the lock-free charge (304b655): tests that reproduce bugs. They
// fail on purpose until the bugs are fixed.

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// TestReviewMultiReadIsNotASnapshot: decideHeld decides a call that charges
// nothing (Peek, or a rejected Take) on TATs loaded one cell at a time, with
// nothing checking that they coexisted. A Take of [a, b] charges both
// atomically, and a and b have the same limit and are only ever charged
// together, so in every state they have the same TAT and any call deciding
// [a, b] identically must get identical Decisions for both. A Peek or a
// rejected Take that loads a before a concurrent charge and b after it
// returns different ones: it observes a partial charge.
func TestReviewMultiReadIsNotASnapshot(t *testing.T) {
	clk := NewManualClock()
	l := New(Options{MaxKeys: 64, Clock: clk})
	li := lim(1, time.Second, 1<<30) // the clock is frozen: no refill
	pair := func(cost int64) []limiter.Request {
		return []limiter.Request{{Key: "a", Limit: li, Cost: cost}, {Key: "b", Limit: li, Cost: cost}}
	}
	mustTake(t, l, pair(1)...) // track both: from now on decideHeld decides [a, b]
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer: charges a and b together
		defer wg.Done()
		for i := 0; i < 1_000_000 && !stop.Load(); i++ {
			if _, err := l.Take(context.Background(), nil, pair(1)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var dst []limiter.Decision
	var err error
	for i := 0; i < 1_000_000 && t.Failed() == false; i++ {
		switch i % 2 {
		case 0:
			dst, err = l.Peek(context.Background(), dst[:0], pair(1))
		case 1:
			dst, err = l.Take(context.Background(), dst[:0], pair(li.Burst)) // always rejected
		}
		if err != nil {
			t.Fatal(err)
		}
		if dst[0] != dst[1] {
			t.Errorf("iteration %d (%s): a and b, always charged together, decided differently:\n a %+v\n b %+v",
				i, map[int]string{0: "Peek", 1: "rejected Take"}[i%2], dst[0], dst[1])
			break
		}
	}
	stop.Store(true)
	wg.Wait()
}

// TestReviewClampAtMinClock: stored clamps every TAT to minTAT =
// MinInt64+3 to keep clear of the sentinels, claiming "any TAT at or below
// the clock means a full bucket, so the clamp changes no decision". That
// holds only while the clock reads at least minTAT: on a clock near
// MinInt64 (a ManualClock, or any Clock whose origin makes readings
// negative) the clamp adds up to 2ns of debt, and a conforming request is
// rejected.
func TestReviewClampAtMinClock(t *testing.T) {
	clk := NewManualClock()
	l := New(Options{MaxKeys: 64, Clock: clk})
	li := lim(1_000_000_000, time.Second, 1) // 1 token per ns, burst 1
	r := limiter.Request{Key: "a", Limit: li, Cost: 1}
	clk.Set(math.MinInt64)
	if d := mustTake(t, l, r)[0]; !d.Allowed {
		t.Fatalf("first Take at MinInt64: %+v", d)
	}
	// The bucket's TAT is MinInt64+1: full again 1ns later.
	clk.Advance(1)
	want := limiter.Decision{Allowed: true, ResetAfter: 1}
	if d := mustPeek(t, l, r)[0]; d != want {
		t.Errorf("Peek 1ns later = %+v; want %+v (the bucket refilled)", d, want)
	}
	if d := mustTake(t, l, r)[0]; d != want {
		t.Errorf("Take 1ns later = %+v; want %+v (the bucket refilled)", d, want)
	}
}

// gateClock is a ManualClock whose next reading, once armed, blocks after
// taking the time until released: the caller then decides on a time that
// is no longer current, as a goroutine preempted (or waiting for a shard
// mutex) between reading the clock and deciding does.
type gateClock struct {
	ManualClock
	armed    atomic.Bool
	reached  chan struct{}
	released chan struct{}
}

func (c *gateClock) Now() time.Duration {
	v := c.ManualClock.Now()
	if c.armed.CompareAndSwap(true, false) {
		c.reached <- struct{}{}
		<-c.released
	}
	return v
}

// TestReviewStaleClockRevivesEvictedDebt: a call reads the clock (now0),
// then another call with a later clock (now1) sweeps and evicts a state
// whose TAT lies in (now0, now1]: full at now1, in debt at now0. The first
// call then finds the cell evicted and decides it as a full bucket at now0,
// storing now0+charge, below the TAT that was evicted. With burst 1 at
// 1/s, key a is admitted at 0, by the delayed call, and again at 1.5s:
// three admissions within 1.5s. Whichever time the delayed call is
// linearised at, at most one of its admission and the one at 1.5s is
// possible (at 0.5s the bucket is in debt: rejected; at 1.5s it charges
// the bucket to 2.5s). Read now after locking in decideLocked to fix; this
// is older than the lock-free change (the old decide read now before
// locking too).
func TestReviewStaleClockRevivesEvictedDebt(t *testing.T) {
	clk := &gateClock{reached: make(chan struct{}), released: make(chan struct{})}
	l := New(Options{MaxKeys: 2, Clock: clk})
	li := lim(1, time.Second, 1)
	req := func(key string, cost int64) limiter.Request { return limiter.Request{Key: key, Limit: li, Cost: cost} }

	mustTake(t, l, req("a", 1)) // a: TAT 1s
	clk.Set(500 * ms)
	clk.armed.Store(true)
	var delayed []limiter.Decision
	var delayedErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Two requests: no decideOne, so the first clock reading is run's.
		delayed, delayedErr = l.Take(context.Background(), nil, []limiter.Request{req("a", 1), req("b", 1)})
	}()
	<-clk.reached // the delayed call holds now = 0.5s

	clk.Set(1500 * ms)
	// Two new keys in a store holding one of two: the call sweeps its shard
	// at 1.5s and evicts a (full since 1s). Its cost-2 request is Never, so
	// it charges nothing and leaves room for the delayed call.
	if d := mustTake(t, l, req("c", 2), req("d", 1)); !d[0].Never {
		t.Fatalf("sweeping call: %+v", d)
	}
	if n := l.Len(); n != 0 {
		t.Fatalf("Len after the sweep = %d; want 0 (a evicted)", n)
	}
	close(clk.released)
	<-done
	if delayedErr != nil {
		t.Fatal(delayedErr)
	}
	later := mustTake(t, l, req("a", 1))[0]
	if delayed[0].Allowed && later.Allowed {
		t.Errorf("a (burst 1, 1/s) admitted at 0, by the call that read the clock at 0.5s (%+v), and at 1.5s (%+v)",
			delayed[0], later)
	}
}

// TestReviewPeekCapacityStaleHint: Peek's mayFit says a new key fits when
// some shard's hint is at or below now. The hint is only a lower bound: it
// is lowered on insert and left alone when the bucket is charged further,
// so it can lie below every TAT of the shard. Peek then promises an
// admission where Take fails with ErrCapacity ("Where Take would fail
// with ErrCapacity, Peek does too"). Older than the lock-free change.
func TestReviewPeekCapacityStaleHint(t *testing.T) {
	clk := NewManualClock()
	l := New(Options{MaxKeys: 1, Clock: clk})
	li := lim(1, time.Second, 10)
	mustTake(t, l, limiter.Request{Key: "a", Limit: li, Cost: 1}) // TAT 1s, hint 1s
	mustTake(t, l, limiter.Request{Key: "a", Limit: li, Cost: 8}) // TAT 9s, hint still 1s
	clk.Set(5 * time.Second)                                      // a is in debt until 9s
	newKey := []limiter.Request{{Key: "b", Limit: li, Cost: 1}}
	_, perr := l.Peek(t.Context(), nil, newKey)
	_, terr := l.Take(t.Context(), nil, newKey)
	if isCapacity(perr) != isCapacity(terr) {
		t.Errorf("Peek err = %v; Take err = %v", perr, terr)
	}
}

// TestReviewPeekCapacityOwnFullState: the store (MaxKeys 1) holds a, full
// again. [a, b] can never be tracked together: Take sweeps a to make room,
// then needs room for both and fails with ErrCapacity. Peek's mayFit sees
// a shard whose hint is at or below now and says they fit, not counting
// that the only evictable state is the call's own. Older than the
// lock-free change.
func TestReviewPeekCapacityOwnFullState(t *testing.T) {
	clk := NewManualClock()
	l := New(Options{MaxKeys: 1, Clock: clk})
	li := lim(1, time.Second, 10)
	mustTake(t, l, limiter.Request{Key: "a", Limit: li, Cost: 1})
	clk.Set(time.Second) // a is full again
	reqs := []limiter.Request{{Key: "a", Limit: li, Cost: 1}, {Key: "b", Limit: li, Cost: 1}}
	_, perr := l.Peek(t.Context(), nil, reqs)
	_, terr := l.Take(t.Context(), nil, reqs)
	if isCapacity(perr) != isCapacity(terr) {
		t.Errorf("Peek err = %v; Take err = %v", perr, terr)
	}
}

// TestReviewSaturationNearMaxClock: within Burst·T of MaxInt64, Decide's
// addSat caps the new TAT at MaxInt64, so the debt it leaves stops growing
// and every further request fits: unlimited admissions from a bucket of
// burst 2. The flaw is in limiter.Decide (saturation turns rejections into
// admissions, contrary to its doc), older than the lock-free change; it
// needs a clock reading about 292 years past its origin.
func TestReviewSaturationNearMaxClock(t *testing.T) {
	clk := NewManualClock()
	l := New(Options{MaxKeys: 64, Clock: clk})
	li := lim(1, time.Second, 2)
	clk.Set(math.MaxInt64 - time.Second)
	admitted := 0
	for range 5 {
		if mustTake(t, l, limiter.Request{Key: "a", Limit: li, Cost: 1})[0].Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("burst 2, frozen clock: %d of 5 admitted; want 2", admitted)
	}
}
