package redis_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// TestDiagnostics: every Decision says how many round trips its call took
// and, on a Cluster, which slot's master decided it (slot + 1; 0 on one
// server), as the debug JSON shows them, in-flight caps included; a
// deny-cache answer took none.
func TestDiagnostics(t *testing.T) {
	srv := redistest.Start(t)
	one := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Prefix: "diag1:"})
	c, client := clusterClient(t)
	cl := mustNew(t, client, rkredis.Options{Prefix: "diag:", DenyCache: -1})
	cached := mustNew(t, client, rkredis.Options{Prefix: "diagc:"})

	a := limiter.Request{Key: "a|network=10.0.0.1/32", Limit: lim(1, time.Hour, 1), Cost: 1}
	b := limiter.Request{Key: "b|network=10.0.0.1/32", Limit: lim(1, time.Hour, 5), Cost: 1}
	if cl.Slot(a) == cl.Slot(b) {
		t.Fatalf("a and b share slot %d; pick other keys", cl.Slot(a))
	}
	// In-flight caps of a's and b's keys: a cap's key (its sorted set of
	// leases) takes its slot from the Key, as a bucket's does.
	ca := limiter.Request{Key: a.Key, Limit: capOf(2, 0), Cost: 1}
	cb := limiter.Request{Key: b.Key, Limit: capOf(2, 0), Cost: 1}
	slotOf := func(l *rkredis.Limiter, r limiter.Request) int {
		got, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", rkredis.RedisKey(l, r))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(got)
		return n
	}
	type diag struct{ slot, rounds int }
	for _, tc := range []struct {
		name string
		l    *rkredis.Limiter
		reqs []limiter.Request
		want []diag
	}{
		{"one server", one, []limiter.Request{a, b}, []diag{{0, 1}, {0, 1}}},
		{"one slot", cl, []limiter.Request{a}, []diag{{slotOf(cl, a) + 1, 1}}},
		// Two slots, both admit: the first charged alone, the other after it.
		{"two slots", cl, []limiter.Request{b, a}, []diag{{slotOf(cl, b) + 1, 2}, {slotOf(cl, a) + 1, 2}}},
		{"one server, a cap", one, []limiter.Request{ca, b}, []diag{{0, 1}, {0, 1}}},
		{"one slot, a cap", cl, []limiter.Request{cb}, []diag{{slotOf(cl, cb) + 1, 1}}},
		{"one slot, a cap and a bucket", cl, []limiter.Request{b, cb}, []diag{{slotOf(cl, b) + 1, 1}, {slotOf(cl, cb) + 1, 1}}},
		// The cap's slot first, then b's: both admit.
		{"two slots, a cap", cl, []limiter.Request{b, ca}, []diag{{slotOf(cl, b) + 1, 2}, {slotOf(cl, ca) + 1, 2}}},
	} {
		d, err := tc.l.Take(t.Context(), nil, tc.reqs)
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.l.Release(t.Context(), tc.reqs, d); err != nil {
			t.Fatal(err)
		}
		for i, w := range tc.want {
			if d[i].HashSlot != w.slot || d[i].RoundTrips != w.rounds {
				t.Errorf("%s: decision %d HashSlot %d, RoundTrips %d; want %d, %d", tc.name, i, d[i].HashSlot, d[i].RoundTrips, w.slot, w.rounds)
			}
		}
	}
	// The deny cache: Redis rejects a, then the cache answers, without a
	// round trip.
	take(t, cached, a)
	if d, _ := cached.Take(t.Context(), nil, []limiter.Request{a}); d[0].Allowed || d[0].Cached || d[0].RoundTrips != 1 || d[0].HashSlot != slotOf(cached, a)+1 {
		t.Errorf("Redis's rejection: %+v", d[0])
	}
	if d, _ := cached.Take(t.Context(), nil, []limiter.Request{a}); !d[0].Cached || d[0].RoundTrips != 0 {
		t.Errorf("the cache's rejection: %+v; want Cached, RoundTrips 0", d[0])
	}
}
