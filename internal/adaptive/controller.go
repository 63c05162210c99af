package adaptive

import (
	"slices"
	"time"
)

// The controller's constants: see the package documentation for what each
// bounds and why.
const (
	// minSamples is the fewest samples a window closes with.
	minSamples = 16
	// maxSamples is the most a window keeps (a uniform reservoir of them
	// when more arrive).
	maxSamples = 64
	// minWindow is the shortest a window lasts; it lasts at least four
	// times the last window's median latency too (a probe window, eight
	// times). Its samples are those of requests started at least twice
	// that median before it closes (see close).
	minWindow = 100 * time.Millisecond
	// tolerance: a window whose median is above tolerance × the baseline
	// shows a queue, and cuts the limit; one at most growBelow × the
	// baseline shows none, and lets the limit grow; in between, the limit
	// holds.
	tolerance = 1.15
	growBelow = 1.05
	// maxCut: one window lowers the limit by at most a quarter.
	maxCut = 0.75
	// growth: once cut, one window raises the limit by limit/growth (at
	// least 1); before the first cut, it doubles it.
	growth = 16
	// probeFloor: a decline cuts the limit to no less than 1/probeFloor
	// of where it started (or Min); probeWindows windows there whose
	// latency is still above tolerance re-anchor the baseline.
	probeFloor   = 4
	probeWindows = 3
	// fall: a window median below the baseline, but within tolerance of
	// it, lowers it by 1/fall of the difference (one further below is
	// the baseline at once).
	fall = 8
	// probeEvery is the mean number of windows between two probe
	// windows (each drawn uniformly from half to one and a half times
	// it), which run at half the limit to see the latency without a
	// queue.
	probeEvery = 50
	// maxEvery bounds Cap.every: a busy cap samples at least one request
	// in maxEvery, so a window still closes soon when traffic falls.
	maxEvery = 1 << 12
)

// Update is what a window's close decided: the limit before and after
// (equal when it did not move) and the latency estimates it used.
type Update struct {
	Limit, Previous   int64
	Baseline, Latency time.Duration
}

// controller is a Cap's latency estimator and limit rule, guarded by the
// Cap's mu. Its zero value starts the first window at time 0.
type controller struct {
	start   int64 // the window's start: samples of requests started earlier are not its
	n, seen int   // samples kept, and offered (for the reservoir)
	samples [maxSamples]sample
	maxHeld int64 // the most slots held at a sampled release in the window
	// baseline is the latency without a queue (ns): see settle. 0 before
	// the first window.
	baseline int64
	recent   int64 // the last window's median (ns)
	cut      bool  // a window has cut the limit: growth is additive from then on
	calm     int   // windows within tolerance since the last step up or cut
	// decline is the limit where the current run of windows above
	// tolerance started (0 when the last window was within it), and how
	// many of them found the limit at its floor.
	decline struct {
		limit int64
		low   int
	}
	// probeIn counts the windows until the next probe is due (0: due);
	// probing is true during a probe window.
	probeIn int
	probing bool
	rng     uint64 // xorshift state: the reservoir, the probes' jitter
}

// observe takes the sample of a request that ran from start to now while
// held slots were held (its own included), and closes the window when it
// is due, returning its Update.
func (k *controller) observe(c *Cap, s *Settings, start, now, held int64) (Update, bool) {
	if start < k.start {
		// Started in an earlier window, under an older limit: its latency
		// says nothing of this one's (Envoy's issue 11579).
		return Update{}, false
	}
	k.maxHeld = max(k.maxHeld, held)
	k.add(sample{start, now - start})
	span := 4 * k.recent
	if k.probing {
		span *= 2 // the queue of the window before must drain
	}
	if k.n < minSamples || now-k.start < max(int64(minWindow), span) {
		return Update{}, false
	}
	return k.close(c, s, now), true
}

// sample is one request's start and latency, in nanoseconds.
type sample struct{ start, latency int64 }

// add keeps sample x in the window's reservoir: every sample offered has
// the same chance to be among the kept ones.
func (k *controller) add(x sample) {
	k.seen++
	if k.n < maxSamples {
		k.samples[k.n] = x
		k.n++
		return
	}
	if j := k.random(k.seen); j < maxSamples {
		k.samples[j] = x
	}
}

// settledLatencies copies into buf the latencies of the window's samples
// of requests started at least twice the last median before now, and
// returns them: a request started later has finished only if it was fast,
// so the window's last stretch would bias its median low (at a limit past
// the capacity, toward the requests that did not queue). When too few
// are that old (the first window, a sudden slowdown), it returns them all.
func (k *controller) settledLatencies(buf *[maxSamples]int64, now int64) []int64 {
	n := 0
	for _, x := range k.samples[:k.n] {
		if x.start <= now-2*k.recent {
			buf[n] = x.latency
			n++
		}
	}
	if n >= minSamples/2 {
		return buf[:n]
	}
	for i, x := range k.samples[:k.n] {
		buf[i] = x.latency
	}
	return buf[:k.n]
}

// random returns a pseudo-random number in [0, n).
func (k *controller) random(n int) int {
	if k.rng == 0 {
		k.rng = 0x9e3779b97f4a7c15
	}
	k.rng ^= k.rng << 13
	k.rng ^= k.rng >> 7
	k.rng ^= k.rng << 17
	return int(k.rng % uint64(n))
}

// close ends the window at now: it sets the limit the window's median
// calls for, publishes the estimates and starts the next window.
func (k *controller) close(c *Cap, s *Settings, now int64) Update {
	var buf [maxSamples]int64
	m := median(k.settledLatencies(&buf, now))
	prev := c.Limit(s)
	next, probe := prev, false
	if k.probing {
		// The probe window's median is the latency without a queue (it
		// serves nothing else): one clearly lower is the baseline, one
		// lower within the noise takes it half way there.
		if tolerance*float64(m) < float64(k.baseline) {
			k.baseline = m
		} else {
			k.baseline -= max((k.baseline-m)/2, 0)
		}
	} else {
		k.settle(m)
		next = k.next(s, prev, m)
		probe = k.probe(prev, next)
	}
	if next != prev || probe != k.probing {
		c.setLimit(next, probe)
	}
	k.probing = probe
	c.endWindow()
	// Sample about 4 × maxSamples requests per window: those offered,
	// times one in every, were all the window's.
	c.every.Store(min(max(int64(k.seen)*max(c.every.Load(), 1)/(4*maxSamples), 1), maxEvery))
	k.recent = m
	k.start, k.n, k.seen, k.maxHeld = now, 0, 0, 0
	c.baseline.Store(k.baseline)
	c.latency.Store(m)
	return Update{Limit: next, Previous: prev, Baseline: time.Duration(k.baseline), Latency: time.Duration(m)}
}

// median returns the middle of v (the upper one of an even count),
// sorting v.
func median(v []int64) int64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// settle lowers the baseline by a window whose median m is below it: the
// first window's median is the baseline; one below the baseline by more
// than the tolerance (a service clearly faster) becomes it at once, and a
// probe is due (the window may have held a queue all the same); one below
// it within the tolerance (noise, most likely) lowers it by 1/fall of the
// difference. The baseline rises only when a decline re-anchors it (see
// next).
func (k *controller) settle(m int64) {
	switch {
	case k.baseline == 0:
		k.baseline, k.probeIn = m, k.probeGap()
	case tolerance*float64(m) < float64(k.baseline):
		k.baseline, k.probeIn = m, 0 // a probe confirms it soon
	case m < k.baseline:
		k.baseline -= max((k.baseline-m)/fall, 1)
	}
}

// probe reports whether the window to come is a probe window, in which
// sheddable requests may hold at most half the limit (less what critical
// work needs: see Cap.admits). A probe is due every probeEvery windows or
// so (jittered, so that processes started together drift apart), and at
// once when the baseline fell at once or was re-anchored (its new value
// may hold a queue); a due probe runs after a window that used at least
// half the limit lim with latency within tolerance (next, its new limit,
// is not lower). Half the limit then lets the queue of the equilibrium
// (up to tolerance × the baseline) drain, and the probe window's median
// is the latency without one, which lowers a baseline left too high.
func (k *controller) probe(lim, next int64) bool {
	if k.probeIn > 0 {
		k.probeIn--
		return false
	}
	if next < lim || 2*k.maxHeld < lim || lim < 2 {
		return false // due: it waits for a calm, busy window
	}
	k.probeIn = k.probeGap()
	return true
}

// probeGap returns the windows until the next probe: probeEvery/2 to
// 3·probeEvery/2, at random.
func (k *controller) probeGap() int { return probeEvery/2 + k.random(probeEvery+1) }

// next returns the limit after a window whose median was m, from limit
// lim:
//
//   - m at most growBelow × the baseline: no queue. The limit grows when
//     the window used at least half of it (else latency says nothing of
//     it): doubling until the first cut, then by lim/growth (at least 1)
//     after two such windows in a row (the second shows whether the step
//     built a queue).
//   - m above that, at most tolerance × the baseline: a small queue; the
//     limit holds, and the count of windows without one starts again.
//   - m above: a queue. The limit becomes lim × tolerance × baseline / m
//     (the gradient: where the latency would be within tolerance, were
//     it proportional to the concurrency), but at least maxCut × lim, and
//     not below the decline's floor: a quarter of the limit where the run
//     of windows above tolerance started, or Min. At the floor, the
//     limit stays; probeWindows windows there still above tolerance show
//     that the latency is not a queue (a quarter of the concurrency would
//     have emptied one): their last median becomes the baseline, and a
//     probe is due.
func (k *controller) next(s *Settings, lim, m int64) int64 {
	if float64(m) <= tolerance*float64(k.baseline) {
		k.decline.limit, k.decline.low = 0, 0
		switch {
		case 2*k.maxHeld < lim:
			return lim
		case float64(m) > growBelow*float64(k.baseline):
			k.calm = 0 // a short queue: growing takes two windows without one
			return lim
		case !k.cut:
			return s.clamp(2 * lim)
		}
		if k.calm++; k.calm < 2 {
			return lim // the next window shows whether the last step built a queue
		}
		k.calm = 0
		return s.clamp(lim + max(1, lim/growth))
	}
	k.calm = 0
	if k.decline.limit == 0 {
		k.decline.limit = lim
	}
	floor := s.clamp(k.decline.limit / probeFloor)
	if lim <= floor {
		if k.decline.low++; k.decline.low >= probeWindows {
			k.baseline, k.probeIn = m, 0
			k.decline.limit, k.decline.low = 0, 0
		}
		return lim
	}
	k.cut = true
	g := max(tolerance*float64(k.baseline)/float64(m), maxCut)
	return max(s.clamp(int64(float64(lim)*g)), floor)
}
