package redis_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// reserveOne takes r (a settling request) and returns its Decisions,
// failing t unless it was admitted with a Reservation.
func reserveOne(t testing.TB, l limiter.Limiter, reqs ...limiter.Request) []limiter.Decision {
	t.Helper()
	ds, err := l.Take(context.Background(), nil, reqs)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	for i := range ds {
		if !ds[i].Allowed || ds[i].Reservation == 0 {
			t.Fatalf("Take: %+v; want every request admitted with a Reservation", ds)
		}
	}
	return ds
}

// tokensOf returns the whole tokens in r's bucket now (a cost-1 Peek).
func tokensOf(t testing.TB, l limiter.Limiter, r limiter.Request) int64 {
	t.Helper()
	r.Cost, r.Settle = 1, false
	d := peek(t, l, r)[0]
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

// TestSettleScriptCalls: on the server's own clock, reserving costs the
// Take's one script call, a settle at the reservation none, a settle that
// changes something exactly one, whatever the number of its buckets on one
// server, and one per slot on a 3-master Cluster; the refund lands exactly
// (500 settled at 100: 900 tokens; 1000/h, so nothing refills meanwhile).
func TestSettleScriptCalls(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{})
	li := lim(1000, time.Hour, 1000)
	a := limiter.Request{Key: "a", Limit: li, Cost: 500, Settle: true}
	b := limiter.Request{Key: "b", Limit: li, Cost: 10, Settle: true}
	calls := func(step string, want int64, f func()) {
		t.Helper()
		before := srv.ScriptCalls(t)
		f()
		if got := srv.ScriptCalls(t) - before; got != want {
			t.Errorf("%s: %d script calls; want %d", step, got, want)
		}
	}
	warm(t, l, li)
	var ds []limiter.Decision
	calls("reserve", 1, func() { ds = reserveOne(t, l, a, b) })
	settle := func(actual ...int64) {
		t.Helper()
		if err := l.Settle(context.Background(), []limiter.Request{a, b}, ds, actual); err != nil {
			t.Fatal(err)
		}
	}
	calls("settle at the reservations", 0, func() { settle(500, 10) })
	calls("settle both", 1, func() { settle(100, 30) })
	if n := tokensOf(t, l, a); n != 900 {
		t.Errorf("a: %d tokens after 500 settled at 100; want 900", n)
	}
	if n := tokensOf(t, l, b); n != 970 {
		t.Errorf("b: %d tokens after 10 settled at 30; want 970", n)
	}

	// A Cluster: one call per slot.
	_, cc := clusterClient(t)
	var hook redistest.Calls
	cc.AddHook(&hook)
	lc := mustNew(t, cc, rkredis.Options{Prefix: "settle-calls:"})
	var reqs []limiter.Request
	for _, k := range []string{"x", "y", "z", "w"} {
		reqs = append(reqs, limiter.Request{Key: k, Limit: li, Cost: 5, Settle: true})
	}
	slots := map[int]bool{}
	for _, r := range reqs {
		slots[lc.Slot(r)] = true
		warm(t, lc, li, r.Key) // the scripts loaded where r lives: 1 token spent
	}
	ds = reserveOne(t, lc, reqs...)
	before := hook.N()
	if err := lc.Settle(context.Background(), reqs, ds, []int64{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if got := hook.N() - before; got != int64(len(slots)) {
		t.Errorf("settle of %d buckets in %d slots: %d round trips; want %d", len(reqs), len(slots), got, len(slots))
	}
	for i, r := range reqs {
		if n := tokensOf(t, lc, r); n != 999-int64(i+1) {
			t.Errorf("%s: %d tokens; want %d", r.Key, n, 999-(i+1))
		}
	}
}

// warm reserves 2 tokens and settles them at 1 on each of keys (default
// "warm"), and peeks a call of two requests, so that the scripts are
// loaded where those keys live (a first call is answered NOSCRIPT and
// sent again by EVAL).
func warm(t testing.TB, l limiter.Limiter, li limiter.Limit, keys ...string) {
	t.Helper()
	if len(keys) == 0 {
		keys = []string{"warm"}
	}
	for _, k := range keys {
		r := []limiter.Request{{Key: k, Limit: li, Cost: 2, Settle: true}}
		if err := l.Settle(context.Background(), r, reserveOne(t, l, r...), []int64{1}); err != nil {
			t.Fatal(err)
		}
		two := []limiter.Request{{Key: k + "-2", Limit: li, Cost: 1}, {Key: k + "-2", Limit: li, Cost: 1}}
		if _, err := l.Peek(context.Background(), nil, two); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSettleDebtServerClock: on the server's clock, a settle far above the
// reservation puts the bucket in debt: the next request is rejected with a
// RetryAfter of what repaying it takes (1000/h: 3.6 s a token; 10 reserved,
// 1010 settled, so 1000 tokens of debt beyond the empty bucket's 0... minus
// the bucket's 1000: RetryAfter 10 tokens' worth, less the few ms since).
func TestSettleDebtServerClock(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{})
	li := lim(1000, time.Hour, 1000)
	r := limiter.Request{Key: "debt", Limit: li, Cost: 10, Settle: true}
	ds := reserveOne(t, l, r)
	if err := l.Settle(context.Background(), []limiter.Request{r}, ds, []int64{1010}); err != nil {
		t.Fatal(err)
	}
	d := peek(t, l, limiter.Request{Key: "debt", Limit: li, Cost: 1})[0]
	const T = 3600 * time.Millisecond
	if d.Allowed || d.RetryAfter <= 10*T-time.Second || d.RetryAfter > 11*T {
		t.Errorf("after a debt of 1000 past 10 reserved: %+v; want a rejection with RetryAfter just under 11 tokens' worth (%v)", d, 11*T)
	}
}

// TestSettleDenyCache: a settle that refunds a bucket the deny cache holds
// lowers the cache's bound with it: the next request is decided by Redis
// (admitted), not refused from the cache.
func TestSettleDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{})
	li := lim(1, time.Minute, 10)
	r := limiter.Request{Key: "k", Limit: li, Cost: 10, Settle: true}
	ds := reserveOne(t, l, r)
	one := limiter.Request{Key: "k", Limit: li, Cost: 1}
	if d := take(t, l, one)[0]; d.Allowed {
		t.Fatalf("an empty bucket admitted: %+v", d)
	}
	if d := take(t, l, one)[0]; !d.Cached {
		t.Fatalf("the second rejection was not cached: %+v", d)
	}
	if err := l.Settle(context.Background(), []limiter.Request{r}, ds, []int64{0}); err != nil {
		t.Fatal(err)
	}
	if d := take(t, l, one)[0]; !d.Allowed || d.Cached {
		t.Errorf("after a refund of the whole reservation: %+v; want admitted by Redis", d)
	}
}

// TestSettleDebtDenyCache: a settle that puts a bucket the deny cache
// holds in debt raises the cache's bound with it: a rejection answered
// from the cache says how long the debt takes to repay (1/min, burst 10:
// 10 reserved, 1000 settled, 990 tokens of debt, about 990 minutes), not
// the minute the bucket needed before it (the attack run got Retry-After
// 6 s for a debt of 594 s).
func TestSettleDebtDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{})
	li := lim(1, time.Minute, 10)
	r := limiter.Request{Key: "k", Limit: li, Cost: 10, Settle: true}
	ds := reserveOne(t, l, r)
	one := limiter.Request{Key: "k", Limit: li, Cost: 1}
	if d := take(t, l, one)[0]; d.Allowed || d.RetryAfter > time.Minute {
		t.Fatalf("an empty bucket: %+v; want a rejection within a minute", d)
	}
	if d := take(t, l, one)[0]; !d.Cached {
		t.Fatalf("the second rejection was not cached: %+v", d)
	}
	if err := l.Settle(context.Background(), []limiter.Request{r}, ds, []int64{1000}); err != nil {
		t.Fatal(err)
	}
	d := take(t, l, one)[0]
	if d.Allowed || !d.Cached || d.RetryAfter < 990*time.Minute || d.RetryAfter > 991*time.Minute {
		t.Errorf("after a debt of 990 tokens: %+v; want a cached rejection with RetryAfter 990 to 991 minutes", d)
	}
}

// TestSettlePrefetch: with Prefetch on, a settling request is decided by
// Redis (not from held tokens: its Reservation is the shared bucket's),
// and settles exactly.
func TestSettlePrefetch(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Prefetch: 64})
	li := lim(1000, time.Hour, 1000)
	plain := limiter.Request{Key: "p", Limit: li, Cost: 1}
	spent := int64(0)
	for prefetched := false; !prefetched; spent++ {
		if spent == 50 {
			t.Fatal("50 plain requests, none served from prefetched tokens")
		}
		prefetched = take(t, l, plain)[0].Prefetched
	}
	r := limiter.Request{Key: "p", Limit: li, Cost: 20, Settle: true}
	ds := reserveOne(t, l, r)
	if ds[0].Prefetched {
		t.Errorf("a settling request was served from prefetched tokens: %+v", ds[0])
	}
	if err := l.Settle(context.Background(), []limiter.Request{r}, ds, []int64{5}); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The plain tokens spent (the rest of their batch given back by
	// Flush) and the 5 settled.
	if n := tokensOf(t, l, plain); n != 1000-spent-5 {
		t.Errorf("%d tokens; want %d", n, 1000-spent-5)
	}
}

// TestSettleNotResent: a settle whose reply is lost (the connection cut
// after Redis ran it) is not sent again, even by a client allowed to retry
// (MaxRetries 3): it returns an error (outcome unknown), and the bucket
// shows one settle, not two. Fails if the settle's command may be retried.
func TestSettleNotResent(t *testing.T) {
	srv := redistest.Start(t)
	px := newCutter(t, srv.Addr)
	client := newClient(t, px.addr, func(o *goredis.Options) { o.MaxRetries = 3; o.PoolSize = 1 })
	l := mustNew(t, client, rkredis.Options{MaxBatch: 1, Timeout: time.Second})
	direct := mustNew(t, newClient(t, srv.Addr), rkredis.Options{})
	li := lim(1000, time.Hour, 1000)
	warm(t, l, li)
	r := limiter.Request{Key: "cut", Limit: li, Cost: 100, Settle: true}
	ds := reserveOne(t, l, r)
	px.cutNext.Store(true)
	err := l.Settle(context.Background(), []limiter.Request{r}, ds, []int64{300})
	if err == nil {
		t.Fatal("a settle whose reply was cut returned nil; want an error (outcome unknown)")
	}
	if n := tokensOf(t, direct, r); n != 700 {
		t.Errorf("after one settle of 100 at 300: %d tokens; want 700 (a resend would leave 500)", n)
	}
	t.Logf("error: %v", err)
}

// cutter is a TCP proxy to a Redis server that, when cutNext is set,
// closes the client's connection instead of forwarding the server's next
// reply: the command ran, its reply is lost.
type cutter struct {
	addr    string
	cutNext atomic.Bool
}

func newCutter(t *testing.T, target string) *cutter {
	c := &cutter{}
	c.addr = tcpProxy(t, target, func(in, out net.Conn) { _, _ = io.Copy(out, in); out.Close() }, c.replies, nil)
	return c
}

// tcpProxy listens on loopback and connects each client it accepts to
// target, running up(client, server) and down(client, server) on
// goroutines of their own (the two directions); it returns its address.
// When the test ends, stop runs (when not nil), then the listener closes
// and the goroutines are waited for.
func tcpProxy(t *testing.T, target string, up, down func(in, out net.Conn), stop func()) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		if stop != nil {
			stop()
		}
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			wg.Go(func() { up(in, out) })
			wg.Go(func() { down(in, out) })
		}
	})
	return ln.Addr().String()
}

// replies forwards the server's replies to the client until a cut.
func (c *cutter) replies(in, out net.Conn) {
	defer in.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := out.Read(buf)
		if n > 0 && c.cutNext.CompareAndSwap(true, false) {
			return
		}
		if n > 0 {
			if _, werr := in.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
