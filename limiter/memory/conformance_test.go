package memory_test

import (
	"testing"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/limitertest"
	"github.com/ratekey/ratekey/limiter/memory"
)

// TestConformance runs the limiter contract's conformance suite on the
// memory store with a manual clock.
func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) (limiter.Limiter, limitertest.Clock) {
		clk := memory.NewManualClock()
		return memory.New(memory.Options{Clock: clk}), clk
	})
}
