package redis_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// gate is a TCP proxy to a Redis server that, while on, holds every chunk
// a client writes that holds an EVALSHA (one script call, or a pipeline of
// them) until the test releases it: each such chunk is announced on
// arrived, then waits for one value on release.
type gate struct {
	addr    string
	on      atomic.Bool
	arrived chan struct{}
	release chan struct{}
}

func newGate(t *testing.T, target string) *gate {
	g := &gate{arrived: make(chan struct{}, 16), release: make(chan struct{}, 16)}
	g.addr = tcpProxy(t, target, g.forward, func(in, out net.Conn) { _, _ = io.Copy(in, out); in.Close() },
		func() { g.on.Store(false); close(g.release) })
	return g
}

// forward copies what the client writes to the server, holding script
// calls while g is on.
func (g *gate) forward(in, out net.Conn) {
	defer out.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 && g.on.Load() && bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) {
			g.arrived <- struct{}{}
			<-g.release
		}
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// mergeFixture is one server behind a gate, a Limiter on it (batching at
// its default) and one straight to the server, with the scripts loaded.
type mergeFixture struct {
	srv    *redistest.Server
	g      *gate
	l      *rkredis.Limiter
	direct *rkredis.Limiter
	li     limiter.Limit
	before int64 // the server's script calls when busy turned the gate on
}

func newMergeFixture(t *testing.T) *mergeFixture {
	srv := redistest.Start(t)
	g := newGate(t, srv.Addr)
	f := &mergeFixture{srv: srv, g: g, li: lim(1000, time.Hour, 1000),
		l:      mustNew(t, newClient(t, g.addr), rkredis.Options{Timeout: 20 * time.Second}),
		direct: mustNew(t, newClient(t, srv.Addr), rkredis.Options{})}
	warm(t, f.l, f.li)
	return f
}

// settleAsync settles reqs (reserved as ds) at actual on f.l in a
// goroutine, and returns where its error will be.
func (f *mergeFixture) settleAsync(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision, actual ...int64) chan error {
	errc := make(chan error, 1)
	go func() { errc <- f.l.Settle(ctx, reqs, ds, actual) }()
	return errc
}

// busy turns the gate on and occupies both of the batcher's senders with
// a settle each (of buckets "busy-1" and "busy-2", 10 reserved, 5
// settled), held at the gate: the calls made next wait in the queue. It
// sets f.before, and returns the two settles' errors, to read after two releases.
func (f *mergeFixture) busy(t *testing.T) [2]chan error {
	t.Helper()
	var reqs [2][]limiter.Request
	var ds [2][]limiter.Decision
	for i, k := range []string{"busy-1", "busy-2"} {
		reqs[i] = []limiter.Request{{Key: k, Limit: f.li, Cost: 10, Settle: true}}
		ds[i] = reserveOne(t, f.l, reqs[i]...)
	}
	f.before = f.srv.ScriptCalls(t)
	f.g.on.Store(true)
	var errs [2]chan error
	for i := range errs {
		errs[i] = f.settleAsync(context.Background(), reqs[i], ds[i], 5)
		<-f.g.arrived // the first sent by its caller, the second by a sender
	}
	return errs
}

// waitQueued waits until n calls wait in f.l's queue.
func (f *mergeFixture) waitQueued(t *testing.T, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); rkredis.Queued(f.l) < n; runtime.Gosched() {
		if time.Now().After(end) {
			t.Fatalf("%d calls queued; want %d", rkredis.Queued(f.l), n)
		}
	}
}

// TestSettleMerge: settles that wait in one server's queue leave as one
// script call; a caller that gives up (its context cancelled while the
// merged call is in flight) gets its own error at once, and the others'
// settles, and its own (outcome unknown to it), land exactly. Both
// senders held by a settle each at the gate, three settles queue (c, d,
// e: 100 reserved, settled at 40, 70, 250); released, the first sender
// takes all three: 3 script calls in all, not 5.
func TestSettleMerge(t *testing.T) {
	f := newMergeFixture(t)
	keys, actual := []string{"c", "d", "e"}, []int64{40, 70, 250}
	var reqs [][]limiter.Request
	var ds [][]limiter.Decision
	for _, k := range keys {
		reqs = append(reqs, []limiter.Request{{Key: k, Limit: f.li, Cost: 100, Settle: true}})
		ds = append(ds, reserveOne(t, f.l, reqs[len(reqs)-1]...))
	}
	held := f.busy(t)
	ctxC, cancelC := context.WithCancel(context.Background())
	defer cancelC()
	var errs []chan error
	for i := range keys {
		ctx := context.Background()
		if i == 0 {
			ctx = ctxC
		}
		errs = append(errs, f.settleAsync(ctx, reqs[i], ds[i], actual[i]))
		f.waitQueued(t, i+1)
	}
	f.g.release <- struct{}{} // busy-1 answered: its caller hands the queue to a sender
	<-f.g.arrived             // c, d and e in one pipeline
	cancelC()
	if err := <-errs[0]; !errors.Is(err, context.Canceled) {
		t.Errorf("c, whose caller gave up: %v; want context.Canceled", err)
	}
	f.g.release <- struct{}{}
	f.g.release <- struct{}{}
	for i, errc := range append(errs[1:], held[:]...) {
		if err := <-errc; err != nil {
			t.Errorf("settle %d: %v", i+1, err)
		}
	}
	f.g.on.Store(false)
	if got := f.srv.ScriptCalls(t) - f.before; got != 3 {
		t.Errorf("5 settles, 3 of them queued together: %d script calls; want 3", got)
	}
	for i, k := range append(keys, "busy-1", "busy-2") {
		want := int64(995)
		if i < len(actual) {
			want = 1000 - actual[i]
		}
		if n := tokensOf(t, f.direct, limiter.Request{Key: k, Limit: f.li}); n != want {
			t.Errorf("%s: %d tokens; want %d", k, n, want)
		}
	}
}

// TestSettleMergeNotTAT: in a merged call, a settle that finds a bucket
// whose state is not a decimal TAT (a hash: WRONGTYPE; a string "abc")
// fails alone and changes none of its buckets, while the settles merged
// with it land. Queued together: c (buckets c1 and a hash, 100 reserved
// each, settled at 10), d (100 settled at 30), e (a string, settled at
// 60).
func TestSettleMergeNotTAT(t *testing.T) {
	f := newMergeFixture(t)
	r := func(k string) limiter.Request { return limiter.Request{Key: k, Limit: f.li, Cost: 100, Settle: true} }
	calls := []struct {
		reqs   []limiter.Request
		actual []int64
		bad    bool
	}{
		{[]limiter.Request{r("c1"), r("hash")}, []int64{10, 10}, true},
		{[]limiter.Request{r("d")}, []int64{30}, false},
		{[]limiter.Request{r("str")}, []int64{60}, true},
	}
	var ds [][]limiter.Decision
	for _, c := range calls {
		ds = append(ds, reserveOne(t, f.l, c.reqs...))
	}
	// The reservations made, their buckets overwritten.
	hash, str := f.l.KeyName(r("hash")), f.l.KeyName(r("str"))
	for _, cmd := range [][]string{{"DEL", hash}, {"HSET", hash, "f", "v"}, {"SET", str, "abc"}} {
		if _, err := f.srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	held := f.busy(t)
	var errs []chan error
	for i, c := range calls {
		errs = append(errs, f.settleAsync(context.Background(), c.reqs, ds[i], c.actual...))
		f.waitQueued(t, i+1)
	}
	for range 3 {
		f.g.release <- struct{}{}
	}
	for i, c := range calls {
		err := <-errs[i]
		if c.bad != (err != nil) || err != nil && !strings.Contains(err.Error(), "not a decimal TAT") {
			t.Errorf("settle %d (bad bucket %v): %v", i, c.bad, err)
		}
	}
	for _, errc := range held {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	f.g.on.Store(false)
	if got := f.srv.ScriptCalls(t) - f.before; got != 3 {
		t.Errorf("%d script calls; want 3", got)
	}
	for k, want := range map[string]int64{"c1": 900, "d": 970} {
		if n := tokensOf(t, f.direct, limiter.Request{Key: k, Limit: f.li}); n != want {
			t.Errorf("%s: %d tokens; want %d", k, n, want)
		}
	}
}
