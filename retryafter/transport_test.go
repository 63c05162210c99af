package retryafter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekey/ratekey/retryafter"
)

// fakeClock never sleeps: Sleep records the wait and moves the clock on.
// It starts at the real current time (whole seconds, for HTTP-dates) so that
// context deadlines derived from it are also in the future for the real
// net/http transport underneath.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
	// hook, if set, replaces the recording sleep's advance of the clock.
	hook func(ctx context.Context, d time.Duration) error
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Now().UTC().Truncate(time.Second)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	hook := c.hook
	c.mu.Unlock()
	if hook != nil {
		return hook(ctx, d)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// counting wraps a base transport, counting requests, response bodies
// closed and response bytes read.
type counting struct {
	base   http.RoundTripper
	mu     sync.Mutex
	reqs   []*http.Request
	closed atomic.Int32
	read   atomic.Int64
}

func newCounting() *counting { return &counting{base: http.DefaultTransport} }

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.mu.Unlock()
	resp, err := c.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, c: c}
	return resp, nil
}

func (c *counting) Requests() []*http.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*http.Request(nil), c.reqs...)
}

type countingBody struct {
	io.ReadCloser
	c    *counting
	once sync.Once
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.read.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error {
	b.once.Do(func() { b.c.closed.Add(1) })
	return b.ReadCloser.Close()
}

// script serves the responses of steps in order, repeating the last one.
type step struct {
	status     int
	retryAfter string // "" sends no Retry-After
	body       string
}

func scripted(t *testing.T, steps ...step) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(hits.Add(1))
		s := steps[min(n, len(steps))-1]
		if s.retryAfter != "" {
			w.Header().Set("Retry-After", s.retryAfter)
		}
		w.WriteHeader(s.status)
		body := s.body
		if body == "" {
			body = "attempt " + strconv.Itoa(n)
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func fixedJitter(j time.Duration) func(time.Duration) time.Duration {
	return func(time.Duration) time.Duration { return j }
}

// do sends req through tr with an http.Client and reads the whole body.
func do(t *testing.T, tr *retryafter.Transport, req *http.Request) (int, string, error) {
	t.Helper()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp.StatusCode, string(b), nil
}

func get(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestRetriesGETOn429AfterRetryAfter(t *testing.T) {
	srv, hits := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200, body: "ok"})
	clock, base := newFakeClock(), newCounting()
	tr := retryafter.WithClock(&retryafter.Transport{Base: base, MaxJitter: 500 * time.Millisecond, JitterFunc: fixedJitter(300 * time.Millisecond)}, clock)

	resp, err := tr.RoundTrip(get(t, context.Background(), srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if got := base.closed.Load(); got != 1 {
		t.Errorf("%d bodies closed before the caller closed the last; want the discarded one only", got)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" || hits.Load() != 2 {
		t.Fatalf("got %d %q after %d hits; want 200 \"ok\" after 2", resp.StatusCode, body, hits.Load())
	}
	if got, want := clock.Sleeps(), []time.Duration{2300 * time.Millisecond}; !slices.Equal(got, want) {
		t.Fatalf("waited %v; want %v (2 s from Retry-After, then 300 ms jitter)", got, want)
	}
}

func TestRandomJitterIsAddedAfterTheDelay(t *testing.T) {
	clock := newFakeClock()
	tr := retryafter.WithClock(&retryafter.Transport{MaxJitter: time.Second}, clock)
	seen := map[time.Duration]bool{}
	for range 20 {
		clock.mu.Lock()
		clock.sleeps = nil
		clock.mu.Unlock()
		srv, _ := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200})
		if code, _, err := do(t, tr, get(t, context.Background(), srv.URL)); err != nil || code != 200 {
			t.Fatalf("got %d, %v", code, err)
		}
		s := clock.Sleeps()
		if len(s) != 1 || s[0] < 2*time.Second || s[0] > 3*time.Second {
			t.Fatalf("waited %v; want one wait in [2s, 3s]", s)
		}
		seen[s[0]] = true
	}
	if len(seen) < 2 {
		t.Errorf("20 random jitters were all equal: %v", seen)
	}
}

func TestJitterNeverShortensTheWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter time.Duration
		want   time.Duration
	}{
		{"negative jitter clamped to zero", -5 * time.Second, 2 * time.Second},
		{"jitter above MaxJitter clamped to it", time.Hour, 2500 * time.Millisecond},
		{"in range", 100 * time.Millisecond, 2100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200})
			clock := newFakeClock()
			tr := retryafter.WithClock(&retryafter.Transport{MaxJitter: 500 * time.Millisecond, JitterFunc: fixedJitter(tc.jitter)}, clock)
			if code, _, err := do(t, tr, get(t, context.Background(), srv.URL)); err != nil || code != 200 {
				t.Fatalf("got %d, %v", code, err)
			}
			if got := clock.Sleeps(); !slices.Equal(got, []time.Duration{tc.want}) {
				t.Fatalf("waited %v; want [%v]", got, tc.want)
			}
		})
	}
	t.Run("no MaxJitter means no jitter", func(t *testing.T) {
		srv, _ := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200})
		clock := newFakeClock()
		tr := retryafter.WithClock(&retryafter.Transport{JitterFunc: fixedJitter(time.Hour)}, clock)
		if code, _, err := do(t, tr, get(t, context.Background(), srv.URL)); err != nil || code != 200 {
			t.Fatalf("got %d, %v", code, err)
		}
		if got := clock.Sleeps(); !slices.Equal(got, []time.Duration{2 * time.Second}) {
			t.Fatalf("waited %v; want [2s]", got)
		}
	})
}

func TestOnlyIdempotentMethodsAreRetried(t *testing.T) {
	for _, tc := range []struct {
		method  string
		methods []string
		retried bool
	}{
		{http.MethodGet, nil, true},
		{http.MethodHead, nil, true},
		{"", nil, true}, // net/http: an empty client method is GET
		{http.MethodPost, nil, false},
		{http.MethodPut, nil, false},
		{http.MethodDelete, nil, false},
		{http.MethodPatch, nil, false},
		{"get", nil, false}, // methods are case-sensitive (RFC 9110 §9.1)
		{http.MethodPut, []string{http.MethodPut}, true},
		{http.MethodGet, []string{http.MethodPut}, false},
	} {
		t.Run(fmt.Sprintf("%q %v", tc.method, tc.methods), func(t *testing.T) {
			srv, hits := scripted(t, step{status: 429, retryAfter: "1"}, step{status: 200})
			clock := newFakeClock()
			tr := retryafter.WithClock(&retryafter.Transport{Methods: tc.methods}, clock)
			req := get(t, context.Background(), srv.URL)
			req.Method = tc.method
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			wantHits, wantCode := int32(1), 429
			if tc.retried {
				wantHits, wantCode = 2, 200
			}
			if hits.Load() != wantHits || resp.StatusCode != wantCode {
				t.Fatalf("%d hits, status %d; want %d, %d", hits.Load(), resp.StatusCode, wantHits, wantCode)
			}
			if !tc.retried && len(clock.Sleeps()) != 0 {
				t.Fatalf("waited %v for a request it does not retry", clock.Sleeps())
			}
		})
	}
}

func TestReplaysBodyForConfiguredMethod(t *testing.T) {
	var hits atomic.Int32
	var bodies sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		bodies.Store(n, string(b))
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(204)
	}))
	defer srv.Close()
	clock := newFakeClock()
	tr := retryafter.WithClock(&retryafter.Transport{Methods: []string{http.MethodPut}}, clock)
	req, _ := http.NewRequest(http.MethodPut, srv.URL, bytes.NewReader([]byte("payload")))
	code, _, err := do(t, tr, req)
	if err != nil || code != 204 || hits.Load() != 2 {
		t.Fatalf("got %d, %v after %d hits; want 204 after 2", code, err, hits.Load())
	}
	for _, n := range []int32{1, 2} {
		if b, _ := bodies.Load(n); b != "payload" {
			t.Errorf("attempt %d sent body %q; want \"payload\"", n, b)
		}
	}
}

// opaqueReader hides its type so http.NewRequest cannot set GetBody.
type opaqueReader struct{ io.Reader }

func TestUnreplayableBodyIsNotRetried(t *testing.T) {
	srv, hits := scripted(t, step{status: 429, retryAfter: "1"}, step{status: 200})
	clock := newFakeClock()
	tr := retryafter.WithClock(&retryafter.Transport{}, clock)
	req, _ := http.NewRequest(http.MethodGet, srv.URL, opaqueReader{strings.NewReader("query")})
	if req.GetBody != nil {
		t.Fatal("test setup: GetBody is set")
	}
	code, _, err := do(t, tr, req)
	if err != nil || code != 429 || hits.Load() != 1 || len(clock.Sleeps()) != 0 {
		t.Fatalf("got %d, %v after %d hits and waits %v; want the 429, 1 hit, no wait", code, err, hits.Load(), clock.Sleeps())
	}
}

func TestGetBodyErrorIsReturned(t *testing.T) {
	srv, hits := scripted(t, step{status: 429, retryAfter: "1"}, step{status: 200})
	tr := retryafter.WithClock(&retryafter.Transport{}, newFakeClock())
	req, _ := http.NewRequest(http.MethodGet, srv.URL, strings.NewReader("q"))
	boom := errors.New("boom")
	req.GetBody = func() (io.ReadCloser, error) { return nil, boom }
	_, err := tr.RoundTrip(req)
	if !errors.Is(err, boom) || hits.Load() != 1 {
		t.Fatalf("got %v after %d hits; want boom after 1", err, hits.Load())
	}
}

func TestOnlyConfiguredStatusesAreRetried(t *testing.T) {
	for _, tc := range []struct {
		status   int
		statuses []int
		retried  bool
	}{
		{429, nil, true},
		{503, nil, true},
		{500, nil, false},
		{502, nil, false},
		{504, nil, false},
		{200, nil, false},
		{500, []int{500}, true},
		{429, []int{500}, false},
	} {
		t.Run(fmt.Sprintf("%d %v", tc.status, tc.statuses), func(t *testing.T) {
			srv, hits := scripted(t, step{status: tc.status, retryAfter: "1"}, step{status: 200})
			tr := retryafter.WithClock(&retryafter.Transport{Statuses: tc.statuses}, newFakeClock())
			code, _, err := do(t, tr, get(t, context.Background(), srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			wantHits, wantCode := int32(1), tc.status
			if tc.retried {
				wantHits, wantCode = 2, 200
			}
			if hits.Load() != wantHits || code != wantCode {
				t.Fatalf("%d hits, status %d; want %d, %d", hits.Load(), code, wantHits, wantCode)
			}
		})
	}
}

func TestAttemptsAreCapped(t *testing.T) {
	for _, tc := range []struct {
		maxAttempts int
		wantHits    int32
	}{{0, retryafter.DefaultMaxAttempts}, {-1, retryafter.DefaultMaxAttempts}, {1, 1}, {4, 4}} {
		t.Run(strconv.Itoa(tc.maxAttempts), func(t *testing.T) {
			srv, hits := scripted(t, step{status: 429, retryAfter: "1"})
			clock, base := newFakeClock(), newCounting()
			tr := retryafter.WithClock(&retryafter.Transport{Base: base, MaxAttempts: tc.maxAttempts}, clock)
			code, body, err := do(t, tr, get(t, context.Background(), srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			want := "attempt " + strconv.Itoa(int(tc.wantHits))
			if code != 429 || body != want || hits.Load() != tc.wantHits {
				t.Fatalf("got %d %q after %d hits; want the last 429 %q after %d", code, body, hits.Load(), want, tc.wantHits)
			}
			if n := len(clock.Sleeps()); n != int(tc.wantHits)-1 {
				t.Errorf("%d waits; want %d", n, tc.wantHits-1)
			}
			if got := base.closed.Load(); got != tc.wantHits {
				t.Errorf("%d bodies closed; want all %d (discarded ones by the transport, the last by the caller)", got, tc.wantHits)
			}
		})
	}
}

func TestDeadlineShorterThanRetryAfterFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter string
	}{
		{"longer", "10"},
		{"equal: the retry would land on the deadline", "5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, hits := scripted(t, step{status: 429, retryAfter: tc.retryAfter}, step{status: 200})
			clock, base := newFakeClock(), newCounting()
			tr := retryafter.WithClock(&retryafter.Transport{Base: base}, clock)
			ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(5*time.Second))
			defer cancel()
			_, _, err := do(t, tr, get(t, ctx, srv.URL))
			var wt *retryafter.WaitTooLongError
			if !errors.As(err, &wt) {
				t.Fatalf("got %v; want a *WaitTooLongError", err)
			}
			wantWait, _ := strconv.Atoi(tc.retryAfter)
			if wt.Wait != time.Duration(wantWait)*time.Second || wt.Remaining != 5*time.Second || !wt.Deadline || wt.StatusCode != 429 {
				t.Errorf("got %+v; want Wait %ds, Remaining 5s, Deadline, 429", *wt, wantWait)
			}
			if hits.Load() != 1 || len(clock.Sleeps()) != 0 || base.closed.Load() != 1 {
				t.Errorf("%d hits, waits %v, %d bodies closed; want 1 hit, no wait, 1 closed", hits.Load(), clock.Sleeps(), base.closed.Load())
			}
			if ctx.Err() != nil {
				t.Error("the context expired: the error was not immediate")
			}
		})
	}
	t.Run("shorter wait proceeds, jitter trimmed to stay short of the deadline", func(t *testing.T) {
		srv, hits := scripted(t, step{status: 429, retryAfter: "4"}, step{status: 200})
		clock := newFakeClock()
		tr := retryafter.WithClock(&retryafter.Transport{MaxJitter: 2 * time.Second, JitterFunc: fixedJitter(2 * time.Second)}, clock)
		ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(5*time.Second))
		defer cancel()
		code, _, err := do(t, tr, get(t, ctx, srv.URL))
		if err != nil || code != 200 || hits.Load() != 2 {
			t.Fatalf("got %d, %v after %d hits", code, err, hits.Load())
		}
		if got := clock.Sleeps(); !slices.Equal(got, []time.Duration{4500 * time.Millisecond}) {
			t.Fatalf("waited %v; want [4.5s]: the full 4 s, then half the 1 s left", got)
		}
	})
	t.Run("default backoff is bounded by the deadline too", func(t *testing.T) {
		srv, hits := scripted(t, step{status: 503}, step{status: 200})
		clock := newFakeClock()
		tr := retryafter.WithClock(&retryafter.Transport{Backoff: 3 * time.Second}, clock)
		ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(2*time.Second))
		defer cancel()
		_, _, err := do(t, tr, get(t, ctx, srv.URL))
		var wt *retryafter.WaitTooLongError
		if !errors.As(err, &wt) || wt.Wait != 3*time.Second || wt.StatusCode != 503 || hits.Load() != 1 {
			t.Fatalf("got %v after %d hits; want WaitTooLongError for the 3 s backoff", err, hits.Load())
		}
	})
}

func TestMaxWaitBoundsWaitsWithoutDeadline(t *testing.T) {
	srv, hits := scripted(t, step{status: 503, retryAfter: "3600"}, step{status: 200})
	clock := newFakeClock()
	_, _, err := do(t, retryafter.WithClock(&retryafter.Transport{}, clock), get(t, context.Background(), srv.URL))
	var wt *retryafter.WaitTooLongError
	if !errors.As(err, &wt) || wt.Wait != time.Hour || wt.Remaining != retryafter.DefaultMaxWait || wt.Deadline || wt.StatusCode != 503 {
		t.Fatalf("got %v; want a WaitTooLongError for 1h against MaxWait 1m", err)
	}
	const msg = "retryafter: 503 response asks to wait 1h0m0s, not within the transport's MaxWait of 1m0s"
	if wt.Error() != msg {
		t.Errorf("message %q; want %q", wt.Error(), msg)
	}
	if hits.Load() != 1 || len(clock.Sleeps()) != 0 {
		t.Fatalf("%d hits, waits %v", hits.Load(), clock.Sleeps())
	}

	// A longer MaxWait follows it; a MaxWait longer than the context's
	// remaining time defers to the deadline.
	srv, _ = scripted(t, step{status: 503, retryAfter: "3600"}, step{status: 200})
	clock = newFakeClock()
	if code, _, err := do(t, retryafter.WithClock(&retryafter.Transport{MaxWait: 2 * time.Hour}, clock), get(t, context.Background(), srv.URL)); err != nil || code != 200 {
		t.Fatalf("got %d, %v", code, err)
	}
	if got := clock.Sleeps(); !slices.Equal(got, []time.Duration{time.Hour}) {
		t.Fatalf("waited %v; want [1h]", got)
	}
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(30*time.Minute))
	defer cancel()
	srv, _ = scripted(t, step{status: 503, retryAfter: "3600"}, step{status: 200})
	_, _, err = do(t, retryafter.WithClock(&retryafter.Transport{MaxWait: 2 * time.Hour}, clock), get(t, ctx, srv.URL))
	if !errors.As(err, &wt) || !wt.Deadline || wt.Remaining != 30*time.Minute {
		t.Fatalf("got %v; want a deadline WaitTooLongError with 30m remaining", err)
	}
}

func TestCancelDuringWaitReturnsContextError(t *testing.T) {
	srv, hits := scripted(t, step{status: 429, retryAfter: "30"}, step{status: 200})
	clock, base := newFakeClock(), newCounting()
	started := make(chan struct{})
	clock.hook = func(ctx context.Context, d time.Duration) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, _, err := do(t, retryafter.WithClock(&retryafter.Transport{Base: base}, clock), get(t, ctx, srv.URL))
	if !errors.Is(err, context.Canceled) || hits.Load() != 1 || base.closed.Load() != 1 {
		t.Fatalf("got %v after %d hits, %d closed; want context.Canceled after 1 hit, body closed", err, hits.Load(), base.closed.Load())
	}
}

func TestCancelDuringWaitWithSystemClock(t *testing.T) {
	srv, hits := scripted(t, step{status: 429, retryAfter: "50"}, step{status: 200})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	_, _, err := do(t, &retryafter.Transport{}, get(t, ctx, srv.URL))
	if !errors.Is(err, context.Canceled) || hits.Load() != 1 {
		t.Fatalf("got %v after %d hits; want context.Canceled after 1", err, hits.Load())
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v to notice the cancellation", el)
	}
}

func TestZeroTransportRetriesImmediatelyOnRetryAfterZero(t *testing.T) {
	srv, hits := scripted(t, step{status: 429, retryAfter: "0"}, step{status: 200, body: "ok"})
	code, body, err := do(t, &retryafter.Transport{}, get(t, context.Background(), srv.URL))
	if err != nil || code != 200 || body != "ok" || hits.Load() != 2 {
		t.Fatalf("got %d %q, %v after %d hits", code, body, err, hits.Load())
	}
}

func TestHTTPDateIsCountedFromReceipt(t *testing.T) {
	clock := newFakeClock()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) > 1 {
			return
		}
		// The server asks for a retry 3 s after it answers; the answer then
		// takes 1 s to arrive, so the client has 2 s left to wait.
		w.Header().Set("Retry-After", clock.Now().Add(3*time.Second).Format(http.TimeFormat))
		clock.Advance(time.Second)
		w.WriteHeader(503)
	}))
	defer srv.Close()
	code, _, err := do(t, retryafter.WithClock(&retryafter.Transport{}, clock), get(t, context.Background(), srv.URL))
	if err != nil || code != 200 || hits.Load() != 2 {
		t.Fatalf("got %d, %v after %d hits", code, err, hits.Load())
	}
	if got := clock.Sleeps(); !slices.Equal(got, []time.Duration{2 * time.Second}) {
		t.Fatalf("waited %v; want [2s]", got)
	}
}

func TestTimeSpentAfterReceiptCountsTowardsTheWait(t *testing.T) {
	// Draining the discarded body takes 500 ms of clock time; the wait is
	// measured from receipt, so only 1.5 s of the 2 s remain to sleep.
	srv, _ := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200})
	clock := newFakeClock()
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && resp.StatusCode == 429 {
			resp.Body = slowBody{resp.Body, clock}
		}
		return resp, err
	})
	code, _, err := do(t, retryafter.WithClock(&retryafter.Transport{Base: base}, clock), get(t, context.Background(), srv.URL))
	if err != nil || code != 200 {
		t.Fatalf("got %d, %v", code, err)
	}
	if got := clock.Sleeps(); !slices.Equal(got, []time.Duration{1500 * time.Millisecond}) {
		t.Fatalf("waited %v; want [1.5s]", got)
	}
}

// slowBody advances the clock by 500 ms when closed.
type slowBody struct {
	io.ReadCloser
	clock *fakeClock
}

func (b slowBody) Close() error {
	b.clock.Advance(500 * time.Millisecond)
	return b.ReadCloser.Close()
}

func TestPastHTTPDateMeansNoWait(t *testing.T) {
	srv, hits := scripted(t, step{status: 503, retryAfter: "Sun, 06 Nov 1994 08:49:37 GMT"}, step{status: 200})
	clock := newFakeClock()
	code, _, err := do(t, retryafter.WithClock(&retryafter.Transport{}, clock), get(t, context.Background(), srv.URL))
	if err != nil || code != 200 || hits.Load() != 2 || len(clock.Sleeps()) != 0 {
		t.Fatalf("got %d, %v after %d hits, waits %v; want 200 after 2, no wait", code, err, hits.Load(), clock.Sleeps())
	}
}

func TestBackoffWithoutUsableRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter string
		backoff    time.Duration
		maxWait    time.Duration
		want       []time.Duration
	}{
		{"absent, default doubling", "", 0, 0, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"invalid is treated as absent", "1.5", 0, 0, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"custom backoff", "", 250 * time.Millisecond, 0, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}},
		{"capped at MaxWait", "", 40 * time.Second, 0, []time.Duration{40 * time.Second, time.Minute, time.Minute}},
		{"huge backoff does not overflow", "", retryafter.MaxDelay / 3, retryafter.MaxDelay, []time.Duration{retryafter.MaxDelay / 3, retryafter.MaxDelay / 3 * 2, retryafter.MaxDelay}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, hits := scripted(t, step{status: 503, retryAfter: tc.retryAfter})
			clock := newFakeClock()
			tr := retryafter.WithClock(&retryafter.Transport{MaxAttempts: 4, Backoff: tc.backoff, MaxWait: tc.maxWait}, clock)
			code, _, err := do(t, tr, get(t, context.Background(), srv.URL))
			if err != nil || code != 503 || hits.Load() != 4 {
				t.Fatalf("got %d, %v after %d hits", code, err, hits.Load())
			}
			if got := clock.Sleeps(); !slices.Equal(got, tc.want) {
				t.Fatalf("waited %v; want %v", got, tc.want)
			}
		})
	}
}

func TestDiscardedBodiesAreDrainedBoundedAndClosed(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	srv, hits := scripted(t, step{status: 429, retryAfter: "1", body: big}, step{status: 429, retryAfter: "1", body: big}, step{status: 200, body: "ok"})
	clock, base := newFakeClock(), newCounting()
	resp, err := (retryafter.WithClock(&retryafter.Transport{Base: base}, clock)).RoundTrip(get(t, context.Background(), srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 3 || base.closed.Load() != 2 {
		t.Fatalf("%d hits, %d bodies closed before the caller's; want 3 and 2", hits.Load(), base.closed.Load())
	}
	if n := base.read.Load(); n > 2*2<<10 {
		t.Errorf("read %d bytes of two discarded 1 MiB bodies; want at most 2 KiB each", n)
	}
	resp.Body.Close()
	if base.closed.Load() != 3 {
		t.Errorf("%d bodies closed; want 3", base.closed.Load())
	}
}

func TestEachAttemptSendsAClone(t *testing.T) {
	srv, _ := scripted(t, step{status: 429, retryAfter: "1"}, step{status: 429, retryAfter: "1"}, step{status: 200})
	base := newCounting()
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "v")
	req := get(t, ctx, srv.URL)
	req.Header.Set("X-Test", "1")
	if _, _, err := do(t, retryafter.WithClock(&retryafter.Transport{Base: base}, newFakeClock()), req); err != nil {
		t.Fatal(err)
	}
	reqs := base.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d attempts; want 3", len(reqs))
	}
	seen := map[*http.Request]bool{}
	for i, r := range reqs {
		if r == req || seen[r] {
			t.Errorf("attempt %d reuses a request value", i+1)
		}
		seen[r] = true
		if r.Header.Get("X-Test") != "1" || r.Context().Value(key{}) != "v" {
			t.Errorf("attempt %d lost the header or the context", i+1)
		}
		r.Header.Set("X-Test", "mutated") // must not reach the original or later attempts
	}
	if req.Header.Get("X-Test") != "1" || len(req.Header) != 1 {
		t.Errorf("original request changed: %v", req.Header)
	}
}

func TestBaseErrorIsReturnedUnretried(t *testing.T) {
	var calls atomic.Int32
	boom := errors.New("connection refused")
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { calls.Add(1); return nil, boom })
	_, err := (retryafter.WithClock(&retryafter.Transport{Base: base}, newFakeClock())).RoundTrip(get(t, context.Background(), "http://example.invalid/"))
	if !errors.Is(err, boom) || calls.Load() != 1 {
		t.Fatalf("got %v after %d calls", err, calls.Load())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestConcurrentUse(t *testing.T) {
	// Each client's first request is limited for 1 s; the shared Transport
	// and fake clock must hold up under the race detector.
	var first sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, seen := first.LoadOrStore(r.Header.Get("X-Client"), true); !seen {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	clock := newFakeClock()
	// Record waits without moving the shared clock: one client's sleep
	// advancing it would (rightly) shorten the others' remaining waits.
	clock.hook = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
	tr := retryafter.WithClock(&retryafter.Transport{MaxJitter: 100 * time.Millisecond}, clock)
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			req := get(t, context.Background(), srv.URL)
			req.Header.Set("X-Client", strconv.Itoa(i))
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("client %d: status %d", i, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	s := clock.Sleeps()
	if len(s) != 16 {
		t.Fatalf("%d waits; want 16", len(s))
	}
	for _, d := range s {
		if d < time.Second || d > 1100*time.Millisecond {
			t.Errorf("wait %v outside [1s, 1.1s]", d)
		}
	}
	tr.CloseIdleConnections()
}

func TestSystemClockSleep(t *testing.T) {
	var c retryafter.SystemClock
	start := time.Now()
	if err := c.Sleep(context.Background(), 10*time.Millisecond); err != nil || time.Since(start) < 10*time.Millisecond {
		t.Fatalf("Sleep(10ms) = %v after %v", err, time.Since(start))
	}
	if err := c.Sleep(context.Background(), -time.Second); err != nil {
		t.Fatalf("Sleep(-1s) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context = %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	start = time.Now()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Fatalf("Sleep(1h) with a 10ms timeout = %v after %v", err, time.Since(start))
	}
	if d := time.Until(c.Now()); d > 0 || d < -time.Second {
		t.Fatalf("Now is %v away from time.Now", d)
	}
}
