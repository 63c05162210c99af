package memory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
)

// manualClock is a clock that moves only when told to: its Time method is
// the [memory.Options] Now a test injects to decide at chosen times. Safe
// for concurrent use.
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) Time() time.Time         { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) Elapsed() time.Duration  { return time.Duration(c.ns.Load()) }
func (c *manualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// A per-account limit of 2 requests per second with a burst of 3 (nginx
// "rate=2r/s burst=2 nodelay"), next to a per-tenant limit, on a manual
// clock. Both are spent together or not at all.
func ExampleLimiter_Take() {
	clock := &manualClock{}
	lim := memory.New(memory.Options{Now: clock.Time})
	rate, _ := limiter.ParseRate("2r/s")
	reqs := []limiter.Request{
		{Key: "per-account|account=alice", Limit: limiter.Limit{Rate: rate, Burst: 3}, Cost: 1},
		{Key: "per-tenant|tenant=acme", Limit: limiter.Limit{Rate: rate, Burst: 10}, Cost: 1},
	}
	show := func() {
		ds, err := lim.Take(context.Background(), nil, reqs)
		if err != nil {
			fmt.Println("error:", err) // unknown outcome: apply the fail mode
			return
		}
		// Charged iff every decision is allowed. An allowed decision of an
		// uncharged call reports the bucket as the charge would leave it.
		charged := ds[0].Allowed && ds[1].Allowed
		a := ds[0]
		fmt.Printf("t=%v charged=%v account: allowed=%v remaining=%d retry_after=%v reset_after=%v; tenant: allowed=%v remaining=%d\n",
			clock.Elapsed(), charged, a.Allowed, a.Remaining, a.RetryAfter, a.ResetAfter, ds[1].Allowed, ds[1].Remaining)
	}
	for range 4 {
		show()
	}
	clock.Advance(500 * time.Millisecond)
	show()

	// Output:
	// t=0s charged=true account: allowed=true remaining=2 retry_after=0s reset_after=500ms; tenant: allowed=true remaining=9
	// t=0s charged=true account: allowed=true remaining=1 retry_after=0s reset_after=1s; tenant: allowed=true remaining=8
	// t=0s charged=true account: allowed=true remaining=0 retry_after=0s reset_after=1.5s; tenant: allowed=true remaining=7
	// t=0s charged=false account: allowed=false remaining=0 retry_after=500ms reset_after=1.5s; tenant: allowed=true remaining=6
	// t=500ms charged=true account: allowed=true remaining=0 retry_after=0s reset_after=1.5s; tenant: allowed=true remaining=7
}
