package limitertest

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

// RunPrefetch runs the conformance cases of a store that may admit a
// token bucket's requests from tokens it took ahead of use (limiter/redis
// with Options.Prefetch k and PrefetchHold hold; k = 0 for a store that
// decides every request where the bucket lives, such as limiter/memory,
// which must pass the same cases). Such a store cannot give the exact
// Decisions of [Run] (a request admitted from held tokens reports what
// its process holds), so these cases pin what it keeps instead:
//
//   - a full bucket: one process admits exactly Burst tokens of it at one
//     instant, then rejects (prefetch never under-admits a process alone
//     from a full bucket); with k > 0 some admission is Prefetched;
//   - the bound: several processes, random calls of random costs (at most
//     k) over random clock steps, on buckets of different rates: from the
//     start the tokens admitted of a bucket never exceed Burst + rate·t,
//     and over any interval of length d never Burst + rate·(d + hold);
//   - all-or-nothing with a bucket decided where it lives (an in-flight
//     cap, which prefetch does not serve): a call refused by the cap
//     spends nothing of the prefetched bucket, so that bucket then admits
//     exactly the rest of its burst, in either order of the two.
//
// newFleet returns n Limiters that share every bucket (n processes on one
// store: the same Redis and key prefix; for a store without a shared
// state, one Limiter n times), fresh (every bucket full), all reading
// their time from now (as for a [Factory]); each call returns a new fleet
// that shares nothing with earlier ones.
func RunPrefetch(t *testing.T, k int64, hold time.Duration, newFleet func(t *testing.T, n int, now func() time.Time) []limiter.Limiter) {
	t.Run("PrefetchFullBucket", func(t *testing.T) {
		clk := clocktest.NewManualClock()
		testPrefetchFullBucket(t, newFleet(t, 1, clk.Time)[0], k)
	})
	t.Run("PrefetchBound", func(t *testing.T) {
		clk := clocktest.NewManualClock()
		testPrefetchBound(t, newFleet(t, 3, clk.Time), clk, k, hold)
	})
	t.Run("PrefetchAllOrNothing", func(t *testing.T) {
		clk := clocktest.NewManualClock()
		testPrefetchAllOrNothing(t, newFleet(t, 1, clk.Time)[0])
	})
}

// takeOne takes reqs on l in one call and returns their Decisions.
func takeOne(t *testing.T, l limiter.Limiter, reqs ...limiter.Request) []dec {
	t.Helper()
	d, err := l.Take(context.Background(), nil, reqs)
	if err != nil || len(d) != len(reqs) {
		t.Fatalf("Take(%+v) = %+v, %v", reqs, d, err)
	}
	return d
}

// testPrefetchFullBucket: burst 40 at 10/s, clock still at 0: 40 calls of
// cost 1 admitted, the 41st and a call of cost 2 rejected.
func testPrefetchFullBucket(t *testing.T, l limiter.Limiter, k int64) {
	r := req("pf-full", lim(10, time.Second, 40), 1)
	prefetched := 0
	for i := range 40 {
		d := takeOne(t, l, r)[0]
		if !d.Allowed {
			t.Fatalf("call %d of 40 on a full bucket of 40: %+v; want admitted", i+1, d)
		}
		if d.Prefetched {
			prefetched++
		}
	}
	for _, cost := range []int64{1, 2} {
		r.Cost = cost
		if d := takeOne(t, l, r)[0]; d.Allowed {
			t.Fatalf("cost %d after 40 admitted of a burst of 40: %+v; want rejected", cost, d)
		}
	}
	switch {
	case k > 1 && prefetched == 0:
		t.Errorf("no admission of 40 was Prefetched (prefetch %d)", k)
	case k == 0 && prefetched > 0:
		t.Errorf("%d admissions Prefetched by a store that does not prefetch", prefetched)
	}
}

// admission is tokens admitted of a bucket at a time.
type admission struct {
	at     time.Duration
	tokens int64
}

// testPrefetchBound: 3 processes, 3 buckets, 3000 calls over ~6 s of
// clock, checked against the bounds of RunPrefetch.
func testPrefetchBound(t *testing.T, ls []limiter.Limiter, clk *clocktest.ManualClock, k int64, hold time.Duration) {
	limits := []limiter.Limit{lim(1000, time.Second, 50), lim(50, time.Second, 10), lim(3, time.Second, 4)}
	rng := rand.New(rand.NewSource(20261205))
	got := make([][]admission, len(limits))
	var now time.Duration
	steps := 3000
	if testing.Short() {
		steps = 800
	}
	for range steps {
		now += time.Duration(rng.Int63n(int64(4 * time.Millisecond)))
		clk.Set(now)
		b := rng.Intn(len(limits))
		cost := 1 + rng.Int63n(max(1, min(k, limits[b].Burst, 4)))
		r := req(fmt.Sprintf("pf-bound-%d", b), limits[b], cost)
		if d := takeOne(t, ls[rng.Intn(len(ls))], r)[0]; d.Allowed {
			got[b] = append(got[b], admission{now, cost})
		}
	}
	for b, li := range limits {
		checkBound(t, li, got[b], now, hold)
	}
}

// checkBound checks the admissions of one bucket of li up to end: from 0,
// at most Burst + rate·t; over every interval between two admissions, at
// most Burst + rate·(d + hold); and that the bucket admitted something.
func checkBound(t *testing.T, li limiter.Limit, as []admission, end, hold time.Duration) {
	t.Helper()
	if len(as) == 0 {
		t.Fatalf("%+v: nothing admitted", li)
	}
	tokensIn := func(d time.Duration) int64 { return li.Burst + int64(d)/int64(li.Rate.Interval()) }
	var total int64
	for _, a := range as {
		total += a.tokens
		if total > tokensIn(a.at) {
			t.Fatalf("%+v: %d tokens admitted by %v; the bucket had at most %d", li, total, a.at, tokensIn(a.at))
		}
	}
	for i := range as {
		var sum int64
		for j := i; j < len(as); j++ {
			sum += as[j].tokens
			if d := as[j].at - as[i].at; sum > tokensIn(d+hold) {
				t.Fatalf("%+v: %d tokens admitted from %v to %v; at most %d (burst + rate·(d + hold %v))",
					li, sum, as[i].at, as[j].at, tokensIn(d+hold), hold)
			}
		}
	}
	t.Logf("%+v: %d tokens admitted by %v of at most %d", li, total, end, tokensIn(end))
}

// testPrefetchAllOrNothing: a call of a prefetchable bucket (burst 10)
// with an in-flight cap of 1, in both orders: the first admitted (the
// slot held), the next 4 refused by the cap; then the bucket alone admits
// exactly 9 more.
func testPrefetchAllOrNothing(t *testing.T, l limiter.Limiter) {
	for _, order := range []string{"bucket first", "cap first"} {
		bucket := req("pf-aon-bucket-"+order, lim(10, time.Hour, 10), 1)
		capped := req("pf-aon-cap-"+order, inFlight(1), 1)
		call := []limiter.Request{bucket, capped}
		if order == "cap first" {
			call = []limiter.Request{capped, bucket}
		}
		if d := takeOne(t, l, call...); !d[0].Allowed || !d[1].Allowed {
			t.Fatalf("%s: first call %+v; want both admitted", order, d)
		}
		for i := range 4 {
			if d := takeOne(t, l, call...); d[0].Allowed && d[1].Allowed {
				t.Fatalf("%s: call %d with the cap's slot held: %+v; want refused", order, i+2, d)
			}
		}
		for i := range 9 {
			if d := takeOne(t, l, bucket)[0]; !d.Allowed {
				t.Fatalf("%s: the bucket alone, call %d of the 9 tokens left: %+v; want admitted (a refused call spent tokens)", order, i+1, d)
			}
		}
		if d := takeOne(t, l, bucket)[0]; d.Allowed {
			t.Fatalf("%s: an 11th token of a burst of 10: %+v; want rejected", order, d)
		}
	}
}
