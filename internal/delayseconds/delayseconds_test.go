package delayseconds

import (
	"math"
	"testing"
	"time"
)

func TestCeilSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{1, 1},
		{time.Second - 1, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{1500 * time.Millisecond, 2},
		{math.MaxInt64, 9223372037}, // 9223372036.854775807 s, rounded up without overflow
	}
	for _, tt := range tests {
		if got := Ceil(tt.d); got != tt.want {
			t.Errorf("Ceil(%d) = %d, want %d", tt.d, got, tt.want)
		}
	}
}
