package workload

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// finishTimes starts n requests of one unit on r at once, in order (each
// queued before the next starts), and returns when each finished, since
// the start, and their errors.
func finishTimes(r *Resource, n int) ([]time.Duration, []error) {
	start := time.Now()
	done := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = r.Work(context.Background(), 1)
			done[i] = time.Since(start)
		})
		synctest.Wait() // request i is served or queued before i+1 arrives
	}
	wg.Wait()
	return done, errs
}

// TestResource: a resource serves Capacity requests at once, the others in
// arrival order (latency grows with the queue), refuses beyond its queue,
// and serves at a lowered capacity once the requests it ran end. Run on
// the testing/synctest clock.
func TestResource(t *testing.T) {
	const u = 10 * time.Millisecond
	for _, tc := range []struct {
		name     string
		capacity int
		lowerTo  int // SetCapacity before the requests, when not 0
		queue    int
		n        int
		want     []time.Duration
		refused  int // requests refused with ErrQueueFull
	}{
		{"capacity 2, four requests", 2, 0, 10, 4, []time.Duration{u, u, 2 * u, 2 * u}, 0},
		{"capacity 2 lowered to 1", 2, 1, 10, 3, []time.Duration{u, 2 * u, 3 * u}, 0},
		{"a queue of 1", 1, 0, 1, 3, []time.Duration{u, 2 * u, 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := NewResource(tc.capacity, tc.capacity, u, tc.queue)
				if tc.lowerTo != 0 {
					r.SetCapacity(tc.lowerTo)
					synctest.Wait() // the removed slot is taken
				}
				got, errs := finishTimes(r, tc.n)
				refused := 0
				for i, err := range errs {
					if errors.Is(err, ErrQueueFull) {
						refused++
						got[i] = 0
					}
				}
				if !slices.Equal(got, tc.want) || refused != tc.refused {
					t.Errorf("finished at %v, %d refused; want %v, %d", got, refused, tc.want, tc.refused)
				}
				r.SetCapacity(tc.capacity) // the blockers go
			})
		})
	}
}
