package memory

// Edge cases found by a review of the lock-free charge: a snapshot of several
// buckets, a stale clock reading, Peek's capacity promise and the ends of the
// int64 clock.

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

// TestSeveralBucketsReadAtOneInstant: a call that charges nothing (Peek,
// or a rejected Take) decides on TATs loaded one cell at a time, so they
// must be checked to have coexisted. A Take of [a, b] charges both
// atomically, and a and b have the same limit and are only ever charged
// together, so in every state they have the same TAT and any call deciding
// [a, b] identically must get identical Decisions for both. A Peek or a
// rejected Take that loads a before a concurrent charge and b after it
// returns different ones: it observes a partial charge.
func TestSeveralBucketsReadAtOneInstant(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 64, Now: clk.Time})
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

// TestClockFloor: the limiter reads its clock as at least minTAT (the
// int64 values below mark cells); from there on, decisions are exact to
// the nanosecond, and a lower reading is read as the floor.
func TestClockFloor(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 64, Now: clk.Time})
	li := lim(1_000_000_000, time.Second, 1) // 1 token per ns, burst 1
	r := limiter.Request{Key: "a", Limit: li, Cost: 1}
	clk.Set(minTAT)
	if d := mustTake(t, l, r)[0]; !d.Allowed {
		t.Fatalf("first Take at the floor: %+v", d)
	}
	// The bucket's TAT is minTAT+1: full again 1ns later.
	clk.Advance(1)
	want := limiter.Decision{Allowed: true, ResetAfter: 1}
	if d := mustPeek(t, l, r)[0]; d != want {
		t.Errorf("Peek 1ns later = %+v; want %+v (the bucket refilled)", d, want)
	}
	if d := mustTake(t, l, r)[0]; d != want {
		t.Errorf("Take 1ns later = %+v; want %+v (the bucket refilled)", d, want)
	}
	// Below the floor: read as the floor, where the bucket (TAT floor+2)
	// is in debt by 2ns.
	clk.Set(math.MinInt64)
	if d := mustPeek(t, l, r)[0]; d.Allowed || d.RetryAfter != 2 {
		t.Errorf("Peek at MinInt64 = %+v; want rejected, RetryAfter 2ns", d)
	}
}

// gateClock is a ManualClock whose next reading, once armed, blocks after
// taking the time until released: the caller then decides on a time that
// is no longer current, as a goroutine preempted (or waiting for a shard
// mutex) between reading the clock and deciding does.
type gateClock struct {
	clocktest.ManualClock
	armed    atomic.Bool
	reached  chan struct{}
	released chan struct{}
}

func (c *gateClock) Time() time.Time {
	v := c.ManualClock.Time()
	if c.armed.CompareAndSwap(true, false) {
		c.reached <- struct{}{}
		<-c.released
	}
	return v
}

// TestStaleClockDoesNotReviveDebt: a call reads the clock (now0),
// then another call with a later clock (now1) sweeps and evicts a state
// whose TAT lies in (now0, now1]: full at now1, in debt at now0. The first
// call then finds the cell evicted and decides it as a full bucket at now0,
// storing now0+charge, below the TAT that was evicted. With burst 1 at
// 1/s, key a is admitted at 0, by the delayed call, and again at 1.5s:
// three admissions within 1.5s. Whichever time the delayed call is
// linearised at, at most one of its admission and the one at 1.5s is
// possible (at 0.5s the bucket is in debt: rejected; at 1.5s it charges
// the bucket to 2.5s). decideLocked therefore reads the clock again once it
// holds the locks.
func TestStaleClockDoesNotReviveDebt(t *testing.T) {
	clk := &gateClock{reached: make(chan struct{}), released: make(chan struct{})}
	l := New(Options{MaxKeys: 2, Now: clk.Time})
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
	if n := l.len(); n != 0 {
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

// TestPeekCapacityStaleHint: a shard's hint is only a lower bound of its
// TATs (lowered on insert, left alone when a bucket is charged further), so
// Peek cannot take a hint at or below now as room: where Take fails with
// ErrCapacity, Peek must too.
func TestPeekCapacityStaleHint(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 1, Now: clk.Time})
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

// TestPeekCapacityOwnFullState: the store (MaxKeys 1) holds a, full
// again. [a, b] can never be tracked together: Take sweeps a to make room,
// then needs room for both and fails with ErrCapacity. Peek must count
// that the only evictable state is the call's own.
func TestPeekCapacityOwnFullState(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 1, Now: clk.Time})
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

// TestSaturationNearMaxClock: near the end of the int64 clock, a request
// whose new TAT would not fit is refused (Never), instead of saturating the
// TAT at MaxInt64, which would stop the debt from growing and admit every
// request after it.
func TestSaturationNearMaxClock(t *testing.T) {
	li := lim(1, time.Second, 2)
	for _, tc := range []struct {
		left time.Duration // the clock reads MaxInt64 - left
		want []bool
	}{
		{2 * time.Second, []bool{true, true, false, false, false}}, // room for the whole burst
		{time.Second, []bool{true, false, false, false, false}},    // room for one token of debt
	} {
		clk := clocktest.NewManualClock()
		l := New(Options{MaxKeys: 64, Now: clk.Time})
		clk.Set(math.MaxInt64 - tc.left)
		var got []bool
		for range 5 {
			got = append(got, mustTake(t, l, limiter.Request{Key: "a", Limit: li, Cost: 1})[0].Allowed)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("burst 2, %v before the end of the clock: admitted %v; want %v", tc.left, got, tc.want)
		}
	}
}

// TestShapesNameTheirOwnBuckets: two limit shapes of one key, and a key's
// in-flight counter beside its token bucket, never share a state. A fixed
// mix of interval and burst named these pairs alike in every process (1
// GB/s with a 4 GiB burst and 500 MB/s with 8 GiB; a counter and a bucket
// of 1 ns with a burst of 2^32), so the second shape read the first's debt.
func TestShapesNameTheirOwnBuckets(t *testing.T) {
	ctx := context.Background()
	perSecond := func(n, burst int64) limiter.Limit {
		return limiter.Limit{Rate: limiter.Rate{Count: n, Per: time.Second}, Burst: burst}
	}
	for _, c := range []struct {
		name        string
		first, then limiter.Request
		want        int64 // then's Remaining after a Peek of cost 1: a fresh bucket's
	}{
		{"1 GB/s burst 2^32, then 500 MB/s burst 2^33",
			limiter.Request{Key: "k", Limit: perSecond(1e9, 1<<32), Cost: 1 << 32},
			limiter.Request{Key: "k", Limit: perSecond(5e8, 2<<32), Cost: 1}, 2<<32 - 1},
		{"an in-flight counter, then a bucket of 1 ns and burst 2^32",
			limiter.Request{Key: "q", Limit: limiter.Limit{MaxInFlight: 10}, Cost: 10},
			limiter.Request{Key: "q", Limit: perSecond(1e9, 1<<32), Cost: 1}, 1<<32 - 1},
	} {
		l := New(Options{Now: clocktest.NewManualClock().Time})
		if ds, err := l.Take(ctx, nil, []limiter.Request{c.first}); err != nil || !ds[0].Allowed {
			t.Fatalf("%s: first Take: %v %+v", c.name, err, ds)
		}
		ds, err := l.Peek(ctx, nil, []limiter.Request{c.then})
		if err != nil || !ds[0].Allowed || ds[0].Remaining != c.want {
			t.Errorf("%s: Peek of the second shape: %v %+v; want allowed, Remaining %d (a bucket of its own)", c.name, err, ds, c.want)
		}
	}
}
