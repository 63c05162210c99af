package memory

import (
	"math"
	"testing"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// TestSeedTrace is the trace the design was checked against: capacity 3,
// rate 2/s (T = 500ms, tau = 1.5s).
func TestSeedTrace(t *testing.T) {
	clk := NewManualClock()
	l := New(Options{Clock: clk})
	li := lim(2, time.Second, 3)
	type D = limiter.Decision
	steps := []struct {
		at   time.Duration
		cost int64
		want D
	}{
		{0, 1, D{Allowed: true, Remaining: 2, ResetAfter: 500 * ms}},
		{0, 1, D{Allowed: true, Remaining: 1, ResetAfter: 1000 * ms}},
		{0, 1, D{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{0, 1, D{Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
		{250 * ms, 1, D{Remaining: 0, RetryAfter: 250 * ms, ResetAfter: 1250 * ms}},
		{500 * ms, 1, D{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{1500 * ms, 2, D{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{100 * time.Second, 1, D{Allowed: true, Remaining: 2, ResetAfter: 500 * ms}},
		{100 * time.Second, 1, D{Allowed: true, Remaining: 1, ResetAfter: 1000 * ms}},
		{100 * time.Second, 1, D{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}},
		{100 * time.Second, 1, D{Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 1500 * ms}},
	}
	for i, s := range steps {
		clk.Set(s.at)
		got := mustTake(t, l, limiter.Request{Key: "k", Limit: li, Cost: s.cost})[0]
		if got != s.want {
			t.Errorf("step %d (t=%v cost=%d): got %+v; want %+v", i+1, s.at, s.cost, got, s.want)
		}
	}

	// A cost above the burst is "never": no Retry-After, nothing consumed.
	clk.Set(100*time.Second + 250*ms)
	one := limiter.Request{Key: "k", Limit: li, Cost: 1}
	before := mustPeek(t, l, one)[0]
	wantPeek := D{Remaining: 0, RetryAfter: 250 * ms, ResetAfter: 1250 * ms}
	if before != wantPeek {
		t.Fatalf("Peek before the cost-4 request: got %+v; want %+v", before, wantPeek)
	}
	got := mustTake(t, l, limiter.Request{Key: "k", Limit: li, Cost: 4})[0]
	if want := (D{Never: true, Remaining: 0, ResetAfter: 1250 * ms}); got != want {
		t.Errorf("cost 4 > burst 3: got %+v; want %+v", got, want)
	}
	if after := mustPeek(t, l, one)[0]; after != before {
		t.Errorf("cost-4 request consumed something: Peek before %+v, after %+v", before, after)
	}
	// And once the bucket is full, the full burst is still there.
	clk.Set(200 * time.Second)
	if got, want := remaining(t, l, "k", li), int64(3); got != want {
		t.Errorf("remaining at t=200s = %d; want %d", got, want)
	}
	if got := mustTake(t, l, limiter.Request{Key: "k", Limit: li, Cost: 4})[0]; !got.Never || got.Allowed || got.RetryAfter != 0 || got.Remaining != 3 {
		t.Errorf("cost 4 on a full bucket of 3: got %+v; want Never with Remaining 3", got)
	}
}

// TestDecisionValues pins Remaining, RetryAfter and ResetAfter on a rate
// whose interval is rounded (3/s: T = 333333334ns) and on weighted requests.
func TestDecisionValues(t *testing.T) {
	const T = 333333334 * time.Nanosecond
	clk := NewManualClock()
	l := New(Options{Clock: clk})
	li := lim(3, time.Second, 5) // tau = 5T = 1666666670ns
	type D = limiter.Decision
	steps := []struct {
		at   time.Duration
		cost int64
		want D
	}{
		{0, 3, D{Allowed: true, Remaining: 2, ResetAfter: 3 * T}},
		{0, 3, D{Remaining: 2, RetryAfter: T, ResetAfter: 3 * T}},       // only 2 left: rejected, charged nothing
		{0, 2, D{Allowed: true, Remaining: 0, ResetAfter: 5 * T}},       // the 2 are still there
		{T - 1, 1, D{Remaining: 0, RetryAfter: 1, ResetAfter: 4*T + 1}}, // 1ns early
		{T, 1, D{Allowed: true, Remaining: 0, ResetAfter: 5 * T}},       // exactly on time
		{T + T/2, 5, D{Remaining: 0, RetryAfter: 4*T + T/2, ResetAfter: 4*T + T/2}},
		{6 * T, 6, D{Never: true, Remaining: 5, ResetAfter: 0}}, // full again; 6 > burst
		{6 * T, 5, D{Allowed: true, Remaining: 0, ResetAfter: 5 * T}},
		{8*T + 1, 1, D{Allowed: true, Remaining: 1, ResetAfter: 4*T - 1}}, // 2 tokens back and 1ns of the third
	}
	for i, s := range steps {
		clk.Set(s.at)
		got := mustTake(t, l, limiter.Request{Key: "k", Limit: li, Cost: s.cost})[0]
		if got != s.want {
			t.Errorf("step %d (t=%v cost=%d): got %+v; want %+v", i+1, s.at, s.cost, got, s.want)
		}
	}
}

// TestLimitChange: a bucket is named by key and limit shape. A changed rate
// or burst (a reloaded policy) finds a fresh, full bucket, and the old state
// is still there if the old limit comes back; a changed delay_after or
// max_delay keeps the state.
func TestLimitChange(t *testing.T) {
	clk := NewManualClock()
	l := New(Options{Clock: clk})
	big, small := lim(1, time.Second, 10), lim(1, time.Second, 2)
	type D = limiter.Decision
	if got, want := mustTake(t, l, limiter.Request{Key: "k", Limit: big, Cost: 10})[0], (D{Allowed: true, ResetAfter: 10 * time.Second}); got != want {
		t.Fatalf("got %+v; want %+v", got, want)
	}
	clk.Set(3 * time.Second) // big's debt is 7s
	if got, want := mustTake(t, l, limiter.Request{Key: "k", Limit: small, Cost: 1})[0], (D{Allowed: true, Remaining: 1, ResetAfter: time.Second}); got != want {
		t.Errorf("smaller burst, fresh bucket: got %+v; want %+v", got, want)
	}
	faster := lim(2, time.Second, 10) // same burst, another interval
	if got, want := mustTake(t, l, limiter.Request{Key: "k", Limit: faster, Cost: 1})[0], (D{Allowed: true, Remaining: 9, ResetAfter: 500 * ms}); got != want {
		t.Errorf("faster rate, fresh bucket: got %+v; want %+v", got, want)
	}
	sameShape := lim(60, time.Minute, 10) // 1/s written differently: one bucket
	if got, want := mustTake(t, l, limiter.Request{Key: "k", Limit: sameShape, Cost: 3})[0], (D{Allowed: true, Remaining: 0, ResetAfter: 10 * time.Second}); got != want {
		t.Errorf("big's shape again: got %+v; want %+v", got, want)
	}
	delayed := big
	delayed.DelayAfter, delayed.MaxDelay = 1, time.Hour
	if got, want := mustTake(t, l, limiter.Request{Key: "k", Limit: delayed, Cost: 1})[0], (D{RetryAfter: time.Second, ResetAfter: 10 * time.Second}); got != want {
		t.Errorf("delay_after changed, state kept: got %+v; want %+v", got, want)
	}
}

func TestGCRASaturation(t *testing.T) {
	huge := lim(1_000_000_000, time.Second, math.MaxInt64) // T = 1ns, tau = MaxInt64
	type D = limiter.Decision
	tests := []struct {
		name     string
		tat, now int64
		l        limiter.Limit
		cost     int64
		want     D
		wantTat  int64
	}{
		{"whole huge bucket", 0, 0, huge, math.MaxInt64, D{Allowed: true, ResetAfter: math.MaxInt64}, math.MaxInt64},
		{"debt plus cost saturates", 10, 0, huge, math.MaxInt64, D{Remaining: math.MaxInt64 - 10, RetryAfter: 10, ResetAfter: 10}, 10},
		{"tat far in the past", math.MinInt64, math.MaxInt64, lim(1, time.Second, 1), 1, D{Allowed: true, ResetAfter: time.Second}, math.MaxInt64},
		{"tat far in the future", math.MaxInt64, math.MinInt64, lim(1, time.Second, 1), 1, D{RetryAfter: math.MaxInt64, ResetAfter: math.MaxInt64}, math.MaxInt64},
		{"cost above burst, no arithmetic", 0, 0, lim(1, time.Hour, 2), math.MaxInt64, D{Never: true, Remaining: 2}, 0},
	}
	for _, tc := range tests {
		got, tat := limiter.Decide(tc.tat, tc.now, tc.l, tc.cost)
		if got != tc.want || tat != tc.wantTat {
			t.Errorf("%s: Decide = %+v, tat %d; want %+v, tat %d", tc.name, got, tat, tc.want, tc.wantTat)
		}
	}
}
