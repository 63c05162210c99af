package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/metrics"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// TestQueueMetrics: a DELAYED request is in its policy's queue while it
// waits out its delay (ratekey_queued_requests 1), and leaves it when the
// delay runs out (outcome proceeded, the time it waited) or its context
// ends (outcome abandoned); a PASSED request and a dry-run policy's
// DELAYED_DRY_RUN never queue. In a testing/synctest bubble (the wait takes
// no real time), the store on a clock that stands still: "slow" admits one
// request without waiting, then delays by 1 s per request.
func TestQueueMetrics(t *testing.T) {
	synctest.Test(t, testQueueMetrics)
}

func testQueueMetrics(t *testing.T) {
	slow := policy.Policy{Name: "slow", Key: []limitkey.Dimension{limitkey.DimOperation}, Limit: limit("1/s", 3)}
	slow.Limit.DelayAfter = 1
	shadow := slow
	shadow.Name, shadow.DryRun = "shadow", true
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	rl, err := middleware.NewRateLimiter(middleware.RateLimitConfig{
		Limiter: memory.New(memory.Options{Now: clocktest.NewManualClock().Time}), Operation: middleware.RouteOperation(r),
		Policies: []policy.Policy{slow, shadow}, Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(rl.Handler)
	r.Get("/a", func(http.ResponseWriter, *http.Request) {})
	serve := func(ctx context.Context) <-chan int {
		done := make(chan int, 1)
		go func() {
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/a", nil).WithContext(ctx))
			done <- w.Code
		}()
		return done
	}
	steps := []struct {
		name    string
		cancel  bool // the client goes away during the wait
		code    int
		waiting []string // the queue series while the request waits (none: it does not)
		after   []string // the queue series once it is answered
	}{
		{"PASSED: no queue", false, http.StatusOK, nil, nil},
		{"DELAYED 1 s, proceeds", false, http.StatusOK,
			[]string{"ratekey_queued_requests{policy=slow} 1"},
			[]string{"ratekey_queued_requests{policy=slow} 0", "ratekey_time_in_queue_seconds{outcome=proceeded,policy=slow} count 1 sum 1"}},
		{"DELAYED 2 s, abandoned at once", true, http.StatusServiceUnavailable,
			[]string{"ratekey_queued_requests{policy=slow} 1", "ratekey_time_in_queue_seconds{outcome=proceeded,policy=slow} count 1 sum 1"},
			[]string{"ratekey_queued_requests{policy=slow} 0", "ratekey_time_in_queue_seconds{outcome=abandoned,policy=slow} count 1 sum 0",
				"ratekey_time_in_queue_seconds{outcome=proceeded,policy=slow} count 1 sum 1"}},
	}
	for _, step := range steps {
		ctx, cancel := context.WithCancel(context.Background())
		done := serve(ctx)
		synctest.Wait() // answered, or blocked in its wait
		if got := queueSeries(t, reg); step.waiting != nil && !slices.Equal(got, step.waiting) {
			t.Errorf("%s, while it waits:\n%s\nwant:\n%s", step.name, strings.Join(got, "\n"), strings.Join(step.waiting, "\n"))
		}
		if step.cancel {
			cancel()
		}
		if code := <-done; code != step.code {
			t.Errorf("%s: %d; want %d", step.name, code, step.code)
		}
		cancel()
		if got := queueSeries(t, reg); !slices.Equal(got, step.after) {
			t.Errorf("%s, answered:\n%s\nwant:\n%s", step.name, strings.Join(got, "\n"), strings.Join(step.after, "\n"))
		}
	}
}

// queueSeries returns the series of ratekey_queued_requests (gauges) and
// ratekey_time_in_queue_seconds (histograms: sample count and sum), sorted.
func queueSeries(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != "ratekey_queued_requests" && f.GetName() != "ratekey_time_in_queue_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := strconv.FormatFloat(s.GetGauge().GetValue(), 'g', -1, 64)
			if h := s.GetHistogram(); h != nil {
				v = "count " + strconv.FormatUint(h.GetSampleCount(), 10) + " sum " + strconv.FormatFloat(h.GetSampleSum(), 'g', -1, 64)
			}
			out = append(out, f.GetName()+"{"+strings.Join(labels, ",")+"} "+v)
		}
	}
	slices.Sort(out)
	return out
}
