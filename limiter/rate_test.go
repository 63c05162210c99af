package limiter

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	valid := []struct {
		in   string
		want Rate
	}{
		{"5/s", Rate{5, time.Second}},
		{"1/s", Rate{1, time.Second}},
		{"30/m", Rate{30, time.Minute}},
		{"1/h", Rate{1, time.Hour}},
		{"10r/s", Rate{10, time.Second}}, // nginx
		{"30r/m", Rate{30, time.Minute}}, // nginx
		{"2r/h", Rate{2, time.Hour}},
		{"1000/d", Rate{1000, 24 * time.Hour}},
		{"1/d", Rate{1, 24 * time.Hour}},
		{"5r/d", Rate{5, 24 * time.Hour}},
		{"007/s", Rate{7, time.Second}},
		{"9223372036854775807/s", Rate{math.MaxInt64, time.Second}},
	}
	for _, tc := range valid {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v, nil", tc.in, got, err, tc.want)
		}
	}
	invalid := []struct {
		in      string
		wantErr string
	}{
		{"", `limiter: invalid rate "": want N/s, N/m, N/h or N/d`},
		{"5", `limiter: invalid rate "5": want N/s, N/m, N/h or N/d`},
		{"5/D", `limiter: invalid rate "5/D": unit "D" is not s, m, h or d`},
		{"5/day", `limiter: invalid rate "5/day": unit "day" is not s, m, h or d`},
		{"5/sec", `limiter: invalid rate "5/sec": unit "sec" is not s, m, h or d`},
		{"5/S", `limiter: invalid rate "5/S": unit "S" is not s, m, h or d`},
		{"5/", `limiter: invalid rate "5/": unit "" is not s, m, h or d`},
		{"/s", `limiter: invalid rate "/s": missing count before "/"`},
		{"r/s", `limiter: invalid rate "r/s": missing count before "/"`},
		{"0/s", `limiter: invalid rate "0/s": count must be at least 1`},
		{"-1/s", `limiter: invalid rate "-1/s": count "-1" is not a whole number`},
		{"+1/s", `limiter: invalid rate "+1/s": count "+1" is not a whole number`},
		{"1.5/s", `limiter: invalid rate "1.5/s": count "1.5" is not a whole number`},
		{" 5/s", `limiter: invalid rate " 5/s": count " 5" is not a whole number`},
		{"5 /s", `limiter: invalid rate "5 /s": count "5 " is not a whole number`},
		{"5/s ", `limiter: invalid rate "5/s ": unit "s " is not s, m, h or d`},
		{"5rr/s", `limiter: invalid rate "5rr/s": count "5r" is not a whole number`},
		{"5/1s", `limiter: invalid rate "5/1s": unit "1s" is not s, m, h or d`},
		{"5/s/s", `limiter: invalid rate "5/s/s": unit "s/s" is not s, m, h or d`},
		{"9223372036854775808/s", `limiter: invalid rate "9223372036854775808/s": count "9223372036854775808" out of range`},
	}
	for _, tc := range invalid {
		got, err := ParseRate(tc.in)
		if err == nil {
			t.Errorf("ParseRate(%q) = %+v, nil; want error %q", tc.in, got, tc.wantErr)
			continue
		}
		if err.Error() != tc.wantErr {
			t.Errorf("ParseRate(%q) error = %q; want %q", tc.in, err, tc.wantErr)
		}
		if got != (Rate{}) {
			t.Errorf("ParseRate(%q) returned %+v with its error; want the zero Rate", tc.in, got)
		}
	}
}

func TestRateInterval(t *testing.T) {
	tests := []struct {
		r    Rate
		want time.Duration
	}{
		{Rate{1, time.Second}, time.Second},
		{Rate{2, time.Second}, 500 * time.Millisecond},
		{Rate{3, time.Second}, 333333334},  // 333333333.3 rounded up
		{Rate{7, time.Minute}, 8571428572}, // 8571428571.4 rounded up
		{Rate{1, time.Hour}, time.Hour},    // tiny rate: no overflow
		{Rate{1000, 24 * time.Hour}, 86400 * time.Millisecond},
		{Rate{7, 24 * time.Hour}, 12342857142858}, // 12342857142857.1 rounded up
		{Rate{1, 24 * time.Hour}, 24 * time.Hour},
		{Rate{1000000000, time.Second}, 1},    // one per ns
		{Rate{3000000000, time.Second}, 1},    // faster than 1/ns: clamped up to 1ns
		{Rate{math.MaxInt64, time.Second}, 1}, // huge count
		{Rate{1, math.MaxInt64}, math.MaxInt64},
		{Rate{2, math.MaxInt64}, math.MaxInt64/2 + 1},
		{Rate{3, 7}, 3},
		{Rate{0, time.Second}, 0},  // invalid
		{Rate{-1, time.Second}, 0}, // invalid
		{Rate{1, 0}, 0},            // invalid
		{Rate{1, -time.Second}, 0}, // invalid
	}
	for _, tc := range tests {
		if got := tc.r.Interval(); got != tc.want {
			t.Errorf("%+v.Interval() = %d; want %d", tc.r, got, tc.want)
		}
		// Never faster than configured: Interval*Count >= Per.
		if iv := tc.r.Interval(); iv > 0 && tc.r.Count <= math.MaxInt64/int64(iv) && int64(iv)*tc.r.Count < int64(tc.r.Per) {
			t.Errorf("%+v.Interval() = %d admits more than the rate", tc.r, iv)
		}
	}
}

func TestRateString(t *testing.T) {
	tests := []struct {
		r    Rate
		want string
	}{
		{Rate{5, time.Second}, "5/s"},
		{Rate{30, time.Minute}, "30/m"},
		{Rate{1, time.Hour}, "1/h"},
		{Rate{1000, 24 * time.Hour}, "1000/d"},
		{Rate{1, 48 * time.Hour}, "1/2d"},
		{Rate{10, 3 * time.Second}, "10/3s"},
		{Rate{9, 3 * time.Minute}, "9/3m"},
		{Rate{5, 90 * time.Minute}, "5/90m"},
		{Rate{5, 1500 * time.Millisecond}, "5/1.5s"},
		{Rate{}, "0/0s"},
	}
	for _, tc := range tests {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%+v.String() = %q; want %q", tc.r, got, tc.want)
		}
		if strings.HasSuffix(tc.want, "/s") || strings.HasSuffix(tc.want, "/m") || strings.HasSuffix(tc.want, "/h") || strings.HasSuffix(tc.want, "/d") {
			back, err := ParseRate(tc.want)
			if err != nil || back != tc.r {
				t.Errorf("ParseRate(%q) = %+v, %v; want round trip to %+v", tc.want, back, err, tc.r)
			}
		}
	}
}
