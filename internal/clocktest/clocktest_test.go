package clocktest

import (
	"testing"
	"time"
)

func TestManualClock(t *testing.T) {
	var zero ManualClock
	c := NewManualClock()
	if zero.Now() != 0 || c.Now() != 0 {
		t.Fatal("new clocks must read 0")
	}
	c.Advance(time.Second)
	c.Advance(500 * time.Millisecond)
	if got := c.Now(); got != 1500*time.Millisecond {
		t.Errorf("after Advance: %v", got)
	}
	c.Set(10 * time.Second)
	if got := c.Now(); got != 10*time.Second {
		t.Errorf("after Set: %v", got)
	}
}
