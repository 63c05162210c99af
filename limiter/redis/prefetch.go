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
	"github.com/ratekey/ratekey/internal/prefetchbooks"
	"github.com/ratekey/ratekey/limiter"
)

// Prefetch (Options.Prefetch): a process takes a batch of a bucket's
// tokens in one script call, paying for them in Redis, and admits the
// bucket's requests from what it holds for at most the hold lifetime H;
// see the package documentation ("Prefetch") for the rule and its bounds.

// holdEntries is the number of holds a Limiter keeps (one per bucket it
// prefetches for); holdWays, the entries of one set of the table;
// maxPending, the expired batches a hold keeps for its next fetch to give
// back.
const (
	holdEntries = 4096
	holdWays    = 2
	maxPending  = 4
)

// defaultPrefetchHold is Options.PrefetchHold's default: see its doc.
const defaultPrefetchHold = 50 * time.Millisecond

// segment is the tokens one fetch left in a hold: valid (spendable) while
// the local clock reads less than exp = the local time the fetch was sent
// + H, which is no later than Redis's time of the fetch + H.
type segment struct {
	id  uint64 // unique within the Limiter: where a tentative take returns
	n   int64  // tokens still held
	exp int64  // local time (Limiter.localNow) from which they are not spent
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
	life     int64      // H for this bucket: min(PrefetchHold, window), ns
	segs     [2]segment // live batches, segs[0] oldest; n == 0 when empty
	last     int64      // the TAT (local time) the newest fetch left
	// pend is the expired (or pushed-out) batches whose unused tokens the
	// next fetch gives back: pend[:npend].
	pend  [maxPending]segment
	npend int
	// sends counts the times refunds of the hold were sent or dropped (a
	// fetch with refunds, Flush, a full list): a tentative take taken at
	// the same count may restore a batch that spending emptied.
	sends uint64
	// inUse is the tokens taken tentatively by calls of several requests
	// that have not settled yet (the hold is not replaced meanwhile).
	inUse int64
	// since is the tokens asked for by the bucket's calls since its last
	// fetch was sent (admitted, rejected, waiting), at local time sent.
	since, sent int64
	// fetch is non-nil while a call fetches for the bucket; the others
	// wait for it to close (at most half their time). fetchEnd is when it
	// is given up on.
	fetch    chan struct{}
	fetchEnd int64
	// dry is set when a fetch came back short (the bucket could not give
	// the batch asked for): until this local time, a Take that finds too
	// few tokens held is rejected here (hold.dryRejection) instead of
	// fetching; it is when the bucket will have refilled about half a
	// batch (see hold.dryUntil).
	dry int64
}

type holdSet struct {
	mu sync.Mutex
	e  [holdWays]hold
}

// prefetcher is a Limiter's table of holds, fixed in size: a bucket that
// finds its set full of holds still in use is decided without prefetch.
type prefetcher struct {
	k    int64 // Options.Prefetch
	life int64 // Options.PrefetchHold, ns
	sets []holdSet
	mask uint64
	ids  atomic.Uint64

	// Counters, in tokens (refundedNs in ns of the buckets' timelines):
	// charged by fetches, admitted (by fetches and from holds), expired
	// (batches past their hold with tokens left, or pushed out), sentBack
	// (refunds sent, with a fetch or by Flush), refundedNs (what Redis
	// gave back), lost (sent in a call that failed: outcome unknown),
	// dropped (never sent: a full pending list, a replaced hold, a
	// tentative take whose batch was flushed meanwhile) and fetches
	// (script calls that fetched).
	charged, admitted, expired, sentBack, refundedNs, lost, dropped, fetches atomic.Int64
}

func newPrefetcher(k int64, life time.Duration) *prefetcher {
	n := 1 << bits.Len(uint(holdEntries/holdWays-1))
	return &prefetcher{k: k, life: int64(life), sets: make([]holdSet, n), mask: uint64(n - 1)}
}

// serves reports whether prefetch may decide r: a token bucket without
// delay shaping (DelayAfter 0 or Burst, no MaxDelay lowering the
// ceiling), enforcing (not a dry run), whose cost is at most K and fits
// its burst.
func (p *prefetcher) serves(r *limiter.Request) bool {
	lim := r.Limit
	w := gcra.Window(lim)
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

// idle reports whether e may be replaced: it holds no live token, no
// fetch and no tentative take.
func (e *hold) idle() bool {
	return e.key == "" || e.fetch == nil && e.inUse == 0 && e.held() == 0
}

// alloc returns a new hold for r in s (s.mu held) at local time now,
// replacing a free or idle one (preferring one without refunds due; those
// of a replaced hold are dropped: their tokens return as the bucket
// refills), or nil. Its demand count starts two lifetimes back, so that
// its first fetch asks for the cost only (a new bucket is taken for a
// quiet one).
func (p *prefetcher) alloc(s *holdSet, r *limiter.Request, name string, now int64) *hold {
	var e *hold
	for i := range s.e {
		if c := &s.e[i]; c.idle() && (e == nil || c.npend < e.npend) {
			e = c
		}
	}
	if e == nil {
		return nil
	}
	for _, g := range e.pend[:e.npend] {
		p.dropped.Add(g.n)
	}
	life := min(p.life, int64(gcra.Window(r.Limit)))
	*e = hold{key: r.Key, name: name, interval: int64(r.Limit.Rate.Interval()), burst: r.Limit.Burst,
		life: life, sent: now - 2*life}
	return e
}

// retire moves g (unused tokens of an expired or pushed-out batch) to
// e's refunds due, or drops it when the list is full.
func (p *prefetcher) retire(e *hold, g segment) {
	if g.n == 0 {
		return
	}
	p.expired.Add(g.n)
	if e.npend == maxPending {
		p.dropped.Add(g.n)
		e.sends++
		return
	}
	e.pend[e.npend] = g
	e.npend++
}

// decay retires, at local time now, the batches whose hold has ended.
func (p *prefetcher) decay(e *hold, now int64) {
	for i := range e.segs {
		if g := &e.segs[i]; g.n > 0 && now >= g.exp {
			p.retire(e, *g)
			*g = segment{}
		}
	}
	if e.segs[0].n == 0 {
		e.segs[0], e.segs[1] = e.segs[1], segment{}
	}
}

// held returns the live tokens e holds.
func (e *hold) held() int64 { return e.segs[0].n + e.segs[1].n }

// taken is a take of one request's cost from a hold: the batches it came
// from (by id) and how many from each, so that it can be returned.
type taken struct {
	s     *holdSet
	r     *limiter.Request
	segs  [2]segment // the batches, as they were; n is how many it took
	cost  int64
	sends uint64 // the hold's sends at the take
}

// spend takes cost tokens (at most e.held()), oldest first.
func (e *hold) spend(cost int64) (t taken) {
	t.cost, t.sends = cost, e.sends
	for i := 0; cost > 0; i++ {
		g := &e.segs[0]
		take := min(cost, g.n)
		g.n -= take
		cost -= take
		t.segs[i] = *g
		t.segs[i].n = take
		if g.n == 0 {
			e.segs[0], e.segs[1] = e.segs[1], segment{}
		}
	}
	return t
}

// local is the Decision of a request admitted from e at now (e.held() is
// what is left): Remaining is the tokens e still holds, a lower bound of
// what the bucket holds for every process; ResetAfter is until the TAT
// the newest fetch left, a lower bound too.
func (e *hold) local(now int64) limiter.Decision {
	return limiter.Decision{Allowed: true, Remaining: min(e.held(), e.burst),
		ResetAfter: time.Duration(max(0, e.last-now)), Prefetched: true}
}

// want returns the batch the next fetch of a request of cost asks for at
// local time now: twice the demand over the last hold lifetime (the
// tokens asked for since the last fetch, scaled to one lifetime when
// that fetch is older), within [cost, K]; and starts a new count.
func (e *hold) want(cost, k, now int64) int64 {
	w := min(e.demand(cost, now), k)
	e.since, e.sent = 0, now
	return w
}

// hot reports whether the bucket's calls asked for at least cost tokens
// over the last hold lifetime (since, scaled to one lifetime when the
// count is older), besides the one asking now.
func (e *hold) hot(cost, now int64) bool {
	return float64(e.since)*float64(e.life)/float64(max(now-e.sent, e.life)) >= float64(cost)
}

// demand returns twice the tokens asked for over the last hold lifetime
// (since + cost, scaled to one lifetime when the count is older), at
// least cost.
func (e *hold) demand(cost, now int64) int64 {
	d := float64(e.since + cost)
	if el := now - e.sent; el > e.life {
		d = d * float64(e.life) / float64(el)
	}
	return max(int64(2*d), cost)
}

// add records the tokens a fetch left for the hold; a batch pushed out
// (both were in use) is retired, its tokens given back with the next
// fetch.
func (p *prefetcher) add(e *hold, g segment, tat int64) {
	e.last = max(e.last, tat)
	switch {
	case e.segs[0].n == 0:
		e.segs[0] = g
	case e.segs[1].n == 0:
		e.segs[1] = g
	default:
		p.retire(e, e.segs[0])
		e.segs[0], e.segs[1] = e.segs[1], g
	}
}

// settle ends a tentative take at local time now: commit counts it
// admitted; otherwise its tokens go back to the batches they came from
// (live or due for a refund; a batch that spending emptied is restored
// when no refund of the hold was sent since), and are dropped (an
// under-admission) when those are gone (flushed, or sent back).
func (p *prefetcher) settle(t *taken, commit bool, now int64) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	e := t.s.find(t.r)
	if e != nil {
		e.inUse -= t.cost
	}
	if commit {
		p.admitted.Add(t.cost)
		return
	}
	for _, g := range t.segs {
		if g.n == 0 {
			continue
		}
		switch b := e.batch(g.id); {
		case b != nil:
			b.n += g.n
		case e != nil && e.sends == t.sends:
			if now >= g.exp {
				p.retire(e, g)
			} else {
				p.add(e, g, e.last)
			}
		default:
			p.dropped.Add(g.n)
		}
	}
}

// batch returns the live or pending batch of e with id, or nil (also
// when e is nil).
func (e *hold) batch(id uint64) *segment {
	if e == nil {
		return nil
	}
	for i := range e.segs {
		if e.segs[i].id == id {
			return &e.segs[i]
		}
	}
	for i := range e.pend[:e.npend] {
		if e.pend[i].id == id {
			return &e.pend[i]
		}
	}
	return nil
}

// prefetched decides r, a request prefetch serves, alone in a Take (take)
// or Peek, from the process's hold when it has r.Cost tokens, else (for a
// Take) by fetching a batch from Redis, which decides r as the
// one-request script would. With tent non-nil (a Take of several
// requests), an admission is tentative: recorded in *tent for settle,
// not yet counted. ok false: prefetch does not decide r (a Peek without
// the tokens, a full table, a fetch waited on for half the call's time),
// and the caller decides it as without prefetch.
func (l *Limiter) prefetched(ctx context.Context, r *limiter.Request, take bool, tent *taken) (d limiter.Decision, rounds int, ok bool, err error) {
	p := l.pre
	s := p.set(r)
	var cutoff <-chan time.Time
	for {
		s.mu.Lock()
		now := l.localNow()
		e := s.find(r)
		if e != nil {
			p.decay(e, now)
			if e.held() >= r.Cost {
				if take {
					l.spendLocal(s, e, r, tent)
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
		if e != nil && now < e.dry {
			e.since += r.Cost // demand the next batch serves
			d = e.dryRejection(r, now)
			s.mu.Unlock()
			return d, 0, true, nil
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
		return l.startFetch(ctx, s, e, r, tent)
	}
}

// spendLocal takes r.Cost tokens from e (s.mu held), counting them
// admitted, or tentatively into *tent.
func (l *Limiter) spendLocal(s *holdSet, e *hold, r *limiter.Request, tent *taken) {
	t := e.spend(r.Cost)
	e.since += r.Cost
	if tent == nil {
		l.pre.admitted.Add(r.Cost)
		return
	}
	t.s, t.r = s, r
	e.inUse += r.Cost
	*tent = t
}

// startFetch is prefetched for a Take that found too few tokens and no
// fetch in flight, with s.mu held (it unlocks it): a cached rejection when
// the deny cache has one, else a fetch by this call, or ok false when the
// table has no room for r's hold. The fetch gives back the hold's expired
// batches (those due).
func (l *Limiter) startFetch(ctx context.Context, s *holdSet, e *hold, r *limiter.Request, tent *taken) (d limiter.Decision, rounds int, ok bool, err error) {
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
		if e = l.pre.alloc(s, r, name, l.localNow()); e == nil {
			s.mu.Unlock()
			if probe != nil {
				l.deny.abandon(r, probe)
			}
			return d, 0, false, nil
		}
	}
	now := l.localNow()
	want := e.want(r.Cost, l.pre.k, now)
	ch := make(chan struct{})
	e.fetch, e.fetchEnd = ch, now+int64(l.timeout)
	f := fetchCall{s: s, r: r, name: e.name, want: want, ch: ch, probe: probe, tent: tent}
	if e.npend > 0 {
		f.refunds = append([]segment(nil), e.pend[:e.npend]...)
		e.npend = 0
		e.sends++
	}
	s.mu.Unlock()
	d, err = l.fetch(ctx, &f)
	return d, 1, err == nil, err
}

// fetchCall is one fetch: r's bucket (its hold in s, its Redis key name),
// the batch asked for, the hold's fetch channel (closed when the reply is
// in), the deny cache's probe, the batches given back with it, and where
// a tentative admission is recorded (nil: counted at once).
type fetchCall struct {
	s       *holdSet
	r       *limiter.Request
	name    string
	want    int64
	ch      chan struct{}
	probe   chan struct{}
	refunds []segment
	tent    *taken
}

// fetch runs f: asks Redis for f.want tokens of the bucket, at least
// r.Cost, after giving back f.refunds, and returns r's Decision: admitted,
// with the batch added to r's hold (less r's cost), or rejected, charging
// nothing. It reports to the deny cache.
func (l *Limiter) fetch(ctx context.Context, f *fetchCall) (limiter.Decision, error) {
	r := f.r
	t := int64(r.Limit.Rate.Interval())
	sent := l.localNow()
	vals, back, err := l.sendFetch(ctx, f, t, sent)
	recv := l.localNow()
	f.s.mu.Lock()
	e := f.s.find(r)
	if e != nil && e.fetch == f.ch {
		e.fetch = nil
	}
	close(f.ch)
	if err != nil {
		f.s.mu.Unlock()
		l.pre.lost.Add(back)
		if f.probe != nil {
			l.deny.abandon(r, f.probe)
		}
		return limiter.Decision{}, err
	}
	debt, n := vals[0], vals[1]
	l.pre.refundedNs.Add(vals[4])
	if n == 0 {
		debt = -1 - debt
	}
	if e != nil && n < f.want {
		e.dryUntil(r, f.want, l.pre.k, recv, debt+n*t)
		e.last = max(e.last, sent+debt+n*t)
	}
	d, _ := gcra.Decide(debt, 0, r.Limit, r.Cost)
	var out segment
	if n > 0 {
		g := segment{id: l.pre.ids.Add(1), n: n, exp: sent + l.pre.lifeOf(e, r), sec: vals[2], nsec: vals[3], w: debt + n*t}
		out = l.landBatch(f, e, g, sent, sent+debt+n*t)
	} else if e != nil {
		e.since += r.Cost
	}
	f.s.mu.Unlock()
	if l.shard == bySlot {
		_, h := l.names.name(r)
		d.HashSlot = slotOf(h) + 1
	}
	if l.deny != nil {
		batch := *r
		batch.Cost = max(n, r.Cost)
		l.deny.done(&batch, sent, recv, &d, debt, n > 0, nil, f.probe)
	}
	if out.n > 0 {
		l.pre.expired.Add(out.n)
		l.giveBack(ctx, f.name, t, out)
	}
	return d, nil
}

// sendFetch runs f's script call (sent at local time sent, for a bucket of
// emission interval t ns), giving back f.refunds (back tokens), and
// returns its reply: the debt, the batch, the decision's time (s, ns) and
// the refunded ns.
func (l *Limiter) sendFetch(ctx context.Context, f *fetchCall, t, sent int64) (vals []int64, back int64, err error) {
	r := f.r
	tctx, cancel := context.WithDeadline(ctx, l.deadline(ctx))
	defer cancel()
	args := make([]any, 0, 9+4*len(f.refunds))
	args = append(args, nil, nil, int64(1), f.name, l.mode(true, sent), t, int64(gcra.Window(r.Limit)), r.Cost, f.want)
	for _, g := range f.refunds {
		args = append(args, g.sec, g.nsec, g.n*t, g.w)
		back += g.n
	}
	l.pre.fetches.Add(1)
	l.pre.sentBack.Add(back)
	cmd, err := run(tctx, l.client, &fetchS, args, false)
	if err != nil {
		return nil, back, l.fail(ctx, tctx, err)
	}
	if vals, err = cmd.Int64Slice(); err == nil && (len(vals) != 5 || vals[1] != 0 && vals[1] < r.Cost) {
		err = fmt.Errorf("limiter/redis: unexpected reply from the fetch script: %v", vals)
	}
	return vals, back, err
}

// landBatch adds the batch g a fetch sent at local time sent took (leaving
// the TAT tat) to the request's hold e (f.s.mu held; allocated if it was
// replaced meanwhile)
// and spends the request's cost from it; it returns what must be given
// back at once (nothing, unless no hold could be had).
func (l *Limiter) landBatch(f *fetchCall, e *hold, g segment, sent, tat int64) (out segment) {
	r := f.r
	l.pre.charged.Add(g.n)
	if e == nil {
		e = l.pre.alloc(f.s, r, f.name, sent)
	}
	if e == nil {
		// No room (not expected: a fetching hold is never replaced):
		// r's cost is admitted at once (an under-admission if a
		// tentative call then fails), the rest given back.
		l.pre.admitted.Add(r.Cost)
		out = g
		out.n = g.n - r.Cost
		if f.tent != nil {
			*f.tent = taken{s: f.s, r: r}
		}
		return out
	}
	l.pre.add(e, g, tat)
	l.spendLocal(f.s, e, r, f.tent)
	return segment{}
}

// dryUntil records, for a fetch of want tokens for a request r that got
// fewer (the bucket had no more), received at local time recv and
// leaving the bucket with debt ns (as of Redis's time, before recv), that
// the hold is dry until the bucket has refilled m = min(max(min(want/2,
// k/2, H/interval), cost), burst) tokens: want/2 is the demand over one
// hold lifetime (hold.want), so a hot bucket fetches again when about
// half a full batch (K/2) has refilled, a quiet one when its cost has;
// never longer than H (a batch is spent within H: waiting longer cost a
// slow bucket shared with a fast one in the same calls a fifth of its
// admissions, TestFleetPrefetch), nor than until the bucket is full.
// Counted from recv, so that for one process alone the next fetch finds
// at least m tokens (another process may take them first: its own fetch
// then comes back short and dry again; none waits more than its m
// tokens' refill per fetch).
func (e *hold) dryUntil(r *limiter.Request, want, k, recv, debt int64) {
	m := min(max(min(want/2, k/2, e.life/e.interval), r.Cost), e.burst)
	t := e.interval
	e.dry = max(e.dry, recv+debt-e.burst*t+m*t)
}

// dryRejection is the Decision of a Take of r at local time now rejected
// while its hold is dry (now < e.dry; e.held() < r.Cost): Cached (no
// round trip, nothing charged), RetryAfter until the hold's next fetch
// (e.dry - now, and at least what the TAT the last fetch left says r's
// cost needs: honest, since this process admits nothing of the bucket
// before then), ResetAfter
// until the TAT the last fetch left (a lower bound).
func (e *hold) dryRejection(r *limiter.Request, now int64) limiter.Decision {
	d, _ := gcra.Decide(e.last, now, r.Limit, r.Cost)
	return limiter.Decision{Cached: true, Remaining: e.held(),
		RetryAfter: max(time.Duration(e.dry-now), d.RetryAfter),
		ResetAfter: time.Duration(max(0, e.last-now))}
}

// lifeOf returns H for r's bucket (its hold e's, when there is one).
func (p *prefetcher) lifeOf(e *hold, r *limiter.Request) int64 {
	if e != nil {
		return e.life
	}
	return min(p.life, int64(gcra.Window(r.Limit)))
}

// giveBack sends one refund of g's tokens of the bucket named name
// (emission interval t), once, under its own Timeout (never retried: a
// replay would give back twice), and counts it.
func (l *Limiter) giveBack(ctx context.Context, name string, t int64, g segment) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	defer cancel()
	l.pre.sentBack.Add(g.n)
	args := []any{nil, nil, int64(1), name, l.mode(true, l.localNow()), g.sec, g.nsec, g.n * t, g.w}
	cmd, err := run(rctx, l.client, &giveBackS, args, false)
	var ns int64
	if err == nil {
		ns, err = cmd.Int64()
	}
	if err != nil {
		l.pre.lost.Add(g.n)
		return fmt.Errorf("limiter/redis: refund of %d prefetched tokens: %w", g.n, err)
	}
	l.pre.refundedNs.Add(ns)
	return nil
}

// Flush gives back to Redis every token this Limiter holds for prefetch
// ([Options.Prefetch]), live or expired and not yet given back: one
// refund per batch, each sent once, under its own Timeout, never retried
// (a replay would give back twice), capped as every refund is (never past
// a full bucket, never undoing another request's charge: see "Refunds and
// the bounds they keep" in the package documentation). Call it when the
// process stops taking requests (after http.Server.Shutdown returns), so
// that other processes can spend the tokens at once instead of after the
// bucket refills. Calls after Flush may prefetch again. It returns nil
// when prefetch is off or nothing is held, else the errors of the refunds
// that failed (joined; their tokens return to the bucket as it refills,
// at the latest one window later). ctx's values reach go-redis; its
// cancellation does not stop a refund once sent. Safe for concurrent use.
func (l *Limiter) Flush(ctx context.Context) error {
	if l.pre == nil {
		return nil
	}
	type todo struct {
		name string
		t    int64
		g    segment
	}
	var all []todo
	for i := range l.pre.sets {
		s := &l.pre.sets[i]
		s.mu.Lock()
		for j := range s.e {
			e := &s.e[j]
			if e.key == "" {
				continue
			}
			for _, g := range append(e.segs[:], e.pend[:e.npend]...) {
				if g.n > 0 {
					all = append(all, todo{e.name, e.interval, g})
				}
			}
			e.segs, e.npend = [2]segment{}, 0
			e.sends++
		}
		s.mu.Unlock()
	}
	var errs []error
	for _, a := range all {
		if err := l.giveBack(ctx, a.name, a.t, a.g); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// prefetchBooks returns l's prefetch counters and the tokens it holds
// now (all zero when prefetch is off), for tests (internal/prefetchbooks).
// Safe for concurrent use; it locks each hold's set in turn.
func (l *Limiter) prefetchBooks() prefetchbooks.Books {
	p := l.pre
	if p == nil {
		return prefetchbooks.Books{}
	}
	held, pending := l.heldTokens()
	return prefetchbooks.Books{
		Fetches: p.fetches.Load(), Charged: p.charged.Load(), Admitted: p.admitted.Load(),
		Held: held, Pending: pending, Expired: p.expired.Load(), SentBack: p.sentBack.Load(),
		RefundedNs: p.refundedNs.Load(), Lost: p.lost.Load(), Dropped: p.dropped.Load(),
	}
}

func init() {
	prefetchbooks.Of = func(l any) prefetchbooks.Books { return l.(*Limiter).prefetchBooks() }
}

// heldTokens returns the live tokens l holds now and the expired ones
// whose refund is due.
func (l *Limiter) heldTokens() (held, pending int64) {
	for i := range l.pre.sets {
		s := &l.pre.sets[i]
		s.mu.Lock()
		for j := range s.e {
			e := &s.e[j]
			held += e.held()
			for _, g := range e.pend[:e.npend] {
				pending += g.n
			}
		}
		s.mu.Unlock()
	}
	return held, pending
}
