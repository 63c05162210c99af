package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/limiter"
)

// Limiter is an in-process [limiter.Limiter]: one GCRA bucket state (an
// int64 theoretical arrival time) per bucket, in sharded maps, at most
// [Options.MaxKeys] of them.
//
// A bucket is named by a 64-bit keyed hash (hash/maphash, a random seed per
// Limiter) of the request's Key and limit shape (emission interval and
// burst); the key string itself is not kept, which is what makes a state
// cost 20 to 30 bytes. Two distinct buckets share a state only if their
// hashes collide: with n tracked buckets the chance that any pair does is
// about n²/2⁶⁵ (3·10⁻⁸ for a million), and since the seed is secret and
// per process, a client cannot choose keys that collide.
//
// Take and Peek lock the shards of all their requests in ascending shard
// order (so concurrent calls cannot deadlock), decide the requests in order,
// charge as the [limiter.Limiter] contract says, and unlock. A call costs a
// few map operations per request and allocates nothing when dst has room
// (tracking a new key may grow a map; when the store is full it may
// trigger a sweep, see [Options]). Calls are meant to carry a handful of
// requests: grouping requests by shard and by bucket is quadratic in
// len(reqs).
//
// A Limiter must be created with [New]. It is safe for concurrent use by
// multiple goroutines.
type Limiter struct {
	clock   Clock
	seed    maphash.Seed
	mask    uint64
	shards  []shard
	maxKeys int64
	// count is the number of tracked buckets, reserved before inserting
	// and released after evicting, so it never exceeds maxKeys.
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

// Take decides reqs at the clock's current time, appends their decisions to
// dst and charges as the [limiter.Limiter] contract says. Besides ctx.Err()
// and [limiter.ErrInvalidRequest], it fails with [limiter.ErrCapacity] when
// the call would track new buckets, the store holds MaxKeys, and too few
// states are full again to be evicted (see [Options]); nothing is charged
// then. Safe for concurrent use.
func (l *Limiter) Take(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	return l.run(ctx, dst, reqs, true)
}

// Peek appends the decisions Take would return now to dst, charging
// nothing, tracking no new bucket and evicting nothing, as the
// [limiter.Limiter] contract says. Its errors are ctx.Err(),
// [limiter.ErrInvalidRequest], and [limiter.ErrCapacity] when Take would
// charge but could not track the new buckets (the store is full of states
// still refilling). Safe for concurrent use.
func (l *Limiter) Peek(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	return l.run(ctx, dst, reqs, false)
}

// Len returns the number of buckets currently tracked, at most MaxKeys. It
// includes states whose bucket is full again but that no sweep has evicted
// yet (sweeps run only when the store is full). Safe for concurrent use.
func (l *Limiter) Len() int {
	return int(l.count.Load())
}

// slot is the per-request scratch state of one call.
type slot struct {
	hash    uint64
	shard   uint32
	prev    int32 // the previous request of this pass with the same bucket, or -1
	existed bool  // (no prev) the bucket was tracked when decided
	in      bool  // the request takes part in the current pass
	known   bool  // the bucket state after this request is tracked or charged
	tat     int64 // the bucket's TAT after this request, if charged
}

// smallCall is the number of requests whose scratch state lives on the stack.
const smallCall = 8

// errNeedRoom reports that a call must track new buckets and the store is
// full even after sweeping the shards the call holds.
var errNeedRoom = errors.New("need room")

func (l *Limiter) run(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request, charge bool) ([]limiter.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := limiter.ValidateRequests(reqs); err != nil {
		return nil, err
	}
	if dst == nil {
		dst = []limiter.Decision{} // non-nil, without allocating
	}
	n0 := len(dst)
	dst = slices.Grow(dst, len(reqs))[:n0+len(reqs)] // no allocation when dst has room
	out := dst[n0:]
	clear(out)
	if len(reqs) == 0 {
		return dst, nil
	}
	var buf [smallCall]slot
	var sl []slot
	if len(reqs) <= smallCall {
		sl = buf[:len(reqs)]
	} else {
		sl = make([]slot, len(reqs))
	}
	for i := range reqs {
		h := l.bucket(&reqs[i])
		sl[i].hash = h
		sl[i].shard = uint32(h & l.mask)
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
			return nil, fmt.Errorf("%w: %d buckets tracked, all still refilling", limiter.ErrCapacity, l.maxKeys)
		}
	}
	if err != nil {
		return nil, err
	}
	return dst, nil
}

// bucket returns the 64-bit name of r's bucket: the keyed hash of its Key,
// mixed with its limit shape (emission interval and burst) so that a
// changed shape names another bucket.
func (l *Limiter) bucket(r *limiter.Request) uint64 {
	shape := uint64(r.Limit.Rate.Interval()) ^ bits.RotateLeft64(uint64(r.Limit.Burst), 32)
	return maphash.String(l.seed, r.Key) ^ mix(shape)
}

// mix is the splitmix64 finaliser: it spreads the bits of x over the word.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// decide locks the shards of sl, decides every request into out and, if
// charge is set, commits what the contract says to charge.
func (l *Limiter) decide(reqs []limiter.Request, sl []slot, out []limiter.Decision, now int64, charge bool) error {
	l.lock(sl)
	defer l.unlock(sl)

	dry := false
	for i := range reqs {
		sl[i].in = true
		dry = dry || reqs[i].DryRun
	}
	if !l.pass(reqs, sl, out, now) && dry {
		// Some request is rejected: decide the enforcing requests again
		// on their own; they are charged if all of them are allowed.
		for i := range reqs {
			sl[i].in = !reqs[i].DryRun
		}
		if !l.pass(reqs, sl, out, now) {
			return nil
		}
	} else if !allIn(sl, out) {
		return nil
	}
	if charge {
		return l.commit(sl, now)
	}
	if !l.mayFit(sl, now) {
		// Peek promises what Take would do: Take would find no room.
		return fmt.Errorf("%w: %d buckets tracked, all still refilling", limiter.ErrCapacity, l.maxKeys)
	}
	return nil
}

// pass decides the requests of sl that are in the pass, in order, into out,
// and reports whether all of them are allowed. The shards are locked.
func (l *Limiter) pass(reqs []limiter.Request, sl []slot, out []limiter.Decision, now int64) bool {
	all := true
	for i := range reqs {
		if !sl[i].in {
			continue
		}
		s := &l.shards[sl[i].shard]
		sl[i].prev = -1
		for j := i - 1; j >= 0; j-- {
			if sl[j].in && sl[j].hash == sl[i].hash {
				sl[i].prev = int32(j)
				break
			}
		}
		var tat int64
		var known bool
		if p := sl[i].prev; p >= 0 {
			// Same bucket earlier in this pass: continue from its outcome.
			tat, known = sl[p].tat, sl[p].known
		} else {
			tat, known = s.tats.get(sl[i].hash)
			sl[i].existed = known
		}
		if !known {
			tat = now // an unknown bucket is full
		}
		d, next := limiter.Decide(tat, now, reqs[i].Limit, reqs[i].Cost)
		out[i] = d
		sl[i].tat = next
		sl[i].known = known || d.Allowed
		all = all && d.Allowed
	}
	return all
}

// allIn reports whether every request of the pass is allowed.
func allIn(sl []slot, out []limiter.Decision) bool {
	for i := range sl {
		if sl[i].in && !out[i].Allowed {
			return false
		}
	}
	return true
}

// newBuckets counts the buckets of the pass that are not tracked yet.
func newBuckets(sl []slot) int64 {
	need := int64(0)
	for i := range sl {
		if sl[i].in && sl[i].prev < 0 && !sl[i].existed {
			need++
		}
	}
	return need
}

// mayFit reports whether the new buckets of the pass could be tracked now:
// they fit under maxKeys, or some shard may hold a state that is full again
// (its hint is a lower bound, so this can say yes where a sweep would find
// nothing, never no where Take would succeed). It reads only atomics.
func (l *Limiter) mayFit(sl []slot, now int64) bool {
	need := newBuckets(sl)
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

// commit stores the TAT of every request of the pass (all allowed), first
// reserving room for the new buckets, sweeping the call's shards if the
// store is full. It writes nothing unless every new bucket fits, and
// returns errNeedRoom if they do not. The shards of sl are locked.
func (l *Limiter) commit(sl []slot, now int64) error {
	need := newBuckets(sl)
	if need > 0 && !l.reserve(need) {
		for i := range sl {
			if l.isFirstOfShard(sl, i) {
				if n := l.shards[sl[i].shard].sweep(now); n > 0 {
					l.count.Add(-n)
				}
			}
		}
		// The sweep may have evicted buckets of this call that were full:
		// count again what must be inserted.
		need = 0
		for i := range sl {
			if sl[i].in && sl[i].prev < 0 {
				if _, ok := l.shards[sl[i].shard].tats.get(sl[i].hash); !ok {
					need++
				}
			}
		}
		if !l.reserve(need) {
			return errNeedRoom
		}
	}
	for i := range sl {
		if sl[i].in {
			l.shards[sl[i].shard].put(sl[i].hash, sl[i].tat)
		}
	}
	return nil
}

// reserve counts n more tracked buckets if they fit under maxKeys.
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
