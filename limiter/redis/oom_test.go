package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// TestOutOfMemory: under maxmemory with noeviction, a Take that would write
// fails with Redis's OOM error (never a decision), and a Peek still
// decides.
func TestOutOfMemory(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	c := newClient(t, srv.Addr)
	l := mustNew(t, c, rkredis.Options{Timeout: testTimeout})
	r := limiter.Request{Key: "k", Limit: lim(1, time.Minute, 2), Cost: 1}
	take(t, l, r)
	small := strings.Repeat("x", 1024)
	for i := range 4096 { // 4 MB of data, then a 1 MB limit: firmly out of memory
		if err := c.Set(context.Background(), fmt.Sprintf("filler-%d", i), small, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	do(t, srv, "CONFIG", "SET", "maxmemory", "1mb")
	d, err := l.Take(context.Background(), nil, []limiter.Request{{Key: "new", Limit: r.Limit, Cost: 1}})
	if err == nil || d != nil || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("Take when out of memory: %v, %v; want nil and the OOM error", d, err)
	}
	if d := peek(t, l, r)[0]; !d.Allowed || d.Remaining != 0 {
		t.Errorf("Peek when out of memory: %+v", d)
	}
	if n := doInt(t, srv, "EXISTS", rkredis.RedisKey(l, limiter.Request{Key: "new", Limit: r.Limit})); n != 0 {
		t.Error("a Take that failed wrote its bucket")
	}
}
