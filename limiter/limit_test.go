package limiter

import (
	"errors"
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
		{Limit{perSec, 3}, ""},
		{Limit{perSec, 1}, ""},
		{Limit{Rate{1, time.Hour}, math.MaxInt64 / int64(time.Hour)}, ""},
		{Limit{Rate{1, time.Hour}, math.MaxInt64/int64(time.Hour) + 1}, "limiter: invalid limit: burst 2562048 at 1/h takes longer than 292 years to refill"},
		{Limit{Rate{1000000000, time.Second}, math.MaxInt64}, ""}, // T = 1ns
		{Limit{Rate{1, math.MaxInt64}, 1}, ""},
		{Limit{Rate{1, math.MaxInt64}, 2}, "limiter: invalid limit: burst 2 at 1/2562047h47m16.854775807s takes longer than 292 years to refill"},
		{Limit{perSec, 0}, "limiter: invalid limit: burst 0, want >= 1"},
		{Limit{perSec, -1}, "limiter: invalid limit: burst -1, want >= 1"},
		{Limit{Rate{0, time.Second}, 1}, "limiter: invalid limit: rate count 0, want >= 1"},
		{Limit{Rate{1, 0}, 1}, "limiter: invalid limit: rate period 0s, want > 0"},
		{Limit{Rate{1, -time.Second}, 1}, "limiter: invalid limit: rate period -1s, want > 0"},
		{Limit{}, "limiter: invalid limit: rate count 0, want >= 1"},
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
		{Limit{Rate{2, time.Second}, 3}, 1500 * time.Millisecond},
		{Limit{Rate{5, time.Second}, 5}, time.Second},
		{Limit{Rate{3, time.Second}, 3}, 1000000002 * time.Nanosecond}, // 3 × 333333334ns
		{Limit{Rate{1, time.Hour}, 24}, 24 * time.Hour},
		{Limit{Rate{1, math.MaxInt64}, 2}, math.MaxInt64}, // saturates (invalid limit)
		{Limit{Rate{1, time.Second}, 0}, 0},
		{Limit{}, 0},
	}
	for _, tc := range tests {
		if got := tc.l.Window(); got != tc.want {
			t.Errorf("%+v.Window() = %v; want %v", tc.l, got, tc.want)
		}
	}
}

func TestValidateRequests(t *testing.T) {
	ok := Limit{Rate{1, time.Second}, 1}
	tests := []struct {
		reqs    []Request
		wantErr string
	}{
		{nil, ""},
		{[]Request{{"k", ok, 1}, {"k", ok, 1}}, ""},
		{[]Request{{"", ok, 1}}, "limiter: invalid request: request 0: empty key"},
		{[]Request{{"k", ok, 1}, {"k", ok, 0}}, "limiter: invalid request: request 1: cost must be at least 1"},
		{[]Request{{"k", ok, -5}}, "limiter: invalid request: request 0: cost must be at least 1"},
		{[]Request{{"k", Limit{}, 1}}, "limiter: invalid request: request 0: limiter: invalid limit: rate count 0, want >= 1"},
	}
	for _, tc := range tests {
		err := ValidateRequests(tc.reqs)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("ValidateRequests(%+v) = %v; want nil", tc.reqs, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.wantErr {
			t.Errorf("ValidateRequests(%+v) = %v; want %q", tc.reqs, err, tc.wantErr)
		}
		if !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("ValidateRequests(%+v) = %v; want it to wrap ErrInvalidRequest", tc.reqs, err)
		}
	}
}
