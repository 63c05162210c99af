package redis_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// Release completes uncache's limiter.Limiter: it passes through.
func (u uncache) Release(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	return u.l.Release(ctx, reqs, ds)
}

// capOf is an in-flight cap of n slots with lease d (0: 60 s).
func capOf(n int64, d time.Duration) limiter.Limit {
	return limiter.Limit{MaxInFlight: n, Lease: d}
}

// freeSlots returns the free slots of key's cap of n, by a cost-1 Peek.
func freeSlots(t testing.TB, l limiter.Limiter, key string, n int64) int64 {
	t.Helper()
	d, err := l.Peek(context.Background(), nil, []limiter.Request{{Key: key, Limit: capOf(n, 0), Cost: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if d[0].Allowed {
		return d[0].Remaining + 1
	}
	return d[0].Remaining
}

// TestInFlightSharedCap: two Limiters (two processes' worth: each its own
// client, lease tag and renewer) on one Redis share one cap of 3; on one
// server, on 3 masters and on a Ring of two servers.
func TestInFlightSharedCap(t *testing.T) {
	srv := redistest.Start(t)
	_, cc := clusterClient(t)
	ring, _ := ringClient(t)
	ring2 := goredis.NewRing(&goredis.RingOptions{Addrs: ring.Options().Addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring2.Close() })
	for _, tc := range []struct {
		name string
		a, b goredis.UniversalClient
	}{
		{"one", newClient(t, srv.Addr), newClient(t, srv.Addr)},
		{"masters", cc, func() goredis.UniversalClient { _, c := clusterClient(t); return c }()},
		{"ring", ring, ring2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := rkredis.Options{Prefix: "shared-" + tc.name + ":", Timeout: testTimeout}
			a, b := mustNew(t, tc.a, o), mustNew(t, tc.b, o)
			r := limiter.Request{Key: "tenant=acme", Limit: capOf(3, 0), Cost: 1}
			var held [][]limiter.Decision
			for i, l := range []*rkredis.Limiter{a, b, a} {
				d := take(t, l, r)
				if !d[0].Allowed || d[0].Slot == 0 || d[0].Remaining != int64(2-i) {
					t.Fatalf("take %d: %+v; want allowed with a slot, %d free", i, d[0], 2-i)
				}
				held = append(held, d)
			}
			for _, l := range []*rkredis.Limiter{a, b} {
				if d := take(t, l, r); d[0].Allowed || d[0].Slot != 0 {
					t.Fatalf("a fourth take: %+v; want refused, no slot", d[0])
				}
			}
			// b's release frees a slot a can take.
			if err := b.Release(context.Background(), []limiter.Request{r}, held[1]); err != nil {
				t.Fatal(err)
			}
			d := take(t, a, r)
			if !d[0].Allowed {
				t.Fatalf("after b's release: %+v; want allowed", d[0])
			}
			held[1] = d
			for i, l := range []*rkredis.Limiter{a, a, a} {
				if err := l.Release(context.Background(), []limiter.Request{r}, held[i]); err != nil {
					t.Fatal(err)
				}
			}
			if n := freeSlots(t, b, r.Key, 3); n != 3 {
				t.Errorf("after every release: %d free; want 3", n)
			}
			// A second release of the same Decision frees nothing more.
			d = take(t, a, r)
			for range 2 {
				if err := a.Release(context.Background(), []limiter.Request{r}, d); err != nil {
					t.Fatal(err)
				}
			}
			x := take(t, b, r)
			if n := freeSlots(t, a, r.Key, 3); n != 2 {
				t.Errorf("a double release: %d free with one slot held; want 2", n)
			}
			if err := b.Release(context.Background(), []limiter.Request{r}, x); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// childEnv names the Redis address of the child process of
// TestInFlightKill (see TestMain).
const childEnv = "RATEKEY_INFLIGHT_CHILD"

// inFlightChild is the child process of TestInFlightKill: it takes the two
// slots of the cap "kill" (lease 1 s), prints "held", and runs (renewing
// them) until killed.
func inFlightChild(addr string) {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	l, err := rkredis.New(c, rkredis.Options{Prefix: "kill:", Timeout: testTimeout})
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	r := limiter.Request{Key: "kill", Limit: capOf(2, time.Second), Cost: 2}
	d, err := l.Take(context.Background(), nil, []limiter.Request{r})
	if err != nil || !d[0].Allowed {
		fmt.Println("take:", d, err)
		os.Exit(2)
	}
	fmt.Println("held")
	select {}
}

// TestInFlightKill: a process that holds slots and is killed (SIGKILL:
// no Release, no deferred call) frees them within one lease of its last
// renewal on the server's clock; while it lives (3 leases) its renewer
// keeps them.
func TestInFlightKill(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Prefix: "kill:", Timeout: testTimeout})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+srv.Addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "held" {
		t.Fatalf("child: %q", line)
	}
	// Three leases alive: the child's renewer keeps both slots.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if n := freeSlots(t, l, "kill", 2); n != 0 {
			t.Fatalf("while the child lives: %d free; want 0 (renewal)", n)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed := time.Now()
	for freeSlots(t, l, "kill", 2) != 2 {
		if time.Since(killed) > 1500*time.Millisecond {
			t.Fatalf("%v after kill -9: slots still held; want free within one lease (1 s)", time.Since(killed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("slots free %v after kill -9 (lease 1 s, renewed every 333 ms)", time.Since(killed).Round(time.Millisecond))
	// The key itself expires with its last lease (a take purges leases).
	d := take(t, l, limiter.Request{Key: "kill", Limit: capOf(2, time.Second), Cost: 2})
	if !d[0].Allowed {
		t.Fatalf("a take after the child's leases expired: %+v", d[0])
	}
	key := rkredis.RedisKey(l, limiter.Request{Key: "kill", Limit: capOf(2, time.Second), Cost: 1})
	c := newClient(t, srv.Addr)
	if ttl := c.PTTL(context.Background(), key).Val(); ttl <= 0 || ttl > time.Second {
		t.Errorf("PTTL of the cap's key: %v; want its lease, (0, 1s]", ttl)
	}
	if err := l.Release(context.Background(), []limiter.Request{{Key: "kill", Limit: capOf(2, time.Second), Cost: 2}}, d); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(context.Background(), key).Val(); n != 0 {
		t.Errorf("the cap's key after its last release: exists %d; want deleted", n)
	}
}

// TestInFlightRenewal: a request held for 2.5 leases keeps its slot, the
// renewer stops when the slot is released (no goroutine left), and a
// round trip per take (shared with a token bucket) and per release.
func TestInFlightRenewal(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	hook := &redistest.Calls{}
	c.AddHook(hook)
	l := mustNew(t, c, rkredis.Options{Prefix: "renew:", Timeout: testTimeout})
	base := runtime.NumGoroutine()
	reqs := []limiter.Request{
		{Key: "k", Limit: lim(10, time.Second, 10), Cost: 1},
		{Key: "k", Limit: capOf(1, time.Second), Cost: 1},
	}
	// Warm up: the connection, and the scripts loaded (a first use is
	// NOSCRIPT, then EVAL).
	if err := l.Release(context.Background(), reqs, take(t, l, reqs...)); err != nil {
		t.Fatal(err)
	}
	n0 := hook.N()
	d, rounds, err := rkredis.TakeRounds(l, context.Background(), reqs)
	if err != nil || !d[1].Allowed || d[1].Slot == 0 {
		t.Fatalf("take: %+v, %v", d, err)
	}
	if got := hook.N() - n0; rounds != 1 || got != 1 {
		t.Errorf("a take of a bucket and a cap: %d round trips, %d commands; want 1, 1", rounds, got)
	}
	// Three more leases of one other key: renewed together.
	many := limiter.Request{Key: "many", Limit: capOf(3, time.Second), Cost: 1}
	var manyDs [][]limiter.Decision
	for range 3 {
		manyDs = append(manyDs, take(t, l, many))
	}
	n0 = hook.N()
	time.Sleep(2500 * time.Millisecond)
	renewals := hook.N() - n0
	if n := freeSlots(t, l, "k", 1); n != 0 {
		t.Fatalf("after 2.5 leases: %d free; want 0 (the lease renewed)", n)
	}
	if n := freeSlots(t, l, "many", 3); n != 0 {
		t.Fatalf("after 2.5 leases: %d free of 3; want 0 (the leases renewed)", n)
	}
	// 2 keys, a renewal every 333 ms (or up to 83 ms early): at most 2 ×
	// 10 calls in 2.5 s (4 × 10 were each lease renewed alone).
	if renewals < 2*2 || renewals > 2*10 {
		t.Errorf("%d renewal calls in 2.5 s for 4 leases of 2 keys; want 4 to 20 (one per key)", renewals)
	}
	t.Logf("%d renewal calls in 2.5 s (4 leases of 2 keys, lease 1 s)", renewals)
	for _, d := range manyDs {
		if err := l.Release(context.Background(), []limiter.Request{many}, d); err != nil {
			t.Fatal(err)
		}
	}
	n0 = hook.N()
	if err := l.Release(context.Background(), reqs, d); err != nil {
		t.Fatal(err)
	}
	if got := hook.N() - n0; got != 1 {
		t.Errorf("a release: %d commands; want 1", got)
	}
	if n := freeSlots(t, l, "k", 1); n != 1 {
		t.Errorf("after the release: %d free; want 1", n)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Errorf("%d goroutines after the release; %d before the take (the renewer must stop)", n, base)
	}
}

// TestInFlightWithRate: a cap and a token bucket in one call, on one
// server, across the slots of 3 masters and across the shards of a Ring of
// two servers: a refusal by either leaves no slot taken and no token
// spent.
func TestInFlightWithRate(t *testing.T) {
	srv := redistest.Start(t)
	_, cc := clusterClient(t)
	ring, _ := ringClient(t)
	for _, tc := range []struct {
		name   string
		client goredis.UniversalClient
		// apart reports whether the keys of a and b are on different
		// masters (slots) or shards; nil on one server.
		apart func(l *rkredis.Limiter, a, b limiter.Request) bool
	}{
		{"one", newClient(t, srv.Addr), nil},
		{"masters", cc, func(l *rkredis.Limiter, a, b limiter.Request) bool { return l.Slot(a) != l.Slot(b) }},
		{"ring", ring, func(l *rkredis.Limiter, a, b limiter.Request) bool {
			return ringShard(t, ring, l, a) != ringShard(t, ring, l, b)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, tc.client, rkredis.Options{Prefix: "mix-" + tc.name + ":", Timeout: testTimeout, DenyCache: -1})
			// apartFrom returns a request of key, or of key with a number
			// appended, whose key is apart from other's.
			apartFrom := func(key string, li limiter.Limit, other limiter.Request) limiter.Request {
				r := limiter.Request{Key: key, Limit: li, Cost: 1}
				for i := 0; tc.apart != nil && !tc.apart(l, r, other); i++ {
					r.Key = key + strconv.Itoa(i)
				}
				return r
			}
			capR := limiter.Request{Key: "tenant=acme", Limit: capOf(1, 0), Cost: 1}
			bucket := apartFrom("route=/a", lim(1, time.Hour, 2), capR)
			// Round trips: 1 for a cap with a bucket of its slot; across
			// two slots 2, or 3 when the second refuses and the first's
			// charge is given back.
			same := limiter.Request{Key: capR.Key, Limit: bucket.Limit, Cost: 1}
			for _, c := range []struct {
				reqs []limiter.Request
				want int
			}{{[]limiter.Request{same, capR}, 1}, {[]limiter.Request{bucket, capR}, 2}} {
				d, rounds, err := rkredis.TakeRounds(l, context.Background(), c.reqs)
				if err != nil {
					t.Fatal(err)
				}
				want := c.want
				if tc.apart == nil {
					want = 1
				}
				if rounds != want {
					t.Errorf("%d round trips for %+v; want %d", rounds, c.reqs, want)
				}
				if err := l.Release(context.Background(), c.reqs, d); err != nil {
					t.Fatal(err)
				}
			}
			// Fresh state for what follows.
			capR.Key = "tenant=acme2"
			bucket = apartFrom("route=/b", bucket.Limit, capR)
			tokens := func() int64 {
				d, err := l.Peek(context.Background(), nil, []limiter.Request{bucket})
				if err != nil {
					t.Fatal(err)
				}
				return d[0].Remaining + 1
			}
			// The cap full: the call is refused, no token spent.
			held := take(t, l, capR)
			for range 5 {
				d := take(t, l, bucket, capR)
				if d[0].Allowed != true || d[1].Allowed || d[1].Slot != 0 || d[0].Slot != 0 {
					t.Fatalf("cap full: %+v", d)
				}
			}
			if n := tokens(); n != 2 {
				t.Errorf("after 5 calls refused by the cap: %d tokens; want 2", n)
			}
			if err := l.Release(context.Background(), []limiter.Request{capR}, held); err != nil {
				t.Fatal(err)
			}
			// The bucket empty: refused, no slot taken.
			take(t, l, bucket, bucket)
			for range 5 {
				d := take(t, l, bucket, capR)
				if d[0].Allowed || !d[1].Allowed || d[1].Slot != 0 {
					t.Fatalf("bucket empty: %+v", d)
				}
			}
			if n := freeSlots(t, l, capR.Key, 1); n != 1 {
				t.Errorf("after 5 calls refused by the bucket: %d free slots; want 1", n)
			}
			sent, lost := rkredis.Refunds(l)
			t.Logf("refunds %d, lost %d", sent, lost)
			if lost != 0 {
				t.Errorf("%d refunds lost", lost)
			}
		})
	}
}

// TestInFlightNoDenyCache: the deny cache (on, its default size) never
// answers an in-flight call, alone or with a token bucket it has cached
// as rejecting: every such call is a script call to Redis, and no
// Decision of it is Cached; releases still find their leases.
func TestInFlightNoDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	hook := &redistest.Calls{}
	c.AddHook(hook)
	l := mustNew(t, c, rkredis.Options{Prefix: "nodeny:", Timeout: testTimeout})
	bucket := limiter.Request{Key: "k", Limit: lim(1, time.Hour, 1), Cost: 1}
	capR := limiter.Request{Key: "k", Limit: capOf(1, 0), Cost: 1}
	take(t, l, bucket)
	cached := 0
	for range 3 { // the bucket's rejection cached
		if d := take(t, l, bucket); d[0].Allowed {
			t.Fatalf("an empty bucket: %+v", d[0])
		} else if d[0].Cached {
			cached++
		}
	}
	if cached == 0 {
		t.Fatal("the deny cache never answered the empty bucket")
	}
	held := take(t, l, capR)
	for _, reqs := range [][]limiter.Request{{capR}, {bucket, capR}, {capR, bucket}} {
		n0 := hook.N()
		d := take(t, l, reqs...)
		if got := hook.N() - n0; got != 1 {
			t.Errorf("%d commands for an in-flight call; want 1 (never the deny cache)", got)
		}
		for i := range d {
			if d[i].Cached || d[i].Allowed || d[i].Slot != 0 {
				t.Errorf("in-flight call %d: %+v; want refused by Redis, not Cached, no slot", i, d[i])
			}
		}
	}
	if err := l.Release(context.Background(), []limiter.Request{capR}, held); err != nil {
		t.Fatal(err)
	}
	if n := freeSlots(t, l, "k", 1); n != 1 {
		t.Errorf("after the release: %d free; want 1", n)
	}
}
