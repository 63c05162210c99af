package limiter

import (
	"math"
	"testing"
	"time"
)

func TestLimitValidate(t *testing.T) {
	perSec := Rate{2, time.Second}
	tests := []struct {
		l       Limit
		wantErr string // "" means valid
	}{
		{Limit{Rate: perSec, Burst: 3}, ""},
		{Limit{Rate: perSec, Burst: 1}, ""},
		{Limit{Rate: Rate{1, time.Hour}, Burst: math.MaxInt64 / int64(time.Hour)}, ""},
		{Limit{Rate: Rate{1, time.Hour}, Burst: math.MaxInt64/int64(time.Hour) + 1}, "limiter: invalid limit: burst 2562048 at 1/h takes longer than 292 years to refill"},
		{Limit{Rate: Rate{1000000000, time.Second}, Burst: math.MaxInt64}, ""}, // T = 1ns
		{Limit{Rate: Rate{1, math.MaxInt64}, Burst: 1}, ""},
		{Limit{Rate: Rate{1, math.MaxInt64}, Burst: 2}, "limiter: invalid limit: burst 2 at 1/2562047h47m16.854775807s takes longer than 292 years to refill"},
		{Limit{Rate: perSec, Burst: 0}, "limiter: invalid limit: burst 0, want >= 1"},
		{Limit{Rate: perSec, Burst: -1}, "limiter: invalid limit: burst -1, want >= 1"},
		{Limit{Rate: Rate{0, time.Second}, Burst: 1}, "limiter: invalid limit: rate count 0, want >= 1"},
		{Limit{Rate: Rate{1, 0}, Burst: 1}, "limiter: invalid limit: rate period 0s, want > 0"},
		{Limit{Rate: Rate{1, -time.Second}, Burst: 1}, "limiter: invalid limit: rate period -1s, want > 0"},
		{Limit{}, "limiter: invalid limit: rate count 0, want >= 1"},
		{Limit{Rate: perSec, Burst: 3, DelayAfter: 3}, ""},
		{Limit{Rate: perSec, Burst: 3, DelayAfter: 1, MaxDelay: time.Second}, ""},
		{Limit{Rate: perSec, Burst: 3, DelayAfter: 4}, "limiter: invalid limit: delay_after 4, want 0 (= burst) to burst 3"},
		{Limit{Rate: perSec, Burst: 3, DelayAfter: -1}, "limiter: invalid limit: delay_after -1, want 0 (= burst) to burst 3"},
		{Limit{Rate: perSec, Burst: 3, MaxDelay: -1}, "limiter: invalid limit: max_delay -1ns, want >= 0"},
	}
	for _, tc := range tests {
		err := tc.l.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%+v.Validate() = %v; want nil", tc.l, err)
		case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
			t.Errorf("%+v.Validate() = %v; want %q", tc.l, err, tc.wantErr)
		}
	}
}

func TestLimitWindow(t *testing.T) {
	tests := []struct {
		l    Limit
		want time.Duration
	}{
		{Limit{Rate: Rate{2, time.Second}, Burst: 3}, 1500 * time.Millisecond},
		{Limit{Rate: Rate{5, time.Second}, Burst: 5}, time.Second},
		{Limit{Rate: Rate{3, time.Second}, Burst: 3}, 1000000002 * time.Nanosecond}, // 3 × 333333334ns
		{Limit{Rate: Rate{1, time.Hour}, Burst: 24}, 24 * time.Hour},
		{Limit{Rate: Rate{1000, 24 * time.Hour}, Burst: 1000}, 24 * time.Hour}, // a daily quota: 86.4 s per token
		{Limit{Rate: Rate{1000, 24 * time.Hour}, Burst: 50}, 72 * time.Minute},
		{Limit{Rate: Rate{1, math.MaxInt64}, Burst: 2}, math.MaxInt64}, // saturates (invalid limit)
		{Limit{Rate: Rate{1, time.Second}, Burst: 0}, 0},
		{Limit{}, 0},
	}
	for _, tc := range tests {
		if got := tc.l.Window(); got != tc.want {
			t.Errorf("%+v.Window() = %v; want %v", tc.l, got, tc.want)
		}
	}
}
