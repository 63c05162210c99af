package memory

import (
	"fmt"
	"math/big"
	"math/rand"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

// refBucket is the slow, obviously correct reference: a token bucket holding
// an exact rational number of tokens, refilled at 1/T tokens per nanosecond
// (T = Rate.Interval(), the rate the limiter promises to enforce).
type refBucket struct {
	tokens *big.Rat
	last   int64
}

// refLimiter holds reference buckets by key.
type refLimiter map[string]*refBucket

// bucket returns key's bucket refilled to now (a copy; the caller decides
// whether to keep it).
func (r refLimiter) bucket(key string, l limiter.Limit, now int64) *refBucket {
	burst := new(big.Rat).SetInt64(l.Burst)
	b, ok := r[key]
	if !ok {
		return &refBucket{tokens: burst, last: now}
	}
	refill := big.NewRat(now-b.last, int64(l.Rate.Interval()))
	tok := new(big.Rat).Add(b.tokens, refill)
	if tok.Cmp(burst) > 0 {
		tok = burst
	}
	return &refBucket{tokens: tok, last: now}
}

// take decides reqs as the Limiter contract says: all-or-nothing, in order;
// when some request is rejected and some are dry run, the enforcing ones
// are decided again on their own and charged if they all fit. It returns
// the decisions and which requests were charged.
func (r refLimiter) take(reqs []limiter.Request, now int64) ([]limiter.Decision, []bool) {
	out, all := r.pass(reqs, now, func(int) bool { return true }, true)
	charged := make([]bool, len(reqs))
	if all {
		for i := range charged {
			charged[i] = true
		}
		return out, charged
	}
	dry := false
	for _, q := range reqs {
		dry = dry || q.DryRun
	}
	if !dry {
		return out, charged
	}
	enforcing := func(i int) bool { return !reqs[i].DryRun }
	second, ok := r.pass(reqs, now, enforcing, true)
	for i := range reqs {
		if enforcing(i) {
			out[i] = second[i]
			charged[i] = ok
		}
	}
	return out, charged
}

// pass decides the requests selected by in, in order, and charges them if
// commit is set and all are allowed; it reports whether all are.
func (r refLimiter) pass(reqs []limiter.Request, now int64, in func(int) bool, commit bool) ([]limiter.Decision, bool) {
	work := map[string]*refBucket{}
	out := make([]limiter.Decision, len(reqs))
	all := true
	for i, q := range reqs {
		if !in(i) {
			continue
		}
		// Buckets are named by key and limit shape.
		name := fmt.Sprintf("%s/%d/%d", q.Key, q.Limit.Rate.Interval(), q.Limit.Burst)
		b, ok := work[name]
		if !ok {
			b = r.bucket(name, q.Limit, now)
			work[name] = b
		}
		t := new(big.Rat).SetInt64(int64(q.Limit.Rate.Interval()))
		cost := new(big.Rat).SetInt64(q.Cost)
		burst := new(big.Rat).SetInt64(q.Limit.Burst)
		da := q.Limit.DelayAfter
		if da == 0 {
			da = q.Limit.Burst
		}
		// need: the tokens the bucket must hold to admit the request now.
		need := cost
		if q.Limit.MaxDelay > 0 {
			// Admitted with delay (burst - (tokens-cost) - da)·T <= MaxDelay.
			md := new(big.Rat).Quo(new(big.Rat).SetInt64(int64(q.Limit.MaxDelay)), t)
			alt := new(big.Rat).Sub(new(big.Rat).Add(cost, burst), new(big.Rat).Add(new(big.Rat).SetInt64(da), md))
			if alt.Cmp(need) > 0 {
				need = alt
			}
		}
		var d limiter.Decision
		switch {
		case need.Cmp(burst) > 0:
			d.Never = true
		case b.tokens.Cmp(need) >= 0:
			d.Allowed = true
			b.tokens = new(big.Rat).Sub(b.tokens, cost)
			// Delay = (burst - tokens - da)·T when positive.
			delay := new(big.Rat).Mul(new(big.Rat).Sub(new(big.Rat).Sub(burst, b.tokens), new(big.Rat).SetInt64(da)), t)
			if delay.Sign() > 0 {
				d.Delay = time.Duration(ratInt(delay))
			}
		default:
			// RetryAfter = (need - tokens)·T, an integer: tokens·T always is,
			// and need·T is cost·T or (cost+burst-da)·T - MaxDelay.
			d.RetryAfter = time.Duration(ratInt(new(big.Rat).Mul(new(big.Rat).Sub(need, b.tokens), t)))
		}
		d.Remaining = floor(b.tokens)
		d.ResetAfter = time.Duration(ratInt(new(big.Rat).Mul(new(big.Rat).Sub(burst, b.tokens), t)))
		all = all && d.Allowed
		out[i] = d
	}
	if all && commit {
		for k, b := range work {
			r[k] = b
		}
	}
	return out, all
}

func floor(x *big.Rat) int64 {
	return new(big.Int).Quo(x.Num(), x.Denom()).Int64() // x >= 0
}

func ratInt(x *big.Rat) int64 {
	if !x.IsInt() {
		panic(fmt.Sprintf("%v is not an integer", x))
	}
	return x.Num().Int64()
}

// TestPropertyRandomTraces drives the limiter and the reference with random
// multi-policy traces (rounded intervals, weighted requests, costs above the
// burst, repeated keys, zero and huge time steps, delay_after, max_delay,
// dry-run requests) and checks that
//   - every decision equals the reference's, field by field;
//   - over every window [t1, t2] of each key, the admitted cost is at most
//     Burst + Count·(t2-t1)/Per, the configured rate (checked in integers).
func TestPropertyRandomTraces(t *testing.T) {
	rates := []limiter.Rate{
		{Count: 1, Per: time.Second},
		{Count: 2, Per: time.Second},
		{Count: 3, Per: time.Second}, // T rounded up
		{Count: 7, Per: time.Minute}, // T rounded up
		{Count: 1, Per: time.Hour},
		{Count: 1000, Per: time.Second},
		{Count: 3, Per: 7}, // T = 3ns, the rate rounded down by 2/7
	}
	keys := []string{"a", "b", "c"}
	traces := 150
	if testing.Short() {
		traces = 30
	}
	rng := rand.New(rand.NewSource(20240601))
	for trace := range traces {
		limits := map[string]limiter.Limit{}
		for _, k := range keys {
			li := limiter.Limit{Rate: rates[rng.Intn(len(rates))], Burst: 1 + rng.Int63n(10)}
			if rng.Intn(2) == 0 {
				li.DelayAfter = 1 + rng.Int63n(li.Burst)
			}
			if rng.Intn(3) == 0 {
				li.MaxDelay = time.Duration(rng.Int63n(int64(li.Burst) * int64(li.Rate.Interval())))
			}
			limits[k] = li
		}
		clk := clocktest.NewManualClock()
		l := New(Options{MaxKeys: 64, Now: clk.Time}) // one shard: cheap to create
		ref := refLimiter{}
		type event struct{ at, cost int64 }
		admitted := map[string][]event{}
		var now int64
		for step := range 300 {
			switch rng.Intn(6) {
			case 0: // same instant
			case 1:
				now += rng.Int63n(10)
			case 2, 3:
				iv := int64(limits[keys[rng.Intn(len(keys))]].Rate.Interval())
				now += rng.Int63n(2*iv + 1)
			case 4:
				iv := int64(limits[keys[rng.Intn(len(keys))]].Rate.Interval())
				now += iv/2 + rng.Int63n(3) - 1
			case 5:
				now += rng.Int63n(int64(2 * time.Hour))
			}
			clk.Set(time.Duration(now))
			reqs := make([]limiter.Request, 1+rng.Intn(3))
			for i := range reqs {
				k := keys[rng.Intn(len(keys))]
				li := limits[k]
				reqs[i] = limiter.Request{Key: k, Limit: li, Cost: 1 + rng.Int63n(li.Burst+1), DryRun: rng.Intn(4) == 0}
			}
			want, charged := ref.take(reqs, now)
			peek := mustPeek(t, l, reqs...)
			got := mustTake(t, l, reqs...)
			for i := range reqs {
				if got[i] != want[i] || peek[i] != want[i] {
					t.Fatalf("trace %d step %d t=%dns request %d %+v (limit T=%d): Take %+v, Peek %+v; reference %+v",
						trace, step, now, i, reqs[i], reqs[i].Limit.Rate.Interval(), got[i], peek[i], want[i])
				}
			}
			for i, q := range reqs {
				if charged[i] {
					admitted[q.Key] = append(admitted[q.Key], event{now, q.Cost})
				}
			}
		}
		for k, evs := range admitted {
			li := limits[k]
			per, count := int64(li.Rate.Per), li.Rate.Count
			for i := range evs {
				var sum int64
				for j := i; j < len(evs); j++ {
					sum += evs[j].cost
					// sum <= B + count·dt/per  <=>  sum·per <= B·per + count·dt,
					// in int64: sum <= 300·3·11, per <= 3.6e12, count <= 1000,
					// dt <= 300 steps · 2h = 2.2e15ns, so every term < 2.2e18.
					dt := evs[j].at - evs[i].at
					lhs, rhs := sum*per, li.Burst*per+count*dt
					if lhs > rhs {
						t.Fatalf("trace %d key %s (%v burst %d): admitted %d tokens in %dns", trace, k, li.Rate, li.Burst, sum, dt)
					}
				}
			}
		}
	}
}

// FuzzTrace decodes a trace from bytes (per step: a time step, up to three
// requests on three keys with fixed limits, a cost each) and checks every
// decision against the big.Rat reference.
func FuzzTrace(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 0, 1, 0, 1, 200, 1, 7, 3, 9, 2, 4, 1, 0, 255})
	f.Add([]byte{3, 0x41, 0x82, 0xc3, 0, 0x41, 0x82, 0xc3, 17, 0xff, 0xff})
	limits := []limiter.Limit{lim(3, time.Second, 3), lim(7, time.Minute, 5), lim(3, 7, 2)}
	keys := []string{"a", "b", "c"}
	f.Fuzz(func(t *testing.T, data []byte) {
		clk := clocktest.NewManualClock()
		l := New(Options{MaxKeys: 64, Now: clk.Time}) // one shard: cheap to create
		ref := refLimiter{}
		var now int64
		for len(data) >= 2 {
			step, shape := data[0], data[1]
			data = data[2:]
			now += int64(step) * int64(step) * int64(step) * 1_000_000 // 0 .. 16.6s, dense near 0
			clk.Set(time.Duration(now))
			n := 1 + int(shape%3)
			reqs := make([]limiter.Request, 0, n)
			for i := range n {
				k := int(shape>>(2+2*i)) % 3
				cost := int64(1)
				if len(data) > 0 {
					cost = 1 + int64(data[0]%7)
					data = data[1:]
				}
				reqs = append(reqs, limiter.Request{Key: keys[k], Limit: limits[k], Cost: cost})
			}
			want, _ := ref.take(reqs, now)
			got := mustTake(t, l, reqs...)
			for i := range reqs {
				if got[i] != want[i] {
					t.Fatalf("t=%dns request %d %+v: got %+v; reference %+v", now, i, reqs[i], got[i], want[i])
				}
			}
		}
	})
}
