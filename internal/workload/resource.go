// Package workload is the demo's simulated resource and the load that
// drives it past saturation: GET /v1/work of cmd/demo runs on a Resource,
// and bench/cmd/overload drives it (in the process, or a running demo
// over HTTP) and reports goodput, latency and the adaptive limit over
// time.
package workload

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrQueueFull is Work's error when the resource's queue is full.
var ErrQueueFull = errors.New("workload: the resource's queue is full")

// Resource is a resource of fixed capacity, as a database's connection
// pool or a worker pool is: at most Capacity requests are served at once,
// each for its units × the unit time; the others wait their turn, first
// come first served, so that beyond the capacity latency grows with the
// queue. The queue is bounded (a request finding it full is refused), so
// memory is too. Safe for concurrent use.
type Resource struct {
	slots chan struct{} // a token per request served; capacity max
	unit  time.Duration
	// mu guards queued and blocked: requests waiting, and the tokens taken
	// by SetCapacity to lower the capacity (held by its goroutines).
	mu       sync.Mutex
	queued   int
	maxQueue int
	blocked  []chan struct{}
}

// NewResource returns a resource serving capacity requests at once (at
// most max after SetCapacity), unit per unit of work, with at most
// maxQueue requests waiting.
func NewResource(capacity, max int, unit time.Duration, maxQueue int) *Resource {
	r := &Resource{slots: make(chan struct{}, max), unit: unit, maxQueue: maxQueue}
	r.SetCapacity(capacity)
	return r
}

// Work serves a request of units units: it waits for a free slot (in
// arrival order; ErrQueueFull when maxQueue others wait already), holds it
// units × the unit time, and returns nil; or ctx's error when ctx ends
// first.
func (r *Resource) Work(ctx context.Context, units int) error {
	r.mu.Lock()
	if r.queued >= r.maxQueue {
		r.mu.Unlock()
		return ErrQueueFull
	}
	r.queued++
	r.mu.Unlock()
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		r.dequeue()
		return ctx.Err()
	}
	r.dequeue()
	defer func() { <-r.slots }()
	t := time.NewTimer(time.Duration(units) * r.unit)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Resource) dequeue() {
	r.mu.Lock()
	r.queued--
	r.mu.Unlock()
}

// SetCapacity makes the resource serve n requests at once (1 to its max):
// a lower capacity takes effect as requests being served end (the tokens
// it removes wait their turn like requests), a higher one at once.
func (r *Resource) SetCapacity(n int) {
	n = min(max(n, 1), cap(r.slots))
	r.mu.Lock()
	defer r.mu.Unlock()
	for want := cap(r.slots) - n; len(r.blocked) < want; {
		stop := make(chan struct{})
		r.blocked = append(r.blocked, stop)
		go func() {
			r.slots <- struct{}{}
			<-stop
			<-r.slots
		}()
	}
	for want := cap(r.slots) - n; len(r.blocked) > want; {
		close(r.blocked[len(r.blocked)-1])
		r.blocked = r.blocked[:len(r.blocked)-1]
	}
}
