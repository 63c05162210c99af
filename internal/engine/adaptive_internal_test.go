package engine

import (
	"runtime"
	"testing"

	"github.com/ratekey/ratekey/limiter/memory"
)

// TestCapsOfSharesAndForgets: every RateLimiter on one store shares its
// registry of adaptive caps, another store has its own, and the entry of a
// store goes once the store is collected (the registry holds it weakly: a
// program that rebuilds its middleware, and a memory store with it, on
// every configuration change would otherwise keep every store alive).
func TestCapsOfSharesAndForgets(t *testing.T) {
	held := func(regs ...*capRegistry) int {
		n := 0
		adaptiveCaps.Range(func(_, v any) bool {
			for _, r := range regs {
				if v == r {
					n++
				}
			}
			return true
		})
		return n
	}
	var ra, rb *capRegistry
	func() {
		a, b := memory.New(memory.Options{}), memory.New(memory.Options{})
		ra, rb = capsOf(a), capsOf(b)
		if capsOf(a) != ra || ra == rb {
			t.Error("one store's registry is not shared, or two stores share one")
		}
		if n := held(ra, rb); n != 2 {
			t.Errorf("%d entries for the two stores, want 2", n)
		}
		runtime.KeepAlive(a)
		runtime.KeepAlive(b)
	}()
	for range 100 {
		runtime.GC()
		runtime.Gosched()
		if held(ra, rb) == 0 {
			return
		}
	}
	t.Errorf("%d entries left after the stores were collected, want 0", held(ra, rb))
}
