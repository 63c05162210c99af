package main

import (
	"fmt"
	"slices"
	"time"
)

// limitAt returns the adaptive limit in force at t of the run (the last
// report before it; the policy's minimum, 2, before the first), or 0 for
// a run without reports (no adaptive cap).
func (sc *scenario) limitAt(t time.Duration) int64 {
	if len(sc.reports) == 0 {
		return 0
	}
	l := int64(2)
	for _, r := range sc.reports {
		if r.t > t {
			break
		}
		l = r.limit
	}
	return l
}

// secondLimits returns the limit in force at each of 20 instants spread
// over second sec, sorted.
func (sc *scenario) secondLimits(sec int) []int64 {
	var ls []int64
	for i := range 20 {
		ls = append(ls, sc.limitAt(time.Duration(sec)*time.Second+time.Duration(i)*50*time.Millisecond))
	}
	slices.Sort(ls)
	return ls
}

// medianLimit returns the median limit in force over second sec.
func (sc *scenario) medianLimit(sec int) int64 { return sc.secondLimits(sec)[10] }

// limitText describes the limit over seconds [from, to): the median of
// the per-second medians, and their range; "-" without an adaptive cap.
func (sc *scenario) limitText(from, to int) string {
	if len(sc.reports) == 0 {
		return "-"
	}
	var ms []int64
	for s := from; s < to; s++ {
		ms = append(ms, sc.medianLimit(s))
	}
	slices.Sort(ms)
	return fmt.Sprintf("%d (%d..%d)", ms[len(ms)/2], ms[0], ms[len(ms)-1])
}

// settled returns the first second from which (to second to) every
// second's median limit is within [lo, hi], counted from second from;
// -1 if none is.
func (sc *scenario) settled(from, to int, lo, hi float64) int {
	first := -1
	for s := from; s < to; s++ {
		m := float64(sc.medianLimit(s))
		switch {
		case m < lo || m > hi:
			first = -1
		case first < 0:
			first = s
		}
	}
	if first < 0 {
		return -1
	}
	return first - from
}

// settledAt returns when, to the report, the limit entered [lo, hi] for
// good in [from, to) seconds: the time of the first report from which
// every report is within, measured from second from; -1 if none.
func (sc *scenario) settledAt(from, to int, lo, hi int64) time.Duration {
	at := time.Duration(-1)
	start, end := time.Duration(from)*time.Second, time.Duration(to)*time.Second
	for _, r := range sc.reports {
		if r.t < start || r.t >= end {
			continue
		}
		switch {
		case r.limit < lo || r.limit > hi:
			at = -1
		case at < 0:
			at = r.t - start
		}
	}
	return at
}
