package middleware_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// adaptiveMetrics keeps the last Adaptive report per policy and
// operation, and the in-flight gauge.
type adaptiveMetrics struct {
	mu       sync.Mutex
	last     map[string]adaptiveReport
	inFlight int
}

type adaptiveReport struct {
	limit             int64
	baseline, latency time.Duration
}

func (m *adaptiveMetrics) Adaptive(policy, op string, limit int64, baseline, latency time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last[policy+" "+op] = adaptiveReport{limit, baseline, latency}
}
func (m *adaptiveMetrics) InFlight(_ string, d int) {
	m.mu.Lock()
	m.inFlight += d
	m.mu.Unlock()
}
func (*adaptiveMetrics) Decision(string, string)                        {}
func (*adaptiveMetrics) StoreCall(string, string, time.Duration, error) {}
func (*adaptiveMetrics) FailOpen(string)                                {}
func (*adaptiveMetrics) JWKSFetch(string, error)                        {}
func (*adaptiveMetrics) Settled(string, int64, bool)                    {}
func (*adaptiveMetrics) Fallback(string)                                {}
func (*adaptiveMetrics) CachedRejection(string)                         {}
func (*adaptiveMetrics) ProxyAnomaly(string)                            {}
func (*adaptiveMetrics) AuthFailure(string)                             {}
func (*adaptiveMetrics) Queued(string)                                  {}
func (*adaptiveMetrics) Dequeued(string, time.Duration, bool)           {}

// lockedBuffer is a bytes.Buffer for a logger written from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAdaptiveLimitFollowsLatency drives the whole Handler in a
// testing/synctest bubble (the bubble's clock: no real waiting): GET
// /work/{n} runs on a resource of 4 workers (first come, first served), 20
// ms each, and 16 clients call it in a loop (a refused one waits 5 ms)
// for 10 s; at 5 s, two workers go. The cap keyed on operation starts at
// 1, doubles, and settles where latency stays within 1.2 × its baseline
// (idle workers between a client's retries keep it a little above the
// workers): from 2 s on, every limit reported is 4 to 8; from 2 s after
// the loss, 2 to 4. Its baseline is 20 ms; the metrics got the policy and
// operation, the log says the limit moved (by more than the factor 1.5
// since its last line: from 1 to 2 at Info, and down at Warn), and every
// slot is given back.
func TestAdaptiveLimitFollowsLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		workers := make(chan struct{}, 4)
		logs := &lockedBuffer{}
		m := &adaptiveMetrics{last: map[string]adaptiveReport{}}
		r := chi.NewRouter()
		rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
			Operation: middleware.RouteOperation(r), Metrics: m, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
			Policies: []policy.Policy{{Name: "protect", Key: []limitkey.Dimension{limitkey.DimOperation},
				Limit: limiter.Limit{MaxInFlightCeiling: 64}, LimitLogFactor: 1.5}}})
		if err != nil {
			t.Fatal(err)
		}
		r.Use(rl.Handler)
		r.Get("/work/{n}", func(http.ResponseWriter, *http.Request) {
			workers <- struct{}{}
			time.Sleep(20 * time.Millisecond)
			<-workers
		})
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { // at 5 s, two of the 4 workers go (a blocker holds them) until the end
			time.Sleep(5 * time.Second)
			workers <- struct{}{}
			workers <- struct{}{}
			time.Sleep(5 * time.Second)
			<-workers
			<-workers
		})
		var mu sync.Mutex
		var four, two []int64 // the limits reported from 2 s on with 4 workers, and with 2
		for range 16 {
			wg.Go(func() {
				for time.Since(start) < 10*time.Second {
					w := httptest.NewRecorder()
					r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/work/1", nil))
					if w.Code != http.StatusOK {
						time.Sleep(5 * time.Millisecond)
					}
					m.mu.Lock()
					l := m.last["protect GET /work/{n}"].limit
					m.mu.Unlock()
					mu.Lock()
					switch since := time.Since(start); {
					case since >= 2*time.Second && since < 5*time.Second:
						four = append(four, l)
					case since >= 7*time.Second:
						two = append(two, l)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, c := range []struct {
			workers int
			limits  []int64
			lo, hi  int64
		}{{4, four, 4, 8}, {2, two, 2, 4}} {
			lo, hi := slices.Min(c.limits), slices.Max(c.limits)
			if lo < c.lo || hi > c.hi {
				t.Errorf("with %d workers, limits %d..%d reported, want within %d..%d", c.workers, lo, hi, c.lo, c.hi)
			}
		}
		rep := m.last["protect GET /work/{n}"]
		if rep.baseline < 20*time.Millisecond || rep.baseline > 21*time.Millisecond {
			t.Errorf("baseline %v, want 20ms (the work, without a queue)", rep.baseline)
		}
		for _, want := range []string{
			`"level":"INFO","msg":"ratekey adaptive limit moved","policy":"protect","limit":2,"previous":1,`,
			`"level":"WARN","msg":"ratekey adaptive limit moved","policy":"protect",`,
		} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("no log line %s in:\n%.3000s", want, logs.String())
			}
		}
		if m.inFlight != 0 {
			t.Errorf("in-flight gauge %d after every request ended, want 0", m.inFlight)
		}
	})
}

// TestAdaptiveIgnoresClientErrors: requests the handler answers with a
// client error at once (400: bad input found after admission) offer no
// latency to the cap, so they cannot drag its baseline, and with it the
// limit, down for everyone (in the bubble their latency is 0). The same
// resource as TestAdaptiveLimitFollowsLatency (4 workers, 20 ms) with 16
// clients doing work and 16 sending bad input (16 000 requests a second,
// answered in 1 µs), for 4 s: the baseline stays the work's 20 ms and
// every limit reported from 2 s on is 4 to 8 (4 to 7 in 12 runs).
// Counting the 400s, 12 runs of 12 failed: the baseline fell to 1 µs and
// the limit to 1-3, or rose to the ceiling of 64.
func TestAdaptiveIgnoresClientErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		workers := make(chan struct{}, 4)
		m := &adaptiveMetrics{last: map[string]adaptiveReport{}}
		r := chi.NewRouter()
		rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}),
			Operation: middleware.RouteOperation(r), Metrics: m, Logger: slog.New(slog.DiscardHandler),
			Policies: []policy.Policy{{Name: "protect", Key: []limitkey.Dimension{},
				Limit: limiter.Limit{MaxInFlightCeiling: 64}}}})
		if err != nil {
			t.Fatal(err)
		}
		r.Use(rl.Handler)
		r.Get("/work/{n}", func(w http.ResponseWriter, r *http.Request) {
			if chi.URLParam(r, "n") != "1" {
				time.Sleep(time.Microsecond) // the input check
				http.Error(w, "units must be a number", http.StatusBadRequest)
				return
			}
			workers <- struct{}{}
			time.Sleep(20 * time.Millisecond)
			<-workers
		})
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var limits []int64
		for i := range 32 {
			path := "/work/1"
			if i%2 == 1 {
				path = "/work/x"
			}
			wg.Go(func() {
				for time.Since(start) < 4*time.Second {
					w := httptest.NewRecorder()
					r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
					switch w.Code {
					case http.StatusServiceUnavailable:
						time.Sleep(5 * time.Millisecond)
					case http.StatusBadRequest:
						time.Sleep(time.Millisecond) // 16 000 bad requests a second
					}
					if time.Since(start) >= 2*time.Second {
						m.mu.Lock()
						l := m.last["protect "].limit
						m.mu.Unlock()
						mu.Lock()
						limits = append(limits, l)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if lo, hi := slices.Min(limits), slices.Max(limits); lo < 4 || hi > 8 {
			t.Errorf("limits %d..%d reported from 2 s on, want within 4..8", lo, hi)
		}
		if rep := m.last["protect "]; rep.baseline < 20*time.Millisecond || rep.baseline > 21*time.Millisecond {
			t.Errorf("baseline %v, want 20ms (the work, without a queue)", rep.baseline)
		}
	})
}
