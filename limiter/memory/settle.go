package memory

import (
	"context"
	"fmt"
	"runtime"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// Settle replaces the reservations that Take charged by the actual costs,
// as the [limiter.Limiter] contract and the rule of package limiter
// ("Reserve, then settle") say: for every reqs[i] whose ds[i].Reservation
// is non-zero and whose actual[i] differs from its Cost, the difference at
// the clock's current time (at the request's share when the store is
// shared by replicas): a debt charged unconditionally, or a refund capped
// by the part of the reservation not yet refilled. A bucket is changed by
// one compare-and-swap (a refund under its shard's mutex, which keeps the
// eviction hint a lower bound); Settle allocates nothing and ignores ctx
// (it cannot be abandoned half-way).
//
// It fails with [limiter.ErrInvalidRequest] (see
// [limiter.Limiter.Settle]), settling nothing, and with
// [limiter.ErrCapacity] for a debt on a bucket that is no longer tracked
// (it was full again and evicted) when the store is full: that debt is
// lost, and the other requests are settled. Safe for concurrent use.
func (l *Limiter) Settle(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision, actual []int64) error {
	var buf [smallCall]int64
	deltas := buf[:]
	if len(reqs) > smallCall {
		deltas = make([]int64, len(reqs))
	}
	if err := gcra.ValidateSettle(reqs, ds, actual, l.replicas, deltas); err != nil {
		return err
	}
	var err error
	for i, delta := range deltas[:len(reqs)] {
		if delta == 0 {
			continue
		}
		if e := l.settle(&reqs[i], ds[i].Reservation, delta); e != nil && err == nil {
			err = fmt.Errorf("%w: request %d: a debt of %d tokens could not be charged", e, i, actual[i]-reqs[i].Cost)
		}
	}
	return err
}

// settle applies a settle of delta ns (see gcra.ValidateSettle) to r's
// bucket, whose reservation left it at TAT reserved.
func (l *Limiter) settle(r *limiter.Request, reserved, delta int64) error {
	h := l.bucket(r)
	s := &l.shards[h&l.mask]
	for {
		now := l.now()
		t := s.tab.Load()
		k := -1
		if t != nil {
			k = t.find(h)
		}
		if k < 0 {
			if done, err := l.settleUntracked(s, h, now, delta); done {
				return err
			}
			continue
		}
		c := &t.cells[k]
		switch v := c.tat.Load(); v {
		case tomb:
			if done, err := l.settleUntracked(s, h, now, delta); done {
				return err
			}
		case frozen:
			s.mu.Lock() // the table is being replaced under it: wait
			s.mu.Unlock()
		case busy:
			runtime.Gosched() // a call deciding several buckets holds it
		default:
			next, changed := gcra.Settle(v, now, reserved, delta)
			if !changed {
				return nil
			}
			if delta > 0 {
				// A debt only raises the TAT: the hint stays a lower bound.
				if c.tat.CompareAndSwap(v, stored(next)) {
					return nil
				}
				continue
			}
			// A refund lowers it: under the mutex, lowering the hint too.
			s.mu.Lock()
			ok := c.tat.CompareAndSwap(v, stored(next))
			if ok {
				s.lower(stored(next), c)
			}
			s.mu.Unlock()
			if ok {
				return nil
			}
		}
	}
}

// settleUntracked settles a bucket that is not tracked (a full bucket): a
// refund has nothing to give back; a debt tracks it again at now + delta,
// reviving its evicted cell or inserting one, when there is room (else
// [limiter.ErrCapacity]). It reports false, having done nothing, when the
// bucket is tracked again by the time it holds the shard's mutex: settle
// then charges it as any tracked bucket.
func (l *Limiter) settleUntracked(s *shard, h uint64, now, delta int64) (bool, error) {
	if delta <= 0 {
		return true, nil
	}
	if l.count.Load() >= l.maxKeys {
		l.sweepAll(now)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var c *cell
	if t := s.tab.Load(); t != nil {
		if k := t.find(h); k >= 0 {
			if c = &t.cells[k]; c.tat.Load() != tomb {
				return false, nil
			}
		}
	}
	if !l.claim(1) {
		return true, limiter.ErrCapacity
	}
	tat, _ := gcra.Settle(now, now, 0, delta)
	if c != nil {
		c.tat.Store(tat)
		s.live++
		s.lower(tat, c)
		return true, nil
	}
	s.reserve(1)
	s.insert(h, tat)
	return true, nil
}
