package redis_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/clocktest"
	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// pipeHook counts the pipelines a client sends and their script commands.
type pipeHook struct{ pipes, cmds, maxLen atomic.Int64 }

func (*pipeHook) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (*pipeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h *pipeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.pipes.Add(1)
		h.cmds.Add(int64(len(cmds)))
		for {
			m := h.maxLen.Load()
			if int64(len(cmds)) <= m || h.maxLen.CompareAndSwap(m, int64(len(cmds))) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestAutoPipelinerRefused: New refuses go-redis's auto-pipeliners (both
// faces, from a real client built with AutoPipelineOptions) and accepts
// the client they came from.
func TestAutoPipelinerRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr, func(o *goredis.Options) { o.AutoPipelineOptions = goredis.DefaultAutoPipelineOptions() })
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	async, err := c.AsyncAutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	for name, client := range map[string]goredis.UniversalClient{"AutoPipeline": ap, "AsyncAutoPipeline": async} {
		_, err := rkredis.New(client, rkredis.Options{})
		if err == nil || !strings.Contains(err.Error(), "auto-pipeliner") {
			t.Errorf("New(%s) = %v; want the auto-pipeliner refused", name, err)
		}
	}
	if _, err := rkredis.New(c, rkredis.Options{}); err != nil {
		t.Errorf("New(the client itself) = %v", err)
	}
	if _, err := rkredis.New(c, rkredis.Options{MaxBatch: -1}); err == nil {
		t.Error("New accepted MaxBatch -1")
	}
}

// TestBatchMixedDeadlines: 64 concurrent callers, a third of them with a
// deadline too short for any round trip, the rest with the default
// timeout, taking from one shared bucket and from their own: calls are
// batched (pipelines of several script calls), every long-deadline call
// succeeds, every short one fails with its own deadline at once, and the
// shared bucket is charged by the admitted calls plus at most the failed
// ones (outcome unknown), never more.
func TestBatchMixedDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr, func(o *goredis.Options) { o.PoolSize = 8 })
	hook := &pipeHook{}
	c.AddHook(hook)
	l := mustNew(t, c, rkredis.Options{Prefix: "mixed:", Timeout: time.Second, DenyCache: -1})
	shared := limiter.Request{Key: "shared", Limit: lim(1, time.Hour, 1000), Cost: 1}
	var ok, admitted, failed atomic.Int64
	var lateMu sync.Mutex
	var late time.Duration
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			own := limiter.Request{Key: fmt.Sprintf("own-%d", g), Limit: lim(1, time.Hour, 5), Cost: 1}
			for i := range 20 {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				short := g%3 == 0
				if short {
					ctx, cancel = context.WithTimeout(ctx, 50*time.Microsecond)
				}
				start := time.Now()
				reqs := []limiter.Request{shared}
				if i%2 == 1 {
					reqs = []limiter.Request{own}
				}
				d, err := l.Take(ctx, nil, reqs)
				took := time.Since(start)
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
					if reqs[0].Key == "shared" && d[0].Allowed {
						admitted.Add(1)
					}
				case short && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, rkredis.ErrTimeout):
					if reqs[0].Key == "shared" {
						failed.Add(1)
					}
					lateMu.Lock()
					late = max(late, took)
					lateMu.Unlock()
				case short:
					// A short call may also finish in time.
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("short call: %v", err)
					}
				default:
					t.Errorf("caller %d call %d (1 s deadline): %v", g, i, err)
				}
			}
		})
	}
	wg.Wait()
	d := peek(t, l, shared)
	used := 1000 - d[0].Remaining
	if used < admitted.Load() || used > admitted.Load()+failed.Load() {
		t.Errorf("the shared bucket was charged %d times; %d calls admitted, %d failed (outcome unknown)", used, admitted.Load(), failed.Load())
	}
	if hook.maxLen.Load() < 2 {
		t.Errorf("no pipeline carried more than one call (%d pipelines, %d commands)", hook.pipes.Load(), hook.cmds.Load())
	}
	t.Logf("%d calls decided, %d short calls failed (slowest returned after %v); %d pipelines carried %d script calls, at most %d",
		ok.Load(), failed.Load(), late, hook.pipes.Load(), hook.cmds.Load(), hook.maxLen.Load())
	// Far below the 1 s deadline of the calls the short ones share their
	// pipelines with (TestClientPauseDeadlines holds a pipeline to prove
	// the bound); not tighter: a busy machine can delay any goroutine by
	// tens of ms (50.5 ms seen under a load average of 10 on 2 cores).
	if late > 500*time.Millisecond {
		t.Errorf("a call with a 50µs deadline returned after %v", late)
	}
}

// TestScriptFlushMidLoad: SCRIPT FLUSH every 20 ms under 32 callers: every
// call still succeeds (the batch resends what the server answered
// NOSCRIPT), and a shared bucket never admits more than burst + rate·t.
func TestScriptFlushMidLoad(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr, func(o *goredis.Options) { o.PoolSize = 8 })
	l := mustNew(t, c, rkredis.Options{Prefix: "flush:", Timeout: time.Second, DenyCache: -1})
	shared := limiter.Request{Key: "shared", Limit: lim(100, time.Second, 20), Cost: 1}
	stop := make(chan struct{})
	var calls, admitted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				reqs := []limiter.Request{shared}
				if i%2 == 1 {
					reqs = append(reqs, limiter.Request{Key: fmt.Sprintf("k%d", g), Limit: lim(1000, time.Second, 1000), Cost: 1})
				}
				d, err := l.Take(context.Background(), nil, reqs)
				if err != nil {
					t.Errorf("call during SCRIPT FLUSH: %v", err)
					return
				}
				calls.Add(1)
				if d[0].Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	flushes := 0
	for time.Since(start) < 400*time.Millisecond {
		time.Sleep(20 * time.Millisecond)
		if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		flushes++
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	if limit := 20 + int64(elapsed/(10*time.Millisecond)) + 1; admitted.Load() > limit {
		t.Errorf("the shared bucket admitted %d in %v; want at most %d", admitted.Load(), elapsed, limit)
	}
	t.Logf("%d calls, %d SCRIPT FLUSHes, shared bucket admitted %d in %v", calls.Load(), flushes, admitted.Load(), elapsed)
}

// TestClientPauseDeadlines: with the server paused by CLIENT PAUSE and a
// 100 ms Timeout, every one of 64 concurrent callers (batched) gets its
// ErrTimeout within the timeout; the assertion allows 3× for a loaded
// machine (254 ms seen under a load average of 10 on 2 cores), still half
// the 600 ms pause a call waiting on its pipeline would take, and the log
// reports the real figure.
func TestClientPauseDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr, func(o *goredis.Options) { o.PoolSize = 8 })
	const timeout = 100 * time.Millisecond
	l := mustNew(t, c, rkredis.Options{Prefix: "pause:", Timeout: timeout})
	take(t, l, limiter.Request{Key: "warm", Limit: lim(1, time.Second, 10), Cost: 1})
	if _, err := srv.Do("CLIENT", "PAUSE", "600", "ALL"); err != nil {
		t.Fatal(err)
	}
	var worst atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			start := time.Now()
			_, err := l.Take(context.Background(), nil, []limiter.Request{{Key: strconv.Itoa(g), Limit: lim(1, time.Second, 10), Cost: 1}})
			took := time.Since(start)
			for {
				w := worst.Load()
				if int64(took) <= w || worst.CompareAndSwap(w, int64(took)) {
					break
				}
			}
			if !errors.Is(err, rkredis.ErrTimeout) {
				t.Errorf("call on a paused server: %v after %v; want ErrTimeout", err, took)
			}
		})
	}
	wg.Wait()
	t.Logf("64 callers on a paused server, 100 ms timeout: the slowest returned after %v", time.Duration(worst.Load()))
	if w := time.Duration(worst.Load()); w > 3*timeout {
		t.Errorf("the slowest call returned after %v; want within 3 × %v", w, timeout)
	}
}

// TestFloodedKeyCalls: 16 callers flood one bucket (100/s, burst 10: a
// 10 ms emission interval), 4 Takes each per step, on a test clock that
// stands still while they call and then moves 4 ms (not a divisor of the
// interval), for 150 steps (600 ms of simulated time): once with the deny
// cache, once without. NewWithTestClock makes the clock both the script's
// time and the deny cache's (localNow), so a call's send time is the
// instant Redis decides at, the cache's bound (send time + debt) is the
// bucket's TAT exactly, and every figure below is exact, whatever the
// machine's speed:
//   - both runs return the same decisions at every step (Cached and the
//     diagnostics aside): 10 admitted at step 0 (the burst), then one at
//     the first step at or after each multiple of 10 ms (steps 3, 5, 8,
//     10, 13, ...), 70 in all;
//   - with the cache, step 0 runs 11 to 26 script calls (INFO
//     commandstats): the burst, the rejection whose reply creates the
//     entry, and at most one rejected call per other caller, sent before
//     that reply arrived; every later step runs exactly one per admission
//     (the probe: the other callers wait for its reply and are then
//     answered locally) and none otherwise, 60 in 60 intervals; every Take
//     is either answered locally or one script call;
//   - without it, every Take is one script call (64 per step).
//
// The round trip's uncertainty (Redis decides somewhere between send and
// reply, so a probe can reach it early) does not exist on a clock that
// stands still during a step; BenchmarkFloodedKey (bench/) measures it on
// the wall clock.
func TestFloodedKeyCalls(t *testing.T) {
	const (
		callers = 16
		each    = 4 // Takes per caller per step
		perStep = callers * each
		steps   = 150
		step    = 4 * time.Millisecond
	)
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr, func(o *goredis.Options) { o.PoolSize = callers })
	r := limiter.Request{Key: "per-account|account=mallory", Limit: lim(100, time.Second, 10), Cost: 1}
	interval := r.Limit.Rate.Interval()
	// wantAdmitted is the number admitted at step s: the burst at step 0,
	// then one when the step reaches a multiple of the interval that the
	// step before it had not.
	wantAdmitted := func(s int) int64 {
		if s == 0 {
			return r.Limit.Burst
		}
		return int64(time.Duration(s)*step/interval - time.Duration(s-1)*step/interval)
	}
	type run struct {
		verdicts []map[limiter.Decision]int // per step: verdict -> Takes
		admitted []int64                    // per step
		calls    []int64                    // script calls per step
		cached   int64                      // Takes answered locally
	}
	flood := func(cache int) run {
		clk := clocktest.NewManualClock()
		l, err := rkredis.NewWithTestClock(c, rkredis.Options{Prefix: fmt.Sprintf("flood%d:", -cache), Timeout: testTimeout, DenyCache: cache}, clk.Time)
		if err != nil {
			t.Fatal(err)
		}
		// Loads the script: no NOSCRIPT retry is counted below.
		take(t, l, limiter.Request{Key: "warm", Limit: r.Limit, Cost: 1})
		var out run
		var cached atomic.Int64
		prev := srv.ScriptCalls(t)
		for s := range steps + 1 {
			clk.Set(time.Duration(s) * step)
			got := map[limiter.Decision]int{}
			var admitted int64
			var mu sync.Mutex
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					dst := make([]limiter.Decision, 0, 1)
					reqs := []limiter.Request{r}
					for range each {
						d, err := l.Take(context.Background(), dst[:0], reqs)
						if err != nil {
							t.Error(err)
							return
						}
						v := d[0]
						if v.Cached {
							cached.Add(1)
						}
						v.Cached, v.HashSlot, v.RoundTrips = false, 0, 0
						mu.Lock()
						got[v]++
						if v.Allowed {
							admitted++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			n := srv.ScriptCalls(t)
			out.verdicts = append(out.verdicts, got)
			out.admitted = append(out.admitted, admitted)
			out.calls = append(out.calls, n-prev)
			prev = n
		}
		out.cached = cached.Load()
		return out
	}
	with, without := flood(0), flood(-1)

	// wrong collects the steps at which a figure is not what it must be,
	// and reports the first few and their number.
	wrong := func(what string, bad []string) {
		t.Helper()
		if len(bad) > 0 {
			t.Errorf("%s at %d of %d steps: %s", what, len(bad), steps+1, strings.Join(bad[:min(len(bad), 5)], "; "))
		}
	}
	var badAdmit, badSame, badCalls, badCallsOff []string
	var admitted, callsAfter int64
	for s := range steps + 1 {
		admitted += with.admitted[s]
		if with.admitted[s] != wantAdmitted(s) || without.admitted[s] != wantAdmitted(s) {
			badAdmit = append(badAdmit, fmt.Sprintf("step %d: %d with the cache, %d without; want %d", s, with.admitted[s], without.admitted[s], wantAdmitted(s)))
		}
		if !maps.Equal(with.verdicts[s], without.verdicts[s]) {
			badSame = append(badSame, fmt.Sprintf("step %d: %v with the cache, %v without", s, with.verdicts[s], without.verdicts[s]))
		}
		if s == 0 {
			if n := with.calls[0]; n < r.Limit.Burst+1 || n > r.Limit.Burst+callers {
				badCalls = append(badCalls, fmt.Sprintf("step 0: %d; want %d..%d", n, r.Limit.Burst+1, r.Limit.Burst+callers))
			}
		} else {
			callsAfter += with.calls[s]
			if with.calls[s] != wantAdmitted(s) {
				badCalls = append(badCalls, fmt.Sprintf("step %d: %d; want %d", s, with.calls[s], wantAdmitted(s)))
			}
		}
		if without.calls[s] != perStep {
			badCallsOff = append(badCallsOff, fmt.Sprintf("step %d: %d", s, without.calls[s]))
		}
	}
	wrong("admitted", badAdmit)
	wrong("decisions with and without the deny cache differ", badSame)
	wrong("deny cache on: script calls", badCalls)
	wrong(fmt.Sprintf("deny cache off: script calls (want %d, one per Take)", perStep), badCallsOff)
	if admitted != 70 {
		t.Errorf("%d admitted in %v; want 70 (burst 10 + 60 intervals)", admitted, steps*step)
	}
	total := int64(perStep * (steps + 1))
	if calls := with.calls[0] + callsAfter; with.cached != total-calls {
		t.Errorf("deny cache on: %d Takes, %d script calls, %d answered locally; want every Take one or the other", total, calls, with.cached)
	}
	if without.cached != 0 {
		t.Errorf("deny cache off: %d Takes answered locally", without.cached)
	}
	intervals := int64(steps * step / interval)
	t.Logf("%d Takes in %d steps of %v: %d admitted with and without the deny cache; with it, %d script calls at step 0 and %d in the %d intervals after (%.2f per interval), %d answered locally; without it, %d script calls",
		total, steps+1, step, admitted, with.calls[0], callsAfter, intervals, float64(callsAfter)/float64(intervals), with.cached, total)
}

// TestDenyCacheHitAllocs: a rejection answered by the deny cache makes no
// round trip and allocates nothing.
func TestDenyCacheHitAllocs(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	l := mustNew(t, c, rkredis.Options{Prefix: "hit:", Timeout: time.Second})
	reqs := []limiter.Request{{Key: "k", Limit: lim(1, time.Hour, 1), Cost: 1}}
	take(t, l, reqs...)
	if d := take(t, l, reqs...); d[0].Allowed || d[0].Cached {
		t.Fatalf("second take: %+v; want a rejection from Redis", d[0])
	}
	before := srv.ScriptCalls(t)
	dst := make([]limiter.Decision, 0, 1)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		d, err := l.Take(ctx, dst[:0], reqs)
		if err != nil || !d[0].Cached || d[0].Allowed || d[0].RetryAfter <= 0 {
			t.Fatalf("cached take: %+v, %v", d, err)
		}
	})
	if allocs != 0 {
		t.Errorf("a cached rejection allocates %v times; want 0", allocs)
	}
	if n := srv.ScriptCalls(t) - before; n != 0 {
		t.Errorf("cached rejections made %d Redis calls", n)
	}
}
