package adaptive

import (
	"testing"
	"time"
)

// The priority tests drive a cap with 20% reserved over a resource of
// capacity 8 (400 requests a second of 20 ms) for 60 s of virtual time.
// A request is critical at random with the given share.

// prioritySim runs a minute of offered load rate × capacity, critical
// requests making up share of it, and returns the sim.
func prioritySim(rate, share float64) *sim {
	m := newSim(Settings{Min: 1, Ceiling: 64, Reserve: 200}, 8, 20*ms, rate)
	m.jitter = 0.2
	m.critical = share
	m.run(time.Minute)
	return m
}

// goodput returns the admitted requests of class cls per second, as a
// share of the resource's 400 a second.
func (m *sim) goodput(cls int) float64 { return float64(m.admitted[cls]) / 60 / 400 }

// success returns the share of class cls's requests that were admitted.
func (m *sim) success(cls int) float64 { return float64(m.admitted[cls]) / float64(m.arrived[cls]) }

const sheddable, critical = 0, 1

// TestCriticalSucceedsUnderOverload is the target: offered twice
// the capacity, 30% of it critical, 20% reserved: at least 99% of the
// critical requests are admitted, and sheddable requests take at least
// 99% of the refusals. (A reserve of a fixed 20%, without the critical
// peak, admits 94%: 2 slots of 10 do not cover the swings of 5 critical
// requests in flight.)
func TestCriticalSucceedsUnderOverload(t *testing.T) {
	m := prioritySim(2, 0.3)
	if s := m.success(critical); s < 0.99 {
		t.Errorf("critical success %.4f, want at least 0.99", s)
	}
	refusedShed, refusedCrit := m.arrived[sheddable]-m.admitted[sheddable], m.arrived[critical]-m.admitted[critical]
	if share := float64(refusedShed) / float64(refusedShed+refusedCrit); share < 0.99 {
		t.Errorf("sheddable share of the refusals %.4f, want at least 0.99", share)
	}
	t.Logf("critical %.4f admitted, sheddable %.4f; goodput %.3f of capacity", m.success(critical), m.success(sheddable), m.goodput(critical)+m.goodput(sheddable))
}

// TestCriticalBeyondCapacityTakesTheCap: offered four times the capacity,
// 30% critical: critical work alone is 1.2 times the capacity, so some of
// it is refused, but only when the cap is full of critical work: sheddable
// requests get at most 1% of the goodput, critical ones at least 90% of
// the capacity.
func TestCriticalBeyondCapacityTakesTheCap(t *testing.T) {
	m := prioritySim(4, 0.3)
	if g := m.goodput(sheddable); g > 0.01 {
		t.Errorf("sheddable goodput %.3f of capacity, want at most 0.01", g)
	}
	if g := m.goodput(critical); g < 0.9 {
		t.Errorf("critical goodput %.3f of capacity, want at least 0.9", g)
	}
}

// TestNoClassStarves: sheddable work keeps what critical work leaves. With
// critical requests 10% of four times the capacity (0.4 of it), critical
// ones still get 99%, and sheddable ones at least 0.3 of the capacity
// (half the 0.6 left: the rest covers the critical swings); with no
// critical traffic at all, the reserve does not idle: sheddable goodput is
// at least 95% of the capacity (the limit grows over the reserve).
func TestNoClassStarves(t *testing.T) {
	m := prioritySim(4, 0.1)
	if s := m.success(critical); s < 0.99 {
		t.Errorf("with 10%% critical: critical success %.4f, want at least 0.99", s)
	}
	if g := m.goodput(sheddable); g < 0.3 {
		t.Errorf("with 10%% critical: sheddable goodput %.3f of capacity, want at least 0.3", g)
	}
	m = prioritySim(4, 0)
	if g := m.goodput(sheddable); g < 0.95 {
		t.Errorf("without critical traffic: sheddable goodput %.3f of capacity, want at least 0.95", g)
	}
}
