package adaptive

import (
	"slices"
	"testing"
	"time"
)

// The tests drive a Cap in virtual time (sim): a resource of capacity 8
// (or as scripted), 20 ms per request ± 10%, offered 4 × its capacity
// unless said otherwise. Every run is deterministic; no test sleeps.

const ms = time.Millisecond

// settled is the range the limit stays in against a capacity of 8: where
// the latency is between 1.05 and 1.15 × the baseline (a queue of 1 at
// most), within ±25% of the capacity.
const settledLo, settledHi = 8, 10

// TestStartsAtMinAndDoubles pins the first windows: the cap starts at
// Min, its first window's median (at one request at a time) is the
// baseline, it doubles while latency stays within tolerance, and the
// first window with a queue (16 requests on 8 workers: twice the
// latency) cuts it by a quarter, the next by the gradient.
func TestStartsAtMinAndDoubles(t *testing.T) {
	m := newSim(Settings{Min: 1, Ceiling: 64}, 8, 20*ms, 4)
	m.jitter = 0.2
	m.run(time.Second)
	var got []int64
	for _, p := range m.limits[:6] {
		got = append(got, p.limit)
	}
	if want := []int64{2, 4, 8, 16, 12, 9}; !slices.Equal(got, want) {
		t.Errorf("first limits %v, want %v", got, want)
	}
	if b := m.limits[0].base; b < 19*ms || b > 21*ms {
		t.Errorf("first baseline %v, want the unloaded 20ms ± 1ms", b)
	}
}

// TestSettlesNearCapacity: against capacity 8 at 4× its load, the limit
// stays within 8 to 10 from the second second on, and the median latency
// of the admitted requests stays within 1.3 × the unloaded 20 ms.
func TestSettlesNearCapacity(t *testing.T) {
	m := newSim(Settings{Min: 1, Ceiling: 64}, 8, 20*ms, 4)
	m.jitter = 0.2
	m.run(30 * time.Second)
	if lo, hi := m.limitRange(2*time.Second, 30*time.Second); lo < settledLo || hi > settledHi {
		t.Errorf("limit %d..%d after 2s, want within %d..%d", lo, hi, settledLo, settledHi)
	}
	lat := slices.Clone(m.latencies)
	slices.Sort(lat)
	if p50 := lat[len(lat)/2]; p50 > 26*ms {
		t.Errorf("median latency %v, want at most 26ms", p50)
	}
}

// TestRisingLatencyLowersLimit: the resource loses half its workers at
// 20 s; latency doubles at the old limit, and within 2 s the limit is
// within 4 to 5 (±25% of 4), where it stays.
func TestRisingLatencyLowersLimit(t *testing.T) {
	m := newSim(Settings{Min: 1, Ceiling: 64}, 8, 20*ms, 4)
	m.jitter = 0.2
	m.capacity = func(t time.Duration) int {
		if t >= 20*time.Second {
			return 4
		}
		return 8
	}
	m.run(40 * time.Second)
	if lo, hi := m.limitRange(10*time.Second, 20*time.Second); lo < settledLo || hi > settledHi {
		t.Errorf("limit %d..%d before the loss, want %d..%d", lo, hi, settledLo, settledHi)
	}
	if lo, hi := m.limitRange(22*time.Second, 40*time.Second); lo < 4 || hi > 5 {
		t.Errorf("limit %d..%d from 2s after the loss, want 4..5", lo, hi)
	}
}

// TestRecoveryRaisesLimit: the resource runs on 4 workers, then gets its
// 8 back at 20 s; within 4 s the limit is back within 8 to 10 (it grows by
// one slot after two windows without a queue).
func TestRecoveryRaisesLimit(t *testing.T) {
	m := newSim(Settings{Min: 1, Ceiling: 64}, 8, 20*ms, 4)
	m.jitter = 0.2
	m.capacity = func(t time.Duration) int {
		if t < 20*time.Second {
			return 4
		}
		return 8
	}
	m.run(40 * time.Second)
	if lo, hi := m.limitRange(10*time.Second, 20*time.Second); lo < 4 || hi > 5 {
		t.Errorf("limit %d..%d on 4 workers, want 4..5", lo, hi)
	}
	if lo, hi := m.limitRange(24*time.Second, 40*time.Second); lo < settledLo || hi > settledHi {
		t.Errorf("limit %d..%d from 4s after the recovery, want %d..%d", lo, hi, settledLo, settledHi)
	}
}

// TestBoundsHold: however latency moves, the limit stays within Min and
// the ceiling, and no request is admitted past the limit: on a resource
// far too small for Min (latency grows without end below it) and on one
// far larger than the ceiling.
func TestBoundsHold(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
	}{
		{"capacity below min", 2},
		{"capacity above ceiling", 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(Settings{Min: 6, Ceiling: 9}, tc.capacity, 20*ms, 4)
			m.jitter = 0.2
			m.run(20 * time.Second)
			if lo, hi := m.limitRange(0, 20*time.Second); lo < 6 || hi > 9 {
				t.Errorf("limit %d..%d, want within 6..9", lo, hi)
			}
			if m.decidedLo < 6 || m.decidedHi > 9 {
				t.Errorf("acquires decided against limits %d..%d, want within 6..9", m.decidedLo, m.decidedHi)
			}
			if m.maxHeldOver > 0 {
				t.Errorf("an admission held %d slots past the limit", m.maxHeldOver)
			}
			if len(m.limits) < 50 {
				t.Errorf("%d windows in 20s, want at least 50", len(m.limits))
			}
		})
	}
}

// TestSlowOutlierDoesNotCollapse: one request in the settled regime takes
// 100 × the others (2 s): its window's median does not move, and the limit
// never leaves 8 to 10.
func TestSlowOutlierDoesNotCollapse(t *testing.T) {
	m := newSim(Settings{Min: 1, Ceiling: 64}, 8, 20*ms, 4)
	m.jitter = 0.2
	m.slow = func(i int) bool { return i == 2000 } // at about 5 s
	m.run(20 * time.Second)
	if lo, hi := m.limitRange(2*time.Second, 20*time.Second); lo < settledLo || hi > settledHi {
		t.Errorf("limit %d..%d around the outlier, want %d..%d", lo, hi, settledLo, settledHi)
	}
}

// TestSlowerServiceReanchors: at 20 s every request takes twice as long
// (a slower database; the capacity in workers is unchanged). Latency
// stays high however the limit falls, so the baseline re-anchors at the
// new latency: the limit falls to a quarter of where the decline started,
// not to Min, and from 18 s after it is back within ±25% of the workers
// (8: where it was, one slot more at times: a re-anchored baseline is one
// window's median, a little noisier than one the traffic lowered; 32: it
// grows back by a sixteenth after every two windows of 160 ms without a
// queue), the baseline
// reading 40 ms ± 10%.
func TestSlowerServiceReanchors(t *testing.T) {
	for _, tc := range []struct {
		workers                       int
		lo, hi, floor, loThen, hiThen int64
	}{
		{8, settledLo, settledHi, 2, settledLo, settledHi + 1}, // a quarter of 8 to 10
		{32, 34, 36, 8, 24, 40},                                // a quarter of 35
	} {
		m := newSim(Settings{Min: 1, Ceiling: 128}, tc.workers, 20*ms, 4)
		m.jitter = 0.2
		m.service = func(t time.Duration) time.Duration {
			if t >= 20*time.Second {
				return 40 * ms
			}
			return 20 * ms
		}
		m.run(45 * time.Second)
		if lo, hi := m.limitRange(10*time.Second, 20*time.Second); lo < tc.lo || hi > tc.hi {
			t.Errorf("%d workers: limit %d..%d before the slowdown, want %d..%d", tc.workers, lo, hi, tc.lo, tc.hi)
		}
		if lo, _ := m.limitRange(20*time.Second, 26*time.Second); lo < tc.floor {
			t.Errorf("%d workers: limit down to %d after the slowdown, want at least %d (a quarter)", tc.workers, lo, tc.floor)
		}
		if lo, hi := m.limitRange(38*time.Second, 45*time.Second); lo < tc.loThen || hi > tc.hiThen {
			t.Errorf("%d workers: limit %d..%d from 18s after the slowdown, want %d..%d", tc.workers, lo, hi, tc.loThen, tc.hiThen)
		}
		if b := m.limits[len(m.limits)-1].base; b < 36*ms || b > 44*ms {
			t.Errorf("%d workers: baseline %v, want 40ms ± 4ms", tc.workers, b)
		}
	}
}

// TestFasterServiceProbes: the service speeds up from 40 ms to 20 ms per
// request at 20 s. The equilibrium's queue hides the new latency from
// every window but the probes (half the limit for sheddable work), one
// of which is due at once when the baseline falls that far: within 10 s
// the baseline reads 20 ms ± 10% and the limit is back within 8 to 11.
func TestFasterServiceProbes(t *testing.T) {
	m := newSim(Settings{Min: 1, Ceiling: 64}, 8, 20*ms, 4)
	m.jitter = 0.2
	m.service = func(t time.Duration) time.Duration {
		if t >= 20*time.Second {
			return 20 * ms
		}
		return 40 * ms
	}
	m.run(40 * time.Second)
	if lo, hi := m.limitRange(30*time.Second, 40*time.Second); lo < settledLo || hi > settledHi+1 {
		t.Errorf("limit %d..%d from 10s after the speed-up, want %d..%d", lo, hi, settledLo, settledHi+1)
	}
	if b := m.limits[len(m.limits)-1].base; b < 18*ms || b > 22*ms {
		t.Errorf("baseline %v, want 20ms ± 2ms", b)
	}
}

// TestMuchFasterServiceProbesAtOnce: the service gets four times faster
// (40 ms to 10 ms), the load staying four times what it can now take. The
// first window after it reads a median clearly below the baseline, with
// the queue the old limit holds in it; it becomes the baseline, and a
// probe is due at once (the next calm window): 1 s after the change the
// baseline is within 10% of 10 ms, wherever the change falls in the
// probes' schedule (without that probe it would wait for the next one,
// 2.5 to 7.5 s away).
func TestMuchFasterServiceProbesAtOnce(t *testing.T) {
	for _, at := range []time.Duration{20 * time.Second, 20700 * ms, 21400 * ms, 22100 * ms, 22800 * ms} {
		m := newSim(Settings{Min: 1, Ceiling: 64}, 8, 10*ms, 4)
		m.jitter = 0.2
		m.service = func(t time.Duration) time.Duration {
			if t >= at {
				return 10 * ms
			}
			return 40 * ms
		}
		m.run(at + time.Second)
		if b := m.limits[len(m.limits)-1].base; b < 9*ms || b > 11*ms {
			t.Errorf("speed-up at %v: baseline %v 1s later, want 10ms ± 1ms", at, b)
		}
	}
}
