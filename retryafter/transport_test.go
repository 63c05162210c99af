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
	"testing/synctest"
	"time"

	"github.com/ratekey/ratekey/retryafter"
)

// The tests that wait run in testing/synctest bubbles: the Transport's
// timer runs on the bubble's clock, which jumps ahead whenever every
// goroutine of the bubble is blocked, so a 1 h Retry-After is waited
// exactly and at once. The servers are in-process (server below): a
// socket is not a wait the bubble can see through.

// server is an in-process HTTP server: a RoundTripper that hands each
// request to its handler in the calling goroutine. It logs, on the
// bubble's clock, when each request arrived and when its response was
// returned, so that the waits between attempts can be read back.
type server struct {
	URL  string
	h    http.Handler
	mu   sync.Mutex
	sent []time.Time // when each request arrived
	back []time.Time // when each response was returned
}

func newServer(h http.Handler) *server { return &server{URL: "http://api.test/r", h: h} }

func (s *server) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	at := time.Now()
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, r)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	resp := rec.Result()
	resp.Request = r
	s.mu.Lock()
	s.sent, s.back = append(s.sent, at), append(s.back, time.Now())
	s.mu.Unlock()
	return resp, nil
}

// waits returns, for each retry, the time from the previous response to
// the retry's request: the wait the Transport observed.
func (s *server) waits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w []time.Duration
	for i := 1; i < len(s.sent); i++ {
		w = append(w, s.sent[i].Sub(s.back[i-1]))
	}
	return w
}

// sentAt returns when request n (from 0) arrived.
func (s *server) sentAt(n int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[n]
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

func newCounting(base http.RoundTripper) *counting { return &counting{base: base} }

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

func scripted(t *testing.T, steps ...step) (*server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	synctest.Test(t, func(t *testing.T) {
		srv, hits := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200, body: "ok"})
		base := newCounting(srv)
		tr := &retryafter.Transport{Base: base, MaxJitter: 500 * time.Millisecond, JitterFunc: fixedJitter(300 * time.Millisecond)}

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
		if got, want := srv.waits(), []time.Duration{2300 * time.Millisecond}; !slices.Equal(got, want) {
			t.Fatalf("waited %v; want %v (2 s from Retry-After, then 300 ms jitter)", got, want)
		}
	})
}

func TestRandomJitterIsAddedAfterTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		seen := map[time.Duration]bool{}
		for range 20 {
			srv, _ := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200})
			tr := &retryafter.Transport{Base: srv, MaxJitter: time.Second}
			if code, _, err := do(t, tr, get(t, context.Background(), srv.URL)); err != nil || code != 200 {
				t.Fatalf("got %d, %v", code, err)
			}
			s := srv.waits()
			if len(s) != 1 || s[0] < 2*time.Second || s[0] > 3*time.Second {
				t.Fatalf("waited %v; want one wait in [2s, 3s]", s)
			}
			seen[s[0]] = true
		}
		if len(seen) < 2 {
			t.Errorf("20 random jitters were all equal: %v", seen)
		}
	})
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
			synctest.Test(t, func(t *testing.T) {
				srv, _ := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200})
				tr := &retryafter.Transport{Base: srv, MaxJitter: 500 * time.Millisecond, JitterFunc: fixedJitter(tc.jitter)}
				if code, _, err := do(t, tr, get(t, context.Background(), srv.URL)); err != nil || code != 200 {
					t.Fatalf("got %d, %v", code, err)
				}
				if got := srv.waits(); !slices.Equal(got, []time.Duration{tc.want}) {
					t.Fatalf("waited %v; want [%v]", got, tc.want)
				}
			})
		})
	}
	t.Run("no MaxJitter means no jitter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, _ := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200})
			tr := &retryafter.Transport{Base: srv, JitterFunc: fixedJitter(time.Hour)}
			if code, _, err := do(t, tr, get(t, context.Background(), srv.URL)); err != nil || code != 200 {
				t.Fatalf("got %d, %v", code, err)
			}
			if got := srv.waits(); !slices.Equal(got, []time.Duration{2 * time.Second}) {
				t.Fatalf("waited %v; want [2s]", got)
			}
		})
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
			synctest.Test(t, func(t *testing.T) {
				srv, hits := scripted(t, step{status: 429, retryAfter: "1"}, step{status: 200})
				tr := &retryafter.Transport{Base: srv, Methods: tc.methods}
				req := get(t, context.Background(), srv.URL)
				req.Method = tc.method
				start := time.Now()
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
				if el := time.Since(start); !tc.retried && el != 0 {
					t.Fatalf("waited %v for a request it does not retry", el)
				}
			})
		})
	}
}

func TestReplaysBodyForConfiguredMethod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hits atomic.Int32
		var bodies sync.Map
		srv := newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		tr := &retryafter.Transport{Base: srv, Methods: []string{http.MethodPut}}
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
	})
}

// opaqueReader hides its type so http.NewRequest cannot set GetBody.
type opaqueReader struct{ io.Reader }

func TestUnreplayableBodyIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, hits := scripted(t, step{status: 429, retryAfter: "1"}, step{status: 200})
		tr := &retryafter.Transport{Base: srv}
		req, _ := http.NewRequest(http.MethodGet, srv.URL, opaqueReader{strings.NewReader("query")})
		if req.GetBody != nil {
			t.Fatal("test setup: GetBody is set")
		}
		start := time.Now()
		code, _, err := do(t, tr, req)
		if el := time.Since(start); err != nil || code != 429 || hits.Load() != 1 || el != 0 {
			t.Fatalf("got %d, %v after %d hits and a wait of %v; want the 429, 1 hit, no wait", code, err, hits.Load(), el)
		}
	})
}

func TestGetBodyErrorIsReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, hits := scripted(t, step{status: 429, retryAfter: "1"}, step{status: 200})
		tr := &retryafter.Transport{Base: srv}
		req, _ := http.NewRequest(http.MethodGet, srv.URL, strings.NewReader("q"))
		boom := errors.New("boom")
		req.GetBody = func() (io.ReadCloser, error) { return nil, boom }
		_, err := tr.RoundTrip(req)
		if !errors.Is(err, boom) || hits.Load() != 1 {
			t.Fatalf("got %v after %d hits; want boom after 1", err, hits.Load())
		}
	})
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
			synctest.Test(t, func(t *testing.T) {
				srv, hits := scripted(t, step{status: tc.status, retryAfter: "1"}, step{status: 200})
				tr := &retryafter.Transport{Base: srv, Statuses: tc.statuses}
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
		})
	}
}

func TestAttemptsAreCapped(t *testing.T) {
	for _, tc := range []struct {
		maxAttempts int
		wantHits    int32
	}{{0, retryafter.DefaultMaxAttempts}, {-1, retryafter.DefaultMaxAttempts}, {1, 1}, {4, 4}} {
		t.Run(strconv.Itoa(tc.maxAttempts), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, hits := scripted(t, step{status: 429, retryAfter: "1"})
				base := newCounting(srv)
				tr := &retryafter.Transport{Base: base, MaxAttempts: tc.maxAttempts}
				code, body, err := do(t, tr, get(t, context.Background(), srv.URL))
				if err != nil {
					t.Fatal(err)
				}
				want := "attempt " + strconv.Itoa(int(tc.wantHits))
				if code != 429 || body != want || hits.Load() != tc.wantHits {
					t.Fatalf("got %d %q after %d hits; want the last 429 %q after %d", code, body, hits.Load(), want, tc.wantHits)
				}
				if n := len(srv.waits()); n != int(tc.wantHits)-1 {
					t.Errorf("%d waits; want %d", n, tc.wantHits-1)
				}
				if got := base.closed.Load(); got != tc.wantHits {
					t.Errorf("%d bodies closed; want all %d (discarded ones by the transport, the last by the caller)", got, tc.wantHits)
				}
			})
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
			synctest.Test(t, func(t *testing.T) {
				srv, hits := scripted(t, step{status: 429, retryAfter: tc.retryAfter}, step{status: 200})
				base := newCounting(srv)
				tr := &retryafter.Transport{Base: base}
				start := time.Now()
				ctx, cancel := context.WithDeadline(context.Background(), start.Add(5*time.Second))
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
				if el := time.Since(start); hits.Load() != 1 || el != 0 || base.closed.Load() != 1 {
					t.Errorf("%d hits, waited %v, %d bodies closed; want 1 hit, no wait, 1 closed", hits.Load(), el, base.closed.Load())
				}
				if ctx.Err() != nil {
					t.Error("the context expired: the error was not immediate")
				}
			})
		})
	}
	t.Run("shorter wait proceeds, jitter trimmed to stay short of the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, hits := scripted(t, step{status: 429, retryAfter: "4"}, step{status: 200})
			tr := &retryafter.Transport{Base: srv, MaxJitter: 2 * time.Second, JitterFunc: fixedJitter(2 * time.Second)}
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(5*time.Second))
			defer cancel()
			code, _, err := do(t, tr, get(t, ctx, srv.URL))
			if err != nil || code != 200 || hits.Load() != 2 {
				t.Fatalf("got %d, %v after %d hits", code, err, hits.Load())
			}
			if got := srv.waits(); !slices.Equal(got, []time.Duration{4500 * time.Millisecond}) {
				t.Fatalf("waited %v; want [4.5s]: the full 4 s, then half the 1 s left", got)
			}
		})
	})
	t.Run("default backoff is bounded by the deadline too", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, hits := scripted(t, step{status: 503}, step{status: 200})
			tr := &retryafter.Transport{Base: srv, Backoff: 3 * time.Second}
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(2*time.Second))
			defer cancel()
			_, _, err := do(t, tr, get(t, ctx, srv.URL))
			var wt *retryafter.WaitTooLongError
			if !errors.As(err, &wt) || wt.Wait != 3*time.Second || wt.StatusCode != 503 || hits.Load() != 1 {
				t.Fatalf("got %v after %d hits; want WaitTooLongError for the 3 s backoff", err, hits.Load())
			}
		})
	})
}

func TestMaxWaitBoundsWaitsWithoutDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, hits := scripted(t, step{status: 503, retryAfter: "3600"}, step{status: 200})
		start := time.Now()
		_, _, err := do(t, &retryafter.Transport{Base: srv}, get(t, context.Background(), srv.URL))
		var wt *retryafter.WaitTooLongError
		if !errors.As(err, &wt) || wt.Wait != time.Hour || wt.Remaining != retryafter.DefaultMaxWait || wt.Deadline || wt.StatusCode != 503 {
			t.Fatalf("got %v; want a WaitTooLongError for 1h against MaxWait 1m", err)
		}
		const msg = "retryafter: 503 response asks to wait 1h0m0s, not within the transport's MaxWait of 1m0s"
		if wt.Error() != msg {
			t.Errorf("message %q; want %q", wt.Error(), msg)
		}
		if el := time.Since(start); hits.Load() != 1 || el != 0 {
			t.Fatalf("%d hits, waited %v", hits.Load(), el)
		}

		// A longer MaxWait follows it; a MaxWait longer than the context's
		// remaining time defers to the deadline.
		srv, _ = scripted(t, step{status: 503, retryAfter: "3600"}, step{status: 200})
		if code, _, err := do(t, &retryafter.Transport{Base: srv, MaxWait: 2 * time.Hour}, get(t, context.Background(), srv.URL)); err != nil || code != 200 {
			t.Fatalf("got %d, %v", code, err)
		}
		if got := srv.waits(); !slices.Equal(got, []time.Duration{time.Hour}) {
			t.Fatalf("waited %v; want [1h]", got)
		}
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(30*time.Minute))
		defer cancel()
		srv, _ = scripted(t, step{status: 503, retryAfter: "3600"}, step{status: 200})
		_, _, err = do(t, &retryafter.Transport{Base: srv, MaxWait: 2 * time.Hour}, get(t, ctx, srv.URL))
		if !errors.As(err, &wt) || !wt.Deadline || wt.Remaining != 30*time.Minute {
			t.Fatalf("got %v; want a deadline WaitTooLongError with 30m remaining", err)
		}
	})
}

func TestCancelDuringWaitReturnsContextError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, hits := scripted(t, step{status: 429, retryAfter: "30"}, step{status: 200})
		base := newCounting(srv)
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		go func() { time.Sleep(10 * time.Second); cancel() }() // 10 s into the 30 s wait
		_, _, err := do(t, &retryafter.Transport{Base: base}, get(t, ctx, srv.URL))
		if !errors.Is(err, context.Canceled) || hits.Load() != 1 || base.closed.Load() != 1 {
			t.Fatalf("got %v after %d hits, %d closed; want context.Canceled after 1 hit, body closed", err, hits.Load(), base.closed.Load())
		}
		if el := time.Since(start); el != 10*time.Second {
			t.Fatalf("returned %v after the start; want 10s, as the context was cancelled", el)
		}
	})
}

// TestContextDoneBeforeTheWait: a context that ends before the wait
// starts (cancelled as the 429 arrives, or past its deadline once the
// discarded body is drained) ends RoundTrip with its error at once.
func TestContextDoneBeforeTheWait(t *testing.T) {
	t.Run("cancelled with the response", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, hits := scripted(t, step{status: 429, retryAfter: "1"}, step{status: 200})
			ctx, cancel := context.WithCancel(context.Background())
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := srv.RoundTrip(r)
				cancel()
				return resp, err
			})
			start := time.Now()
			_, _, err := do(t, &retryafter.Transport{Base: base}, get(t, ctx, srv.URL))
			if el := time.Since(start); !errors.Is(err, context.Canceled) || hits.Load() != 1 || el != 0 {
				t.Fatalf("got %v after %d hits and %v; want context.Canceled at once after 1 hit", err, hits.Load(), el)
			}
		})
	})
	t.Run("deadline passed while draining", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, hits := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200})
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := srv.RoundTrip(r)
				if err == nil && resp.StatusCode == 429 {
					resp.Body = slowBody{resp.Body, 6 * time.Second, new(time.Time)}
				}
				return resp, err
			})
			start := time.Now()
			ctx, cancel := context.WithDeadline(context.Background(), start.Add(5*time.Second))
			defer cancel()
			_, _, err := do(t, &retryafter.Transport{Base: base}, get(t, ctx, srv.URL))
			if el := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || hits.Load() != 1 || el != 6*time.Second {
				t.Fatalf("got %v after %d hits and %v; want context.DeadlineExceeded once the 6 s drain ended, 1 hit", err, hits.Load(), el)
			}
		})
	})
}

// TestZeroTransportRetriesImmediatelyOnRetryAfterZero runs outside a
// bubble, through a real loopback server and http.DefaultTransport: the
// zero Transport as a program uses it.
func TestZeroTransportRetriesImmediatelyOnRetryAfterZero(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(429)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	code, body, err := do(t, &retryafter.Transport{}, get(t, context.Background(), srv.URL))
	if err != nil || code != 200 || body != "ok" || hits.Load() != 2 {
		t.Fatalf("got %d %q, %v after %d hits", code, body, err, hits.Load())
	}
}

func TestHTTPDateIsCountedFromReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hits atomic.Int32
		srv := newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hits.Add(1) > 1 {
				return
			}
			// The server asks for a retry 3 s after it answers; the answer then
			// takes 1 s to arrive, so the client has 2 s left to wait. (The
			// bubble's clock starts on a whole second, as HTTP-dates count.)
			w.Header().Set("Retry-After", time.Now().Add(3*time.Second).Format(http.TimeFormat))
			time.Sleep(time.Second)
			w.WriteHeader(503)
		}))
		code, _, err := do(t, &retryafter.Transport{Base: srv}, get(t, context.Background(), srv.URL))
		if err != nil || code != 200 || hits.Load() != 2 {
			t.Fatalf("got %d, %v after %d hits", code, err, hits.Load())
		}
		if got := srv.waits(); !slices.Equal(got, []time.Duration{2 * time.Second}) {
			t.Fatalf("waited %v; want [2s]", got)
		}
	})
}

func TestTimeSpentAfterReceiptCountsTowardsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Draining the discarded body takes 500 ms; the wait is measured
		// from receipt, so only 1.5 s of the 2 s remain to sleep.
		srv, _ := scripted(t, step{status: 429, retryAfter: "2"}, step{status: 200})
		var drained time.Time
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := srv.RoundTrip(r)
			if err == nil && resp.StatusCode == 429 {
				resp.Body = slowBody{resp.Body, 500 * time.Millisecond, &drained}
			}
			return resp, err
		})
		code, _, err := do(t, &retryafter.Transport{Base: base}, get(t, context.Background(), srv.URL))
		if err != nil || code != 200 {
			t.Fatalf("got %d, %v", code, err)
		}
		if got := srv.sentAt(1).Sub(drained); got != 1500*time.Millisecond {
			t.Fatalf("waited %v after the drain; want 1.5s", got)
		}
		if got := srv.waits(); !slices.Equal(got, []time.Duration{2 * time.Second}) {
			t.Fatalf("retried %v after receipt; want [2s]", got)
		}
	})
}

// slowBody takes d of the bubble's clock to close, and records when the
// close ended in *closed.
type slowBody struct {
	io.ReadCloser
	d      time.Duration
	closed *time.Time
}

func (b slowBody) Close() error {
	time.Sleep(b.d)
	*b.closed = time.Now()
	return b.ReadCloser.Close()
}

func TestPastHTTPDateMeansNoWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, hits := scripted(t, step{status: 503, retryAfter: "Sun, 06 Nov 1994 08:49:37 GMT"}, step{status: 200})
		code, _, err := do(t, &retryafter.Transport{Base: srv}, get(t, context.Background(), srv.URL))
		if w := srv.waits(); err != nil || code != 200 || hits.Load() != 2 || !slices.Equal(w, []time.Duration{0}) {
			t.Fatalf("got %d, %v after %d hits, waits %v; want 200 after 2, no wait", code, err, hits.Load(), w)
		}
	})
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, hits := scripted(t, step{status: 503, retryAfter: tc.retryAfter})
				tr := &retryafter.Transport{Base: srv, MaxAttempts: 4, Backoff: tc.backoff, MaxWait: tc.maxWait}
				code, _, err := do(t, tr, get(t, context.Background(), srv.URL))
				if err != nil || code != 503 || hits.Load() != 4 {
					t.Fatalf("got %d, %v after %d hits", code, err, hits.Load())
				}
				if got := srv.waits(); !slices.Equal(got, tc.want) {
					t.Fatalf("waited %v; want %v", got, tc.want)
				}
			})
		})
	}
}

// TestHugeBackoffDoesNotOverflow asks the backoff schedule directly: its
// waits add up to more than a bubble's clock can pass (which is an int64
// of nanoseconds too), so a Transport cannot be run through them.
func TestHugeBackoffDoesNotOverflow(t *testing.T) {
	var got []time.Duration
	for attempt := 1; attempt <= 3; attempt++ {
		got = append(got, retryafter.Backoff(retryafter.MaxDelay/3, attempt, retryafter.MaxDelay))
	}
	if want := []time.Duration{retryafter.MaxDelay / 3, retryafter.MaxDelay / 3 * 2, retryafter.MaxDelay}; !slices.Equal(got, want) {
		t.Fatalf("waits %v; want %v", got, want)
	}
}

func TestDiscardedBodiesAreDrainedBoundedAndClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		big := strings.Repeat("x", 1<<20)
		srv, hits := scripted(t, step{status: 429, retryAfter: "1", body: big}, step{status: 429, retryAfter: "1", body: big}, step{status: 200, body: "ok"})
		base := newCounting(srv)
		resp, err := (&retryafter.Transport{Base: base}).RoundTrip(get(t, context.Background(), srv.URL))
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
	})
}

func TestEachAttemptSendsAClone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := scripted(t, step{status: 429, retryAfter: "1"}, step{status: 429, retryAfter: "1"}, step{status: 200})
		base := newCounting(srv)
		type key struct{}
		ctx := context.WithValue(context.Background(), key{}, "v")
		req := get(t, ctx, srv.URL)
		req.Header.Set("X-Test", "1")
		if _, _, err := do(t, &retryafter.Transport{Base: base}, req); err != nil {
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
	})
}

func TestBaseErrorIsReturnedUnretried(t *testing.T) {
	var calls atomic.Int32
	boom := errors.New("connection refused")
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { calls.Add(1); return nil, boom })
	_, err := (&retryafter.Transport{Base: base}).RoundTrip(get(t, context.Background(), "http://example.invalid/"))
	if !errors.Is(err, boom) || calls.Load() != 1 {
		t.Fatalf("got %v after %d calls", err, calls.Load())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Each client's first request is limited for 1 s; the shared
		// Transport must hold up under the race detector, and each client
		// waits its own 1 s plus jitter.
		var first sync.Map // client → when its 429 was sent
		var mu sync.Mutex
		var waits []time.Duration
		srv := newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if at, seen := first.LoadOrStore(r.Header.Get("X-Client"), time.Now()); seen {
				mu.Lock()
				waits = append(waits, time.Since(at.(time.Time)))
				mu.Unlock()
				io.WriteString(w, "ok")
				return
			}
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
		}))
		tr := &retryafter.Transport{Base: srv, MaxJitter: 100 * time.Millisecond}
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
		if len(waits) != 16 {
			t.Fatalf("%d waits; want 16", len(waits))
		}
		for _, d := range waits {
			if d < time.Second || d > 1100*time.Millisecond {
				t.Errorf("wait %v outside [1s, 1.1s]", d)
			}
		}
	})
}
