package redis_test

import (
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/limitertest"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// ringClient returns a *redis.Ring of two fresh redis-servers (shards "a"
// and "b"), closed when the test ends, and the servers.
func ringClient(t *testing.T) (*goredis.Ring, [2]*redistest.Server) {
	srvs := [2]*redistest.Server{redistest.Start(t), redistest.Start(t)}
	ring := goredis.NewRing(&goredis.RingOptions{
		Addrs:                 map[string]string{"a": srvs[0].Addr, "b": srvs[1].Addr},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { ring.Close() })
	return ring, srvs
}

// TestConformanceRing runs the suite, its in-flight cases included,
// through a *redis.Ring of two servers: a call whose keys' hash tags go
// to different shards is decided part by part, as across Cluster slots
// (runSplit, runInFlight). Both shards must end up holding keys, or the
// Ring was one server in disguise.
func TestConformanceRing(t *testing.T) {
	ring, srvs := ringClient(t)
	limitertest.Run(t, testClockFactory(ring, "confr%d:"))
	for i, s := range srvs {
		n, err := s.Do("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		if k, _ := strconv.Atoi(n); k == 0 {
			t.Errorf("shard %d holds no key: the Ring never sent it a call", i)
		}
		t.Logf("shard %d: %s keys", i, n)
	}
}

// ringShard returns the address of the shard of ring that holds r's key.
func ringShard(t *testing.T, ring *goredis.Ring, l *rkredis.Limiter, r limiter.Request) string {
	t.Helper()
	c, err := ring.GetShardClientForKey(rkredis.RedisKey(l, r))
	if err != nil {
		t.Fatal(err)
	}
	return c.Options().Addr
}
