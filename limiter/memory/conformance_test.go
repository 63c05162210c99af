package memory_test

import (
	"github.com/ratekey/ratekey/internal/clocktest"
	"testing"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/limitertest"
	"github.com/ratekey/ratekey/limiter/memory"
)

// TestConformance runs the limiter contract's conformance suite on the
// memory store with a manual clock.
func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) (limiter.Limiter, limitertest.Clock) {
		clk := clocktest.NewManualClock()
		return memory.New(memory.Options{Clock: clk}), clk
	})
}

// TestConformanceShares runs the shares cases on a memory store shared by
// 3 processes (Options.Replicas 3), and on a WithReplicas(3) view of a
// store of one.
func TestConformanceShares(t *testing.T) {
	limitertest.RunShares(t, 3, func(t *testing.T) (limiter.Limiter, limitertest.Clock) {
		clk := clocktest.NewManualClock()
		return memory.New(memory.Options{Clock: clk, Replicas: 3}), clk
	})
	t.Run("view", func(t *testing.T) {
		limitertest.RunShares(t, 3, func(t *testing.T) (limiter.Limiter, limitertest.Clock) {
			clk := clocktest.NewManualClock()
			return memory.New(memory.Options{Clock: clk}).WithReplicas(3), clk
		})
	})
}

// TestConformancePrefetch runs the prefetch cases on the memory store, a
// store that decides every request where its bucket lives (k 0): a fleet
// of processes sharing it is one Limiter.
func TestConformancePrefetch(t *testing.T) {
	limitertest.RunPrefetch(t, 0, 0, func(t *testing.T, n int) ([]limiter.Limiter, limitertest.Clock) {
		clk := clocktest.NewManualClock()
		l := memory.New(memory.Options{Clock: clk})
		ls := make([]limiter.Limiter, n)
		for i := range ls {
			ls[i] = l
		}
		return ls, clk
	})
}
