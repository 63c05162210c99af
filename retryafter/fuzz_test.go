package retryafter_test

import (
	"errors"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/retryafter"
)

func trimOWS(s string) string { return strings.Trim(s, " \t") }

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// FuzzParse: Parse never panics and never returns a negative delay; errors
// wrap ErrInvalid and quote a bounded prefix of the input; delay-seconds
// agree with a big-integer reference and round-trip through their decimal
// form; every accepted date is the canonical spelling of its time in its
// form (strictness), agrees with net/http.ParseTime where both apply, and
// gives the delay date − receipt, floored at zero.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"0", "120", "00120", "-1", "+1", "1.5", " 1", "1 ", "", "99999999999999999999999",
		"9223372036", "9223372037",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Sun, 01 Mar 2026 00:02:00 GMT", "Sat, 31 Dec 2016 23:59:60 GMT", "Mon, 06 Nov 1994 08:49:37 GMT",
		"Sun, 06 nov 1994 08:49:37 GMT", "Wednesday, 01-Jan-70 00:00:00 GMT", "Sun Mar 01 00:00:30 2026",
		"Fri, 31 Dec 9999 23:59:59 GMT", "garbage",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := retryafter.Parse(s, received)
		if d < 0 {
			t.Fatalf("Parse(%q) = %v: negative", s, d)
		}
		if err != nil {
			var se *retryafter.SyntaxError
			if d != 0 || !errors.Is(err, retryafter.ErrInvalid) || !errors.As(err, &se) {
				t.Fatalf("Parse(%q) = %v, %v: want 0 and a *SyntaxError", s, d, err)
			}
			if len(se.Value) > 64 || !strings.HasPrefix(s, se.Value) || se.Len != len(s) {
				t.Fatalf("SyntaxError %+v does not hold a bounded prefix of %q", se, s)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("error message of %d bytes", len(err.Error()))
			}
			if allDigits(trimOWS(s)) {
				t.Fatalf("Parse(%q) rejected delay-seconds: %v", s, err)
			}
			return
		}
		v := trimOWS(s)
		if allDigits(v) {
			// Reference: n seconds in nanoseconds, saturated at MaxInt64.
			n, _ := new(big.Int).SetString(v, 10)
			n.Mul(n, big.NewInt(int64(time.Second)))
			want := retryafter.MaxDelay
			if n.IsInt64() {
				want = time.Duration(n.Int64())
			}
			if d != want {
				t.Fatalf("Parse(%q) = %v; want %v", s, d, want)
			}
			if d < retryafter.MaxDelay {
				back, err := retryafter.Parse(strconv.FormatInt(int64(d/time.Second), 10), received)
				if err != nil || back != d || d%time.Second != 0 {
					t.Fatalf("Parse(%q) = %v does not round-trip: %v, %v", s, d, back, err)
				}
			}
			return
		}
		date, err := retryafter.ParseDate(s, received)
		if err != nil {
			t.Fatalf("Parse(%q) accepted what ParseDate rejects: %v", s, err)
		}
		want := date.Sub(received)
		if want < 0 {
			want = 0
		}
		if d != want {
			t.Fatalf("Parse(%q) = %v; want date − receipt = %v", s, d, want)
		}
		leap := strings.Contains(v, ":60 ") // second 60 normalises to the next minute
		var layout string
		switch {
		case len(v) == 29:
			layout = http.TimeFormat
		case len(v) == 24:
			layout = time.ANSIC
			if v[8] == '0' { // "Mar 01": the two-digit spelling of the day
				layout = "Mon Jan 02 15:04:05 2006"
			}
		default:
			layout = "Monday, 02-Jan-06 15:04:05 GMT"
		}
		if !leap {
			if got := date.Format(layout); got != v {
				t.Fatalf("ParseDate(%q) = %v, which formats as %q: a non-canonical spelling was accepted", s, date, got)
			}
			if layout != "Monday, 02-Jan-06 15:04:05 GMT" {
				ref, err := http.ParseTime(v)
				if err != nil || !ref.Equal(date) {
					t.Fatalf("ParseDate(%q) = %v; net/http.ParseTime says %v, %v", s, date, ref, err)
				}
			}
		}
	})
}

// FuzzRFC850Century checks the two-digit-year rule of RFC 9110 §5.6.7
// against a slow reference: among all years ending in yy within a century
// either side of the receipt year, the one whose timestamp t satisfies
// received − 50y < t ≤ received + 50y.
func FuzzRFC850Century(f *testing.F) {
	// Arguments: receipt (Unix seconds), yy, then month-1, day-1, hour,
	// minute, second (each reduced modulo its range).
	f.Add(int64(1577836800), uint8(70), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0))      // 2020 → 2070
	f.Add(int64(1577836800), uint8(70), uint8(0), uint8(0), uint8(0), uint8(0), uint8(1))      // 2020 → 1970
	f.Add(int64(1772323200), uint8(69), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0))      // 2026 → 2069
	f.Add(int64(1772323200), uint8(99), uint8(11), uint8(30), uint8(23), uint8(59), uint8(59)) // 2026 → 1999
	f.Add(int64(1772323200), uint8(0), uint8(1), uint8(28), uint8(12), uint8(0), uint8(0))     // 29 Feb 2000
	f.Add(int64(3799958400), uint8(40), uint8(5), uint8(0), uint8(0), uint8(0), uint8(0))      // 2090 → 2140
	f.Fuzz(func(t *testing.T, recv int64, yy, mon, day, hh, mm, ss uint8) {
		// Receipt times from year 1000 to 9000, whole or fractional seconds.
		const lo, span = -30610224000, 252460800000
		if recv < lo || recv >= lo+span {
			recv = lo + int64(uint64(recv)%span)
		}
		r := time.Unix(recv, int64(uint64(recv)%3)*333_333_333).UTC()
		y2, m := int(yy%100), time.Month(mon%12+1)
		d, h, mi, s := int(day%31+1), int(hh%24), int(mm%60), int(ss%60)

		var want time.Time
		found := 0
		for y := r.Year() - 150; y <= r.Year()+150; y++ {
			if y%100 != y2 {
				continue
			}
			c := time.Date(y, m, d, h, mi, s, 0, time.UTC)
			if c.After(r.AddDate(-50, 0, 0)) && !c.After(r.AddDate(50, 0, 0)) {
				want, found = c, found+1
			}
		}
		if found != 1 {
			t.Fatalf("reference found %d candidates for yy=%02d at %v", found, y2, r)
		}
		if want.Day() != d || want.Month() != m {
			return // no such day in that year (29 Feb): skip, the normalised reference is not comparable
		}
		in := want.Format("Monday, 02-Jan-06 15:04:05 GMT")
		got, err := retryafter.ParseDate(in, r)
		if err != nil || !got.Equal(want) {
			t.Fatalf("ParseDate(%q, %v) = %v, %v; want %v", in, r, got, err, want)
		}
	})
}
