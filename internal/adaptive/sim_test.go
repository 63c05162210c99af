package adaptive

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"time"
)

// sim drives a Cap in virtual time (no clock, no sleep): an open-loop
// stream of requests, one every gap, arrives at the cap; those it admits
// run on a resource of capacity workers, first come first served, each for
// service (scripted by time), and release their slot, with their latency
// as the sample, when they finish. Deterministic for a seed.
type sim struct {
	cap *Cap
	set Settings
	// gap is the time between arrivals; critical is the share of them
	// that are critical (the rest sheddable).
	gap      time.Duration
	critical float64
	// capacity and service script the resource: capacity(t) workers,
	// each request taking service(t) (times 1 ± jitter/2 at random).
	capacity func(t time.Duration) int
	service  func(t time.Duration) time.Duration
	jitter   float64
	// slow, when it returns true for an admitted request's index, makes
	// it take 100× its service time (an outlier).
	slow func(i int) bool

	rng     *rand.Rand
	workers freeAt // when each worker is next free
	running running
	// What happened, per class: arrivals, admitted; and the limit and
	// held slots seen at every admission.
	arrived, admitted    [2]int
	limits               []point
	decidedLo, decidedHi int64 // the lowest and highest limit an Acquire decided against
	maxHeldOver          int64 // the most slots held beyond the limit after an admission (must stay <= 0)
	latencies            []time.Duration
	idx                  int
}

// point is the limit and latency estimates at an instant.
type point struct {
	t             time.Duration
	limit         int64
	latency, base time.Duration
}

// newSim returns a sim of a resource of c workers taking s per request,
// driven at rate × c/s requests per second.
func newSim(set Settings, c int, s time.Duration, rate float64) *sim {
	return &sim{cap: &Cap{}, set: set, gap: time.Duration(float64(s) / (rate * float64(c))),
		capacity: func(time.Duration) int { return c }, service: func(time.Duration) time.Duration { return s },
		rng: rand.New(rand.NewPCG(1, 2))}
}

// run drives the sim until t = d.
func (m *sim) run(d time.Duration) {
	for t := time.Duration(0); t < d; t += m.gap {
		m.finishUntil(t)
		m.resize(t)
		critical := m.rng.Float64() < m.critical
		cls := 0
		if critical {
			cls = 1
		}
		m.arrived[cls]++
		ok, held, lim := m.cap.Acquire(&m.set, critical)
		if m.decidedLo == 0 || lim < m.decidedLo {
			m.decidedLo = lim
		}
		m.decidedHi = max(m.decidedHi, lim)
		if !ok {
			continue
		}
		m.maxHeldOver = max(m.maxHeldOver, held-lim)
		m.admitted[cls]++
		svc := time.Duration(float64(m.service(t)) * (1 + m.jitter*(m.rng.Float64()-0.5)))
		if m.slow != nil && m.slow(m.idx) {
			svc *= 100
		}
		m.idx++
		begin := max(t, m.workers[0])
		m.workers[0] = begin + svc
		heap.Fix(&m.workers, 0)
		heap.Push(&m.running, job{start: t, end: begin + svc, critical: critical})
	}
}

// finishUntil releases every request that finished by t, in time order.
func (m *sim) finishUntil(t time.Duration) {
	for len(m.running) > 0 && m.running[0].end <= t {
		j := heap.Pop(&m.running).(job)
		m.latencies = append(m.latencies, j.end-j.start)
		if u, ok := m.cap.Release(&m.set, j.critical, true, int64(j.start), int64(j.end)); ok {
			m.limits = append(m.limits, point{j.end, u.Limit, u.Latency, u.Baseline})
		}
	}
}

// resize adds or removes workers to match capacity(t): a removed worker
// finishes what it runs.
func (m *sim) resize(t time.Duration) {
	c := m.capacity(t)
	for len(m.workers) < c {
		heap.Push(&m.workers, t)
	}
	for len(m.workers) > c {
		last := slices.Index(m.workers, slices.Max(m.workers))
		heap.Remove(&m.workers, last)
	}
}

// limitAt returns the limit in force at t (the last update before it).
func (m *sim) limitAt(t time.Duration) int64 {
	l := m.set.Min
	for _, p := range m.limits {
		if p.t > t {
			break
		}
		l = p.limit
	}
	return l
}

// limitRange returns the lowest and highest limit in force during [from, to).
func (m *sim) limitRange(from, to time.Duration) (lo, hi int64) {
	lo, hi = m.limitAt(from), m.limitAt(from)
	for _, p := range m.limits {
		if p.t >= from && p.t < to {
			lo, hi = min(lo, p.limit), max(hi, p.limit)
		}
	}
	return lo, hi
}

type job struct {
	start, end time.Duration
	critical   bool
}

// running is a min-heap of jobs by end.
type running []job

func (h running) Len() int           { return len(h) }
func (h running) Less(i, j int) bool { return h[i].end < h[j].end }
func (h running) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *running) Push(x any)        { *h = append(*h, x.(job)) }
func (h *running) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// freeAt is a min-heap of the instants workers are next free.
type freeAt []time.Duration

func (h freeAt) Len() int           { return len(h) }
func (h freeAt) Less(i, j int) bool { return h[i] < h[j] }
func (h freeAt) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *freeAt) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *freeAt) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
