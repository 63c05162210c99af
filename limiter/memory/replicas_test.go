package memory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter"
)

// TestReplicasTogetherWithinLimit: three stores with Replicas 3, one per
// process, each take from the same key every 100 ms for 10 s: each admits
// exactly its share (burst 3 at once, then 1 a second), and together they
// admit exactly burst 9 + 3/s · t, never more.
func TestReplicasTogetherWithinLimit(t *testing.T) {
	li := lim(3, time.Second, 9)
	clk := clocktest.NewManualClock()
	var stores [3]*Limiter
	for i := range stores {
		stores[i] = New(Options{Now: clk.Time, Replicas: 3})
	}
	r := limiter.Request{Key: "global", Limit: li, Cost: 1}
	admitted := [3]int64{}
	for step := range 101 {
		elapsed := time.Duration(step) * 100 * ms
		for i, l := range stores {
			// Each process is flooded: it asks until refused.
			for {
				d := mustTake(t, l, r)[0]
				if !d.Allowed {
					break
				}
				admitted[i]++
			}
		}
		// Each share: burst 3, then 1 token a second.
		want := 3 + int64(elapsed/time.Second)
		for i, got := range admitted {
			if got != want {
				t.Fatalf("at %v process %d admitted %d; want %d", elapsed, i, got, want)
			}
		}
		if total, bound := admitted[0]+admitted[1]+admitted[2], 9+3*int64(elapsed/time.Second); total > bound {
			t.Fatalf("at %v the three admitted %d; the limit allows %d", elapsed, total, bound)
		}
		clk.Advance(100 * ms)
	}
}

// TestReplicasDecisions: a store with Replicas 3 states its share in the
// decisions (Remaining of a burst of 3, RetryAfter at the share's rate),
// caps at a third of max_in_flight, and refuses a request whose share is
// below one token or slot.
func TestReplicasDecisions(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{Now: clk.Time, Replicas: 3})
	r := limiter.Request{Key: "k", Limit: lim(30, time.Second, 10), Cost: 1}
	want := []limiter.Decision{
		{Allowed: true, Remaining: 2, ResetAfter: 100 * ms},
		{Allowed: true, Remaining: 1, ResetAfter: 200 * ms},
		{Allowed: true, Remaining: 0, ResetAfter: 300 * ms},
		{Allowed: false, Remaining: 0, RetryAfter: 100 * ms, ResetAfter: 300 * ms},
	}
	for i, w := range want {
		if got := mustTake(t, l, r)[0]; got != w {
			t.Errorf("take %d: %+v; want %+v", i, got, w)
		}
	}

	c := limiter.Request{Key: "c", Limit: limiter.Limit{MaxInFlight: 10}, Cost: 1}
	for i := range 3 {
		if d := mustTake(t, l, c)[0]; !d.Allowed {
			t.Fatalf("slot %d of a share of 3: %+v", i, d)
		}
	}
	if d := mustTake(t, l, c)[0]; d.Allowed || d.InFlight != 3 {
		t.Errorf("a 4th slot of a share of 3: %+v; want refused with 3 in flight", d)
	}

	_, err := l.Take(context.Background(), nil, []limiter.Request{{Key: "small", Limit: lim(1, time.Second, 2), Cost: 1}})
	if !errors.Is(err, limiter.ErrInvalidRequest) || err.Error() != "limiter: invalid request: request 0: limiter: burst 2 shared by 3 replicas is below one token per replica" {
		t.Errorf("burst 2 over 3 replicas: %v; want ErrInvalidRequest naming the numbers", err)
	}
}

// TestReplicasRescaleKeepsDebt: a bucket emptied under the whole limit is
// still empty in a WithReplicas(3) view (its debt is kept in time, and a
// share's window is the limit's), and refills at the share's rate; set
// back to 1, it is not refilled either.
func TestReplicasRescaleKeepsDebt(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{Now: clk.Time})
	r := limiter.Request{Key: "k", Limit: lim(10, time.Second, 9), Cost: 1}
	for range 9 {
		mustTake(t, l, r)
	}
	whole := l
	l = whole.WithReplicas(3)
	if l.Replicas() != 3 || whole.Replicas() != 1 {
		t.Fatalf("Replicas() = %d of the view, %d of the store; want 3, 1", l.Replicas(), whole.Replicas())
	}
	if d := mustTake(t, l, r)[0]; d.Allowed || d.RetryAfter != 300*ms {
		t.Errorf("an empty bucket, shared by 3: %+v; want refused, retry after 300ms (the share's 10 per 3s)", d)
	}
	clk.Advance(600 * ms)
	// The debt of 900 ms (9 tokens at 10/s) is 300 ms now: 2 of the
	// share's 3 (one per 300 ms).
	if got := remaining(t, l, "k", r.Limit); got != 2 {
		t.Errorf("tokens of the share 600 ms later: %d; want 2", got)
	}
	l = l.WithReplicas(1)
	// The same 300 ms of debt under the whole limit: 6 of 9.
	if got := remaining(t, l, "k", r.Limit); got != 6 {
		t.Errorf("tokens of the whole limit in a WithReplicas(1) view: %d; want 6", got)
	}
}
