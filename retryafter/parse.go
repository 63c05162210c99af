package retryafter

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"
)

// maxDelay is the longest delay [FromHeader] reports: the largest [time.Duration],
// about 292 years. A delay-seconds value above 9223372036 seconds, or an
// HTTP-date further than that after the receipt time, saturates to maxDelay
// (RFC 9111 §1.2.2 prescribes the same for caches reading delta-seconds).
const maxDelay time.Duration = math.MaxInt64

// maxSeconds is the largest delay-seconds value that fits a time.Duration.
const maxSeconds = uint64(maxDelay / time.Second)

// ErrInvalid is wrapped by every error this package returns for a
// Retry-After value or HTTP-date that does not follow RFC 9110; test for it
// with errors.Is.
var ErrInvalid = errors.New("retryafter: invalid Retry-After value")

// maxQuoted is how many bytes of an invalid value a syntaxErr keeps.
const maxQuoted = 64

// syntaxErr reports a Retry-After value or HTTP-date that does not follow
// the grammar of RFC 9110 §10.2.3 and §5.6.7. It wraps [ErrInvalid].
//
// Value holds at most the first 64 bytes of the input so that an
// attacker-sized header is never echoed whole into logs; Len is the input's
// full length in bytes. Error quotes Value with Go escaping, so control
// characters cannot forge log lines.
type syntaxErr struct {
	Value  string // the input, truncated to its first 64 bytes
	Len    int    // the length of the whole input, in bytes
	Reason string // what is wrong, e.g. "sign not allowed in delay-seconds"
}

// Error returns "retryafter: invalid Retry-After value " followed by the
// quoted (and possibly truncated) value and the reason.
func (e *syntaxErr) Error() string {
	q := strconv.Quote(e.Value)
	if e.Len > len(e.Value) {
		q += "... (" + strconv.Itoa(e.Len) + " bytes)"
	}
	return "retryafter: invalid Retry-After value " + q + ": " + e.Reason
}

// Unwrap returns [ErrInvalid].
func (e *syntaxErr) Unwrap() error { return ErrInvalid }

func syntaxError(value, reason string) error {
	v := value
	if len(v) > maxQuoted {
		v = v[:maxQuoted]
	}
	return &syntaxErr{Value: v, Len: len(value), Reason: reason}
}

// parse returns the wait a single Retry-After field value asks for,
// counted from received (see [FromHeader]). It does not allocate unless it
// returns an error.
func parse(value string, received time.Time) (time.Duration, error) {
	v := trimOWS(value)
	if v == "" {
		return 0, syntaxError(value, "empty value")
	}
	switch c := v[0]; {
	case isDigit(c):
		return parseSeconds(value, v)
	case c == '+' || c == '-':
		return 0, syntaxError(value, "sign not allowed in delay-seconds")
	}
	t, err := parseDate(value, v, received)
	if err != nil {
		return 0, err
	}
	d := t.Sub(received) // saturates at maxDelay; wall clock, since t has no monotonic reading
	if d < 0 {
		d = 0
	}
	return d, nil
}

// parseHTTPDate parses an HTTP-date (RFC 9110 §5.6.7) in any of its three forms,
// IMF-fixdate, RFC 850 and asctime, and returns it in UTC. received is only
// used to resolve the two-digit year of the RFC 850 form: the year is placed
// in the century that puts the timestamp after received minus 50 years and
// no later than received plus 50 years, as §5.6.7 requires ("more than 50
// years in the future" means "in the past century").
//
// Names are case-sensitive, the spacing is exactly the grammar's, the
// weekday must match the date, the day must exist in its month, and second 60
// (a leap second) is accepted as second 0 of the next minute. Leading and
// trailing spaces and tabs are ignored. Anything else returns the zero time
// and a an error wrapping [ErrInvalid]. parseHTTPDate does not allocate
// unless it returns an error, and is safe for concurrent use.
func parseHTTPDate(value string, received time.Time) (time.Time, error) {
	return parseDate(value, trimOWS(value), received)
}

// FromHeader reads the Retry-After field of a response header and returns
// how long to wait, counted from received, before the follow-up request it
// asks for (RFC 9110 §10.2.3). received is the time the response was
// received; pass time.Now() taken when the response headers arrived.
// present reports whether the field was there at all; when it is absent, d
// is 0 and err is nil. To read a lone value v, pass
// http.Header{"Retry-After": {v}}.
//
// A delay-seconds value (1*DIGIT) is that many seconds, whatever received is;
// leading zeros are allowed and values beyond the largest time.Duration
// (math.MaxInt64 nanoseconds, about 292 years) saturate to it. An HTTP-date
// (see the package documentation) gives the date minus received, or zero if
// the date is not after received; received also anchors the two-digit years
// of the RFC 850 form. The result is never negative. Leading and trailing
// spaces and tabs are ignored (RFC 9110 §5.5).
//
// Retry-After is a singleton field: several lines with the same value (after
// trimming) count as one, several differing lines are invalid. A present
// value that is neither form, or differing lines, return present == true,
// d == 0 and an error wrapping [ErrInvalid]. FromHeader does not allocate
// unless it returns an error, only reads h, and is safe for concurrent use
// with other readers of h.
func FromHeader(h http.Header, received time.Time) (d time.Duration, present bool, err error) {
	lines := h["Retry-After"]
	if len(lines) == 0 {
		return 0, false, nil
	}
	first := trimOWS(lines[0])
	for _, l := range lines[1:] {
		if trimOWS(l) != first {
			return 0, true, syntaxError(lines[0], "several differing Retry-After field lines")
		}
	}
	d, err = parse(lines[0], received)
	return d, true, err
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseSeconds parses delay-seconds = 1*DIGIT from v (value is the untrimmed
// input, for errors).
func parseSeconds(value, v string) (time.Duration, error) {
	var n uint64
	saturated := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !isDigit(c) {
			switch c {
			case '.':
				return 0, syntaxError(value, "fraction not allowed in delay-seconds")
			case ',':
				return 0, syntaxError(value, "list not allowed: Retry-After is a single value")
			case ' ', '\t':
				return 0, syntaxError(value, "space inside delay-seconds")
			}
			return 0, syntaxError(value, "delay-seconds must be decimal digits only")
		}
		if !saturated {
			n = n*10 + uint64(c-'0')
			if n > maxSeconds {
				saturated = true
			}
		}
	}
	if saturated {
		return maxDelay, nil
	}
	return time.Duration(n) * time.Second, nil
}

var dayNames = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

var longDayNames = [7]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}

var monthNames = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// dateParts is an HTTP-date before validation; year is -1 for a two-digit
// RFC 850 year not yet placed in a century (yy holds it).
type dateParts struct {
	weekday             time.Weekday
	year, yy            int
	month               time.Month
	day, hour, min, sec int
}

// parseDate dispatches on the shape of v (value is the untrimmed input).
func parseDate(value, v string, received time.Time) (time.Time, error) {
	var p dateParts
	var reason string
	switch {
	case len(v) == len("Sun, 06 Nov 1994 08:49:37 GMT") && v[3] == ',':
		reason = p.imfFixdate(v)
	case len(v) == len("Sun Nov  6 08:49:37 1994") && v[3] == ' ':
		reason = p.asctime(v)
	default:
		reason = p.rfc850(v)
	}
	if reason != "" {
		return time.Time{}, syntaxError(value, reason)
	}
	if p.year < 0 {
		p.year = centuryFor(p, received)
	}
	if reason = p.validate(); reason != "" {
		return time.Time{}, syntaxError(value, reason)
	}
	t := time.Date(p.year, p.month, p.day, p.hour, p.min, min(p.sec, 59), 0, time.UTC)
	if t.Weekday() != p.weekday {
		return time.Time{}, syntaxError(value, "weekday does not match the date")
	}
	if p.sec == 60 {
		t = t.Add(time.Second) // leap second: second 0 of the next minute
	}
	return t, nil
}

// dayMonth reads the two-digit day and the three-letter month name of an
// IMF-fixdate or RFC 850 date (RFC 9110 §5.6.7) into p, or returns what is
// wrong.
func (p *dateParts) dayMonth(day, month string) string {
	var ok bool
	if p.day, ok = digits(day); !ok {
		return "day must be two digits"
	}
	m, ok := lookup(monthNames[:], month)
	if !ok {
		return "unknown month name"
	}
	p.month = time.Month(m + 1)
	return ""
}

// imfFixdate parses "Sun, 06 Nov 1994 08:49:37 GMT" (length already checked).
func (p *dateParts) imfFixdate(v string) string {
	wd, ok := lookup(dayNames[:], v[0:3])
	if !ok {
		return "unknown day name"
	}
	p.weekday = time.Weekday(wd)
	if v[4] != ' ' || v[7] != ' ' || v[11] != ' ' || v[16] != ' ' || v[25] != ' ' {
		return "not an HTTP-date"
	}
	if r := p.dayMonth(v[5:7], v[8:11]); r != "" {
		return r
	}
	if p.year, ok = digits(v[12:16]); !ok {
		return "year must be four digits"
	}
	if r := p.timeOfDay(v[17:25]); r != "" {
		return r
	}
	if v[26:29] != "GMT" {
		return `time zone must be "GMT"`
	}
	return ""
}

// asctime parses "Sun Nov  6 08:49:37 1994" (length already checked); the
// day is two digits or a space and one digit.
func (p *dateParts) asctime(v string) string {
	wd, ok := lookup(dayNames[:], v[0:3])
	if !ok {
		return "unknown day name"
	}
	p.weekday = time.Weekday(wd)
	if v[7] != ' ' || v[10] != ' ' || v[19] != ' ' {
		return "not an HTTP-date"
	}
	m, ok := lookup(monthNames[:], v[4:7])
	if !ok {
		return "unknown month name"
	}
	p.month = time.Month(m + 1)
	if v[8] == ' ' {
		p.day, ok = digits(v[9:10])
	} else {
		p.day, ok = digits(v[8:10])
	}
	if !ok {
		return "day must be two digits or a space and a digit"
	}
	if r := p.timeOfDay(v[11:19]); r != "" {
		return r
	}
	if p.year, ok = digits(v[20:24]); !ok {
		return "year must be four digits"
	}
	return ""
}

// rfc850 parses "Sunday, 06-Nov-94 08:49:37 GMT".
func (p *dateParts) rfc850(v string) string {
	comma := -1
	for i := 0; i < len(v) && i <= len("Wednesday"); i++ {
		if v[i] == ',' {
			comma = i
			break
		}
	}
	if comma < 0 {
		return "not an HTTP-date"
	}
	wd, ok := lookup(longDayNames[:], v[:comma])
	if !ok {
		return "not an HTTP-date"
	}
	p.weekday = time.Weekday(wd)
	r := v[comma+1:]
	if len(r) != len(" 06-Nov-94 08:49:37 GMT") || r[0] != ' ' || r[3] != '-' || r[7] != '-' || r[10] != ' ' || r[19] != ' ' {
		return "not an HTTP-date"
	}
	if rr := p.dayMonth(r[1:3], r[4:7]); rr != "" {
		return rr
	}
	if p.yy, ok = digits(r[8:10]); !ok {
		return "year must be two digits"
	}
	p.year = -1
	if rr := p.timeOfDay(r[11:19]); rr != "" {
		return rr
	}
	if r[20:23] != "GMT" {
		return `time zone must be "GMT"`
	}
	return ""
}

// timeOfDay parses "08:49:37".
func (p *dateParts) timeOfDay(v string) string {
	if v[2] != ':' || v[5] != ':' {
		return "time of day must be hh:mm:ss"
	}
	var ok1, ok2, ok3 bool
	p.hour, ok1 = digits(v[0:2])
	p.min, ok2 = digits(v[3:5])
	p.sec, ok3 = digits(v[6:8])
	if !ok1 || !ok2 || !ok3 {
		return "time of day must be hh:mm:ss"
	}
	return ""
}

// validate checks field ranges once the year is known.
func (p *dateParts) validate() string {
	switch {
	case p.hour > 23 || p.min > 59 || p.sec > 60:
		return "time of day out of range (00:00:00 to 23:59:60)"
	case p.day < 1 || p.day > daysIn(p.month, p.year):
		return "day out of range for its month"
	}
	return ""
}

// centuryFor resolves a two-digit RFC 850 year (RFC 9110 §5.6.7): among the
// years ending in p.yy, the one that puts the timestamp after received minus
// 50 years and no later than received plus 50 years.
func centuryFor(p dateParts, received time.Time) int {
	ry := received.UTC().Year()
	y := ry - mod(ry, 100) + p.yy
	if later(y, p, received.UTC().AddDate(50, 0, 0)) {
		return y - 100
	}
	if !later(y, p, received.UTC().AddDate(-50, 0, 0)) {
		return y + 100
	}
	return y
}

// later reports whether the timestamp p with year y is after ref (UTC),
// comparing fields so that an impossible date (29 Feb in a common year)
// is not normalised first.
func later(y int, p dateParts, ref time.Time) bool {
	a := [...]int{y, int(p.month), p.day, p.hour, p.min, p.sec}
	b := [...]int{ref.Year(), int(ref.Month()), ref.Day(), ref.Hour(), ref.Minute(), ref.Second()}
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return false // equal to the second, or earlier within it: not later
}

func mod(a, b int) int {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func daysIn(m time.Month, year int) int {
	switch m {
	case time.February:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}

func lookup(names []string, s string) (int, bool) {
	for i, n := range names {
		if n == s {
			return i, true
		}
	}
	return 0, false
}

// digits parses an all-digit string of at most 4 bytes.
func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}
