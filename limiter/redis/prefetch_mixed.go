package redis

import (
	"context"

	"github.com/ratekey/ratekey/limiter"
)

// mixed decides a Take of several requests when prefetch is on (see the
// package documentation, "Prefetch", calls of several requests). Each
// request prefetch serves is taken tentatively from its bucket's hold
// when the hold has its cost, or, when the bucket is hot (its next batch
// would be more than the cost), by a fetch of its own (one round trip
// before the others'; a fetch that rejects sends the request on with the
// others). The rest go to Redis in one call (remote): the usual script,
// all-or-nothing, or a fetch when one request prefetch serves is left.
// If that call fails or rejects an enforcing request, nothing is charged:
// the tentative tokens go back to their holds (settle); otherwise they
// are admitted. ok false: no request was taken locally or fetched, and
// the caller decides the call as without prefetch (nothing was done).
// The decisions are appended to dst in reqs' order; rounds counts the
// sequential round trips.
func (l *Limiter) mixed(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) (_ []limiter.Decision, rounds int, ok bool, err error) {
	n0 := len(dst)
	dst = append(dst, make([]limiter.Decision, len(reqs))...)
	out := dst[n0:]
	var tents [8]taken
	tent, local := tents[:0], make([]bool, len(reqs)) // local: decided here
	rejected := false                                 // by a fetch of its own: the call is
	for i := range reqs {
		r := &reqs[i]
		if !l.pre.serves(r) {
			continue
		}
		var t taken
		switch held, hot := l.takeHeld(r, &t, &out[i]); {
		case held:
			tent, local[i] = append(tent, t), true
		case hot:
			d, rt, ok, err := l.prefetched(ctx, r, true, &t)
			rounds += rt
			if err != nil {
				l.settleAll(tent, false)
				return nil, rounds, true, err
			}
			if ok {
				out[i], local[i] = d, true
				if d.Allowed {
					tent = append(tent, t)
				} else {
					rejected = true
				}
			}
		}
	}
	if len(tent) == 0 && !rejected {
		return dst[:n0], 0, false, nil
	}
	commit := !rejected
	if !allTrue(local) {
		// A call already rejected only asks the others' decisions (a Peek).
		var rt int
		rt, err = l.remote(ctx, reqs, local, out, !rejected)
		rounds += rt
		commit = commit && err == nil && enforcingOK(reqs, out)
	}
	l.settleAll(tent, commit)
	if err != nil {
		return nil, rounds, true, err
	}
	return dst, rounds, true, nil
}

// settleAll settles every take of tent (see prefetcher.settle).
func (l *Limiter) settleAll(tent []taken, commit bool) {
	now := l.localNow()
	for i := range tent {
		l.pre.settle(&tent[i], commit, now)
	}
}

// remote decides the requests of reqs not decided locally (local[i]
// false) in one call to Redis, writing their decisions into out: for a
// Take (take), a fetch when it is one request prefetch serves, else the
// usual script; otherwise a Peek.
func (l *Limiter) remote(ctx context.Context, reqs []limiter.Request, local []bool, out []limiter.Decision, take bool) (int, error) {
	rest := make([]limiter.Request, 0, len(reqs))
	for i := range reqs {
		if !local[i] {
			rest = append(rest, reqs[i])
		}
	}
	var got []limiter.Decision
	var rounds int
	var err error
	if take && len(rest) == 1 && l.pre.serves(&rest[0]) {
		var d limiter.Decision
		var ok bool
		// Admitted, it is charged at once: the call then commits, as the
		// local takes are all admitted.
		d, rounds, ok, err = l.prefetched(ctx, &rest[0], true, nil)
		if ok && err == nil {
			got = []limiter.Decision{d}
		}
	}
	if got == nil && err == nil {
		got, rounds, err = l.direct(ctx, nil, rest, take)
	}
	if err != nil {
		return rounds, err
	}
	j := 0
	for i := range reqs {
		if !local[i] {
			out[i] = got[j]
			j++
		}
	}
	return rounds, nil
}

// takeHeld takes r.Cost tokens from r's hold tentatively into *t when it
// holds enough, setting *d to r's local Decision (held true). Otherwise
// it reports whether the bucket is hot (hold.hot: others asked for its
// cost within the last hold lifetime) or dry (hold.dry: prefetched then
// rejects it locally) with no fetch in flight (demand is
// then counted by the fetch; a bucket not hot counts r as demand here). A bucket without a
// hold gets one, to count its demand, when its set has room.
func (l *Limiter) takeHeld(r *limiter.Request, t *taken, d *limiter.Decision) (held, hot bool) {
	s := l.pre.set(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := l.localNow()
	e := s.find(r)
	if e == nil {
		name, _ := l.names.name(r)
		if e = l.pre.alloc(s, r, name, now); e == nil {
			return false, false
		}
	}
	l.pre.decay(e, now)
	if e.held() >= r.Cost {
		l.spendLocal(s, e, r, t)
		*d = e.local(now)
		return true, false
	}
	if e.fetch == nil && (now < e.dry || e.hot(r.Cost, now)) {
		return false, true
	}
	e.since += r.Cost
	return false, false
}

// allTrue reports whether every element of b is true.
func allTrue(b []bool) bool {
	for _, v := range b {
		if !v {
			return false
		}
	}
	return true
}
