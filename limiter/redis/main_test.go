package redis_test

import (
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
)

// quiet drops go-redis's internal log lines (dial failures in the fault
// tests); test failures say what matters.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// masters is the 3-master Redis Cluster the tests of this package share
// (each with its own key prefix).
var masters redistest.Shared

// clusterClient returns a ClusterClient on the shared 3-master cluster,
// closed when the test ends.
func clusterClient(t testing.TB, opts ...func(*goredis.ClusterOptions)) (*redistest.Cluster, *goredis.ClusterClient) {
	c := masters.Get(t, 3)
	o := &goredis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	client := goredis.NewClusterClient(o)
	t.Cleanup(func() { client.Close() })
	return c, client
}

func TestMain(m *testing.M) {
	if addr := os.Getenv(childEnv); addr != "" {
		inFlightChild(addr) // TestInFlightKill's child: runs until killed
	}
	if os.Getenv("RATEKEY_REDIS_LOG") == "" {
		goredis.SetLogger(quiet{})
	}
	code := m.Run()
	masters.Close()
	os.Exit(code)
}
