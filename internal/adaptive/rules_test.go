package adaptive

import (
	"slices"
	"testing"
	"time"
)

// script drives a cap's controller with scripted latencies on a clock of
// its own (nanoseconds the test advances): no sim, no sleep.
type script struct {
	t   *testing.T
	c   *Cap
	s   Settings
	now int64
}

func newScript(t *testing.T, limit int64) *script {
	c := &Cap{}
	c.setLimit(limit, false)
	return &script{t: t, c: c, s: Settings{Min: 1, Ceiling: 64}}
}

// window releases n requests of latency lat, started evenly over the
// window from the clock's reading (the last ends when the window is due),
// while held slots are held (and acquired first), and returns the update
// of the window they close (failing if none closes).
func (sc *script) window(n int, lat time.Duration, held int) Update {
	sc.t.Helper()
	for range held {
		sc.c.Acquire(&sc.s, true)
	}
	var u Update
	closed := false
	start := sc.now
	// The last one ends when even a probe window (eight times the last
	// median) is due.
	span := max(int64(minWindow), 8*sc.c.ctl.recent) + int64(lat)
	for i := range n {
		begin := start + int64(i)*span/int64(n-1)
		end := begin + int64(lat)
		sc.now = max(sc.now, end)
		if got, ok := sc.c.Release(&sc.s, true, true, begin, end); ok {
			u, closed = got, true
		}
		sc.c.Acquire(&sc.s, true)
	}
	for range held {
		sc.c.Release(&sc.s, true, false, 0, 0)
	}
	if !closed {
		sc.t.Fatalf("%d samples of %v closed no window", n, lat)
	}
	sc.now++
	return u
}

// TestSamplesOfEarlierWindows: a request admitted before a window began
// is not its sample (Envoy's issue 11579: samples of an earlier epoch
// skewed its minimum). After a window of 20 ms at a limit of 10, half of
// the next window's releases are of requests that started before it and
// took 500 ms: its median is the others' 20 ms, and the limit is not cut.
func TestSamplesOfEarlierWindows(t *testing.T) {
	sc := newScript(t, 10)
	sc.window(16, 20*time.Millisecond, 9)
	winStart := sc.now - 1
	for i := range 16 { // started before the window, released in it
		begin := winStart - int64(time.Millisecond)*int64(i+1)
		sc.c.Acquire(&sc.s, true)
		if _, ok := sc.c.Release(&sc.s, true, true, begin, begin+int64(500*time.Millisecond)); ok {
			t.Fatal("samples of an earlier window closed this one")
		}
	}
	u := sc.window(16, 20*time.Millisecond, 9)
	if u.Latency != 20*time.Millisecond || u.Limit < u.Previous {
		t.Errorf("window: median %v, limit %d from %d; want 20ms and no cut", u.Latency, u.Limit, u.Previous)
	}
}

// TestProbeWindowMedian: a probe window's median is the latency without a
// queue: one clearly below the baseline (more than the tolerance) is the
// baseline at once; one below it within the tolerance takes it half way.
func TestProbeWindowMedian(t *testing.T) {
	for _, tc := range []struct {
		name      string
		probe     time.Duration
		wantBasis time.Duration
	}{
		{"clearly lower", 10 * time.Millisecond, 10 * time.Millisecond},
		{"within the tolerance", 36 * time.Millisecond, 38 * time.Millisecond},
		{"higher", 44 * time.Millisecond, 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := newScript(t, 10)
			sc.window(16, 40*time.Millisecond, 9) // the baseline: 40 ms
			sc.c.ctl.probing = true
			if u := sc.window(16, tc.probe, 4); u.Baseline != tc.wantBasis || u.Limit != u.Previous {
				t.Errorf("after a probe window of %v: baseline %v, limit %d from %d; want %v, unchanged", tc.probe, u.Baseline, u.Limit, u.Previous, tc.wantBasis)
			}
		})
	}
}

// TestIdleLimitDoesNotGrow: a window that held fewer than half the limit
// says nothing of it, however fast its requests were: the limit stays
// (else a quiet hour would raise it to the ceiling, and the next burst
// would meet no cap). One that held half grows it.
func TestIdleLimitDoesNotGrow(t *testing.T) {
	sc := newScript(t, 10)
	sc.window(16, 20*time.Millisecond, 8) // the baseline, and the first doubling
	sc.c.ctl.cut = true                   // past slow start: growth is by a step
	for i := range 4 {
		if u := sc.window(16, 20*time.Millisecond, 3); u.Limit != u.Previous {
			t.Fatalf("idle window %d: limit %d from %d; want unchanged", i, u.Limit, u.Previous)
		}
	}
	sc.window(16, 20*time.Millisecond, 12)
	if u := sc.window(16, 20*time.Millisecond, 12); u.Limit <= u.Previous {
		t.Errorf("busy windows: limit %d from %d; want it to grow", u.Limit, u.Previous)
	}
}

// TestLateStartersLeftOut: a window's median counts only requests started
// at least twice the last median before it closes. A request started
// later has finished only if it was fast, so counting it would bias the
// median low: at a limit past the capacity, toward the requests that did
// not queue. Here the requests started early in the window took 30 ms (a
// queue), and 25 fast ones started in its last stretch: the window reads
// 30 ms, above the tolerance of a 20 ms baseline, and cuts the limit.
func TestLateStartersLeftOut(t *testing.T) {
	sc := newScript(t, 10)
	sc.window(16, 20*time.Millisecond, 9) // the baseline and the last median: 20 ms
	start := sc.now
	end := start + int64(minWindow) // the window is due here; its cut-off is end - 2 x 20 ms
	for i := range 16 {             // 30 ms each, started over the window's first 30 ms
		begin := start + int64(i)*int64(2*time.Millisecond)
		sc.c.Acquire(&sc.s, true)
		sc.c.Release(&sc.s, true, true, begin, begin+int64(30*time.Millisecond))
	}
	for i := range 24 { // 1 ms each, started in its last 38 ms
		begin := end - int64(38*time.Millisecond) + int64(i)*int64(1500*time.Microsecond)
		sc.c.Acquire(&sc.s, true)
		if _, ok := sc.c.Release(&sc.s, true, true, begin, begin+int64(time.Millisecond)); ok {
			t.Fatal("the window closed early")
		}
	}
	sc.c.Acquire(&sc.s, true) // one more, 1 ms, closes the window
	u, closed := sc.c.Release(&sc.s, true, true, end-int64(time.Millisecond), end)
	if !closed || u.Latency != 30*time.Millisecond || u.Limit >= u.Previous {
		t.Errorf("closed %v: median %v, limit %d from %d; want 30ms and a cut", closed, u.Latency, u.Limit, u.Previous)
	}
}

// TestGrowthEveryOtherWindow: past the first cut, a limit grows by a step
// after two consecutive windows without a queue, not after each: a
// window's latency lags its limit (the queue a step builds takes time to
// show), and the window between shows whether the last step built one. A
// window with a short queue (between 1.05 and 1.15 × the baseline) holds
// the limit and starts the count again.
func TestGrowthEveryOtherWindow(t *testing.T) {
	sc := newScript(t, 10)
	sc.window(16, 20*time.Millisecond, 9) // the baseline; slow start doubles to 20
	sc.c.ctl.cut = true
	var limits []int64
	for _, lat := range []time.Duration{20, 20, 20, 20, 22, 20, 20} {
		limits = append(limits, sc.window(16, lat*time.Millisecond, int(sc.c.Limit(&sc.s))-1).Limit)
	}
	if want := []int64{20, 21, 21, 22, 22, 22, 23}; !slices.Equal(limits, want) {
		t.Errorf("limits %v over windows of 20, 20, 20, 20, 22, 20, 20 ms, want %v", limits, want)
	}
}
