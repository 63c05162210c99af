package redis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// Build a Redis limiter from a URL and decide the two policies of one HTTP
// request in one round trip. (Not run by go test: it needs a Redis at the
// URL. The tests start their own with internal/redistest.)
func Example() {
	// redis://[user:password@]host:port/db, rediss:// for TLS,
	// unix:///path/to/socket?db=N. The URL may hold a password: never log
	// it or an error that quotes it.
	opt, err := goredis.ParseURL("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal("invalid Redis URL")
	}
	opt.ContextTimeoutEnabled = true // required: lets Timeout bound every read
	client := goredis.NewClient(opt)
	defer client.Close()

	lim, err := rkredis.New(client, rkredis.Options{Prefix: "ratekey:", Timeout: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	rate, _ := limiter.ParseRate("2r/s")
	reqs := []limiter.Request{
		{Key: "per-account|tenant=acme|account=alice", Limit: limiter.Limit{Rate: rate, Burst: 3}, Cost: 1},
		{Key: "per-tenant|tenant=acme", Limit: limiter.Limit{Rate: rate, Burst: 10}, Cost: 1},
	}
	var buf [2]limiter.Decision
	ds, err := lim.Take(context.Background(), buf[:0], reqs)
	if err != nil {
		// Unknown outcome (Redis down, timeout, ...): apply the policy's
		// fail mode (on_store_error: deny → 503, or allow).
		fmt.Println("store error:", err)
		return
	}
	for i, d := range ds {
		fmt.Printf("%s: allowed=%v remaining=%d retry_after=%v\n", reqs[i].Key, d.Allowed, d.Remaining, d.RetryAfter)
	}
}
