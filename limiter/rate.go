package limiter

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratekey/ratekey/internal/quote"
)

// Rate is Count tokens per Per: the speed at which a bucket refills.
//
// The zero Rate is invalid. A valid Rate has Count >= 1 and Per > 0; rates
// come from [ParseRate] or are written literally, e.g.
// Rate{Count: 5, Per: time.Second}. Rate is a plain value, safe to copy and
// to share between goroutines.
type Rate struct {
	// Count is the number of tokens added per Per; >= 1.
	Count int64
	// Per is the period over which Count tokens are added; > 0.
	Per time.Duration
}

// ParseRate parses "N/s", "N/m", "N/h" or "N/d" (N tokens per second,
// minute, hour or day; a day is 24 hours, 86 400 s, whatever the calendar
// says, so a daily quota is a bucket that refills over a rolling 24 h, not
// a counter reset at midnight). The nginx limit_req spelling "Nr/s", "Nr/m"
// (and, by extension, "Nr/h" and "Nr/d") is accepted too. N is a decimal integer >= 1 made of ASCII digits
// only (no sign, no spaces, no fraction) that fits in an int64.
//
// The error names the input, quoted; it wraps no sentinel.
func ParseRate(s string) (Rate, error) {
	num, unit, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, fmt.Errorf("limiter: invalid rate %s: want N/s, N/m, N/h or N/d", quote.Value(s))
	}
	num = strings.TrimSuffix(num, "r") // nginx "10r/s"
	var per time.Duration
	switch unit {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	case "d":
		per = day
	default:
		return Rate{}, fmt.Errorf("limiter: invalid rate %s: unit %s is not s, m, h or d", quote.Value(s), quote.Value(unit))
	}
	if num == "" {
		return Rate{}, fmt.Errorf("limiter: invalid rate %s: missing count before %q", quote.Value(s), "/")
	}
	for i := 0; i < len(num); i++ {
		if num[i] < '0' || num[i] > '9' {
			return Rate{}, fmt.Errorf("limiter: invalid rate %s: count %s is not a whole number", quote.Value(s), quote.Value(num))
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return Rate{}, fmt.Errorf("limiter: invalid rate %s: count %s out of range", quote.Value(s), quote.Value(num))
	}
	if n < 1 {
		return Rate{}, fmt.Errorf("limiter: invalid rate %s: count must be at least 1", quote.Value(s))
	}
	return Rate{Count: n, Per: per}, nil
}

// day is the period of a "N/d" rate: 24 hours.
const day = 24 * time.Hour

// Interval returns the emission interval T: the time one token takes to come
// back, ceil(Per/Count) nanoseconds.
//
// The division rounds up so the configured rate is never exceeded: 3/s gives
// 333333334ns, a hair slower than a third of a second, never faster. The
// result is therefore at least 1ns for every valid rate, however large Count
// is (a rate above one token per nanosecond is served at exactly one per
// nanosecond), and it cannot overflow, however small the rate is (1/h is
// 3600s; integer nanoseconds, unlike float seconds, lose nothing; see
// golang/go#71154 for the overflow x/time/rate hit with tiny rates).
//
// Interval returns 0 for an invalid rate (Count < 1 or Per <= 0).
func (r Rate) Interval() time.Duration {
	if r.Count < 1 || r.Per <= 0 {
		return 0
	}
	per := int64(r.Per)
	t := per / r.Count
	if per%r.Count != 0 {
		t++ // cannot overflow: t <= per/1 only when Count == 1, and then there is no remainder
	}
	return time.Duration(t)
}

// String formats r as ParseRate reads it: "5/s", "30/m", "1/h", "1000/d".
// A whole number of days, hours, minutes or seconds is written with its
// count before the unit, as a share of a limit has it ("10/3s" is 10 per
// 3 s, "3/2d"); any other period with [time.Duration.String], e.g.
// "5/1.5s". ParseRate reads neither.
func (r Rate) String() string {
	unit := r.Per.String()
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{day, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if r.Per > 0 && r.Per%u.d == 0 {
			unit = u.name
			if n := r.Per / u.d; n != 1 {
				unit = strconv.FormatInt(int64(n), 10) + u.name
			}
			break
		}
	}
	return strconv.FormatInt(r.Count, 10) + "/" + unit
}
