package redis

import (
	"context"
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
// once, and callers that arrive while every sender is busy leave together
// in the next pipeline. Each caller waits for its reply or its own
// deadline, whichever comes first; see the package documentation
// ("Batching").

// defaultMaxBatch is the most calls in one pipeline when
// Options.MaxBatch is 0.
const defaultMaxBatch = 64

// batchSenders is the most pipelines in flight to one server at a time
// (each on its own pooled connection).
var batchSenders = 4

// batchGrace is how long a pipeline may outlive the latest deadline of
// its callers.
const batchGrace = time.Millisecond

// Call states.
const (
	queued int32 = iota
	sent
	abandoned
)

// call is one script call waiting in a batch.
type call struct {
	args     []any // EVALSHA arguments; [0] and [1] set by the sender
	s        *script
	take     bool
	deadline time.Time
	state    atomic.Int32
	done     chan struct{} // receives one value when cmd and err are set
	cmd      *goredis.Cmd
	err      error
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// batcher is the queue of one server.
type batcher struct {
	mu      sync.Mutex
	queue   []*call
	senders int
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

// submit queues the call of s with args (the EVALSHA arguments after the
// SHA, as for run) on b and waits for its reply or for tctx to end, which
// it then returns at once (the call may still run: outcome unknown).
func (l *Limiter) submit(tctx context.Context, b *batcher, s *script, args []any, take bool) (*goredis.Cmd, error) {
	c := callPool.Get().(*call)
	c.args, c.s, c.take = args, s, take
	c.deadline, _ = tctx.Deadline()
	c.state.Store(queued)
	b.mu.Lock()
	if b.senders == 0 {
		// Nothing is in flight to the server (so nothing waits): this call goes
		// at once, on the caller's goroutine, as without batching.
		b.senders++
		b.mu.Unlock()
		callPool.Put(c)
		cmd, err := run(tctx, l.client, s, args, !take)
		b.mu.Lock()
		if len(b.queue) > 0 {
			go l.send(b) // calls came meanwhile: this sender's turn passes to them
		} else {
			b.senders--
		}
		b.mu.Unlock()
		return cmd, err
	}
	b.queue = append(b.queue, c)
	start := b.senders < batchSenders
	if start {
		b.senders++
	}
	b.mu.Unlock()
	if start {
		go l.send(b)
	}
	select {
	case <-c.done:
		cmd, err := c.cmd, c.err
		*c = call{done: c.done}
		callPool.Put(c)
		return cmd, err
	case <-tctx.Done():
		// The sender may hold c still: it is left to the garbage collector.
		c.state.CompareAndSwap(queued, abandoned)
		return nil, tctx.Err()
	}
}

// send sends b's queued calls, a pipeline at a time, until the queue is
// empty.
func (l *Limiter) send(b *batcher) {
	batch := make([]*call, 0, l.maxBatch)
	for {
		b.mu.Lock()
		n := min(len(b.queue), l.maxBatch)
		if n == 0 {
			b.senders--
			b.mu.Unlock()
			return
		}
		batch = append(batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		l.exec(batch)
	}
}

// exec sends the calls of batch that their callers still wait for in one
// pipeline, under a deadline that is the latest of theirs, and resends
// the ones the server answered NOSCRIPT (at most twice: the first call of
// each script by EVAL, which loads it, the others by EVALSHA after it on
// the same connection; then every one by EVAL).
func (l *Limiter) exec(batch []*call) {
	live := batch[:0]
	var deadline time.Time
	for _, c := range batch {
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
	// A little after the latest caller's deadline: each caller's own timer
	// ends its wait first, and reports its deadline as its own.
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(batchGrace))
	defer cancel()
	cmds := make([]*goredis.Cmd, len(live))
	l.pipeline(ctx, live, cmds, func(c *call) (string, any) { return "evalsha", c.s.sha })
	for round := 0; round < 2; round++ {
		var redo []*call
		var idx []int
		for i, cmd := range cmds {
			if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
				redo = append(redo, live[i])
				idx = append(idx, i)
			}
		}
		if len(redo) == 0 {
			break
		}
		loaded := map[*script]bool{}
		again := make([]*goredis.Cmd, len(redo))
		l.pipeline(ctx, redo, again, func(c *call) (string, any) {
			if round == 1 || !loaded[c.s] {
				loaded[c.s] = true
				return "eval", c.s.src
			}
			return "evalsha", c.s.sha
		})
		for j, i := range idx {
			cmds[i] = again[j]
		}
	}
	for i, c := range live {
		c.cmd, c.err = cmds[i], cmds[i].Err()
		c.done <- struct{}{}
	}
}

// pipeline sends one command per call of calls in one pipeline, named by
// verb (its first two arguments), and sets cmds.
func (l *Limiter) pipeline(ctx context.Context, calls []*call, cmds []*goredis.Cmd, verb func(*call) (string, any)) {
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
