package adaptive

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestNoUpdateRacesAcquirePastLimit: 64 goroutines acquire and release
// as fast as they can, critical and sheddable, while a limit updater
// alternates the limit between 32 and 2 (what the controller does, with
// the same compare-and-swap). Every admission's count, its own slot
// included, must be within the limit it decided against: a
// check-then-increment cap (Netflix concurrency-limits issue 234) fails
// this as soon as two goroutines pass the check at the last free slot, or
// one reads 32 before a lowering and increments after it. After each
// lowering, once the slots held have drained to 2, the updater watches the
// word: no acquire may take it past 2. The count at the end is 0. Run
// with -race in CI.
func TestNoUpdateRacesAcquirePastLimit(t *testing.T) {
	c := New()
	s := &Settings{Min: 1, Ceiling: 64}
	acquires := 300_000 // per goroutine
	if raceEnabled {
		acquires = 5_000
	}
	var running atomic.Int64
	var over atomic.Int64 // admissions whose count passed the limit they saw
	var wg sync.WaitGroup
	running.Store(64)
	for g := range 64 {
		wg.Go(func() {
			defer running.Add(-1)
			critical := g%2 == 0
			for range acquires {
				ok, held, lim := c.Acquire(s, critical)
				if !ok {
					continue
				}
				if held > lim {
					over.Add(1)
				}
				c.Release(s, critical, false, 0, 0)
			}
		})
	}
	var rounds, passed int
	wg.Go(func() {
		for running.Load() > 0 {
			rounds++
			c.setLimit(32, false)
			runtime.Gosched()
			c.setLimit(2, false)
			drained := false
			for range 1000 {
				h := word(c.word.Load()).held()
				if drained && h > 2 {
					passed++
					break
				}
				drained = drained || h <= 2
			}
			runtime.Gosched()
		}
	})
	wg.Wait()
	if passed > 0 {
		t.Errorf("in %d of %d rounds an acquire took the cap past a lowered limit of 2", passed, rounds)
	}
	if n := over.Load(); n > 0 {
		t.Errorf("%d admissions held more slots than the limit they decided against", n)
	}
	if w := word(c.word.Load()); w.held() != 0 || w.critical() != 0 {
		t.Errorf("after every release: held %d, critical %d, want 0 and 0", w.held(), w.critical())
	}
}

// TestInterleavings puts a limit update, or another acquire, between an
// Acquire's read of the word and its swap, where a check-then-increment
// cap lets both through: the Acquire must see the change and refuse.
func TestInterleavings(t *testing.T) {
	s := &Settings{Min: 1, Ceiling: 64}
	for _, tc := range []struct {
		name        string
		limit, held int64
		between     func(c *Cap)
	}{
		{"the limit is lowered to the slots held", 8, 1, func(c *Cap) { c.setLimit(1, false) }},
		{"another acquire takes the last slot", 2, 1, func(c *Cap) {
			if ok, _, _ := c.Acquire(s, true); !ok {
				t.Error("the other acquire was refused")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New()
			c.word.Store(uint64(word(tc.held).with(tc.limit, false)))
			afterRead = func() {
				afterRead = nil
				tc.between(c)
			}
			defer func() { afterRead = nil }()
			ok, _, lim := c.Acquire(s, true)
			if w := word(c.word.Load()); ok || w.held() > w.limit() {
				t.Errorf("admitted: %v against limit %d, held %d of limit %d now", ok, lim, w.held(), w.limit())
			}
		})
	}
}
