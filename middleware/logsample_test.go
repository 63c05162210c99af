package middleware_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/metrics"
	"github.com/ratekey/ratekey/middleware"
	"github.com/ratekey/ratekey/policy"
)

// logRig is ClientAddress → RateLimiter over a store, logging JSON to a
// buffer, with an injected clock for the decision log's intervals and its
// timers run by hand when the clock passes them.
type logRig struct {
	t      *testing.T
	rl     *middleware.RateLimiter
	h      http.Handler
	reg    *prometheus.Registry
	logs   bytes.Buffer
	now    time.Time
	timers []logTimer
	late   bool // advance runs no timer (they fire late)
}

type logTimer struct {
	at time.Time
	f  func()
}

// newLogRig builds the rig from cfg (Limiter defaults to a memory store;
// Operation, Metrics and Logger are set here).
func newLogRig(t *testing.T, cfg middleware.RateLimitConfig) *logRig {
	t.Helper()
	g := &logRig{t: t, reg: prometheus.NewRegistry(), now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, err := metrics.New(g.reg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limiter == nil {
		cfg.Limiter = memory.New(memory.Options{})
	}
	cfg.Operation = func(*http.Request) string { return "GET /v1/reports/{id}" }
	cfg.Metrics = m
	cfg.Logger = slog.New(slog.NewJSONHandler(&g.logs, nil))
	g.rl, err = middleware.NewRateLimiter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	middleware.SetLogClock(g.rl, func() time.Time { return g.now }, func(d time.Duration, f func()) {
		g.timers = append(g.timers, logTimer{g.now.Add(d), f})
	})
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	g.h = middleware.ClientAddress(proxyResolver(t), middleware.ClientAddressOptions{})(g.rl.Handler(ok))
	return g
}

// get sends one request from client network n (a /32 of its own).
func (g *logRig) get(n int) int {
	r := httptest.NewRequest(http.MethodGet, "/v1/reports/1", nil)
	r.RemoteAddr = "10.0.0.1:1"
	r.Header.Set("X-Forwarded-For", fmt.Sprintf("100.%d.%d.%d", n>>16&255, n>>8&255, n&255))
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	return w.Code
}

// advance moves the clock to t, running the timers due by then.
func (g *logRig) advance(t time.Time) {
	g.now = t
	for !g.late && len(g.timers) > 0 {
		i := slices.IndexFunc(g.timers, func(x logTimer) bool { return !x.at.After(t) })
		if i < 0 {
			return
		}
		f := g.timers[i].f
		g.timers = slices.Delete(g.timers, i, i+1)
		f()
	}
}

// logLine is the part of a decision-log line the tests look at.
type logLine struct {
	Msg        string  `json:"msg"`
	Level      string  `json:"level"`
	Policy     string  `json:"policy"`
	Decision   string  `json:"decision"`
	Key        string  `json:"key"`
	Count      int64   `json:"count"`
	Keys       int64   `json:"keys"`
	KeysCapped bool    `json:"keys_capped"`
	Interval   float64 `json:"interval_seconds"`
}

func (g *logRig) lines() []logLine {
	g.t.Helper()
	var out []logLine
	sc := bufio.NewScanner(bytes.NewReader(g.logs.Bytes()))
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			g.t.Fatalf("%v: %s", err, sc.Bytes())
		}
		out = append(out, l)
	}
	return out
}

// decisions adds up the decisions the log accounts for, by decision: one
// per decision line, count per summary.
func decisions(lines []logLine) map[string]int64 {
	n := map[string]int64{}
	for _, l := range lines {
		switch l.Msg {
		case "ratekey decision":
			n[l.Decision]++
		case "ratekey decisions summarised", "ratekey decisions suppressed":
			n[l.Decision] += l.Count
		}
	}
	return n
}

// short renders a line for exact comparison.
func (l logLine) short() string {
	net := strings.TrimPrefix(l.Key, "per-network|network=")
	switch l.Msg {
	case "ratekey decision":
		return "line " + l.Decision + " " + net
	case "ratekey decisions summarised":
		return fmt.Sprintf("summary %s %s count=%d", l.Decision, net, l.Count)
	case "ratekey decisions suppressed":
		return fmt.Sprintf("suppressed %s count=%d keys=%d capped=%v", l.Decision, l.Count, l.Keys, l.KeysCapped)
	}
	return l.Msg
}

// TestLogFloodIsBounded is the proof of the issue: 50 000 rejections of
// 1 000 keys in 10 s write less than 100 KB of log, and the lines add up
// to exactly the rejected count, which the metrics also hold.
func TestLogFloodIsBounded(t *testing.T) {
	g := newLogRig(t, middleware.RateLimitConfig{Policies: []policy.Policy{perNetwork("1/h", 1)}})
	const keys, rejections = 1000, 50000
	const total = keys + rejections // each key's first request passes
	start := g.now
	for i := range total {
		g.advance(start.Add(time.Duration(i) * 10 * time.Second / total))
		code := g.get(i % keys)
		if want := map[bool]int{true: 200, false: 429}[i < keys]; code != want {
			t.Fatalf("request %d: %d; want %d", i, code, want)
		}
	}
	g.advance(start.Add(11 * time.Second)) // the last interval's timer
	if len(g.timers) != 0 {
		t.Errorf("%d timers still set after the flood", len(g.timers))
	}
	lines := g.lines()
	if n := decisions(lines)["REJECTED"]; n != rejections {
		t.Errorf("the log accounts for %d rejections; want %d", n, rejections)
	}
	if n := series(t, g.reg, "ratekey_decisions_total", "decision", "REJECTED"); n != rejections {
		t.Errorf("metrics count %v rejections; want %d", n, rejections)
	}
	t.Logf("%d rejections of %d keys in 10 s: %d lines, %d bytes of log", rejections, keys, len(lines), g.logs.Len())
	if g.logs.Len() >= 100_000 {
		t.Errorf("%d bytes of log; want < 100 KB", g.logs.Len())
	}
	// About one interval a second, each at most 10 first lines, 10
	// summaries and one suppressed line.
	if len(lines) > 11*21 {
		t.Errorf("%d lines; want at most %d", len(lines), 11*21)
	}
	if e, h, _ := middleware.LogSamplerSize(g.rl); e != 0 || h != 0 {
		t.Errorf("sampler holds %d entries and %d hashes after its last interval; want none", e, h)
	}
}

// TestLogSampleExact pins the lines written for sequences of rejections
// (clients n rejected at times in ms; -1 for FlushLog), interval 1 s.
func TestLogSampleExact(t *testing.T) {
	type ev struct{ ms, n int }
	flush := func(ms int) ev { return ev{ms, -1} }
	for _, tc := range []struct {
		name   string
		events []ev
		end    int  // ms the clock moves to at the end (timers run)
		late   bool // timers never run
		want   []string
	}{
		{"one rejection, no summary", []ev{{0, 1}}, 5000, false,
			[]string{"line REJECTED 100.0.0.1/32"}},
		{"repeats summarised when the timer ends the interval",
			[]ev{{0, 1}, {100, 1}, {200, 2}, {999, 1}}, 5000, false,
			[]string{"line REJECTED 100.0.0.1/32", "line REJECTED 100.0.0.2/32", "summary REJECTED 100.0.0.1/32 count=2"}},
		{"the timer writes the summary before the next interval",
			[]ev{{0, 1}, {500, 1}, {1000, 1}, {1200, 1}}, 2500, false,
			[]string{"line REJECTED 100.0.0.1/32", "summary REJECTED 100.0.0.1/32 count=1", "line REJECTED 100.0.0.1/32",
				"summary REJECTED 100.0.0.1/32 count=1"}},
		{"with the timer late, the next rejection after the interval writes the summary",
			[]ev{{0, 1}, {500, 1}, {1000, 1}, {1200, 1}, flush(1300)}, 1500, true,
			[]string{"line REJECTED 100.0.0.1/32", "summary REJECTED 100.0.0.1/32 count=1", "line REJECTED 100.0.0.1/32",
				"summary REJECTED 100.0.0.1/32 count=1"}},
		{"an interval starts at its first rejection",
			[]ev{{0, 1}, {500, 1}, {2500, 1}, {3400, 1}, {3600, 1}}, 3600, false,
			[]string{"line REJECTED 100.0.0.1/32", "summary REJECTED 100.0.0.1/32 count=1",
				"line REJECTED 100.0.0.1/32", "summary REJECTED 100.0.0.1/32 count=1", "line REJECTED 100.0.0.1/32"}},
		{"FlushLog writes the summaries at once",
			[]ev{{0, 1}, {10, 1}, {20, 1}, flush(30), {40, 1}}, 40, false,
			[]string{"line REJECTED 100.0.0.1/32", "summary REJECTED 100.0.0.1/32 count=2", "line REJECTED 100.0.0.1/32"}},
		{"beyond 10 keys, suppressed per policy and decision",
			func() []ev {
				var e []ev
				for n := range 12 {
					e = append(e, ev{n, 100 + n}, ev{100 + n, 100 + n})
				}
				return e
			}(), 5000, false,
			func() []string {
				var w []string
				for n := range 10 {
					w = append(w, fmt.Sprintf("line REJECTED 100.0.0.%d/32", 100+n))
				}
				for n := range 10 {
					w = append(w, fmt.Sprintf("summary REJECTED 100.0.0.%d/32 count=1", 100+n))
				}
				return append(w, "suppressed REJECTED count=4 keys=2 capped=false")
			}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newLogRig(t, middleware.RateLimitConfig{Policies: []policy.Policy{perNetwork("1/h", 1)}})
			g.late = tc.late
			start := g.now
			seen := map[int]bool{}
			rejected := 0
			for _, e := range tc.events {
				g.advance(start.Add(time.Duration(e.ms) * time.Millisecond))
				if e.n < 0 {
					g.rl.FlushLog()
					continue
				}
				if !seen[e.n] { // spend the client's only token, unlogged
					seen[e.n] = true
					if code := g.get(e.n); code != 200 {
						t.Fatalf("first request of %d: %d", e.n, code)
					}
				}
				if code := g.get(e.n); code != 429 {
					t.Fatalf("%+v: %d; want 429", e, code)
				}
				rejected++
			}
			g.advance(start.Add(time.Duration(tc.end) * time.Millisecond))
			var got []string
			lines := g.lines()
			for _, l := range lines {
				got = append(got, l.short())
				if l.Msg != "ratekey decision" && (l.Policy != "per-network" || l.Interval != 1 || l.Level != "INFO") {
					t.Errorf("summary line %+v: want policy per-network, interval_seconds 1, level INFO", l)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if n := decisions(lines)["REJECTED"]; n != int64(rejected) {
				t.Errorf("the log accounts for %d rejections; want %d", n, rejected)
			}
		})
	}
}

// TestLogEveryDecision: the option keeps a line per rejection, and so no
// summaries.
func TestLogEveryDecision(t *testing.T) {
	g := newLogRig(t, middleware.RateLimitConfig{Policies: []policy.Policy{perNetwork("1/h", 1)}, LogEveryDecision: true})
	g.get(1)
	for i := range 50 {
		g.advance(g.now.Add(100 * time.Millisecond))
		if code := g.get(1 + i%2); code != 429 && i != 1 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	g.advance(g.now.Add(time.Minute))
	g.rl.FlushLog()
	lines := g.lines()
	if len(lines) != 49 {
		t.Errorf("%d lines; want 49, one per rejection", len(lines))
	}
	for _, l := range lines {
		if l.Msg != "ratekey decision" {
			t.Errorf("line %+v; want only decision lines", l)
		}
	}
	if len(g.timers) != 0 {
		t.Errorf("%d timers set; want none", len(g.timers))
	}
}

// TestLogDistinctKeysBounded: 100 000 distinct keys in one interval (here
// every request errors, the store being down, and fails open) write 10
// lines and one summary, and the sampler holds at most 10 keys and 4096
// hashes; the distinct key count is then a lower bound, and says so.
func TestLogDistinctKeysBounded(t *testing.T) {
	p := perNetwork("1/h", 1)
	p.OnStoreError = policy.OnStoreErrorAllow
	g := newLogRig(t, middleware.RateLimitConfig{Limiter: failingLimiter{}, Policies: []policy.Policy{p}})
	const keys = 100_000
	for n := range keys {
		if code := g.get(n); code != 200 {
			t.Fatalf("client %d: %d; want 200 (fail open)", n, code)
		}
		if n%10_000 == 0 {
			if e, h, a := middleware.LogSamplerSize(g.rl); e > 10 || h > 4096 || a > 1 {
				t.Fatalf("after %d keys the sampler holds %d entries, %d hashes, %d aggregates", n, e, h, a)
			}
		}
	}
	if e, h, a := middleware.LogSamplerSize(g.rl); e != 10 || h != 4096 || a != 1 {
		t.Errorf("the sampler holds %d entries, %d hashes, %d aggregates; want 10, 4096, 1", e, h, a)
	}
	g.advance(g.now.Add(time.Second))
	lines := g.lines()
	if len(lines) != 11 {
		t.Fatalf("%d lines; want 10 and a summary", len(lines))
	}
	last := lines[10]
	if got := last.short(); got != "suppressed ERROR count=99990 keys=4096 capped=true" || last.Level != "WARN" {
		t.Errorf("summary %s at %s; want suppressed ERROR count=99990 keys=4096 capped=true at WARN", got, last.Level)
	}
	if n := decisions(lines)["ERROR"]; n != keys {
		t.Errorf("the log accounts for %d errors; want %d", n, keys)
	}
	t.Logf("%d distinct keys: %d bytes of log", keys, g.logs.Len())
	if g.logs.Len() > 5000 {
		t.Errorf("%d bytes of log; want at most 5 KB", g.logs.Len())
	}
}

// TestLogSampleAcrossReload: the counts of an interval survive Reload (the
// sampler is the RateLimiter's), and a dry-run decision is sampled apart
// from an enforcing one of the same key.
func TestLogSampleAcrossReload(t *testing.T) {
	lim := memory.New(memory.Options{})
	policies := []policy.Policy{perNetwork("1/h", 1)}
	g := newLogRig(t, middleware.RateLimitConfig{Limiter: lim, Policies: policies})
	g.get(1)
	g.get(1)
	g.get(1)
	cfg := middleware.RateLimitConfig{Limiter: lim, Policies: policies, DryRun: true,
		Operation: func(*http.Request) string { return "GET /v1/reports/{id}" },
		Logger:    slog.New(slog.NewJSONHandler(&g.logs, nil))}
	if _, err := g.rl.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	g.get(1)
	g.get(1)
	g.advance(g.now.Add(time.Second))
	var got []string
	lines := g.lines()
	for _, l := range lines {
		got = append(got, l.short())
	}
	want := []string{"line REJECTED 100.0.0.1/32", "line REJECTED_DRY_RUN 100.0.0.1/32",
		"summary REJECTED 100.0.0.1/32 count=1", "summary REJECTED_DRY_RUN 100.0.0.1/32 count=1"}
	if !slices.Equal(got, want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLogIntervalValidated: a negative interval is refused; 0 is the default.
func TestLogIntervalValidated(t *testing.T) {
	cfg := middleware.RateLimitConfig{Limiter: memory.New(memory.Options{}), Operation: func(*http.Request) string { return "" },
		LogInterval: -time.Second}
	if _, err := middleware.NewRateLimiter(cfg); err == nil || !strings.Contains(err.Error(), "log_interval: -1s must not be negative") {
		t.Errorf("error %v; want the negative log interval named", err)
	}
	cfg.LogInterval = 0
	if _, err := middleware.NewRateLimiter(cfg); err != nil {
		t.Error(err)
	}
}
