package redis_test

import (
	"fmt"
	"github.com/ratekey/ratekey/internal/clocktest"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/limitertest"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// newClient returns a client for addr with ContextTimeoutEnabled, closed
// when the test ends.
func newClient(t testing.TB, addr string, opts ...func(*goredis.Options)) *goredis.Client {
	o := &goredis.Options{Addr: addr, ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConformance runs the limiter contract's conformance suite on the
// Redis store, one real redis-server for the whole suite and a fresh key
// prefix per subtest, on a test clock (NewWithTestClock: the script takes
// its time from the call instead of the server's TIME).
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	limitertest.Run(t, testClockFactory(client, "conf%d:"))
}

// TestConformanceCluster runs the suite through a ClusterClient on a
// one-node Redis Cluster (every call is one slot's: one script).
func TestConformanceCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	limitertest.Run(t, testClockFactory(client, "conf%d:"))
}

// TestConformanceMasters runs the suite on a 3-master Redis Cluster, where
// the buckets of one call fall in several slots (on several masters) and
// are decided slot by slot, with refunds.
func TestConformanceMasters(t *testing.T) {
	_, client := clusterClient(t)
	limitertest.Run(t, testClockFactory(client, "confm%d:"))
}

// TestConformanceSentinel runs the suite through a Sentinel failover
// client (go-redis NewFailoverClient: the master's address comes from the
// Sentinel).
func TestConformanceSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "rk-master", master)
	client := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName: "rk-master", SentinelAddrs: []string{sentinel.Addr}, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { client.Close() })
	limitertest.Run(t, testClockFactory(client, "conf%d:"))
	if n, err := master.Do("DBSIZE"); err != nil || n == "0" {
		t.Errorf("the master holds %s keys (%v): the failover client did not reach it", n, err)
	}
}

// testClockFactory returns a conformance-suite factory: a Limiter on client
// with a test clock and a fresh key prefix per subtest, made from prefix
// (a format with one %d).
func testClockFactory(client goredis.UniversalClient, prefix string) limitertest.Factory {
	var n atomic.Int64
	return func(t *testing.T) (limiter.Limiter, limitertest.Clock) {
		clk := clocktest.NewManualClock()
		l, err := rkredis.NewWithTestClock(client, rkredis.Options{Prefix: fmt.Sprintf(prefix, n.Add(1)), Timeout: testTimeout}, clk.Now)
		if err != nil {
			t.Fatal(err)
		}
		return l, clk
	}
}
