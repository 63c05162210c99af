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

// settled is the range the limit stays in against a capacity of 8 at the
// tolerance 1.2: about 1.2 × 8 (a queue of 1 or 2), the growth step and
// a cut around it.
const settledLo, settledHi = 9, 12

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
// stays within 9 to 12 from the second second on, and the median latency
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
// within 4 to 7 (about 1.2 × 4), where it stays.
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
	if lo, hi := m.limitRange(22*time.Second, 40*time.Second); lo < 4 || hi > 7 {
		t.Errorf("limit %d..%d from 2s after the loss, want 4..7", lo, hi)
	}
}

// TestRecoveryRaisesLimit: the resource runs on 4 workers, then gets its
// 8 back at 20 s; within 2 s the limit is back within 9 to 12.
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
	if lo, hi := m.limitRange(10*time.Second, 20*time.Second); lo < 4 || hi > 7 {
		t.Errorf("limit %d..%d on 4 workers, want 4..7", lo, hi)
	}
	if lo, hi := m.limitRange(22*time.Second, 40*time.Second); lo < settledLo || hi > settledHi {
		t.Errorf("limit %d..%d from 2s after the recovery, want %d..%d", lo, hi, settledLo, settledHi)
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
// never leaves 9 to 12.
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
// new latency: within 5 s the limit is back within 9 to 12, and the
// baseline reads 40 ms ± 10%.
func TestSlowerServiceReanchors(t *testing.T) {
	m := newSim(Settings{Min: 1, Ceiling: 64}, 8, 20*ms, 4)
	m.jitter = 0.2
	m.service = func(t time.Duration) time.Duration {
		if t >= 20*time.Second {
			return 40 * ms
		}
		return 20 * ms
	}
	m.run(40 * time.Second)
	if lo, hi := m.limitRange(25*time.Second, 40*time.Second); lo < settledLo || hi > settledHi {
		t.Errorf("limit %d..%d from 5s after the slowdown, want %d..%d", lo, hi, settledLo, settledHi)
	}
	if b := m.limits[len(m.limits)-1].base; b < 36*ms || b > 44*ms {
		t.Errorf("baseline %v, want 40ms ± 4ms", b)
	}
}

// TestFasterServiceProbes: the service speeds up from 40 ms to 20 ms per
// request at 20 s. The equilibrium's queue hides the new latency from
// every window but the probes (half the limit for sheddable work): within
// 10 s the baseline reads 20 ms ± 10% and the limit is back within 9 to
// 12 (without probes it would settle at twice that: see the mutation
// note in the package's tests).
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
	if lo, hi := m.limitRange(30*time.Second, 40*time.Second); lo < settledLo/2 || hi > settledHi {
		t.Errorf("limit %d..%d from 10s after the speed-up, want at most %d (a probe halves it for sheddable work only)", lo, hi, settledHi)
	}
	if b := m.limits[len(m.limits)-1].base; b < 18*ms || b > 22*ms {
		t.Errorf("baseline %v, want 20ms ± 2ms", b)
	}
}
