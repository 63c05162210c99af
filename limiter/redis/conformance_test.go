package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
// its time from the call instead of the server's TIME), with batching on
// (the default) and the deny cache off: every decision comes from Redis.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	limitertest.Run(t, testClockFactory(client, "conf%d:"))
}

// TestConformanceUnbatched runs the suite with batching off (MaxBatch 1:
// every call its own round trip on the caller's goroutine).
func TestConformanceUnbatched(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	limitertest.Run(t, testClockFactory(client, "confu%d:", func(o *rkredis.Options) { o.MaxBatch = 1 }))
}

// TestConformanceDenyCache runs the suite with the deny cache on (its
// default size) and batching on, on one server and on 3 masters: the
// cache's answers must equal Redis's exactly. The suite compares whole
// Decisions, so the wrapper clears Decision.Cached, after checking that
// only a rejection is Cached; it counts the cached answers, and the test
// fails if the cache never answered.
func TestConformanceDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	_, cc := clusterClient(t)
	for _, tc := range []struct {
		name   string
		client goredis.UniversalClient
	}{{"one", newClient(t, srv.Addr)}, {"masters", cc}} {
		t.Run(tc.name, func(t *testing.T) {
			var cached atomic.Int64
			f := testClockFactory(tc.client, "confd%d:", func(o *rkredis.Options) { o.DenyCache = 0 })
			limitertest.Run(t, func(t *testing.T, now func() time.Time) limiter.Limiter {
				return uncache{f(t, now), &cached, t}
			})
			if cached.Load() == 0 {
				t.Error("the deny cache answered no call")
			}
			t.Logf("%d decisions answered by the deny cache", cached.Load())
		})
	}
}

// uncache clears Decision.Cached (counting it), for the conformance suite.
type uncache struct {
	l      limiter.Limiter
	cached *atomic.Int64
	t      *testing.T
}

func (u uncache) clear(d []limiter.Decision, err error) ([]limiter.Decision, error) {
	for i := range d {
		if d[i].Cached {
			if d[i].Allowed || d[i].Never {
				u.t.Errorf("a Cached decision that is not a rejection: %+v", d[i])
			}
			u.cached.Add(1)
			d[i].Cached = false
		}
	}
	return d, err
}

func (u uncache) Take(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	return u.clear(u.l.Take(ctx, dst, reqs))
}

func (u uncache) Peek(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	return u.clear(u.l.Peek(ctx, dst, reqs))
}

// Settle completes uncache's limiter.Limiter: it passes through.
func (u uncache) Settle(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision, actual []int64) error {
	return u.l.Settle(ctx, reqs, ds, actual)
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
// (a format with one %d), with the deny cache off unless an option turns
// it on.
func testClockFactory(client goredis.UniversalClient, prefix string, opts ...func(*rkredis.Options)) limitertest.Factory {
	var n atomic.Int64
	return func(t *testing.T, now func() time.Time) limiter.Limiter {
		o := rkredis.Options{Prefix: fmt.Sprintf(prefix, n.Add(1)), Timeout: testTimeout, DenyCache: -1}
		for _, f := range opts {
			f(&o)
		}
		l, err := rkredis.NewWithTestClock(client, o, now)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// TestConformancePrefetch runs the prefetch cases on one server and on 3
// masters, with K 8 and the default hold (50 ms): each fleet is n Limiters
// with their own holds on one key prefix and one test clock, as n
// processes on one Redis; the deny cache at its default.
func TestConformancePrefetch(t *testing.T) {
	srv := redistest.Start(t)
	_, cc := clusterClient(t)
	for _, tc := range []struct {
		name   string
		client goredis.UniversalClient
	}{{"one", newClient(t, srv.Addr)}, {"masters", cc}} {
		t.Run(tc.name, func(t *testing.T) {
			var fleets atomic.Int64
			limitertest.RunPrefetch(t, 8, 50*time.Millisecond, func(t *testing.T, n int, now func() time.Time) []limiter.Limiter {
				prefix := fmt.Sprintf("confp%d:", fleets.Add(1))
				ls := make([]limiter.Limiter, n)
				for i := range ls {
					l, err := rkredis.NewWithTestClock(tc.client, rkredis.Options{Prefix: prefix, Timeout: testTimeout, Prefetch: 8}, now)
					if err != nil {
						t.Fatal(err)
					}
					ls[i] = l
				}
				return ls
			})
		})
	}
}
