package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// cancelDeadline is how long after the store answers again a test waits
// for the leases of calls whose outcome was unknown to be cancelled: the
// cancels are retried at most a second apart (leases.go), far below the
// default lease (60 s) a leaked slot was held for.
const cancelDeadline = 3 * time.Second

// waitFree polls the free slots of key's cap of n until they are want,
// for up to cancelDeadline after since, and returns how long after since
// that was; it fails t if they never were.
func waitFree(t *testing.T, l *rkredis.Limiter, key string, n, want int64, since time.Time) time.Duration {
	t.Helper()
	var got int64
	var err error
	for time.Since(since) < cancelDeadline {
		var d []limiter.Decision
		d, err = l.Peek(context.Background(), nil, []limiter.Request{{Key: key, Limit: capOf(n, 0), Cost: 1}})
		if err == nil {
			got = d[0].Remaining
			if d[0].Allowed {
				got++
			}
			if got == want {
				return time.Since(since)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("free slots of %q %v after the store answered again: %d (last error %v); want %d", key, cancelDeadline, got, err, want)
	return 0
}

// warmPool opens n connections of client's pool, so that n calls made
// at once while the server is stalled each write their command at once
// (a connection dialled then would time out in its handshake instead).
func warmPool(t *testing.T, client *goredis.Client, n int) {
	t.Helper()
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-ready
			// Each BLPOP holds its connection for 50 ms (no list: nil).
			if err := client.BLPop(context.Background(), 50*time.Millisecond, "warm:none").Err(); err != goredis.Nil {
				t.Error(err)
			}
		})
	}
	close(ready)
	wg.Wait()
	if got := client.PoolStats().TotalConns; got < uint32(n) {
		t.Fatalf("pool has %d connections; want %d", got, n)
	}
}

// TestStalledAcquireCancelled: Redis stalled (SIGSTOP) while three
// requests acquire slots of a cap of 4 (one slot held by a fourth). Each
// acquire times out; Redis, once resumed, runs their queued scripts. The
// leases they took are cancelled once Redis answers, so the three slots
// are free again within a second or so (they were held for the whole
// 60 s lease before), and the fourth request's slot stays held.
func TestStalledAcquireCancelled(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	l := mustNew(t, client, rkredis.Options{Timeout: faultTimeout})
	const key = "stalled"
	r := limiter.Request{Key: key, Limit: capOf(4, 0), Cost: 1}
	warmPool(t, client, 3) // each acquire finds a connection: its script reaches Redis
	holder := take(t, l, r)
	if !holder[0].Allowed || holder[0].Slot == 0 {
		t.Fatalf("holder: %+v; want a slot", holder[0])
	}

	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { _, errs[i] = l.Take(context.Background(), nil, []limiter.Request{r}) })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, rkredis.ErrTimeout) {
			t.Fatalf("acquire %d on the stalled server: %v; want ErrTimeout", i, err)
		}
	}
	srv.Resume()
	paused = false
	resumed := time.Now()
	took := waitFree(t, l, key, 4, 3, resumed)
	t.Logf("the three stalled acquires' slots were free %v after the resume", took)
	if q, d := rkredis.Cancels(l); q != 0 || d != 0 {
		t.Errorf("cancels queued %d, dropped %d after they were delivered; want 0, 0", q, d)
	}
	if err := l.Release(context.Background(), []limiter.Request{r}, holder); err != nil {
		t.Fatal(err)
	}
	if got := freeSlots(t, l, key, 4); got != 4 {
		t.Errorf("free slots after the holder's release: %d; want 4", got)
	}
}

// TestStalledReleaseRetried: a Release that times out on a stalled Redis
// is sent again once Redis answers: the slot is free within about a
// second of the resume, not one lease later.
func TestStalledReleaseRetried(t *testing.T) {
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Timeout: faultTimeout})
	const key = "stalled-release"
	r := limiter.Request{Key: key, Limit: capOf(2, 0), Cost: 1}
	d := take(t, l, r)
	srv.Pause()
	err := l.Release(context.Background(), []limiter.Request{r}, d)
	srv.Resume()
	resumed := time.Now()
	if !errors.Is(err, rkredis.ErrTimeout) {
		t.Fatalf("Release on the stalled server: %v; want ErrTimeout", err)
	}
	took := waitFree(t, l, key, 2, 2, resumed)
	t.Logf("the slot whose release timed out was free %v after the resume", took)
}

// TestCancelBeforeAcquire: a cancel that reaches Redis before the acquire
// it cancels (they travel on different connections) leaves a tombstone:
// the acquire, when it runs, charges nothing, neither its cap nor the
// token bucket beside it; the next acquire (another slot id) takes its
// slot as usual. On one server and on 3 masters.
func TestCancelBeforeAcquire(t *testing.T) {
	srv := redistest.Start(t)
	_, cc := clusterClient(t)
	for _, tc := range []struct {
		name   string
		client goredis.UniversalClient
	}{
		{"one", newClient(t, srv.Addr)},
		{"masters", cc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, tc.client, rkredis.Options{Timeout: time.Second, Prefix: fmt.Sprintf("cancel-%s-%d:", tc.name, time.Now().UnixNano())})
			ctx := context.Background()
			c := limiter.Request{Key: "early", Limit: capOf(2, 0), Cost: 1}
			b := limiter.Request{Key: "bucket", Limit: lim(1, time.Minute, 5), Cost: 1}
			if err := rkredis.CancelNext(l, ctx, c); err != nil {
				t.Fatal(err)
			}
			_, err := l.Take(ctx, nil, []limiter.Request{b, c})
			if err == nil || !strings.Contains(err.Error(), "ratekey: call cancelled") {
				t.Fatalf("Take after its cancel: %v; want the script's 'ratekey: call cancelled'", err)
			}
			if got := freeSlots(t, l, "early", 2); got != 2 {
				t.Errorf("free slots after a cancelled acquire: %d; want 2", got)
			}
			if got := used(t, l, b); got != 0 {
				t.Errorf("tokens used of the bucket beside the cancelled acquire: %d; want 0", got)
			}
			d := take(t, l, b, c)
			if !d[1].Allowed || d[1].Slot == 0 {
				t.Fatalf("the next acquire: %+v; want a slot", d[1])
			}
			if got := freeSlots(t, l, "early", 2); got != 1 {
				t.Errorf("free slots after the next acquire: %d; want 1", got)
			}
			if got := used(t, l, b); got != 1 {
				t.Errorf("tokens used after the next acquire: %d; want 1", got)
			}
		})
	}
}
