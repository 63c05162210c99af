package redis_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// faultTimeout is the per-call timeout of the fault tests; lateness is the
// scheduling slack allowed on top of it (2 shared cores, -race).
const (
	faultTimeout = 150 * time.Millisecond
	lateness     = 350 * time.Millisecond
)

// call is one Take of a load run.
type call struct {
	start, end time.Time
	allowed    bool
	err        error
}

// load runs workers goroutines calling Take on distinct keys until stop is
// closed, and returns every call. A panic in Take fails the test binary.
func load(l *rkredis.Limiter, workers int, stop <-chan struct{}) func() []call {
	var mu sync.Mutex
	var calls []call
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []call
			for i := 0; ; i++ {
				select {
				case <-stop:
					mu.Lock()
					calls = append(calls, mine...)
					mu.Unlock()
					return
				default:
				}
				r := limiter.Request{Key: fmt.Sprintf("w%d-%d", w, i%50), Limit: lim(1, time.Second, 1000), Cost: 1}
				c := call{start: time.Now()}
				d, err := l.Take(context.Background(), nil, []limiter.Request{r})
				c.end, c.err = time.Now(), err
				if err == nil {
					c.allowed = d[0].Allowed
				} else if d != nil {
					c.err = fmt.Errorf("decisions %v returned with error %w", d, err)
				}
				mine = append(mine, c)
			}
		}()
	}
	return func() []call { wg.Wait(); return calls }
}

// settledGoroutines waits until the goroutine count is at most limit and
// returns it (or the last count after 3s).
func settledGoroutines(limit int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(3 * time.Second); n > limit && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// TestRedisKilledMidLoad: the server dies (SIGKILL) under load; every call
// that starts afterwards returns an error, within the timeout, and no
// decision; nothing panics or leaks; a server restarted on the same port is
// used again by the same client.
func TestRedisKilledMidLoad(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr, func(o *goredis.Options) { o.PoolSize = 8 })
	l := mustNew(t, client, rkredis.Options{Timeout: faultTimeout})
	take(t, l, limiter.Request{Key: "warm", Limit: lim(1, time.Second, 10), Cost: 1})
	base := runtime.NumGoroutine()

	stop := make(chan struct{})
	wait := load(l, 8, stop)
	time.Sleep(100 * time.Millisecond)
	srv.Stop()
	killed := time.Now()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	calls := wait()

	var before, after, errs int
	for _, c := range calls {
		if d := c.end.Sub(c.start); d > faultTimeout+lateness {
			t.Errorf("a call took %v; want at most the %v timeout (+%v slack)", d, faultTimeout, lateness)
		}
		if c.err != nil {
			errs++
		}
		if c.start.After(killed) {
			after++
			if c.err == nil {
				t.Fatalf("a call started after the kill returned a decision (allowed=%v)", c.allowed)
			}
		} else if c.err == nil {
			before++
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("load did not span the kill: %d decisions before, %d calls after", before, after)
	}
	t.Logf("%d calls: %d decisions before the kill, %d errors, %d calls after it", len(calls), before, errs, after)
	_, err := l.Take(context.Background(), nil, []limiter.Request{{Key: "k", Limit: lim(1, time.Second, 1), Cost: 1}})
	t.Logf("error while down: %v", err)

	if n := settledGoroutines(base + 2); n > base+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before the load, %d after it\n%s", base, n, buf[:runtime.Stack(buf, true)])
	}

	// Same client, same address, fresh server: decisions resume (the
	// server has no script and no state: EVAL reloads it, buckets full).
	srv.Restart(t)
	d := firstDecision(t, l, limiter.Request{Key: "after-restart", Limit: lim(1, time.Minute, 2), Cost: 1}, "the restart")
	if d[0] != (limiter.Decision{Allowed: true, Remaining: 1, ResetAfter: time.Minute}) {
		t.Errorf("first decision after the restart: %+v", d[0])
	}
	// Every call decides. A call may time out (150 ms) on a machine busy
	// enough to stall the process that long (seen under a load average of
	// 10 on 2 cores); it is then made again, at most twice: a limiter that
	// had not recovered would time out every time.
	retried := 0
	for i := range 20 {
		req := []limiter.Request{{Key: fmt.Sprintf("x%d", i), Limit: lim(1, time.Minute, 2), Cost: 1}}
		for attempt := 1; ; attempt++ {
			_, err := l.Take(context.Background(), nil, req)
			if err == nil {
				break
			}
			if !errors.Is(err, rkredis.ErrTimeout) || attempt == 3 {
				t.Errorf("call %d after the restart, attempt %d: %v", i, attempt, err)
				break
			}
			retried++
		}
	}
	t.Logf("20 calls after the restart decided, %d attempts timed out and were made again", retried)
}

// TestRedisPaused: a stalled server (SIGSTOP: connections open, no
// answers) makes every call fail with ErrTimeout within the timeout; after
// it resumes, decisions resume on the same client.
func TestRedisPaused(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr, func(o *goredis.Options) { o.PoolSize = 4 })
	l := mustNew(t, client, rkredis.Options{Timeout: faultTimeout})
	take(t, l, limiter.Request{Key: "warm", Limit: lim(1, time.Second, 10), Cost: 1})
	base := runtime.NumGoroutine()

	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	stop := make(chan struct{})
	wait := load(l, 6, stop)
	time.Sleep(4 * faultTimeout)
	close(stop)
	calls := wait()
	if len(calls) < 6 {
		t.Fatalf("only %d calls", len(calls))
	}
	for _, c := range calls {
		if c.err == nil || !errors.Is(c.err, rkredis.ErrTimeout) {
			t.Fatalf("call on a paused server: %v; want an error wrapping ErrTimeout", c.err)
		}
		if d := c.end.Sub(c.start); d > faultTimeout+lateness {
			t.Errorf("a call took %v; want at most the %v timeout (+%v slack)", d, faultTimeout, lateness)
		}
	}
	t.Logf("%d calls on the paused server; first error: %v", len(calls), calls[0].err)

	// The caller's own deadline, shorter than Timeout, wins and is named.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.Peek(ctx, nil, []limiter.Request{{Key: "p", Limit: lim(1, time.Second, 1), Cost: 1}})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rkredis.ErrTimeout) || time.Since(start) > 20*time.Millisecond+lateness {
		t.Errorf("Peek with a 20ms caller deadline: %v after %v; want context.DeadlineExceeded", err, time.Since(start))
	}

	srv.Resume()
	paused = false
	d := firstDecision(t, l, limiter.Request{Key: "after-resume", Limit: lim(1, time.Minute, 2), Cost: 1}, "the resume")
	if !d[0].Allowed {
		t.Errorf("first decision after the resume: %+v", d[0])
	}
	if n := settledGoroutines(base + 2); n > base+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after\n%s", base, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestCancelMidCall: a caller cancelling while the script is in flight gets
// an error wrapping context.Canceled, never a decision. go-redis does not
// interrupt a read on cancellation (only on a deadline), so the call ends
// at the latest when Options.Timeout expires.
func TestCancelMidCall(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 300 * time.Millisecond
	l := mustNew(t, newClient(t, srv.Addr), rkredis.Options{Timeout: timeout})
	take(t, l, limiter.Request{Key: "warm", Limit: lim(1, time.Second, 10), Cost: 1})
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		d, err := l.Take(ctx, nil, []limiter.Request{{Key: "k", Limit: lim(1, time.Second, 1), Cost: 1}})
		if d != nil || !errors.Is(err, context.Canceled) {
			t.Errorf("Take cancelled in flight: %v, %v; want nil and context.Canceled", d, err)
		}
	}()
	time.Sleep(30 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(timeout + lateness):
		t.Fatal("Take did not return within its timeout after its context was cancelled")
	}
	t.Logf("returned %v after the start", time.Since(start))
}

// firstDecision retries Take of r until the server answers again, for up
// to 5 s after event, and returns the decisions.
func firstDecision(t *testing.T, l *rkredis.Limiter, r limiter.Request, event string) []limiter.Decision {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := l.Take(context.Background(), nil, []limiter.Request{r})
		if err == nil {
			return verdicts(d)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision 5s after %s: %v", event, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
