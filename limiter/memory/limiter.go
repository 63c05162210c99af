package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// Limiter is an in-process [limiter.Limiter]: one GCRA bucket state (an
// int64 theoretical arrival time) per key, in sharded maps, at most
// [Options.MaxKeys] of them.
//
// Take and Peek lock the shards of all their requests in ascending shard
// order (so concurrent calls cannot deadlock), decide the requests in order,
// charge all or none, and unlock. Their cost is a few map operations per
// request plus one allocation for the returned slice; a new key also costs a
// copy of its string and, when the store is full, may trigger a sweep (see
// [Options]). Calls are meant to carry a handful of requests: grouping
// requests by shard and by key is quadratic in len(reqs).
//
// A Limiter must be created with [New]. It is safe for concurrent use by
// multiple goroutines.
type Limiter struct {
	clock   Clock
	seed    maphash.Seed
	mask    uint64
	shards  []shard
	maxKeys int64
	// count is the number of tracked keys, reserved before inserting and
	// released after evicting, so it never exceeds maxKeys.
	count atomic.Int64
}

// maxShards bounds the shard count; minShardKeys is the smallest share of
// MaxKeys worth its own shard (small stores get one shard, so which states
// a sweep evicts does not depend on the hash seed).
const (
	maxShards    = 256
	minShardKeys = 1024
)

// New returns an empty Limiter configured by opts; see [Options] for the
// defaults. It panics if opts.MaxKeys is negative.
func New(opts Options) *Limiter {
	if opts.MaxKeys < 0 {
		panic(fmt.Sprintf("memory.New: MaxKeys %d is negative", opts.MaxKeys))
	}
	maxKeys := opts.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	clock := opts.Clock
	if clock == nil {
		clock = monotonic{start: time.Now()}
	}
	n := 1
	for n*2 <= maxShards && n*2*minShardKeys <= maxKeys {
		n *= 2
	}
	l := &Limiter{clock: clock, seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard, n), maxKeys: int64(maxKeys)}
	for i := range l.shards {
		l.shards[i].init()
	}
	return l
}

// Take decides reqs at the clock's current time and charges every bucket if
// every decision is Allowed, as the [limiter.Limiter] contract says. Besides
// ctx.Err() and [limiter.ErrInvalidRequest], it fails with
// [limiter.ErrCapacity] when the call would track new keys, the store holds
// MaxKeys, and too few states are full again to be evicted (see [Options]);
// nothing is charged then. Safe for concurrent use.
func (l *Limiter) Take(ctx context.Context, reqs []limiter.Request) ([]limiter.Decision, error) {
	return l.run(ctx, reqs, true)
}

// Peek returns the decisions Take would return now, charging nothing,
// tracking no new key and evicting nothing, as the [limiter.Limiter]
// contract says. Its errors are ctx.Err(), [limiter.ErrInvalidRequest], and
// [limiter.ErrCapacity] when every request would be allowed but Take could
// not track their new keys (the store is full of states still refilling).
// Safe for concurrent use.
func (l *Limiter) Peek(ctx context.Context, reqs []limiter.Request) ([]limiter.Decision, error) {
	return l.run(ctx, reqs, false)
}

// Len returns the number of keys currently tracked, at most MaxKeys. It
// includes states whose bucket is full again but that no sweep has evicted
// yet (sweeps run only when the store is full). Safe for concurrent use.
func (l *Limiter) Len() int {
	return int(l.count.Load())
}

// slot is the per-request scratch state of one call.
type slot struct {
	shard   uint32
	first   int32 // index of the first request in this call with the same key
	existed bool  // (first occurrence) the key was tracked when decided
	known   bool  // the bucket state after this request is tracked or charged
	tat     int64 // the bucket's TAT after this request, if charged
}

// smallCall is the number of requests whose scratch state lives on the stack.
const smallCall = 8

// errNeedRoom reports that a call must track new keys and the store is
// full even after sweeping the shards the call holds.
var errNeedRoom = errors.New("need room")

func (l *Limiter) run(ctx context.Context, reqs []limiter.Request, charge bool) ([]limiter.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := limiter.ValidateRequests(reqs); err != nil {
		return nil, err
	}
	out := make([]limiter.Decision, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	var buf [smallCall]slot
	var sl []slot
	if len(reqs) <= smallCall {
		sl = buf[:len(reqs)]
	} else {
		sl = make([]slot, len(reqs))
	}
	for i := range reqs {
		sl[i].shard = uint32(maphash.String(l.seed, reqs[i].Key) & l.mask)
		sl[i].first = int32(i)
		for j := range i {
			if sl[j].shard == sl[i].shard && reqs[j].Key == reqs[i].Key {
				sl[i].first = sl[j].first
				break
			}
		}
	}

	// Read the clock before locking: a concurrent call that locks first may
	// then use a later time, which only makes this call stricter (its
	// buckets look less refilled), never looser.
	now := int64(l.clock.Now())
	err := l.decide(reqs, sl, out, now, charge)
	if err == errNeedRoom {
		// Make room in every shard, one lock at a time (never while
		// holding this call's locks), then decide again from scratch: the
		// call has charged nothing.
		l.sweepAll(now)
		err = l.decide(reqs, sl, out, now, charge)
		if err == errNeedRoom {
			return nil, fmt.Errorf("%w: %d keys tracked, all still refilling", limiter.ErrCapacity, l.maxKeys)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decide locks the shards of sl, decides every request into out and, if
// charge is set and all are allowed, commits.
func (l *Limiter) decide(reqs []limiter.Request, sl []slot, out []limiter.Decision, now int64, charge bool) error {
	l.lock(sl)
	defer l.unlock(sl)

	all := true
	for i := range reqs {
		r := &reqs[i]
		s := &l.shards[sl[i].shard]
		var tat int64
		var known bool
		if f := int(sl[i].first); f != i {
			// Same key earlier in this call: continue from its outcome.
			for j := i - 1; j >= f; j-- {
				if sl[j].first == sl[i].first {
					tat, known = sl[j].tat, sl[j].known
					break
				}
			}
		} else {
			tat, known = s.tats[r.Key]
			sl[i].existed = known
		}
		if !known {
			tat = now // an unknown key is a full bucket
		}
		d, next := gcra(tat, now, r.Limit, r.Cost)
		out[i] = d
		sl[i].tat = next
		sl[i].known = known || d.Allowed
		all = all && d.Allowed
	}
	if charge && all {
		return l.commit(reqs, sl, now)
	}
	if !charge && all && !l.mayFit(sl, now) {
		// Peek promises what Take would do: Take would find no room.
		return fmt.Errorf("%w: %d keys tracked, all still refilling", limiter.ErrCapacity, l.maxKeys)
	}
	return nil
}

// mayFit reports whether the new keys of sl could be tracked now: they fit
// under maxKeys, or some shard may hold a state that is full again (its
// hint is a lower bound, so this can say yes where a sweep would find
// nothing, never no where Take would succeed). It reads only atomics.
func (l *Limiter) mayFit(sl []slot, now int64) bool {
	need := int64(0)
	for i := range sl {
		if int(sl[i].first) == i && !sl[i].existed {
			need++
		}
	}
	if need == 0 || l.count.Load()+need <= l.maxKeys {
		return true
	}
	for i := range l.shards {
		if l.shards[i].hint.Load() <= now {
			return true
		}
	}
	return false
}

// commit stores the TAT of every request (all allowed), first reserving
// room for the call's new keys, sweeping the call's shards if the store is
// full. It writes nothing unless every new key fits, and returns
// errNeedRoom if they do not. The shards of sl are locked.
func (l *Limiter) commit(reqs []limiter.Request, sl []slot, now int64) error {
	need := int64(0)
	for i := range sl {
		if int(sl[i].first) == i && !sl[i].existed {
			need++
		}
	}
	swept := false
	if need > 0 && !l.reserve(need) {
		for i := range sl {
			if l.isFirstOfShard(sl, i) {
				if n := l.shards[sl[i].shard].sweep(now); n > 0 {
					l.count.Add(-n)
					swept = true
				}
			}
		}
		if swept {
			// The sweep may have evicted keys of this call whose buckets
			// were full: count again what must be inserted.
			need = 0
			for i := range sl {
				if int(sl[i].first) == i {
					if _, ok := l.shards[sl[i].shard].tats[reqs[i].Key]; !ok {
						need++
					}
				}
			}
		}
		if !l.reserve(need) {
			return errNeedRoom
		}
	}
	for i := range sl {
		s := &l.shards[sl[i].shard]
		k := reqs[i].Key
		if !swept && sl[sl[i].first].existed {
			s.tats[k] = sl[i].tat
			continue
		}
		if _, ok := s.tats[k]; ok {
			s.tats[k] = sl[i].tat
			continue
		}
		// A new key: copy it so the map does not pin the caller's buffer.
		s.insert(strings.Clone(k), sl[i].tat)
	}
	return nil
}

// reserve counts n more tracked keys if they fit under maxKeys.
func (l *Limiter) reserve(n int64) bool {
	for {
		c := l.count.Load()
		if c+n > l.maxKeys {
			return false
		}
		if l.count.CompareAndSwap(c, c+n) {
			return true
		}
	}
}

// sweepAll sweeps every shard that may hold a full state, locking one shard
// at a time. Callers hold no shard lock.
func (l *Limiter) sweepAll(now int64) {
	for i := range l.shards {
		s := &l.shards[i]
		if now < s.hint.Load() {
			continue // nothing evictable yet; skipped without locking
		}
		s.mu.Lock()
		n := s.sweep(now)
		s.mu.Unlock()
		l.count.Add(-n)
	}
}

// isFirstOfShard reports whether request i is the first of sl in its shard.
func (l *Limiter) isFirstOfShard(sl []slot, i int) bool {
	for j := range i {
		if sl[j].shard == sl[i].shard {
			return false
		}
	}
	return true
}

// lock locks the distinct shards of sl in ascending order.
func (l *Limiter) lock(sl []slot) {
	last := -1
	for {
		next := -1
		for i := range sl {
			if s := int(sl[i].shard); s > last && (next < 0 || s < next) {
				next = s
			}
		}
		if next < 0 {
			return
		}
		l.shards[next].mu.Lock()
		last = next
	}
}

// unlock unlocks the distinct shards of sl.
func (l *Limiter) unlock(sl []slot) {
	for i := range sl {
		if l.isFirstOfShard(sl, i) {
			l.shards[sl[i].shard].mu.Unlock()
		}
	}
}
