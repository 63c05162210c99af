package memory_test

import (
	"testing"
	"time"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/limitertest"
	"github.com/ratekey/ratekey/limiter/memory"
)

// TestConformance runs the limiter contract's conformance suite on the
// memory store with a manual clock.
func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, now func() time.Time) limiter.Limiter {
		return memory.New(memory.Options{Now: now})
	})
}

// TestConformanceShares runs the shares cases on a memory store shared by
// 3 processes (Options.Replicas 3), and on a WithReplicas(3) view of a
// store of one.
func TestConformanceShares(t *testing.T) {
	limitertest.RunShares(t, 3, func(t *testing.T, now func() time.Time) limiter.Limiter {
		return memory.New(memory.Options{Now: now, Replicas: 3})
	})
	t.Run("view", func(t *testing.T) {
		limitertest.RunShares(t, 3, func(t *testing.T, now func() time.Time) limiter.Limiter {
			return memory.New(memory.Options{Now: now}).WithReplicas(3)
		})
	})
}

// TestConformancePrefetch runs the prefetch cases on the memory store, a
// store that decides every request where its bucket lives (k 0): a fleet
// of processes sharing it is one Limiter.
func TestConformancePrefetch(t *testing.T) {
	limitertest.RunPrefetch(t, 0, 0, func(t *testing.T, n int, now func() time.Time) []limiter.Limiter {
		l := memory.New(memory.Options{Now: now})
		ls := make([]limiter.Limiter, n)
		for i := range ls {
			ls[i] = l
		}
		return ls
	})
}
