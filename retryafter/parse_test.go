package retryafter_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/retryafter"
)

// received is the fixed receipt time of the table tests: Sunday 1 March 2026,
// midnight UTC.
var received = time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Duration
	}{
		// delay-seconds (RFC 9110 §10.2.3: 1*DIGIT).
		{"zero", "0", 0},
		{"seconds", "120", 120 * time.Second},
		{"leading zeros are digits", "00120", 120 * time.Second},
		{"all zeros", "0000", 0},
		{"one", "1", time.Second},
		{"largest exact", "9223372036", 9223372036 * time.Second},
		{"one past largest saturates", "9223372037", retryafter.MaxDelay},
		{"huge saturates", "99999999999999999999999", retryafter.MaxDelay},
		{"very long saturates", strings.Repeat("9", 10000), retryafter.MaxDelay},
		{"leading space trimmed (RFC 9110 §5.5)", " 1", time.Second},
		{"trailing space trimmed", "1 ", time.Second},
		{"tabs trimmed", "\t7\t", 7 * time.Second},

		// IMF-fixdate.
		{"IMF-fixdate future", "Sun, 01 Mar 2026 00:02:00 GMT", 120 * time.Second},
		{"IMF-fixdate now", "Sun, 01 Mar 2026 00:00:00 GMT", 0},
		{"IMF-fixdate past is zero", "Sun, 06 Nov 1994 08:49:37 GMT", 0},
		{"IMF-fixdate one second ago is zero", "Sat, 28 Feb 2026 23:59:59 GMT", 0},
		{"IMF-fixdate next day", "Mon, 02 Mar 2026 00:00:00 GMT", 24 * time.Hour},
		{"IMF-fixdate leap second", "Sun, 01 Mar 2026 00:00:60 GMT", time.Minute},
		{"IMF-fixdate far future saturates", "Fri, 31 Dec 9999 23:59:59 GMT", retryafter.MaxDelay},
		{"IMF-fixdate trimmed", "  Sun, 01 Mar 2026 00:00:30 GMT ", 30 * time.Second},

		// asctime (obsolete, UTC implied).
		{"asctime single-digit day, space padded", "Sun Nov  6 08:49:37 1994", 0},
		{"asctime future", "Sun Mar  1 00:00:30 2026", 30 * time.Second},
		{"asctime two-digit day", "Sun Mar 01 00:00:30 2026", 30 * time.Second},
		{"asctime two-digit day without zero", "Tue Mar 31 00:00:00 2026", 30 * 24 * time.Hour},

		// RFC 850 (obsolete, two-digit year relative to receipt in 2026:
		// window (1976-03-01, 2076-03-01]).
		{"RFC 850 past", "Sunday, 06-Nov-94 08:49:37 GMT", 0},
		{"RFC 850 future", "Sunday, 01-Mar-26 00:00:10 GMT", 10 * time.Second},
		{"RFC 850 year 70 is 2070, within 50 years", "Wednesday, 01-Jan-70 00:00:00 GMT",
			time.Date(2070, 1, 1, 0, 0, 0, 0, time.UTC).Sub(received)},
		{"RFC 850 year 69 is 2069", "Tuesday, 01-Jan-69 00:00:00 GMT",
			time.Date(2069, 1, 1, 0, 0, 0, 0, time.UTC).Sub(received)},
		{"RFC 850 year 99 is 1999", "Friday, 31-Dec-99 23:59:59 GMT", 0},
		{"RFC 850 year 00 is 2000", "Saturday, 01-Jan-00 00:00:00 GMT", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := retryafter.Parse(tc.in, received)
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %v, %v; want %v, nil", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseReceivedWithinASecond(t *testing.T) {
	// The date has whole seconds; the receipt time need not.
	r := received.Add(400 * time.Millisecond)
	got, err := retryafter.Parse("Sun, 01 Mar 2026 00:00:01 GMT", r)
	if err != nil || got != 600*time.Millisecond {
		t.Fatalf("got %v, %v; want 600ms", got, err)
	}
	// delay-seconds ignore the receipt time altogether.
	if got, err := retryafter.Parse("5", time.Time{}); err != nil || got != 5*time.Second {
		t.Fatalf("got %v, %v; want 5s", got, err)
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range []struct{ name, in, reason string }{
		{"empty", "", "empty value"},
		{"only spaces", "   ", "empty value"},
		{"negative", "-1", "sign not allowed"},
		{"plus sign", "+1", "sign not allowed"},
		{"fraction", "1.5", "fraction not allowed"},
		{"comma", "1,5", "list not allowed"},
		{"exponent", "1e3", "decimal digits only"},
		{"hex", "0x10", "decimal digits only"},
		{"inner space", "1 2", "space inside"},
		{"unit suffix", "120s", "decimal digits only"},
		{"two values", "120, 120", "list not allowed"},
		{"non-ASCII digit", "١٢٠", "not an HTTP-date"},
		{"NUL", "1\x00", "decimal digits only"},
		{"garbage", "soon", "not an HTTP-date"},
		{"IMF-fixdate wrong weekday", "Mon, 06 Nov 1994 08:49:37 GMT", "weekday does not match"},
		{"IMF-fixdate lowercase month", "Sun, 06 nov 1994 08:49:37 GMT", "unknown month"},
		{"IMF-fixdate lowercase day", "sun, 06 Nov 1994 08:49:37 GMT", "unknown day"},
		{"IMF-fixdate uppercase month", "Sun, 06 NOV 1994 08:49:37 GMT", "unknown month"},
		{"IMF-fixdate UTC instead of GMT", "Sun, 06 Nov 1994 08:49:37 UTC", `must be "GMT"`},
		{"IMF-fixdate lowercase gmt", "Sun, 06 Nov 1994 08:49:37 gmt", `must be "GMT"`},
		{"IMF-fixdate numeric zone", "Sun, 06 Nov 1994 08:49:37 +0000", "not an HTTP-date"},
		{"IMF-fixdate no zone", "Sun, 06 Nov 1994 08:49:37", "not an HTTP-date"},
		{"IMF-fixdate one-digit hour", "Sun, 06 Nov 1994 8:49:37 GMT", "not an HTTP-date"},
		{"IMF-fixdate fractional second", "Sun, 06 Nov 1994 08:49:37.5 GMT", "not an HTTP-date"},
		{"IMF-fixdate one-digit day", "Sun, 6 Nov 1994 08:49:37 GMT", "not an HTTP-date"},
		{"IMF-fixdate two-digit year", "Sun, 06 Nov 94 08:49:37 GMT", "not an HTTP-date"},
		{"IMF-fixdate 31 February", "Tue, 31 Feb 2026 00:00:00 GMT", "day out of range"},
		{"IMF-fixdate day 0", "Sun, 00 Mar 2026 00:00:00 GMT", "day out of range"},
		{"IMF-fixdate 29 Feb common year", "Sun, 29 Feb 2026 00:00:00 GMT", "day out of range"},
		{"IMF-fixdate hour 24", "Sun, 01 Mar 2026 24:00:00 GMT", "out of range"},
		{"IMF-fixdate minute 60", "Sun, 01 Mar 2026 00:60:00 GMT", "out of range"},
		{"IMF-fixdate second 61", "Sun, 01 Mar 2026 00:00:61 GMT", "out of range"},
		{"IMF-fixdate sign in day", "Sun, +6 Nov 1994 08:49:37 GMT", "day must be two digits"},
		{"IMF-fixdate double space", "Sun,  06 Nov 1994 08:49:37 GMT", "not an HTTP-date"},
		{"IMF-fixdate long day name", "Sunday, 06 Nov 1994 08:49:37 GMT", "not an HTTP-date"},
		{"RFC 850 short day name", "Sun, 06-Nov-94 08:49:37 GMT", "not an HTTP-date"},
		{"RFC 850 wrong weekday for 1994", "Monday, 06-Nov-94 08:49:37 GMT", "weekday does not match"},
		{"RFC 850 weekday of the other century", "Thursday, 01-Jan-70 00:00:00 GMT", "weekday does not match"},
		{"RFC 850 lowercase month", "Sunday, 06-nov-94 08:49:37 GMT", "unknown month"},
		{"RFC 850 four-digit year", "Sunday, 06-Nov-1994 08:49:37 GMT", "not an HTTP-date"},
		{"RFC 850 other zone", "Sunday, 06-Nov-94 08:49:37 PST", `must be "GMT"`},
		{"asctime single space before one-digit day", "Sun Nov 6 08:49:37 1994", "not an HTTP-date"},
		{"asctime with zone", "Sun Nov  6 08:49:37 GMT 1994", "not an HTTP-date"},
		{"asctime wrong weekday", "Mon Nov  6 08:49:37 1994", "weekday does not match"},
		{"asctime lowercase month", "Sun nov  6 08:49:37 1994", "unknown month"},
		{"asctime day then space", "Sun Nov 6  08:49:37 1994", "day must be"},
		{"ISO 8601", "2026-03-01T00:00:00Z", "decimal digits only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := retryafter.Parse(tc.in, received)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, nil; want an error", tc.in, got)
			}
			if got != 0 {
				t.Errorf("Parse(%q) = %v with an error; want 0", tc.in, got)
			}
			if !errors.Is(err, retryafter.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			var se *retryafter.SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *SyntaxError", err)
			}
			if !strings.Contains(se.Reason, tc.reason) {
				t.Errorf("reason %q; want it to contain %q", se.Reason, tc.reason)
			}
			if se.Value != tc.in || se.Len != len(tc.in) {
				t.Errorf("SyntaxError{Value: %q, Len: %d}; want the input %q", se.Value, se.Len, tc.in)
			}
		})
	}
}

func TestSyntaxErrorTruncatesAndEscapes(t *testing.T) {
	in := "\x1b[31m" + strings.Repeat("A", 1<<20) + "\n"
	_, err := retryafter.Parse(in, received)
	var se *retryafter.SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("got %v; want a *SyntaxError", err)
	}
	if len(se.Value) != 64 || se.Len != len(in) {
		t.Fatalf("Value has %d bytes, Len %d; want 64 and %d", len(se.Value), se.Len, len(in))
	}
	msg := err.Error()
	if len(msg) > 250 {
		t.Errorf("error message is %d bytes; want it short: %s", len(msg), msg)
	}
	if strings.ContainsAny(msg, "\x1b\n") {
		t.Errorf("error message carries raw control characters: %q", msg)
	}
	want := `retryafter: invalid Retry-After value "\x1b[31m` + strings.Repeat("A", 64-5) + `"... (1048582 bytes): not an HTTP-date`
	if msg != want {
		t.Errorf("message\n%s\nwant\n%s", msg, want)
	}
}

func TestParseDateRFC850Century(t *testing.T) {
	// RFC 9110 §5.6.7: a two-digit year more than 50 years in the future is
	// in the past century. Each receipt time puts the window (r-50y, r+50y].
	utc := func(y int, m time.Month, d, hh, mm, ss int) time.Time {
		return time.Date(y, m, d, hh, mm, ss, 0, time.UTC)
	}
	for _, tc := range []struct {
		name     string
		received time.Time
		in       string
		want     time.Time
	}{
		{"70, exactly 50 years ahead: 2070", utc(2020, 1, 1, 0, 0, 0), "Wednesday, 01-Jan-70 00:00:00 GMT", utc(2070, 1, 1, 0, 0, 0)},
		{"70, 50 years and 1 s ahead: 1970", utc(2020, 1, 1, 0, 0, 0), "Thursday, 01-Jan-70 00:00:01 GMT", utc(1970, 1, 1, 0, 0, 1)},
		{"69 from 2020: 2069 (net/http says 1969)", utc(2020, 1, 1, 0, 0, 0), "Tuesday, 01-Jan-69 00:00:00 GMT", utc(2069, 1, 1, 0, 0, 0)},
		{"99 from 2020: 1999", utc(2020, 1, 1, 0, 0, 0), "Friday, 31-Dec-99 23:59:59 GMT", utc(1999, 12, 31, 23, 59, 59)},
		{"00 from 2020: 2000", utc(2020, 1, 1, 0, 0, 0), "Saturday, 01-Jan-00 00:00:00 GMT", utc(2000, 1, 1, 0, 0, 0)},
		{"94 from 2026: 1994", received, "Sunday, 06-Nov-94 08:49:37 GMT", utc(1994, 11, 6, 8, 49, 37)},
		{"69 from 1994: 1969", utc(1994, 11, 6, 0, 0, 0), "Wednesday, 01-Jan-69 00:00:00 GMT", utc(1969, 1, 1, 0, 0, 0)},
		{"00 from 2090: 2100, not 90 years ago", utc(2090, 6, 1, 0, 0, 0), "Friday, 01-Jan-00 00:00:00 GMT", utc(2100, 1, 1, 0, 0, 0)},
		{"40 from 2090, exactly 50 years back: 2140", utc(2090, 6, 1, 0, 0, 0), "Wednesday, 01-Jun-40 00:00:00 GMT", utc(2140, 6, 1, 0, 0, 0)},
		{"40 from 2090, 50 years back and 1 s: 2040", utc(2090, 6, 1, 0, 0, 0), "Friday, 01-Jun-40 00:00:01 GMT", utc(2040, 6, 1, 0, 0, 1)},
		{"receipt in another zone counts in UTC", time.Date(2020, 1, 1, 1, 0, 0, 0, time.FixedZone("CET", 3600)), "Wednesday, 01-Jan-70 00:00:00 GMT", utc(2070, 1, 1, 0, 0, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := retryafter.ParseDate(tc.in, tc.received)
			if err != nil || !got.Equal(tc.want) || got.Location() != time.UTC {
				t.Fatalf("ParseDate(%q, %v) = %v, %v; want %v", tc.in, tc.received, got, err, tc.want)
			}
		})
	}
	// 29 February of a year ending in 00 resolved to 2100 (no leap day) is
	// invalid, even though 2000 had one: the rule picks the century first.
	if got, err := retryafter.ParseDate("Tuesday, 29-Feb-00 00:00:00 GMT", time.Date(2051, 1, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(err, retryafter.ErrInvalid) {
		t.Errorf("29-Feb-00 from 2051 = %v, %v; want ErrInvalid", got, err)
	}
	if got, err := retryafter.ParseDate("Tuesday, 29-Feb-00 00:00:00 GMT", time.Date(2049, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil || !got.Equal(time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("29-Feb-00 from 2049 = %v, %v; want 2000-02-29", got, err)
	}
}

func TestParseDateForms(t *testing.T) {
	want := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)
	for _, in := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		"Sun Nov 06 08:49:37 1994",
	} {
		got, err := retryafter.ParseDate(in, received)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseDate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	// Leap second at the end of a year rolls into the next one.
	got, err := retryafter.ParseDate("Sat, 31 Dec 2016 23:59:60 GMT", received)
	if err != nil || !got.Equal(time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("leap second: %v, %v", got, err)
	}
	// Year 0000 is a four-digit year like any other (and long past).
	if d, err := retryafter.Parse("Sat, 01 Jan 0000 00:00:00 GMT", received); err != nil || d != 0 {
		t.Errorf("year 0000: %v, %v", d, err)
	}
}

// TestNetHTTPParseTimeDiffers pins the package doc's reasons for not using
// net/http.ParseTime: if one of these starts to fail, revisit the doc.
func TestNetHTTPParseTimeDiffers(t *testing.T) {
	lenient := []string{
		"Sun, 06 nov 1994 08:49:37 GMT",   // case-insensitive month
		"Sun, 06 Nov 1994 8:49:37 GMT",    // one-digit hour
		"Sun, 06 Nov 1994 08:49:37.5 GMT", // fractional second
		"Mon, 06 Nov 1994 08:49:37 GMT",   // weekday not checked
		"Sunday, 06-Nov-94 08:49:37 PST",  // any zone name, read as UTC
		"Sun Nov 6 08:49:37 1994",         // single space before a one-digit day
	}
	for _, in := range lenient {
		if _, err := http.ParseTime(in); err != nil {
			t.Errorf("http.ParseTime(%q) now fails (%v); update the package doc", in, err)
		}
		if _, err := retryafter.ParseDate(in, received); err == nil {
			t.Errorf("ParseDate(%q) accepted it", in)
		}
	}
	if _, err := http.ParseTime("Sat, 31 Dec 2016 23:59:60 GMT"); err == nil {
		t.Errorf("http.ParseTime accepts second 60 now; update the package doc")
	}
	// Fixed pivot at 69 instead of the sliding 50-year window.
	got, err := http.ParseTime("Wednesday, 01-Jan-69 00:00:00 GMT")
	if err != nil || got.Year() != 1969 {
		t.Errorf("http.ParseTime 69 = %v, %v; the package doc says 1969", got, err)
	}
	got, err = retryafter.ParseDate("Tuesday, 01-Jan-69 00:00:00 GMT", received)
	if err != nil || got.Year() != 2069 {
		t.Errorf("ParseDate 69 from 2026 = %v, %v; want 2069", got, err)
	}
}

func TestFromHeader(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lines   []string
		want    time.Duration
		present bool
		invalid bool
	}{
		{"absent", nil, 0, false, false},
		{"one line", []string{"3"}, 3 * time.Second, true, false},
		{"date", []string{"Sun, 01 Mar 2026 00:00:05 GMT"}, 5 * time.Second, true, false},
		{"identical lines count once", []string{"3", " 3"}, 3 * time.Second, true, false},
		{"differing lines", []string{"3", "4"}, 0, true, true},
		{"invalid", []string{"soon"}, 0, true, true},
		{"empty line", []string{""}, 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, l := range tc.lines {
				h.Add("retry-after", l)
			}
			d, present, err := retryafter.FromHeader(h, received)
			if d != tc.want || present != tc.present || (err != nil) != tc.invalid {
				t.Fatalf("FromHeader(%q) = %v, %v, %v; want %v, %v, invalid=%v", tc.lines, d, present, err, tc.want, tc.present, tc.invalid)
			}
			if tc.invalid && !errors.Is(err, retryafter.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestParseDoesNotAllocate(t *testing.T) {
	for _, in := range []string{"120", "99999999999999999999999", "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"} {
		if n := testing.AllocsPerRun(100, func() { _, _ = retryafter.Parse(in, received) }); n != 0 {
			t.Errorf("Parse(%q) allocates %v times", in, n)
		}
	}
}

// BenchmarkNetHTTPParseTime is the standard library's lenient parser, for
// comparison with BenchmarkParse/IMF-fixdate.
func BenchmarkNetHTTPParseTime(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = http.ParseTime("Sun, 01 Mar 2026 00:02:00 GMT")
	}
}

func BenchmarkParse(b *testing.B) {
	for _, bc := range []struct{ name, in string }{
		{"seconds", "120"},
		{"saturated", "99999999999999999999999"},
		{"IMF-fixdate", "Sun, 01 Mar 2026 00:02:00 GMT"},
		{"RFC850", "Sunday, 01-Mar-26 00:02:00 GMT"},
		{"asctime", "Sun Mar  1 00:02:00 2026"},
		{"invalid", "Mon, 06 Nov 1994 08:49:37 GMT"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = retryafter.Parse(bc.in, received)
			}
		})
	}
}

// RFC 850 dates carry a two-digit year: it is read as the one that puts the
// date no more than 50 years after the receipt time.
func TestParseDateRFC850CenturyFrom2026(t *testing.T) { // was ExampleParseDate
	received := time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Time{
		"Tuesday, 01-Jan-69 00:00:00 GMT": time.Date(2069, time.January, 1, 0, 0, 0, 0, time.UTC),
		"Friday, 31-Dec-99 23:59:59 GMT":  time.Date(1999, time.December, 31, 23, 59, 59, 0, time.UTC),
	} {
		got, err := retryafter.ParseDate(v, received)
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("ParseDate(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
}
