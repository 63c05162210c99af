package redis

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Micro-batching: concurrent script calls bound for one server (one
// master of a Cluster) wait in that server's queue, and up to
// batchSenders goroutines per server send them, up to MaxBatch per
// pipeline, each still its own EVALSHA. There is no timer: a sender takes
// whatever is queued the moment it is free, so a caller alone is sent at
// once, and callers that arrive while the senders are busy leave together
// in the next pipeline. Each caller waits for its reply or its own
// deadline, whichever comes first; see the package documentation
// ("Batching").

// defaultMaxBatch is the most calls in one pipeline when
// Options.MaxBatch is 0.
const defaultMaxBatch = 64

// batchSenders is the most pipelines in flight to one server at a time
// (each on its own pooled connection). Up to minSenders run whenever
// calls wait; more start only while a whole pipeline (MaxBatch calls)
// waits, so that under a steady load the calls gather into fewer, fuller
// pipelines: on the 2-core benchmark machine, 64 callers made pipelines
// of 11 calls with 4 senders always started, 25 with this rule, and
// 0.5-1 µs less client CPU per decision (BENCHMARKS.md).
var batchSenders = 4

const minSenders = 2

// batchGrace is how long a pipeline may outlive the latest deadline of
// its callers.
const batchGrace = time.Millisecond

// Call states. A call leaves queued (or sent) exactly once, by the
// compare-and-swap of whoever ends it: the sender with its reply
// (replied), the batcher's watchdog at its deadline (expired), or its
// caller when its context ends (abandoned). Only replied records go back
// to callPool; a sender may still hold the others.
const (
	queued int32 = iota
	sent
	replied
	expired
	abandoned
	direct // sent on its caller's goroutine, outside the batcher
)

// callReqs is the most requests whose arguments fit in a call record's
// own storage; a call of more allocates them.
const callReqs = 4

// call is one script call: its EVALSHA arguments and, while it waits in a
// batch, its state and reply. Records come from callPool and go back to
// it once their caller is done with the reply, so the arguments and the
// done channel are reused from call to call; a record
// whose caller stopped waiting (it may still be in a sender's pipeline)
// is left to the garbage collector.
type call struct {
	args     []any // EVALSHA arguments; [0] and [1] set by the sender
	s        *script
	take     bool
	deadline time.Time // the caller's: Timeout from its start, or its context's if earlier
	// sent is the local time (Limiter.localNow) the call was last sent at
	// or before: the deny cache's bound counts from it, so the later it is
	// taken (never after the write), the closer the bound to Redis's TAT.
	sent  int64
	state atomic.Int32
	done  chan struct{} // receives one value when cmd and err are set
	cmd   *goredis.Cmd
	err   error

	// A settle (settleScript) the sender may merge with the other settles
	// of its pipeline bound for the same group (Cluster slot) and sent in
	// the same mode: its number of buckets (an argument, by pointer), and
	// the index of its result in the reply (0 when sent alone). Set by
	// settleGroup; merge is cleared by putCall.
	merge bool
	group uint32
	keys  int64
	part  int

	// Storage of args for a call of up to callReqs requests: the key names
	// and numbers are passed by pointer (go-redis writes *string and
	// *int64 as their values), so filling args boxes nothing.
	argBuf [headArgs + 2 + (1+settleArgsPerKey)*callReqs]any
	names  [callReqs]string
	nums   [settleArgsPerKey * callReqs]int64
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// getCall returns a record from callPool whose args holds k arguments.
func getCall(k int) *call {
	c := callPool.Get().(*call)
	if k <= len(c.argBuf) {
		c.args = c.argBuf[:k]
	} else {
		c.args = make([]any, k)
	}
	return c
}

// putCall returns c to callPool; its caller must be done with c.cmd.
func putCall(c *call) {
	clear(c.args)
	clear(c.names[:])
	c.args, c.s, c.cmd, c.err, c.merge = nil, nil, nil, nil, false
	callPool.Put(c)
}

// setArgs sets c's key and charge arguments for request i, keyed name.
func (c *call) setArgs(i, n int, name string, charge, ceiling int64) {
	keys, argv := c.args[headArgs:headArgs+n], c.args[headArgs+n:]
	if n > callReqs {
		keys[i], argv[1+argsPerReq*i], argv[2+argsPerReq*i] = name, charge, ceiling
		return
	}
	c.names[i], c.nums[argsPerReq*i], c.nums[argsPerReq*i+1] = name, charge, ceiling
	keys[i], argv[1+argsPerReq*i], argv[2+argsPerReq*i] = &c.names[i], &c.nums[argsPerReq*i], &c.nums[argsPerReq*i+1]
}

// shaArg returns s's SHA as an argument, boxed once.
func shaArg(s *script) any { return s.sha }

// batcher is the queue of one server, with the calls in flight in its
// senders' pipelines and the watchdog that ends each one's wait at its
// deadline (one timer per server, not one per call).
type batcher struct {
	mu      sync.Mutex
	queue   []*call
	senders int
	flights []*flight // one per running sender

	// watch fires at watchAt (zero: not armed), the earliest deadline of
	// a waiting call when it was armed, or earlier.
	watch   *time.Timer
	watchAt time.Time
}

// flight is what one sender has taken from the queue; batch is read by
// the watchdog and written under batcher.mu only, and emptied before the
// replies go out (a record replied to may be reused at once).
type flight struct {
	batch []*call
	live  []*call
	cmds  []*goredis.Cmd

	// The merging of settles (see merge): the calls sent, the index in
	// units of each live call's reply, and the records of merged settles
	// with their members, reused from pipeline to pipeline.
	units   []*call
	unit    []int
	merged  []*mergedSettle
	nmerged int
}

// mergedSettle is one settleScript call that carries the settles of
// members, which share a group and a mode.
type mergedSettle struct {
	c       call
	at      int // its index in flight.units
	members []*call
}

// batcherFor returns the queue for a call whose first key is key, or nil
// when the call must go alone (batching off, a Ring, or a Cluster whose
// slot map is not known).
func (l *Limiter) batcherFor(ctx context.Context, key string) *batcher {
	switch {
	case l.maxBatch <= 1 || l.shard == byTag:
		return nil
	case l.shard == oneServer:
		return &l.single
	}
	cc, ok := l.client.(*goredis.ClusterClient)
	if !ok {
		return nil
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil // the direct call reports the error
	}
	if b, ok := l.masters.Load(node); ok {
		return b.(*batcher)
	}
	b, _ := l.masters.LoadOrStore(node, &batcher{})
	return b.(*batcher)
}

// submit queues c on b and waits for its reply, or for ctx to end or
// c.deadline to pass, which it then reports at once (the call may still
// run: outcome unknown). Its error is the one Take returns. It reports
// whether c may go back to callPool (false: a sender may still hold it).
func (l *Limiter) submit(ctx context.Context, b *batcher, c *call) (*goredis.Cmd, error, bool) {
	b.mu.Lock()
	if b.senders == 0 {
		// Nothing is in flight to the server (so nothing waits): this call goes
		// at once, on the caller's goroutine, as without batching.
		c.state.Store(direct)
		b.senders++
		b.mu.Unlock()
		tctx, cancel := context.WithDeadline(ctx, c.deadline)
		c.resend(l)
		cmd, err := run(tctx, l.client, c.s, c.args, !c.take)
		if err != nil {
			err = l.fail(ctx, tctx, err)
		}
		cancel()
		b.mu.Lock()
		if len(b.queue) > 0 {
			go l.send(b) // calls came meanwhile: this sender's turn passes to them
		} else {
			b.senders--
		}
		b.mu.Unlock()
		return cmd, err, true
	}
	c.state.Store(queued)
	b.queue = append(b.queue, c)
	start := b.senders < minSenders || b.senders < batchSenders && len(b.queue) >= l.maxBatch
	if start {
		b.senders++
	}
	if b.watchAt.IsZero() || c.deadline.Before(b.watchAt) {
		b.watchAt = c.deadline
		if d := time.Until(c.deadline); b.watch == nil {
			b.watch = time.AfterFunc(d, b.expire)
		} else {
			b.watch.Reset(d)
		}
	}
	b.mu.Unlock()
	if start {
		go l.send(b)
	}
	if done := ctx.Done(); done == nil {
		<-c.done
	} else {
		select {
		case <-c.done:
		case <-done:
			if c.state.CompareAndSwap(queued, abandoned) || c.state.CompareAndSwap(sent, abandoned) {
				return nil, l.failTimed(ctx, false, ctx.Err()), false
			}
			<-c.done // replied or expired meanwhile: its value is on the way
		}
	}
	if c.state.Load() == expired {
		return nil, l.failTimed(ctx, true, context.DeadlineExceeded), false
	}
	if c.err != nil {
		return nil, l.failTimed(ctx, !time.Now().Before(c.deadline), c.err), true
	}
	return c.cmd, nil, true
}

// expire is the watchdog: it ends the wait of every queued or sent call
// whose deadline has passed, and arms itself for the earliest of the
// others.
func (b *batcher) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var next time.Time
	check := func(calls []*call) {
		for _, c := range calls {
			st := c.state.Load()
			if st != queued && st != sent {
				continue
			}
			if !c.deadline.After(now) {
				if c.state.CompareAndSwap(st, expired) {
					c.done <- struct{}{}
				}
			} else if next.IsZero() || c.deadline.Before(next) {
				next = c.deadline
			}
		}
	}
	check(b.queue)
	for _, f := range b.flights {
		check(f.batch)
	}
	if b.watchAt = next; !next.IsZero() {
		b.watch.Reset(time.Until(next))
	}
}

// send sends b's queued calls, a pipeline at a time, until the queue is
// empty.
func (l *Limiter) send(b *batcher) {
	f := &flight{
		batch: make([]*call, 0, l.maxBatch),
		live:  make([]*call, 0, l.maxBatch),
		cmds:  make([]*goredis.Cmd, l.maxBatch),
	}
	b.mu.Lock()
	b.flights = append(b.flights, f)
	for {
		clear(f.batch)
		n := min(len(b.queue), l.maxBatch)
		if n == 0 {
			for i, g := range b.flights {
				if g == f {
					last := len(b.flights) - 1
					b.flights[i], b.flights[last] = b.flights[last], nil
					b.flights = b.flights[:last]
					break
				}
			}
			b.senders--
			b.mu.Unlock()
			return
		}
		f.batch = append(f.batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		l.exec(b, f)
		// Let the callers just answered run first: their next calls then
		// join this sender's next pipeline rather than leave one by one.
		runtime.Gosched()
		b.mu.Lock()
	}
}

// exec sends the calls of f.batch (b's sender f) that their callers still
// wait for in one pipeline, under a deadline that is the latest of theirs, and
// resends the ones the server answered NOSCRIPT (at most twice: the first
// call of each script by EVAL, which loads it, the others by EVALSHA
// after it on the same connection; then every one by EVAL).
func (l *Limiter) exec(b *batcher, f *flight) {
	live := f.live[:0]
	var deadline time.Time
	for _, c := range f.batch {
		if c.state.CompareAndSwap(queued, sent) {
			live = append(live, c)
			if c.deadline.After(deadline) {
				deadline = c.deadline
			}
		}
	}
	if len(live) == 0 {
		return
	}
	// A little after the latest caller's deadline: the watchdog ends each
	// caller's wait first, and reports its deadline as its own.
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(batchGrace))
	defer cancel()
	if l.now == nil {
		now := l.localNow()
		for _, c := range live {
			c.sent = now
		}
	}
	units := f.merge(live)
	cmds := f.cmds[:len(units)]
	l.pipeline(ctx, units, cmds, func(c *call) (any, any) { return "evalsha", shaArg(c.s) })
	for round := 0; round < 2; round++ {
		var redo []*call
		var idx []int
		for i, cmd := range cmds {
			if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
				redo = append(redo, units[i])
				idx = append(idx, i)
			}
		}
		if len(redo) == 0 {
			break
		}
		loaded := map[*script]bool{}
		again := make([]*goredis.Cmd, len(redo))
		l.pipeline(ctx, redo, again, func(c *call) (any, any) {
			if round == 1 || !loaded[c.s] {
				loaded[c.s] = true
				return "eval", c.s.src
			}
			return "evalsha", shaArg(c.s)
		})
		for j, i := range idx {
			cmds[i] = again[j]
		}
	}
	// Out of the watchdog's sight before any record can be reused.
	b.mu.Lock()
	clear(f.batch)
	f.batch = f.batch[:0]
	b.mu.Unlock()
	f.unmerge()
	for i, c := range live {
		if c.state.CompareAndSwap(sent, replied) {
			cmd := cmds[f.unit[i]]
			c.cmd, c.err = cmd, cmd.Err()
			c.done <- struct{}{}
		}
		live[i] = nil
	}
	clear(cmds)
}

// merge returns the calls to send for live (the calls of one pipeline):
// live itself, unless two or more of its settles share a group (a Cluster
// slot; every call on one server shares group 0) and a mode, which then
// leave as one settleScript call that carries their buckets, in the place
// of the first of them, each settle's result at its own index (its part)
// of the reply. f.unit[i] is the index of live[i]'s call in the result.
func (f *flight) merge(live []*call) []*call {
	f.unit, f.units, f.nmerged = f.unit[:0], f.units[:0], 0
	for _, c := range live {
		c.part = 0
		if c.merge {
			g, fresh := f.groupFor(c)
			if !fresh {
				c.part = len(g.members)
				g.members = append(g.members, c)
				f.unit = append(f.unit, g.at)
				continue
			}
			g.at, g.members = len(f.units), append(g.members, c)
		}
		f.unit = append(f.unit, len(f.units))
		f.units = append(f.units, c)
	}
	for _, g := range f.merged[:f.nmerged] {
		if len(g.members) > 1 {
			f.units[g.at] = g.build()
		}
	}
	return f.units
}

// groupFor returns the merged settle of c's group and mode in this
// pipeline, and whether it is new (c its first member).
func (f *flight) groupFor(c *call) (*mergedSettle, bool) {
	mode := c.args[headArgs+c.keys]
	for _, g := range f.merged[:f.nmerged] {
		if h := g.members[0]; h.group == c.group && h.args[headArgs+h.keys] == mode {
			return g, false
		}
	}
	if f.nmerged == len(f.merged) {
		f.merged = append(f.merged, &mergedSettle{})
	}
	g := f.merged[f.nmerged]
	f.nmerged++
	g.members = g.members[:0]
	return g, true
}

// build sets g's call to carry the settles of every member (see
// settleScript: their keys, the mode, then each one's arguments) and
// returns it.
func (g *mergedSettle) build() *call {
	c := &g.c
	c.s, c.take = &settleS, true
	n := int64(0)
	for _, m := range g.members {
		n += m.keys
	}
	args := append(c.args[:0], nil, nil, n)
	for _, m := range g.members {
		args = append(args, m.args[headArgs:headArgs+m.keys]...)
	}
	args = append(args, g.members[0].args[headArgs+g.members[0].keys])
	for _, m := range g.members {
		args = append(args, m.args[headArgs+m.keys+1:]...)
	}
	c.args = args
	return c
}

// unmerge drops what merge held of a pipeline's calls, whose records may
// now be reused.
func (f *flight) unmerge() {
	for _, g := range f.merged[:f.nmerged] {
		clear(g.c.args)
		clear(g.members)
		g.c.args, g.members = g.c.args[:0], g.members[:0]
	}
	clear(f.units)
	f.units, f.nmerged = f.units[:0], 0
}

// pipeline sends one command per call of calls in one pipeline, named by
// verb (its first two arguments), and sets cmds.
func (l *Limiter) pipeline(ctx context.Context, calls []*call, cmds []*goredis.Cmd, verb func(*call) (any, any)) {
	pipe := l.client.Pipeline()
	for i, c := range calls {
		// The first command of a resent call is done with its arguments.
		c.args[0], c.args[1] = verb(c)
		cmd := goredis.NewCmd(ctx, c.args...)
		cmd.SetFirstKeyPos(3)
		cmds[i] = cmd
		if c.take {
			_ = pipe.Process(ctx, noRetryCmd{cmd})
		} else {
			_ = pipe.Process(ctx, cmd)
		}
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
}

// resend sets c.sent to now, just before c is written (with the test
// clock, c.sent is the script's time: it stays).
func (c *call) resend(l *Limiter) {
	if l.now == nil {
		c.sent = l.localNow()
	}
}

// names0 returns the Redis key of c's first request, of a call of n.
func (c *call) names0(n int) string {
	if n > callReqs {
		return c.args[headArgs].(string)
	}
	return c.names[0]
}
