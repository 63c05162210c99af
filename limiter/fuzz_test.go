package limiter

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseRate: ParseRate never panics, errors name the input, and every
// accepted rate is valid and survives a String round trip.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"5/s", "10r/m", "1/h", "007/s", "0/s", "-1/s", "5/d", "", "/", "99999999999999999999/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Errorf("ParseRate(%q) error %q does not name the input", s, err)
			}
			return
		}
		if (Limit{Rate: r, Burst: 1}).Validate() != nil {
			t.Fatalf("ParseRate(%q) = %+v: invalid rate accepted", s, r)
		}
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %+v; String %q parses to %+v, %v", s, r, r.String(), back, err)
		}
	})
}
