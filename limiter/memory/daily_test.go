package memory

import (
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter"
)

// TestDailyQuotaExpiry: a state of a daily quota (1000/d) carries
// information until its bucket is full again, a day after it was emptied,
// and not a nanosecond longer: a full store refuses a new key until then
// (the abuser's debt is never evicted), with the exact wait, and takes it
// at that instant.
func TestDailyQuotaExpiry(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 1, Now: clk.Time})
	day := lim(1000, 24*time.Hour, 1000)
	if d := mustTake(t, l, limiter.Request{Key: "p|tenant=acme", Limit: day, Cost: 1000})[0]; !d.Allowed || d.ResetAfter != 24*time.Hour {
		t.Fatalf("spend the quota: %+v", d)
	}
	other := []limiter.Request{{Key: "p|tenant=beta", Limit: day, Cost: 1}}
	for _, tc := range []struct{ at, want time.Duration }{
		{0, 24 * time.Hour},
		{12 * time.Hour, 12 * time.Hour},
		{24*time.Hour - 1, 1},
	} {
		clk.Set(tc.at)
		_, err := l.Take(t.Context(), nil, other)
		if got := capacityWait(t, "Take at "+tc.at.String(), err); got != tc.want {
			t.Errorf("Take at %v: RetryAfter = %v; want %v", tc.at, got, tc.want)
		}
	}
	clk.Set(24 * time.Hour)
	if d := mustTake(t, l, other...)[0]; !d.Allowed || d.Remaining != 999 || d.ResetAfter != 86400*ms {
		t.Errorf("new key at 24 h = %+v; want admitted, 999 left, full in 86.4 s", d)
	}
	checkCount(t, l)
}
