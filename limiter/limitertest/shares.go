package limitertest

import (
	"math/rand"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

// RunShares runs the conformance cases of a store that n processes share
// without a shared store (limiter/memory's Options.Replicas n): given the
// whole limits, it must decide every request exactly as the contract
// decides the request at its [limiter.Limit.Share] of n, token buckets,
// delay shaping and in-flight caps alike, in the bucket the whole limit
// names. newLimiter returns such a store, as for [Run].
func RunShares(t *testing.T, n int64, newLimiter Factory) {
	t.Run("SharesRandom", func(t *testing.T) {
		clk := clocktest.NewManualClock()
		testSharesRandom(t, &harness{l: diagnosticsCleared{newLimiter(t, clk.Time)}, clk: clk}, n)
	})
	t.Run("SharesSettle", func(t *testing.T) {
		clk := clocktest.NewManualClock()
		testSharesSettle(t, &harness{l: diagnosticsCleared{newLimiter(t, clk.Time)}, clk: clk}, n)
	})
}

// sharedLimits are limits whose shares of 3 are distinct shapes (so the
// reference, which names buckets by the share's shape, keeps them apart as
// the store does by the whole limit's) and keep at least one token or
// slot.
var sharedLimits = []limiter.Limit{
	lim(2, time.Second, 3), // share: 2 per 3 s, burst 1
	lim(3, time.Second, 7), // share: 3 per 3 s, burst 2
	{Rate: limiter.Rate{Count: 2, Per: time.Second}, Burst: 9, DelayAfter: 4},                    // burst 3, delay_after 1
	{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 12, DelayAfter: 9, MaxDelay: 5 * ms}, // burst 4, delay_after 3
	lim(1000, time.Second, 20), // share: 1000 per 3 s, burst 6
	lim(1, time.Hour, 30),      // share: 1 per 3 h, burst 10
	inFlight(6),                // share: 2 slots
}

// testSharesRandom: random traces of calls with the whole limits, against
// the reference model given their shares of n; in-flight slots are
// released at random.
func testSharesRandom(t *testing.T, h *harness, n int64) {
	keys := []string{"a", "b", "per-account|tenant=acme|account=alice"}
	rng := rand.New(rand.NewSource(20261205))
	steps := 600
	if testing.Short() {
		steps = 150
	}
	m := newModel()
	type holding struct{ whole, shared []limiter.Request }
	var held []holding
	var now time.Duration
	for st := range steps {
		if len(held) > 0 && rng.Intn(4) == 0 {
			k := rng.Intn(len(held))
			hd := held[k]
			held = append(held[:k], held[k+1:]...)
			ds := make([]dec, len(hd.whole))
			for i := range ds {
				ds[i].Slot = 1
			}
			h.release(t, hd.whole, ds)
			for i := range hd.shared {
				m.release(&hd.shared[i])
			}
			continue
		}
		now += time.Duration(rng.Int63n(int64(2 * time.Second)))
		h.at(now)
		whole := make([]limiter.Request, 1+rng.Intn(3))
		shared := make([]limiter.Request, len(whole))
		for i := range whole {
			li := sharedLimits[rng.Intn(len(sharedLimits))]
			s, err := li.Share(n)
			if err != nil {
				t.Fatal(err)
			}
			cost := int64(1)
			if rng.Intn(4) == 0 {
				cost = 1 + rng.Int63n(max(s.Burst, s.MaxInFlight)+1) // now and then one that never fits
			}
			whole[i] = limiter.Request{Key: keys[rng.Intn(len(keys))], Limit: li, Cost: cost, DryRun: rng.Intn(6) == 0}
			shared[i] = whole[i]
			shared[i].Limit = s
		}
		want := m.call(shared, int64(now), false)
		peek := h.peek(t, whole...)
		got := h.take(t, whole...)
		wantTake := m.call(shared, int64(now), true)
		var slots holding
		for i := range whole {
			if peek[i] != want[i] || slotted(got)[i] != wantTake[i] {
				t.Fatalf("step %d request %d of %+v (shares %+v): Take %+v, Peek %+v; reference %+v, %+v", st, i, whole, shared, got[i], peek[i], wantTake[i], want[i])
			}
			if got[i].Slot != 0 {
				slots.whole = append(slots.whole, whole[i])
				slots.shared = append(slots.shared, shared[i])
			}
		}
		if len(slots.whole) > 0 {
			held = append(held, slots)
		}
	}
}
