package retryafter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/retryafter"
)

func ExampleFromHeader_forms() {
	received := time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)
	for _, v := range []string{
		"120",                           // delay-seconds
		"007",                           // leading zeros are digits
		"Sun, 01 Mar 2026 00:00:30 GMT", // IMF-fixdate, 30 s after receipt
		"Sun, 06 Nov 1994 08:49:37 GMT", // in the past: no wait
		"Sun Mar  1 00:01:00 2026",      // asctime
		"99999999999999999999",          // saturates to MaxDelay
		"1.5",                           // not an integer
		"Mon, 01 Mar 2026 00:00:30 GMT", // 1 March 2026 is a Sunday
	} {
		d, _, err := retryafter.FromHeader(http.Header{"Retry-After": {v}}, received)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(d)
	}
	// Output:
	// 2m0s
	// 7s
	// 30s
	// 0s
	// 1m0s
	// 2562047h47m16.854775807s
	// error: retryafter: invalid Retry-After value "1.5": fraction not allowed in delay-seconds
	// error: retryafter: invalid Retry-After value "Mon, 01 Mar 2026 00:00:30 GMT": weekday does not match the date
}

func ExampleFromHeader() {
	received := time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("Retry-After", "Sun, 01 Mar 2026 00:00:05 GMT")
	d, present, err := retryafter.FromHeader(h, received)
	fmt.Println(d, present, err)
	d, present, err = retryafter.FromHeader(http.Header{}, received)
	fmt.Println(d, present, err)
	// Output:
	// 5s true <nil>
	// 0s false <nil>
}

// A GET answered 503 with "Retry-After: 0" is sent again; the caller only
// sees the final answer.
func ExampleTransport() {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "report 1")
	}))
	defer srv.Close()

	client := &http.Client{Transport: &retryafter.Transport{
		MaxAttempts: 3,
		MaxJitter:   100 * time.Millisecond,
	}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", hits.Load(), "requests")
	// Output:
	// 200 report 1 after 2 requests
}

// A server asking for two minutes while the caller has ten seconds left is
// not waited for: the transport fails at once.
func ExampleWaitTooLongError() {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start := time.Now()
	_, err := (&http.Client{Transport: &retryafter.Transport{}}).Do(req)
	var wt *retryafter.WaitTooLongError
	if errors.As(err, &wt) {
		fmt.Println("status", wt.StatusCode, "asked for", wt.Wait, "deadline-bound:", wt.Deadline)
	}
	fmt.Println(errors.As(err, &wt), hits.Load(), "request", time.Since(start) < 5*time.Second)
	// Output:
	// status 429 asked for 2m0s deadline-bound: true
	// true 1 request true
}
