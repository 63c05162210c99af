package redis_test

import (
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// TestDailyQuotaExpiry: a daily quota's state (1000/d) on the server's
// clock expires exactly when its bucket is full again: a day out after the
// whole quota is spent, 86.4 s out after one request. Its expiry is the
// TAT rounded up to a millisecond (PXAT), never earlier.
func TestDailyQuotaExpiry(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Timeout: testTimeout})
	day := lim(1000, 24*time.Hour, 1000)
	for _, tc := range []struct {
		key  string
		cost int64
		ttl  time.Duration // from the request to the bucket being full
		want limiter.Decision
	}{
		{"p|tenant=acme", 1000, 24 * time.Hour, limiter.Decision{Allowed: true, Remaining: 0, ResetAfter: 24 * time.Hour}},
		{"p|tenant=beta", 1, 86400 * time.Millisecond, limiter.Decision{Allowed: true, Remaining: 999, ResetAfter: 86400 * time.Millisecond}},
	} {
		r := limiter.Request{Key: tc.key, Limit: day, Cost: tc.cost}
		before := serverNow(t, srv)
		d := take(t, l, r)[0]
		after := serverNow(t, srv)
		if d != tc.want {
			t.Errorf("%s: %+v; want %+v", tc.key, d, tc.want)
		}
		key := rkredis.RedisKey(l, r)
		tat := doInt(t, srv, "GET", key)
		if tat < before+int64(tc.ttl) || tat > after+int64(tc.ttl) {
			t.Errorf("%s: TAT %d not in [%d, %d] + %v", tc.key, tat, before, after, tc.ttl)
		}
		if got, want := doInt(t, srv, "PEXPIRETIME", key), (tat+999_999)/1_000_000; got != want {
			t.Errorf("%s: PEXPIRETIME %d; want the TAT rounded up to ms, %d", tc.key, got, want)
		}
		if p := doInt(t, srv, "PTTL", key); p > tc.ttl.Milliseconds()+1 || p < tc.ttl.Milliseconds()-5000 {
			t.Errorf("%s: PTTL %d ms; want about %d", tc.key, p, tc.ttl.Milliseconds())
		}
	}
}
