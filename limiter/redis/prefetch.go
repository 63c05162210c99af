package redis

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// Prefetch (Options.Prefetch): a process takes a batch of a bucket's
// tokens in one script call, paying for them in Redis, and admits the
// bucket's one-request calls from what it holds; see the package
// documentation ("Prefetch") for the rule and its bounds.

// holdEntries is the number of holds a Limiter keeps (one per bucket it
// prefetches for); holdWays, the entries of one set of the table.
const (
	holdEntries = 4096
	holdWays    = 2
)

// segment is the tokens one fetch left in a hold. They are the last n of
// the fetch's batch, whose slots on the bucket's timeline (one emission
// interval T each) end at the TAT the fetch left: token i of the n
// (oldest first) may be admitted only while its slot has not begun,
// i.e. at a local time no later than end - (n - i) × T. So a held token
// is spent before Redis could have refilled it, and over any interval
// every admission's slot lies within [start, end + window]: the bound
// burst + rate × t holds (see the package documentation).
type segment struct {
	n   int64 // tokens still held
	end int64 // local time (Limiter.localNow) no later than the TAT the fetch left
	// For the refund (giveBackScript): the time the fetch was decided at,
	// on Redis's clock, and the debt it left, in ns.
	sec, nsec, w int64
}

// hold is what a process holds of one bucket.
type hold struct {
	key      string // the request's Key ("" for a free entry)
	name     string // the bucket's Redis key
	interval int64  // the bucket's shape: emission interval (ns) and burst
	burst    int64
	segs     [2]segment // segs[0] oldest; n == 0 when empty
	last     int64      // the end of the newest fetch's segment
	// since is the tokens asked for by the bucket's calls since its last
	// fetch began (admitted, rejected from the deny cache or by a fetch,
	// or waiting for a fetch), and expired whether some held token expired meanwhile: the
	// next batch is 2 × (since + cost), or since + cost after an expiry,
	// within [cost, K].
	since   int64
	expired bool
	// fetch is non-nil while a call fetches for the bucket; the others
	// wait for it to close (at most half their time). fetchEnd is when it
	// is given up on.
	fetch    chan struct{}
	fetchEnd int64
}

type holdSet struct {
	mu sync.Mutex
	e  [holdWays]hold
}

// prefetcher is a Limiter's table of holds, fixed in size: a bucket that
// finds its set full of holds still in use is decided without prefetch.
type prefetcher struct {
	k    int64 // Options.Prefetch
	sets []holdSet
	mask uint64

	// Counters, in tokens (refundedNs in ns of the buckets' timelines):
	// charged by fetches, admitted (by fetches and from holds), expired
	// (dropped from a hold when their slot began: Redis had refilled them),
	// sent back (refunds sent), refundedNs (what Redis gave back), lost
	// (refunds that failed), and fetches (script calls that fetched).
	charged, admitted, expired, sentBack, refundedNs, lost, fetches atomic.Int64
}

func newPrefetcher(k int64) *prefetcher {
	n := 1 << bits.Len(uint(holdEntries/holdWays-1))
	return &prefetcher{k: k, sets: make([]holdSet, n), mask: uint64(n - 1)}
}

// serves reports whether prefetch decides r when it is the only request
// of its call: a token bucket without delay shaping (DelayAfter 0 or
// Burst, no MaxDelay lowering the ceiling), enforcing (not a dry run),
// whose cost is at most K and fits its burst.
func (p *prefetcher) serves(r *limiter.Request) bool {
	lim := r.Limit
	w := lim.Window()
	return lim.MaxInFlight == 0 && !r.DryRun && r.Cost <= p.k && r.Cost <= lim.Burst &&
		gcra.Free(lim) == w && gcra.Ceiling(lim) == w
}

func (p *prefetcher) set(r *limiter.Request) *holdSet {
	h := uint64(keyHash(r.Key))
	h ^= uint64(r.Limit.Rate.Interval())*0x9e3779b97f4a7c15 ^ uint64(r.Limit.Burst)*0xbf58476d1ce4e5b9
	h ^= h >> 29
	return &p.sets[h&p.mask]
}

func (e *hold) is(r *limiter.Request) bool {
	return e.key == r.Key && e.key != "" && e.interval == int64(r.Limit.Rate.Interval()) && e.burst == r.Limit.Burst
}

// find returns r's hold in s (s.mu held), or nil.
func (s *holdSet) find(r *limiter.Request) *hold {
	for i := range s.e {
		if s.e[i].is(r) {
			return &s.e[i]
		}
	}
	return nil
}

// alloc returns a new hold for r in s (s.mu held), replacing a free one
// or one that holds nothing and is not fetching, or nil if there is none.
func (s *holdSet) alloc(r *limiter.Request, name string) *hold {
	for i := range s.e {
		e := &s.e[i]
		if e.key == "" || e.fetch == nil && e.segs[0].n == 0 && e.segs[1].n == 0 {
			*e = hold{key: r.Key, name: name, interval: int64(r.Limit.Rate.Interval()), burst: r.Limit.Burst}
			return e
		}
	}
	return nil
}

// decay drops, at local time now, the held tokens whose slot has begun,
// and returns how many it dropped.
func (e *hold) decay(now int64) int64 {
	var dropped int64
	for i := range e.segs {
		s := &e.segs[i]
		if s.n == 0 {
			continue
		}
		valid := int64(0)
		if s.end > now {
			valid = (s.end - now) / e.interval
		}
		if valid < s.n {
			dropped += s.n - valid
			s.n = valid
		}
	}
	if dropped > 0 {
		e.expired = true
		if e.segs[0].n == 0 {
			e.segs[0], e.segs[1] = e.segs[1], segment{}
		}
	}
	return dropped
}

// held returns the tokens e holds.
func (e *hold) held() int64 { return e.segs[0].n + e.segs[1].n }

// spend takes cost tokens (at most e.held()), oldest first.
func (e *hold) spend(cost int64) {
	take := min(cost, e.segs[0].n)
	e.segs[0].n -= take
	e.segs[1].n -= cost - take
	if e.segs[0].n == 0 {
		e.segs[0], e.segs[1] = e.segs[1], segment{}
	}
	e.since += cost
}

// local is the Decision of a request of cost tokens admitted from e at
// now, after spending them (e.held() is then what is left): Remaining is
// the tokens e still holds, a lower bound of what the bucket holds for
// every process; ResetAfter is until the newest fetch's end, a lower
// bound too (other processes may have charged since).
func (e *hold) local(now int64) limiter.Decision {
	return limiter.Decision{Allowed: true, Remaining: min(e.held(), e.burst),
		ResetAfter: time.Duration(max(0, e.last-now)), Prefetched: true}
}

// want returns the batch the next fetch of a request of cost asks for,
// and starts a new count of demand.
func (e *hold) want(cost, k int64) int64 {
	b := e.since + cost
	if !e.expired {
		b *= 2
	}
	e.since, e.expired = 0, false
	return min(max(b, cost), k)
}

// add records the tokens a fetch left for the hold; a segment pushed out
// (both were in use) is returned, to be given back.
func (e *hold) add(s segment) (out segment) {
	if s.n == 0 {
		return out
	}
	e.last = s.end
	switch {
	case e.segs[0].n == 0:
		e.segs[0] = s
	case e.segs[1].n == 0:
		e.segs[1] = s
	default:
		out, e.segs[0], e.segs[1] = e.segs[0], e.segs[1], s
	}
	return out
}

// prefetched decides r, the only request of a Take (take) or Peek whose
// bucket prefetch serves, from the process's hold when it has r.Cost
// tokens, else (for a Take) by fetching a batch from Redis, which decides
// r as the one-request script would. ok false: prefetch does not decide
// r (a Peek without the tokens, a full table, a fetch waited on for half
// the call's time), and the caller decides it as without prefetch.
func (l *Limiter) prefetched(ctx context.Context, r *limiter.Request, take bool) (d limiter.Decision, rounds int, ok bool, err error) {
	p := l.pre
	s := p.set(r)
	var cutoff <-chan time.Time
	for {
		s.mu.Lock()
		now := l.localNow()
		e := s.find(r)
		if e != nil {
			p.expired.Add(e.decay(now))
			if e.held() >= r.Cost {
				if take {
					e.spend(r.Cost)
					p.admitted.Add(r.Cost)
				}
				d = e.local(now)
				if !take {
					d.Remaining = min(e.held()-r.Cost, e.burst)
				}
				s.mu.Unlock()
				return d, 0, true, nil
			}
		}
		if !take {
			s.mu.Unlock()
			return d, 0, false, nil
		}
		if e != nil && e.fetch != nil && now < e.fetchEnd {
			ch := e.fetch
			if cutoff == nil {
				e.since += r.Cost // demand the next batch serves
			}
			s.mu.Unlock()
			if cutoff == nil {
				t := time.NewTimer(time.Until(l.deadline(ctx)) / 2)
				defer t.Stop()
				cutoff = t.C
			}
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return d, 0, false, ctx.Err()
			case <-cutoff:
				return d, 0, false, nil
			}
		}
		return l.startFetch(ctx, s, e, r)
	}
}

// startFetch is prefetched for a Take that found too few tokens and no
// fetch in flight, with s.mu held (it unlocks it): a cached rejection when
// the deny cache has one, else a fetch by this call, or ok false when the
// table has no room for r's hold.
func (l *Limiter) startFetch(ctx context.Context, s *holdSet, e *hold, r *limiter.Request) (d limiter.Decision, rounds int, ok bool, err error) {
	var probe chan struct{}
	if l.deny != nil {
		dd, v, ch := l.deny.check(r)
		if v == denyHit {
			if e != nil {
				e.since += r.Cost
			}
			s.mu.Unlock()
			return dd, 0, true, nil
		}
		if v == denyProbe {
			probe = ch
		}
	}
	if e == nil {
		name, _ := l.names.name(r)
		if e = s.alloc(r, name); e == nil {
			s.mu.Unlock()
			if probe != nil {
				l.deny.abandon(r, probe)
			}
			return d, 0, false, nil
		}
	}
	want := e.want(r.Cost, l.pre.k)
	ch := make(chan struct{})
	e.fetch, e.fetchEnd = ch, l.localNow()+int64(l.timeout)
	name := e.name
	s.mu.Unlock()
	d, err = l.fetch(ctx, s, r, name, want, ch, probe)
	return d, 1, err == nil, err
}

// fetch asks Redis for want tokens of r's bucket (named name), at least
// r.Cost, and returns r's Decision: admitted, with the rest of the batch
// added to r's hold, or rejected, charging nothing. It closes ch (the
// hold's fetch) when the reply is in, and reports to the deny cache.
func (l *Limiter) fetch(ctx context.Context, s *holdSet, r *limiter.Request, name string, want int64, ch chan struct{}, probe chan struct{}) (limiter.Decision, error) {
	tctx, cancel := context.WithDeadline(ctx, l.deadline(ctx))
	defer cancel()
	t := int64(r.Limit.Rate.Interval())
	sent := l.localNow()
	args := []any{nil, nil, int64(1), name, l.mode(true, sent), t, int64(r.Limit.Window()), r.Cost, want}
	l.pre.fetches.Add(1)
	cmd, err := run(tctx, l.client, &fetchS, args, false)
	var vals []int64
	if err != nil {
		err = l.fail(ctx, tctx, err)
	} else if vals, err = cmd.Int64Slice(); err == nil && (len(vals) != 4 || vals[1] != 0 && vals[1] < r.Cost) {
		err = fmt.Errorf("limiter/redis: unexpected reply from the fetch script: %v", vals)
	}
	recv := l.localNow()
	s.mu.Lock()
	e := s.find(r)
	if e != nil && e.fetch == ch {
		e.fetch = nil
	}
	close(ch)
	if err != nil {
		s.mu.Unlock()
		if probe != nil {
			l.deny.abandon(r, probe)
		}
		return limiter.Decision{}, err
	}
	debt, n := vals[0], vals[1]
	if n == 0 {
		debt = -1 - debt
	}
	d, _ := gcra.Decide(debt, 0, r.Limit, r.Cost)
	var out segment
	if e != nil && n == 0 {
		e.since += r.Cost
	}
	if n > 0 {
		l.pre.charged.Add(n)
		l.pre.admitted.Add(r.Cost)
		seg := segment{n: n - r.Cost, end: sent + debt + n*t, sec: vals[2], nsec: vals[3], w: debt + n*t}
		if e == nil {
			e = s.alloc(r, name)
		}
		if e == nil {
			out = seg // no room: give it back
		} else {
			e.since += r.Cost
			out = e.add(seg)
		}
	}
	s.mu.Unlock()
	if l.shard == bySlot {
		_, h := l.names.name(r)
		d.HashSlot = slotOf(h) + 1
	}
	if l.deny != nil {
		batch := *r
		batch.Cost = max(n, r.Cost)
		l.deny.done(&batch, sent, recv, &d, debt, n > 0, nil, probe)
	}
	if out.n > 0 {
		l.giveBack(ctx, name, t, out)
	}
	return d, nil
}

// giveBack sends one refund of seg's tokens of the bucket named name
// (emission interval t), once, under its own Timeout (never retried: a
// replay would give back twice), and counts it.
func (l *Limiter) giveBack(ctx context.Context, name string, t int64, seg segment) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	defer cancel()
	l.pre.sentBack.Add(seg.n)
	args := []any{nil, nil, int64(1), name, l.mode(true, l.localNow()), seg.sec, seg.nsec, seg.n * t, seg.w}
	cmd, err := run(rctx, l.client, &giveBackS, args, false)
	var ns int64
	if err == nil {
		ns, err = cmd.Int64()
	}
	if err != nil {
		l.pre.lost.Add(seg.n)
		return fmt.Errorf("limiter/redis: refund of %d prefetched tokens: %w", seg.n, err)
	}
	l.pre.refundedNs.Add(ns)
	return nil
}

// Flush gives back to Redis every token this Limiter holds for prefetch
// ([Options.Prefetch]): one refund per batch held, each sent once, under
// its own Timeout, never retried (a replay would give back twice), capped
// as every refund is (never past a full bucket, never undoing another
// request's charge: see "Refunds and the bounds they keep" in the package
// documentation). Call it when the process stops taking requests (after
// http.Server.Shutdown returns), so that other processes can spend the
// tokens at once instead of after they expire. Calls after Flush may
// prefetch again. It returns nil when prefetch is off or nothing is held,
// else the errors of the refunds that failed (joined; their tokens
// return to the bucket as it refills, at the latest one window later).
// ctx's values reach go-redis; its cancellation does not stop a refund
// once sent. Safe for concurrent use.
func (l *Limiter) Flush(ctx context.Context) error {
	if l.pre == nil {
		return nil
	}
	type todo struct {
		name string
		t    int64
		seg  segment
	}
	var all []todo
	for i := range l.pre.sets {
		s := &l.pre.sets[i]
		s.mu.Lock()
		now := l.localNow()
		for j := range s.e {
			e := &s.e[j]
			if e.key == "" {
				continue
			}
			l.pre.expired.Add(e.decay(now))
			for _, seg := range e.segs {
				if seg.n > 0 {
					all = append(all, todo{e.name, e.interval, seg})
				}
			}
			e.segs = [2]segment{}
		}
		s.mu.Unlock()
	}
	var errs []error
	for _, a := range all {
		if err := l.giveBack(ctx, a.name, a.t, a.seg); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// heldTokens returns the tokens l holds now (for the tests).
func (l *Limiter) heldTokens() int64 {
	var n int64
	for i := range l.pre.sets {
		s := &l.pre.sets[i]
		s.mu.Lock()
		for j := range s.e {
			n += s.e[j].held()
		}
		s.mu.Unlock()
	}
	return n
}
