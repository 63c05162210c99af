package redis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// TestDenyCacheFloodNoErrors: the load of TestFiguresFailover without its
// fault (10 keys, 4 callers each calling Take back to back, rate 100/s,
// burst 10, Timeout 150 ms) for a second on a healthy Redis, with the deny
// cache on (the default). Every call must return a Decision: a caller whose
// bucket is over its limit gets a rejection (with its RetryAfter), never an
// error, while Redis answers. Before the fix, a caller waiting for another
// call's probe waited for the next probe after it, and the next, each of
// which admitted someone else (the scheduler woke it about one emission
// interval after each reply, by when the bound admitted again and a spinning
// caller was probing), until its own deadline: 126 to 157 calls failed in
// the second, with "context deadline exceeded"; now none does.
//
// Also checked, as bounds that no machine's speed can break: the cache
// answered calls (it was on the path), no key admitted more than
// burst + rate·t, t from before its first call to after its last, and every
// rejection has a RetryAfter in (0, interval] (cost 1, no delay: Redis's
// debt never exceeds the window). Before the deny cache read its clock
// under its lock, a caller descheduled between reading it and taking the
// lock was rejected against a bound refreshed meanwhile, as if earlier:
// RetryAfter up to 18.5 ms in about 2 runs of 3.
func TestDenyCacheFloodNoErrors(t *testing.T) {
	const (
		keys    = 10
		callers = 4 // per key
		run     = time.Second
	)
	srv := redistest.Start(t)
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Prefix: "denyflood:", Timeout: 150 * time.Millisecond})
	rl := lim(100, time.Second, 10)
	interval := rl.Rate.Interval()
	take(t, l, limiter.Request{Key: "warm", Limit: rl, Cost: 1}) // loads the script
	scripts := srv.ScriptCalls(t)

	type load struct {
		mu                sync.Mutex
		admitted, cached  int
		calls, errs       int
		firstErr, badWait string
	}
	loads := make([]load, keys)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for k := range keys {
		r := limiter.Request{Key: fmt.Sprintf("flooded%d", k), Limit: rl, Cost: 1}
		ld := &loads[k]
		for range callers {
			wg.Go(func() {
				reqs := []limiter.Request{r}
				dst := make([]limiter.Decision, 0, 1)
				for {
					select {
					case <-stop:
						return
					default:
					}
					d, err := l.Take(context.Background(), dst[:0], reqs)
					ld.mu.Lock()
					ld.calls++
					switch {
					case err != nil:
						ld.errs++
						if ld.firstErr == "" {
							ld.firstErr = err.Error()
						}
					case d[0].Allowed:
						ld.admitted++
					default:
						if d[0].Cached {
							ld.cached++
						}
						if ra := d[0].RetryAfter; (ra <= 0 || ra > interval) && ld.badWait == "" {
							ld.badWait = fmt.Sprintf("%+v", d[0])
						}
					}
					ld.mu.Unlock()
					if err != nil {
						time.Sleep(time.Millisecond) // a failing store is no busy loop
					}
				}
			})
		}
	}
	time.Sleep(run)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	scripts = srv.ScriptCalls(t) - scripts

	var calls, errs, admitted, cached int
	bound := rl.Burst + int64(elapsed/interval) + 1
	for k := range loads {
		ld := &loads[k]
		calls, errs, admitted, cached = calls+ld.calls, errs+ld.errs, admitted+ld.admitted, cached+ld.cached
		if ld.errs > 0 {
			t.Errorf("key %d: %d of %d calls failed on a healthy Redis, the first with %q; want a Decision for each", k, ld.errs, ld.calls, ld.firstErr)
		}
		if int64(ld.admitted) > bound {
			t.Errorf("key %d: %d admitted in %v; want at most burst + rate·t = %d", k, ld.admitted, elapsed, bound)
		}
		if ld.badWait != "" {
			t.Errorf("key %d: rejection %s; want a RetryAfter in (0, %v]", k, ld.badWait, interval)
		}
	}
	if cached == 0 {
		t.Errorf("no call was answered by the deny cache: the test does not test it")
	}
	t.Logf("%d keys × %d callers for %v: %d calls, %d failed, %d admitted (at most %d per key), %d answered by the deny cache, %d script calls (%.2f per key per interval)",
		keys, callers, elapsed.Round(time.Millisecond), calls, errs, admitted, bound, cached, scripts, float64(scripts)/keys/float64(elapsed/interval))
}
