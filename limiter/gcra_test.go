package limiter

import (
	"math"
	"testing"
	"time"
)

// TestDecideSaturation: sums near the int64 limits saturate without ever
// turning a rejection into an admission, and a new TAT past MaxInt64 is
// refused. (Decide's ordinary traces are in
// the conformance suite, limiter/limitertest, which every store runs.)
func TestDecideSaturation(t *testing.T) {
	huge := Limit{Rate: Rate{Count: 1_000_000_000, Per: time.Second}, Burst: math.MaxInt64} // T = 1ns, tau = MaxInt64
	type D = Decision
	tests := []struct {
		name     string
		tat, now int64
		l        Limit
		cost     int64
		want     D
		wantTat  int64
	}{
		{"whole huge bucket", 0, 0, huge, math.MaxInt64, D{Allowed: true, ResetAfter: math.MaxInt64}, math.MaxInt64},
		{"debt plus cost saturates", 10, 0, huge, math.MaxInt64, D{Remaining: math.MaxInt64 - 10, RetryAfter: 10, ResetAfter: 10}, 10},
		{"tat far in the past", math.MinInt64, math.MaxInt64 - int64(time.Second), Limit{Rate: Rate{Count: 1, Per: time.Second}, Burst: 1}, 1, D{Allowed: true, ResetAfter: time.Second}, math.MaxInt64},
		{"new tat past the end of the clock", math.MinInt64, math.MaxInt64, Limit{Rate: Rate{Count: 1, Per: time.Second}, Burst: 1}, 1, D{Never: true}, math.MinInt64},
		{"tat far in the future", math.MaxInt64, math.MinInt64, Limit{Rate: Rate{Count: 1, Per: time.Second}, Burst: 1}, 1, D{RetryAfter: math.MaxInt64, ResetAfter: math.MaxInt64}, math.MaxInt64},
		{"cost above burst, no arithmetic", 0, 0, Limit{Rate: Rate{Count: 1, Per: time.Hour}, Burst: 2}, math.MaxInt64, D{Never: true, Remaining: 2}, 0},
	}
	for _, tc := range tests {
		got, tat := Decide(tc.tat, tc.now, tc.l, tc.cost)
		if got != tc.want || tat != tc.wantTat {
			t.Errorf("%s: Decide = %+v, tat %d; want %+v, tat %d", tc.name, got, tat, tc.want, tc.wantTat)
		}
	}
}
