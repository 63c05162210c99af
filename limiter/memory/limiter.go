package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// Limiter is an in-process [limiter.Limiter]: one GCRA bucket state (an
// int64 theoretical arrival time) per bucket, in sharded hash tables, at most
// [Options.MaxKeys] of them. An in-flight cap's counter is a state of the
// same tables (an int64 far past any TAT while slots are held, so it is
// never evicted then; a full bucket's state, evictable, once they are all
// released): acquiring and releasing a slot is one compare-and-swap on a
// tracked key, allocating nothing (BenchmarkInFlight compares it with a
// channel semaphore and golang.org/x/sync/semaphore).
//
// A bucket is named by a 64-bit keyed hash (hash/maphash, a random seed per
// Limiter) of the request's Key and limit shape (emission interval and
// burst); the key string itself is not kept, which is what makes a state
// cost 20 to 30 bytes. Two distinct buckets share a state only if their
// hashes collide: with n tracked buckets the chance that any pair does is
// about n²/2⁶⁵ (3·10⁻⁸ for a million), and since the seed is secret and
// per process, a client cannot choose keys that collide.
//
// A call whose buckets are all tracked takes no lock: it reads their TATs,
// decides, and charges by compare-and-swap (one request) or by holding its
// cells for the write (several requests), deciding again if another call
// charged first. A call that tracks a new bucket, or meets a cell being
// evicted or moved, locks the shards of all its requests in ascending shard
// order (so concurrent calls cannot deadlock) and decides there. Either way
// the requests are decided in order and charged as the [limiter.Limiter]
// contract says, all or nothing. A call allocates nothing when dst has room
// (tracking a new key may grow a table; when the store is full it may
// trigger a sweep, see [Options]). Calls are meant to carry a handful of
// requests: grouping requests by shard and by bucket is quadratic in
// len(reqs).
//
// A Limiter must be created with [New]. It is safe for concurrent use by
// multiple goroutines.
type Limiter struct {
	clock func() time.Time // Options.Now, or time.Now
	epoch time.Time        // clock's reading at New: time 0 of every TAT
	// mono: clock is time.Now (Options.Now was nil), so now reads only the
	// monotonic clock (time.Since), as clock().Sub(epoch) would use only
	// it, without the wall-clock reading time.Now also takes.
	mono bool
	seed maphash.Seed // of the keys' hashes (see bucket)
	// shapeSeed keys the limit shapes' hashes, apart from seed.
	shapeSeed maphash.Seed
	mask      uint64
	shards    []shard
	maxKeys   int64
	// replicas is Options.Replicas, or WithReplicas' n (at least 1):
	// requests are decided at their Limit's Share of it.
	replicas int64
	// count is the number of tracked buckets, reserved before inserting
	// and released after evicting, so it never exceeds maxKeys.
	count *atomic.Int64
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
	if opts.Replicas < 0 {
		panic(fmt.Sprintf("memory.New: Replicas %d is negative", opts.Replicas))
	}
	maxKeys := opts.MaxKeys
	if maxKeys == 0 {
		maxKeys = defaultMaxKeys
	}
	clock := opts.Now
	if clock == nil {
		clock = time.Now
	}
	n := 1
	for n*2 <= maxShards && n*2*minShardKeys <= maxKeys {
		n *= 2
	}
	l := &Limiter{clock: clock, epoch: clock(), mono: opts.Now == nil, seed: maphash.MakeSeed(), shapeSeed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard, n), maxKeys: int64(maxKeys)}
	l.replicas, l.count = int64(max(opts.Replicas, 1)), new(atomic.Int64)
	for i := range l.shards {
		l.shards[i].init()
	}
	return l
}

// Replicas returns the number of processes the store shares every budget
// with (see [Options.Replicas]): at least 1. Safe for concurrent use.
func (l *Limiter) Replicas() int { return int(l.replicas) }

// WithReplicas returns a Limiter that shares every bucket, slot and the
// MaxKeys bound with l, but decides at the share of n processes (a reload
// of limiter.replicas: the new configuration uses it while the old one
// keeps l); n < 1 means 1. Each bucket keeps its state: its debt in time,
// measured against the new share (a share's window is never longer than
// the limit's, so a bucket in debt stays in debt, and none is refilled by
// the change); slots held count against the new share of a cap. Both are
// safe for concurrent use, together too.
func (l *Limiter) WithReplicas(n int) *Limiter {
	v := *l
	v.replicas = int64(max(n, 1))
	return &v
}

// Take decides reqs at the clock's current time, appends their decisions to
// dst and charges as the [limiter.Limiter] contract says. Besides ctx.Err()
// and [limiter.ErrInvalidRequest], it fails with [limiter.ErrCapacity] when
// the call would track new buckets, the store holds MaxKeys, and too few
// states are full again to be evicted (see [Options]); nothing is charged
// then. That error is a wrapped [*limiter.CapacityError] whose RetryAfter
// is the time until enough states are full again for the call's new
// buckets, as of the failure: the k-th lowest TAT in the store minus the
// clock, for a call needing k slots (exact for k up to 8; above that, the
// time until every tracked state is full again, a later bound). It is 0
// when there are fewer tracked states than the call needs freed (it needs
// more new buckets than MaxKeys, or other calls were inserting meanwhile).
// Safe for concurrent use.
func (l *Limiter) Take(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	return l.run(ctx, dst, reqs, true)
}

// Peek appends the decisions Take would return now to dst, charging
// nothing, tracking no new bucket and evicting nothing, as the
// [limiter.Limiter] contract says. Its errors are ctx.Err(),
// [limiter.ErrInvalidRequest], and [limiter.ErrCapacity] when Take would
// charge but could not track the new buckets (the store is full of states
// still refilling), with the RetryAfter Take's error would carry. Safe for
// concurrent use.
func (l *Limiter) Peek(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	return l.run(ctx, dst, reqs, false)
}

// Release frees the in-flight slots that Take took, as the
// [limiter.Limiter] contract says: for every reqs[i] whose ds[i].Slot is
// non-zero, reqs[i].Cost slots of its key's counter. It never blocks on
// other calls for long, allocates nothing, ignores ctx (freeing memory
// cannot be abandoned half-way) and fails only with
// [limiter.ErrInvalidRequest] (len(ds) != len(reqs), or a Slot on a
// malformed or token-bucket request), then releasing nothing. A counter
// back at 0 is a full bucket's state: evictable like any. A second
// Release of the same Decisions frees slots other requests hold (counters
// stop at 0). Safe for concurrent use.
func (l *Limiter) Release(ctx context.Context, reqs []limiter.Request, ds []limiter.Decision) error {
	if err := gcra.ValidateRelease(reqs, ds); err != nil {
		return err
	}
	for i := range reqs {
		if ds[i].Slot != 0 {
			l.release(&reqs[i])
		}
	}
	return nil
}

// release frees r.Cost slots of r's counter. Above the last slots it is
// one compare-and-swap; the last slots are freed under the shard's mutex,
// which lowers the shard's hint to the freed state (a lower bound of every
// TAT is what lets sweeps skip a shard, and the freed state is now
// evictable).
func (l *Limiter) release(r *limiter.Request) {
	h := l.bucket(r)
	s := &l.shards[h&l.mask]
	for {
		t := s.tab.Load()
		if t == nil {
			return
		}
		k := t.find(h)
		if k < 0 {
			return // not tracked: nothing held (a release too many)
		}
		c := &t.cells[k]
		switch v := c.tat.Load(); {
		case v == tomb:
			return // evicted: nothing held
		case v == frozen:
			s.mu.Lock() // the table is being replaced under it: wait
			s.mu.Unlock()
		case v == busy:
			runtime.Gosched() // a call deciding several buckets holds it
		case gcra.Held(v) > r.Cost:
			if c.tat.CompareAndSwap(v, v-r.Cost) {
				return
			}
		default:
			s.mu.Lock()
			ok := c.tat.CompareAndSwap(v, minTAT)
			if ok {
				s.lower(minTAT, c)
			}
			s.mu.Unlock()
			if ok {
				return
			}
		}
	}
}

// slot is the per-request scratch state of one call. The fields marked
// (owner) are set on the first request of each bucket only.
type slot struct {
	hash  uint64
	cell  *cell // (owner) the bucket's cell, held during the decision, or nil
	orig  int64 // (owner) the TAT the cell held (tomb: evicted)
	tat   int64 // the bucket's TAT after this request, if charged
	final int64 // (owner) the TAT the call leaves, if charged
	shard uint32
	owner int32 // the first request of the call with the same bucket
	prev  int32 // the previous request of this pass with the same bucket, or -1
	// existed (owner): the bucket was tracked when the call held it.
	existed bool
	in      bool // the request takes part in the current pass
	known   bool // the bucket state after this request is tracked or charged
	charged bool // (owner) the call charges the bucket
}

// smallCall is the number of requests whose scratch state lives on the stack.
const smallCall = 8

// errNeedRoom reports that a call must track new buckets and the store is
// full even after sweeping the shards the call holds; errPeekFull that a
// Peek's new buckets fit only if Take's sweep would make room.
var (
	errNeedRoom = errors.New("need room")
	errPeekFull = errors.New("peek: store full")
)

// run is Take (charge) or Peek: with the requests valid and, for a store
// shared by replicas, each with a share (see [Options.Replicas]), decide.
// A request is decided at its share in the bucket its whole limit names: a
// bucket's name does not change with the number of replicas.
func (l *Limiter) run(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request, charge bool) ([]limiter.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := gcra.ValidateAll(reqs); err != nil {
		return nil, err
	}
	if n := l.replicas; n > 1 {
		for i := range reqs {
			if !hasShare(&reqs[i].Limit, n) {
				_, err := reqs[i].Limit.Share(n) // the reason
				return nil, fmt.Errorf("%w: request %d: %w", limiter.ErrInvalidRequest, i, err)
			}
		}
	}
	return l.decide(dst, reqs, charge)
}

// hasShare reports whether [limiter.Limit.Share] of n succeeds for l,
// without building the share (run asks it of every request).
func hasShare(l *limiter.Limit, n int64) bool {
	if l.MaxInFlight != 0 {
		return l.MaxInFlight >= n
	}
	hi, lo := bits.Mul64(uint64(l.Rate.Per), uint64(n)) // Per × n fits an int64
	return l.Burst >= n && hi == 0 && lo <= math.MaxInt64
}

// decide is run for valid requests.
func (l *Limiter) decide(dst []limiter.Decision, reqs []limiter.Request, charge bool) ([]limiter.Decision, error) {
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
	if len(reqs) == 1 && l.decideOne(&reqs[0], l.bucket(&reqs[0]), &out[0], charge) {
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
		sl[i].owner = int32(i)
		for j := range i {
			if sl[j].hash == h {
				sl[i].owner = int32(j)
				break
			}
		}
	}

	// Read the clock before holding anything: a concurrent call that
	// charges first may then use a later time, which only makes this call
	// stricter (its buckets look less refilled), never looser.
	now := l.now()
	if len(reqs) > 1 && len(reqs) <= smallCall && l.decideHeld(reqs, sl, out, now, charge) {
		return dst, nil
	}
	err := l.decideLocked(reqs, sl, out, now, charge)
	if err == errPeekFull {
		// Peek promises what Take would do: Take would sweep.
		err = nil
		if !l.peekFits(sl, now) {
			err = errNeedRoom
		}
	}
	if err == errNeedRoom && !charge {
		return nil, l.capacityError(sl, now)
	}
	if err == errNeedRoom {
		// Make room in every shard, one lock at a time (never while
		// holding this call's locks), then decide again from scratch: the
		// call has charged nothing.
		l.sweepAll(now)
		err = l.decideLocked(reqs, sl, out, now, charge)
		if err == errNeedRoom {
			return nil, l.capacityError(sl, now)
		}
	}
	if err != nil {
		return nil, err
	}
	return dst, nil
}

// maxNeed is the most new buckets of one call for which a [limiter.CapacityError]
// reports exactly when they fit; beyond it, when every tracked state is
// full again.
const maxNeed = smallCall

// capacityError returns the error of a call that cannot track its new
// buckets: a [limiter.CapacityError] whose RetryAfter is the time from now
// until enough tracked states are full again (TAT <= clock) to be evicted
// for them. A call needing k more states than there is room for waits for
// the k-th lowest TAT of the store (MaxKeys is one bound over all shards,
// so any shard's state makes room); for k above maxNeed, for the highest.
// It runs only on this failure path, one shard's mutex at a time (callers
// hold none). Its cost for k = 1 is one load per shard while the
// earliest state of each shard is unchanged (see [shard.earliest]), else
// at most one visit of every cell, skipping the shards whose hint shows
// they cannot hold an earlier state.
func (l *Limiter) capacityError(sl []slot, now int64) error {
	now = max(now, l.now())
	// As peekFits counts: the call's new buckets, and its tracked ones
	// that Take would evict as full and track again.
	need := newBuckets(sl)
	for i := range sl {
		if sl[i].owner == int32(i) && sl[i].charged && sl[i].existed && sl[i].orig <= now {
			need++
		}
	}
	var wait time.Duration
	if k := l.count.Load() + need - l.maxKeys; k > 0 {
		// A state holding in-flight slots is freed when its requests end,
		// which no one can tell: no wait is promised then.
		if at, ok := l.freeAt(int(k)); ok && at > now && at <= gcra.InFlightBase {
			wait = time.Duration(at - now) // both >= minTAT: no overflow
		}
	}
	return fmt.Errorf("%w (%d buckets tracked, all still refilling)", &limiter.CapacityError{RetryAfter: wait}, l.maxKeys)
}

// freeAt returns the k-th lowest TAT of the tracked states (k >= 1; for k
// above maxNeed, the highest TAT). It reports false when fewer than k
// states are found (calls that claimed room have not inserted yet, or the
// store changed meanwhile). Callers hold no shard mutex.
func (l *Limiter) freeAt(k int) (int64, bool) {
	if k > maxNeed {
		high, n := int64(math.MinInt64), 0
		for i := range l.shards {
			s := &l.shards[i]
			s.mu.Lock()
			if t := s.tab.Load(); t != nil && s.live > 0 {
				high = max(high, t.highest())
				n += s.live
			}
			s.mu.Unlock()
		}
		return high, n >= k
	}
	var buf [maxNeed]int64
	best, n := buf[:k], 0
	for i := range l.shards {
		s := &l.shards[i]
		if n == k && s.hint.Load() >= best[k-1] {
			continue // no state here is lower than the k lowest so far
		}
		s.mu.Lock()
		if k == 1 {
			if low, ok := s.earliest(); ok && (n == 0 || low < best[0]) {
				best[0], n = low, 1
			}
		} else if t := s.tab.Load(); t != nil {
			n = t.smallest(best, n)
		}
		s.mu.Unlock()
	}
	return best[k-1], n == k
}

// now reads the clock, raised to minTAT so that a TAT stored at or after
// it is never a sentinel nor raised by [stored].
func (l *Limiter) now() int64 {
	if l.mono {
		return max(int64(time.Since(l.epoch)), minTAT)
	}
	return max(int64(l.clock().Sub(l.epoch)), minTAT)
}

// bucket returns the 64-bit name of r's bucket: the keyed hash of its Key
// combined with the keyed hash of its limit shape (emission interval and
// burst; an in-flight counter's is 0 and 0), so that a changed shape names
// another bucket, as unpredictably as another key does. (A fixed mix of
// the shape's two numbers named some shapes alike in every process: 1 ns
// with a burst of 2^32 and 2 ns with 2^33, or an in-flight counter.) It is
// never 0 (the empty cell).
func (l *Limiter) bucket(r *limiter.Request) uint64 {
	shape := [2]int64{int64(r.Limit.Rate.Interval()), r.Limit.Burst}
	return norm(maphash.String(l.seed, r.Key) ^ maphash.Comparable(l.shapeSeed, shape))
}

// decideOne decides a call of one request on a tracked bucket without
// locking: it reads the TAT, decides, and charges by compare-and-swap from
// the TAT it decided on, deciding again if another call charged first. It
// reports false, having done nothing, when the bucket is not tracked (or
// its cell is evicted, frozen or held for long), for decideLocked to do.
// h is the bucket's name (see bucket).
func (l *Limiter) decideOne(r *limiter.Request, h uint64, out *limiter.Decision, charge bool) bool {
	t := l.shards[h&l.mask].tab.Load()
	if t == nil {
		return false
	}
	i := t.find(h)
	if i < 0 {
		return false
	}
	c := &t.cells[i].tat
	now := l.now()
	for spin := 0; spin < maxSpin; spin++ {
		v := c.Load()
		switch v {
		case tomb, frozen:
			return false
		case busy:
			continue
		}
		d, next := gcra.DecideAny(v, now, &r.Limit, r.Cost, l.replicas)
		// A rejection charges nothing, nor does an allowed dry-run
		// request alone: the dry-run rule charges it like an enforced one.
		if !charge || !d.Allowed || c.CompareAndSwap(v, stored(next)) {
			if charge && d.Allowed {
				if r.Limit.MaxInFlight != 0 {
					d.Slot = 1
				} else if r.Settle {
					d.Reservation = next
				}
			}
			*out = d
			return true
		}
	}
	return false
}

// decideHeld decides a call whose buckets are all tracked without locking.
// It decides on the TATs it reads; a call that charges nothing (a
// rejection, or Peek) ends there, having written nothing, once a second
// read finds the same TATs (so they were all current at one instant). A
// call that charges holds its cells (in request order, at the TATs it
// decided on, giving up on any it cannot hold at once), writes the new
// TATs and releases them; if a TAT changed meanwhile it reads and decides
// again, a few times. It reports false, having changed nothing, when some
// bucket is not tracked or the cells could not be held, for decideLocked
// to do.
func (l *Limiter) decideHeld(reqs []limiter.Request, sl []slot, out []limiter.Decision, now int64, charge bool) bool {
	for i := range sl {
		sl[i].cell = nil
		if sl[i].owner != int32(i) {
			continue
		}
		t := l.shards[sl[i].shard].tab.Load()
		if t == nil {
			return false
		}
		k := t.find(sl[i].hash)
		if k < 0 {
			return false
		}
		sl[i].cell, sl[i].existed = &t.cells[k], true
	}
	for range maxRetries {
		for i := range sl {
			if sl[i].owner == int32(i) {
				v := sl[i].cell.tat.Load()
				if v <= busy { // evicted, frozen or held
					return false
				}
				sl[i].orig = v
			}
		}
		if !l.evaluate(reqs, sl, out, now) || !charge {
			// Nothing to write, but the TATs read one by one must have
			// held together: a call charging several of them in between
			// would show half its charge.
			if unchanged(sl) {
				return true
			}
			continue
		}
		if !holdAt(sl) {
			continue
		}
		finals(sl, true)
		for i := range sl {
			if sl[i].owner == int32(i) {
				v := sl[i].orig
				if sl[i].charged {
					v = stored(sl[i].final)
				}
				sl[i].cell.tat.Store(v)
			}
		}
		markSlots(reqs, sl, out)
		return true
	}
	return false
}

// markSlots sets the Slot of every in-flight request the call charged
// (those left in the pass) after the call committed its charge, and the
// Reservation of every settling one: the TAT its charge left.
func markSlots(reqs []limiter.Request, sl []slot, out []limiter.Decision) {
	for i := range reqs {
		switch {
		case !sl[i].in:
		case reqs[i].Limit.MaxInFlight != 0:
			out[i].Slot = 1
		case reqs[i].Settle:
			out[i].Reservation = sl[i].tat
		}
	}
}

// maxRetries bounds how often decideHeld decides again after a concurrent
// charge before taking the shards' mutexes instead.
const maxRetries = 4

// unchanged reports whether the cells of sl's owners still hold the TATs
// read into orig, so that those TATs were all current at one instant (the
// first read of this check).
func unchanged(sl []slot) bool {
	for i := range sl {
		if sl[i].owner == int32(i) && sl[i].cell.tat.Load() != sl[i].orig {
			return false
		}
	}
	return true
}

// holdAt holds the cells of sl's owners at the TATs read into orig, in
// request order; if one has changed it releases those it holds and
// reports false.
func holdAt(sl []slot) bool {
	for i := range sl {
		if sl[i].owner == int32(i) && !sl[i].cell.tat.CompareAndSwap(sl[i].orig, busy) {
			release(sl[:i])
			return false
		}
	}
	return true
}

// release writes back the TAT of every cell sl holds, unchanged.
func release(sl []slot) {
	for i := range sl {
		if sl[i].owner == int32(i) && sl[i].cell != nil {
			sl[i].cell.tat.Store(sl[i].orig)
		}
	}
}

// decideLocked decides a call under the mutexes of its shards: it makes
// room for its new buckets, holds the cells of its tracked ones, decides
// and, if charge is set, commits what the contract says to charge.
func (l *Limiter) decideLocked(reqs []limiter.Request, sl []slot, out []limiter.Decision, now int64, charge bool) error {
	l.lock(sl)
	defer l.unlock(sl)
	// Read the clock again: while this call waited, a sweep may have
	// evicted one of its buckets as full at a later time than now, and
	// reviving it as full at an earlier time would forget debt.
	now = max(now, l.now())
	if charge {
		l.makeRoom(sl, now)
	}
	for i := range sl {
		sl[i].cell = nil
		if sl[i].owner != int32(i) {
			continue
		}
		sl[i].orig, sl[i].existed = tomb, false
		t := l.shards[sl[i].shard].tab.Load()
		if t == nil {
			continue
		}
		if k := t.find(sl[i].hash); k >= 0 {
			c := &t.cells[k]
			v := hold(c)
			sl[i].cell, sl[i].orig, sl[i].existed = c, v, v != tomb
		}
	}
	commit := l.evaluate(reqs, sl, out, now)
	finals(sl, commit)
	switch {
	case !commit:
		release(sl)
		return nil
	case !charge:
		release(sl)
		if need := newBuckets(sl); need > 0 && l.count.Load()+need > l.maxKeys {
			return errPeekFull
		}
		return nil
	}
	if need := newBuckets(sl); need > 0 && !l.claim(need) {
		release(sl)
		return errNeedRoom
	}
	for i := range sl {
		if sl[i].owner != int32(i) {
			continue
		}
		s := &l.shards[sl[i].shard]
		switch v := stored(sl[i].final); {
		case !sl[i].charged:
			if sl[i].cell != nil {
				sl[i].cell.tat.Store(sl[i].orig)
			}
		case sl[i].cell == nil:
			s.insert(sl[i].hash, v)
		default:
			sl[i].cell.tat.Store(v)
			if !sl[i].existed { // revived
				s.live++
				s.lower(v, sl[i].cell)
			}
		}
	}
	markSlots(reqs, sl, out)
	return nil
}

// makeRoom prepares the call's shards, whose mutexes are held and none of
// whose cells the call holds yet, for the buckets the call may track: when
// they would not fit under MaxKeys it first sweeps those shards, then it
// reserves table room for every bucket without a live cell.
func (l *Limiter) makeRoom(sl []slot, now int64) {
	untracked := func(i int) bool {
		t := l.shards[sl[i].shard].tab.Load()
		if t == nil {
			return true
		}
		k := t.find(sl[i].hash)
		return k < 0 || t.cells[k].tat.Load() == tomb
	}
	need := int64(0)
	for i := range sl {
		if sl[i].owner == int32(i) && untracked(i) {
			need++
		}
	}
	if need == 0 {
		return
	}
	if l.count.Load()+need > l.maxKeys {
		for i := range sl {
			if l.isFirstOfShard(sl, i) {
				if n := l.shards[sl[i].shard].sweep(now); n > 0 {
					l.count.Add(-n)
				}
			}
		}
	}
	for i := range sl {
		if !l.isFirstOfShard(sl, i) {
			continue
		}
		n := 0
		for j := i; j < len(sl); j++ {
			if sl[j].shard == sl[i].shard && sl[j].owner == int32(j) && untracked(j) {
				n++
			}
		}
		l.shards[sl[i].shard].reserve(n)
	}
}

// evaluate decides the call's requests into out from the TATs its owners
// hold, with the dry-run rule of the [limiter.Limiter] contract, and
// reports whether the call charges: then the requests to charge are those
// left in the pass.
func (l *Limiter) evaluate(reqs []limiter.Request, sl []slot, out []limiter.Decision, now int64) bool {
	dry := false
	for i := range reqs {
		sl[i].in = true
		dry = dry || reqs[i].DryRun
	}
	if l.pass(reqs, sl, out, now) {
		return true
	}
	if !dry {
		return false
	}
	// Some request is rejected: decide the enforcing requests again on
	// their own; they are charged if all of them are allowed.
	for i := range reqs {
		sl[i].in = !reqs[i].DryRun
	}
	return l.pass(reqs, sl, out, now)
}

// pass decides the requests of sl that are in the pass, in order, into out,
// and reports whether all of them are allowed.
func (l *Limiter) pass(reqs []limiter.Request, sl []slot, out []limiter.Decision, now int64) bool {
	all := true
	for i := range reqs {
		if !sl[i].in {
			continue
		}
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
			o := sl[i].owner
			tat, known = sl[o].orig, sl[o].existed
		}
		if !known {
			tat = now // an unknown bucket is full
		}
		d, next := gcra.DecideAny(tat, now, &reqs[i].Limit, reqs[i].Cost, l.replicas)
		out[i] = d
		sl[i].tat = next
		sl[i].known = known || d.Allowed
		all = all && d.Allowed
	}
	return all
}

// finals marks, on each owner, whether the call charges its bucket and the
// TAT it leaves there: that of the bucket's last request in the pass. With
// commit unset nothing is charged.
func finals(sl []slot, commit bool) {
	for i := range sl {
		if sl[i].owner == int32(i) {
			sl[i].charged = false
		}
	}
	if !commit {
		return
	}
	for i := range sl {
		if sl[i].in {
			o := sl[i].owner
			sl[o].charged, sl[o].final = true, sl[i].tat
		}
	}
}

// newBuckets counts the buckets the call charges that are not tracked.
func newBuckets(sl []slot) int64 {
	need := int64(0)
	for i := range sl {
		if sl[i].owner == int32(i) && sl[i].charged && !sl[i].existed {
			need++
		}
	}
	return need
}

// peekFits reports whether the new buckets of a Peek that would charge
// could be tracked, counting exactly what Take would: every shard's full
// states are evicted, including the call's own, which must then be tracked
// again. It locks one shard at a time (callers hold none) and evicts
// nothing.
func (l *Limiter) peekFits(sl []slot, now int64) bool {
	need := newBuckets(sl)
	for i := range sl {
		if sl[i].owner == int32(i) && sl[i].charged && sl[i].existed && sl[i].orig <= now {
			need++
		}
	}
	full := int64(0)
	for i := range l.shards {
		s := &l.shards[i]
		if now < s.hint.Load() {
			continue // nothing evictable yet
		}
		s.mu.Lock()
		if t := s.tab.Load(); t != nil {
			full += int64(t.full(now))
		}
		s.mu.Unlock()
	}
	return l.count.Load()-full+need <= l.maxKeys
}

// claim counts n more tracked buckets if they fit under maxKeys.
func (l *Limiter) claim(n int64) bool {
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
