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
