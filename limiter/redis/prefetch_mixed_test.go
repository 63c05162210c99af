package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// TestPrefetchMixed: calls of several requests with K 4 on a test clock
// (deny cache off), on one server and 3 masters. A call of a prefetched
// bucket A (3 tokens held) and a direct bucket B: admitted, A from its
// hold (no round trip of its own), B by Redis. The same call once B is
// empty: rejected, and A's tentative token is back in the hold (nothing
// admitted, A's Redis state untouched); B's first fetch asked for 4
// and got 1 (its burst), so B is dry (a fetch came back short) and is
// rejected locally (Cached, RetryAfter 1 h, no round trip). A call of A
// and a bucket G whose key holds garbage: an error, A's token back. Then A with its hold empty
// but hot and an empty C: A's bucket fetches a batch first (tentatively
// taking 1), C rejects, and the whole batch stays held. The books balance
// and nothing is dropped.
func TestPrefetchMixed(t *testing.T) {
	for name, clients := range prefetchClients(t, 1) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktest.NewManualClock()
			o := rkredis.Options{Prefix: "pfx:", Timeout: testTimeout, DenyCache: -1, Prefetch: 4}
			l, err := rkredis.NewWithTestClock(clients[0], o, clk.Time)
			if err != nil {
				t.Fatal(err)
			}
			o.Prefetch = 0
			direct, _ := rkredis.NewWithTestClock(clients[0], o, clk.Time)
			lim := limiter.Limit{Rate: limiter.Rate{Count: 10, Per: time.Second}, Burst: 10}
			one := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Hour}, Burst: 1}
			a := limiter.Request{Key: "a", Limit: lim, Cost: 1}
			b := limiter.Request{Key: "b", Limit: one, Cost: 1}
			c := limiter.Request{Key: "c", Limit: one, Cost: 1}
			take := func(reqs ...limiter.Request) []limiter.Decision {
				t.Helper()
				d, err := l.Take(ctx, nil, reqs)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			peekA := func() limiter.Decision {
				d, err := direct.Peek(ctx, nil, []limiter.Request{a})
				if err != nil {
					t.Fatal(err)
				}
				return d[0]
			}
			held := func(want int64) {
				t.Helper()
				if s := rkredis.Prefetch(l); s.Held != want {
					t.Fatalf("held %d, want %d (%+v)", s.Held, want, s)
				}
			}
			take(a)
			take(a) // fetches 4: 3 held
			held(3)
			d := take(a, b)
			if !d[0].Allowed || !d[0].Prefetched || !d[1].Allowed || d[1].Prefetched || d[0].RoundTrips != 1 {
				t.Fatalf("A held and B fresh: %+v", d)
			}
			held(2)
			before := peekA()
			d = take(a, b)
			if !d[0].Allowed || !d[0].Prefetched || d[1].Allowed || !d[1].Cached || d[1].RoundTrips != 0 || d[1].RetryAfter != time.Hour {
				t.Fatalf("B empty: %+v; want A's token taken tentatively, B rejected locally (dry: Cached, RetryAfter 1h, no round trip)", d)
			}
			held(2)
			if got := peekA(); got != before {
				t.Fatalf("A's state moved: %+v, was %+v", got, before)
			}
			g := limiter.Request{Key: "g", Limit: one, Cost: 1}
			if err := clients[0].Set(ctx, rkredis.RedisKey(direct, g), "garbage", 0).Err(); err != nil {
				t.Fatal(err)
			}
			f0 := rkredis.Prefetch(l).Fetches
			if _, err := l.Take(ctx, nil, []limiter.Request{a, g}); err == nil {
				t.Fatal("G's key holds garbage: want an error")
			}
			if f := rkredis.Prefetch(l).Fetches; f != f0+1 {
				t.Fatalf("fetches %d -> %d", f0, f)
			}
			held(2)
			take(a)
			take(a)
			held(0)
			take(c)
			d = take(a, c) // A is hot: fetches 4 first, then C rejects
			if !d[0].Allowed || d[1].Allowed || d[0].RoundTrips != 2 {
				t.Fatalf("A fetched, C empty: %+v", d)
			}
			held(4)
			s := rkredis.Prefetch(l)
			// B, C and G are served by prefetch too (fetches of their cost:
			// they are quiet): fetches A 3, B 1 (short: then dry), G 1 (failed), C 2;
			// charged A 1 + 4 + 4, B 1, C 1; admitted A 5, B 1, C 1.
			want := rkredis.PrefetchStats{Fetches: 7, Charged: 11, Admitted: 7, Held: 4}
			if s != want {
				t.Fatalf("stats %+v, want %+v", s, want)
			}
		})
	}
}
