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
		// An adaptive cap is the process's, never a store's.
		{Limit{MaxInFlightCeiling: 64}, "limiter: invalid limit: an adaptive in-flight cap (max_in_flight_ceiling, min_in_flight) is decided in the process by package middleware, never by a store"},
		{Limit{MaxInFlight: 8, MinInFlight: 2, MaxInFlightCeiling: 64}, "limiter: invalid limit: an adaptive in-flight cap (max_in_flight_ceiling, min_in_flight) is decided in the process by package middleware, never by a store"},
		{Limit{MaxInFlight: 8, MinInFlight: 2}, "limiter: invalid limit: an adaptive in-flight cap (max_in_flight_ceiling, min_in_flight) is decided in the process by package middleware, never by a store"},
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

// TestLimitShare pins the rounding rule of Limit.Share: rates divide
// exactly, bursts, delay_after and caps round down, and a share below one
// token or one slot is refused with the numbers.
func TestLimitShare(t *testing.T) {
	perSec := Rate{10, time.Second}
	tests := []struct {
		name    string
		l       Limit
		n       int64
		want    Limit
		wantErr string
	}{
		{"one replica", Limit{Rate: perSec, Burst: 5}, 1, Limit{Rate: perSec, Burst: 5}, ""},
		{"zero is one", Limit{Rate: perSec, Burst: 5}, 0, Limit{Rate: perSec, Burst: 5}, ""},
		{"exact", Limit{Rate: perSec, Burst: 9, MaxDelay: time.Second}, 3, Limit{Rate: Rate{10, 3 * time.Second}, Burst: 3, MaxDelay: time.Second}, ""},
		{"burst rounds down", Limit{Rate: perSec, Burst: 10}, 3, Limit{Rate: Rate{10, 3 * time.Second}, Burst: 3}, ""},
		{"delay_after rounds down", Limit{Rate: perSec, Burst: 10, DelayAfter: 7}, 3, Limit{Rate: Rate{10, 3 * time.Second}, Burst: 3, DelayAfter: 2}, ""},
		{"delay_after at least 1", Limit{Rate: perSec, Burst: 10, DelayAfter: 1}, 3, Limit{Rate: Rate{10, 3 * time.Second}, Burst: 3, DelayAfter: 1}, ""},
		{"daily quota", Limit{Rate: Rate{3, 24 * time.Hour}, Burst: 3}, 3, Limit{Rate: Rate{3, 72 * time.Hour}, Burst: 1}, ""},
		{"burst below one token", Limit{Rate: perSec, Burst: 2}, 3, Limit{}, "limiter: burst 2 shared by 3 replicas is below one token per replica"},
		{"period overflows", Limit{Rate: Rate{1, math.MaxInt64 / 2}, Burst: 3}, 3, Limit{}, "limiter: rate 1/1281023h53m38.427387903s shared by 3 replicas: the period overflows"},
		{"cap", Limit{MaxInFlight: 10, Lease: time.Minute}, 3, Limit{MaxInFlight: 3, Lease: time.Minute}, ""},
		{"cap below one slot", Limit{MaxInFlight: 2}, 3, Limit{}, "limiter: max_in_flight 2 shared by 3 replicas is below one slot per replica"},
		{"adaptive cap: per process", Limit{MinInFlight: 2, MaxInFlightCeiling: 64}, 3, Limit{MinInFlight: 2, MaxInFlightCeiling: 64}, ""},
	}
	for _, tt := range tests {
		got, err := tt.l.Share(tt.n)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%s: Share(%d) error %v; want %q", tt.name, tt.n, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: Share(%d) = %+v, %v; want %+v", tt.name, tt.n, got, err, tt.want)
		}
		if window(got) > window(tt.l) {
			t.Errorf("%s: share's window %v exceeds the limit's %v", tt.name, window(got), window(tt.l))
		}
	}
}

// window returns Burst × Interval of l, in ns (exact: the test limits'
// windows fit in an int64).
func window(l Limit) time.Duration { return time.Duration(l.Burst) * l.Rate.Interval() }
