package main

import (
	"fmt"
	"time"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/policy"
)

// scenario is one run of a stack: its load, the capacity over time, what
// each second saw and the adaptive cap's reports.
type scenario struct {
	name     string
	rate     float64 // requests a second
	critical float64 // the share of them that is critical
	secs     int
	steps    []step // capacity changes
	run      *run
	reports  []report
}

// step is a change of the resource's capacity at second at.
type step struct{ at, capacity int }

// capacityAt returns the resource's capacity in second sec.
func (sc *scenario) capacityAt(sec float64) int {
	c := capacity
	for _, s := range sc.steps {
		if sec >= float64(s.at) {
			c = s.capacity
		}
	}
	return c
}

// results are every scenario of one run.
type results struct {
	unloaded, adaptive, nolimit, halving *scenario
	sweep                                []*scenario // fixed caps, by sweepCaps
	prio                                 []*scenario // at 2x and 3x
	started                              time.Time
	loadStart                            string
}

// sweepCaps are the fixed caps the sweep tries.
var sweepCaps = []int64{4, 6, 8, 9, 10, 12, 16, 24, 32}

// The demo's adaptive policy (cmd/demo/default.yaml's work, without its
// priorities unless asked).
func adaptivePolicy(priorities bool) *ratekey.Policy {
	p := &ratekey.Policy{Name: "work", Limit: limiter.Limit{MinInFlight: 2, MaxInFlightCeiling: 64}}
	if priorities {
		p.Reserved, p.Priorities = 0.2, []policy.Priority{{Plan: "pro", Class: policy.ClassCritical}}
	}
	return p
}

// runAll runs every scenario, durations times scale.
func runAll(scale float64) (*results, error) {
	full := 4 * capacity / unit.Seconds() // 4x the capacity, requests a second
	secs := func(s float64) int { return max(int(s*scale), 2) }
	res := &results{started: time.Now(), loadStart: loadAverage()}
	var err error
	do := func(name string, p *ratekey.Policy, rate float64, n int, critical float64, steps ...step) *scenario {
		if err != nil {
			return nil
		}
		var sc *scenario
		sc, err = runScenario(name, p, rate, n, critical, steps)
		return sc
	}
	res.unloaded = do("unloaded", adaptivePolicy(false), full/16, secs(5), 0)
	res.adaptive = do("adaptive", adaptivePolicy(false), full, secs(30), 0)
	for _, n := range sweepCaps {
		res.sweep = append(res.sweep, do(fmt.Sprintf("fixed %d", n), &ratekey.Policy{Name: "work", Limit: limiter.Limit{MaxInFlight: n}}, full, secs(8), 0))
	}
	res.nolimit = do("no cap", nil, full, secs(10), 0)
	h := secs(15)
	res.halving = do("halving", adaptivePolicy(false), full, 3*h, 0, step{h, capacity / 2}, step{2 * h, capacity})
	res.prio = append(res.prio, do("priorities 2x", adaptivePolicy(true), full/2, secs(30), 0.3))
	res.prio = append(res.prio, do("priorities 3x", adaptivePolicy(true), 3*full/4, secs(20), 0.3))
	return res, err
}

// runScenario builds a stack with policy p (nil: none) and drives it at
// rate for n seconds, changing the capacity at steps.
func runScenario(name string, p *ratekey.Policy, rate float64, n int, critical float64, steps []step) (*scenario, error) {
	s, err := newStack(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	sc := &scenario{name: name, rate: rate, critical: critical, secs: n, steps: steps}
	var timers []*time.Timer
	for _, st := range steps {
		timers = append(timers, time.AfterFunc(time.Duration(st.at)*time.Second, func() { s.res.SetCapacity(st.capacity) }))
	}
	sc.run = drive(s.local, rate, time.Duration(n)*time.Second, critical, 1<<17)
	for _, t := range timers {
		t.Stop()
	}
	sc.reports = s.limits.since(sc.run.start)
	fmt.Printf("%-14s %5.0f/s %3d s: %s\n", name, rate, n, sc.summary(0, n))
	return sc, nil
}

// summary is one line of what seconds [from, to) saw.
func (sc *scenario) summary(from, to int) string {
	w := sc.run.window(from, to)
	return fmt.Sprintf("goodput %4.0f/s, p50 %5.1f ms, p99 %7.1f ms, refused %d, other %d, limit median %s",
		w.goodput(to-from), ms(w.quantile(0.5)), ms(w.quantile(0.99)), w.refused[0]+w.refused[1], w.other, sc.limitText(from, to))
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
