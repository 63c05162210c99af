package redis

import (
	"context"
	"fmt"
	"slices"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/limiter"
)

// A call whose buckets span several slots (or Ring shards) is split into
// parts, one per slot, each decided by one partScript on the slot's master.
// See the package documentation ("Cluster: calls across slots") for the
// protocol and its bounds; this file implements it.

// part is the requests of one call that share a slot, and what the
// partScript said about them.
type part struct {
	idx   []int  // indexes of the call's requests, in call order
	group uint32 // their slot or Ring tag
	prio  uint32 // the lowest hint of its requests: parts run lowest first
	last  int    // the highest index: ties run the later policy first

	// The reply: whether every request fits in the first pass (a1) and
	// every enforcing one in the second (a2); the master's time (sec, nsec)
	// of the decision; per request the debt of the first pass (d1) and of
	// the second (d2, -1 for dry-run requests).
	a1, a2    bool
	sec, nsec int64
	d1, d2    []int64
	// charged is what the part's script charged: 2 the first pass, 1 the
	// second (enforcing requests only), 0 nothing.
	charged int
	err     error
}

// runSplit decides and, for a Take, charges a call whose requests fall in
// several groups (slots or Ring tags), as the package documentation says.
// partsOf groups the indexes of a call's requests by groups[i] (their
// slot or Ring tag) into parts, in the order they run: the lowest prio of
// a part's requests first, then the part whose last request comes later.
func partsOf(groups []uint32, prio func(i int) uint32) []*part {
	var parts []*part
	for i := range groups {
		h := prio(i)
		j := slices.IndexFunc(parts, func(p *part) bool { return groups[p.idx[0]] == groups[i] })
		if j < 0 {
			parts = append(parts, &part{prio: h, group: groups[i]})
			j = len(parts) - 1
		}
		p := parts[j]
		p.idx = append(p.idx, i)
		p.prio = min(p.prio, h)
		p.last = i
	}
	slices.SortStableFunc(parts, func(a, b *part) int {
		if a.prio != b.prio {
			return int(a.prio) - int(b.prio)
		}
		return b.last - a.last
	})
	return parts
}

func (l *Limiter) runSplit(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request, names []string, groups []uint32, take bool) ([]limiter.Decision, int, error) {
	// Most selective first: the part whose bucket was last seen emptiest,
	// so that a rejection comes before any charge when it can.
	parts := partsOf(groups, func(i int) uint32 { return l.hint(&reqs[i]) })

	anyDry := slices.ContainsFunc(reqs, func(r limiter.Request) bool { return r.DryRun })
	tctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	rounds := 1
	var charged bool
	final := 0 // the level the call charged at (see part)
	if !take {
		l.each(parts, func(p *part) { l.decidePart(tctx, reqs, names, p, false, 2) })
		if err := firstErr(parts); err != nil {
			return nil, rounds, l.fail(ctx, tctx, err)
		}
		charged = allFit(parts, anyDry)
	} else {
		p0, rest := parts[0], parts[1:]
		l.decidePart(tctx, reqs, names, p0, true, 2)
		if p0.err != nil {
			return nil, rounds, l.fail(ctx, tctx, p0.err)
		}
		level := p0.charged
		rounds++
		// The rest in parallel: charged at the level the first part
		// reached, or only peeked (for their decisions) if it rejected.
		l.each(rest, func(p *part) { l.decidePart(tctx, reqs, names, p, level > 0, level) })
		final = level
		for _, p := range rest {
			if p.err == nil && level > 0 {
				final = min(final, p.charged)
			}
		}
		err := firstErr(rest)
		if err != nil {
			final = 0 // the call fails: give back what was charged
		}
		if level > 0 && slices.ContainsFunc(parts, func(p *part) bool { return p.err == nil && p.charged > final }) {
			rounds++
			l.refund(ctx, reqs, names, nil, parts, final)
		}
		if err != nil {
			return nil, rounds, l.fail(ctx, tctx, err)
		}
		charged = final > 0
	}

	// The decisions: the first pass's, except that, when the call does not
	// fit whole and has dry-run requests, enforcing requests get the
	// second pass's (the contract's two-pass rule).
	second := anyDry && slices.ContainsFunc(parts, func(p *part) bool { return !p.a1 })
	n0 := len(dst)
	dst = append(dst, make([]limiter.Decision, len(reqs))...)
	out := dst[n0:]
	if err := partDecisions(parts, reqs, out, second); err != nil {
		return nil, rounds, err
	}
	if charged != enforcingOK(reqs, out) {
		return nil, rounds, errDisagree
	}
	if take {
		reserveParts(parts, reqs, out, final)
	}
	for i := range reqs {
		l.learn(&reqs[i], &out[i])
	}
	return dst, rounds, nil
}

// reserveParts sets the Reservation of every settling request that a call
// across parts charged at level final (2: every request, whose TAT its
// first-pass debt gives; 1: the enforcing ones, at their second-pass debt;
// 0: none), from its part's time. A part charged at 2 and refunded to 1
// keeps a TAT up to its dry-run charges higher than the second pass's:
// the Reservation is then lower than the TAT the charge left, which only
// caps a later refund lower (never over-refunds).
func reserveParts(parts []*part, reqs []limiter.Request, out []limiter.Decision, final int) {
	if final == 0 {
		return
	}
	for _, p := range parts {
		at := replyTime(p.sec, p.nsec)
		for j, i := range p.idx {
			d := p.d1[j]
			if final == 1 {
				if reqs[i].DryRun {
					continue
				}
				d = p.d2[j]
			}
			if reqs[i].Limit.MaxInFlight == 0 {
				reserve(&reqs[i], &out[i], at, d)
			}
		}
	}
}

// allFit reports whether a call whose parts were all decided would charge:
// every request fits in the first pass, or there are dry-run requests and
// every enforcing one fits in the second.
func allFit(parts []*part, anyDry bool) bool {
	a1, a2 := true, true
	for _, p := range parts {
		a1, a2 = a1 && p.a1, a2 && p.a2
	}
	return a1 || anyDry && a2
}

func firstErr(parts []*part) error {
	for _, p := range parts {
		if p.err != nil {
			return p.err
		}
	}
	return nil
}

// each runs f on every part, in parallel (each part is its own master and
// round trip), and returns when all are done.
func (l *Limiter) each(parts []*part, f func(*part)) {
	var wg sync.WaitGroup
	for _, p := range parts[min(1, len(parts)):] {
		wg.Go(func() { f(p) })
	}
	if len(parts) > 0 {
		f(parts[0])
	}
	wg.Wait()
}

// hint returns the hint of r's bucket: 1 + its last known fill (0..255),
// or 256 when unknown.
func (l *Limiter) hint(r *limiter.Request) uint32 {
	if v := l.hints[keyHash(r.Key)%hintSize].Load(); v != 0 {
		return v - 1
	}
	return 256
}

// learn records the fill of r's bucket as d leaves it.
func (l *Limiter) learn(r *limiter.Request, d *limiter.Decision) {
	fill := uint32(d.Remaining * 255 / r.Limit.Burst)
	l.hints[keyHash(r.Key)%hintSize].Store(fill + 1)
}

// decidePart runs partScript for p at the call's level (2: the first
// pass may charge; 1: only the second pass may) and fills p's reply, or
// p.err.
func (l *Limiter) decidePart(ctx context.Context, reqs []limiter.Request, names []string, p *part, take bool, level int) {
	m := len(p.idx)
	args := make([]any, headArgs+m+2+argsPerReq*m)
	args[2] = int64(m)
	keys, argv := args[headArgs:headArgs+m], args[headArgs+m:]
	argv[0] = l.mode(take, l.localNow())
	argv[1] = int64(level)
	for j, i := range p.idx {
		keys[j] = names[i]
		argv[2+argsPerReq*j], argv[3+argsPerReq*j] = chargeCeiling(&reqs[i])
	}
	cmd, err := run(ctx, l.client, &partS, args, !take)
	if err != nil {
		p.err = err
		return
	}
	p.read(cmd, m, level, take)
}

// read decodes a part script's reply for the m requests of p, called at
// level (2: the first pass, 1: the second) with take, into p: the passes'
// verdicts, the master's time, the debts, and what it charged; a reply of
// the wrong shape is p.err.
func (p *part) read(cmd *goredis.Cmd, m, level int, take bool) {
	vals, err := cmd.Int64Slice()
	if err != nil || len(vals) != 4+2*m {
		p.err = fmt.Errorf("limiter/redis: unexpected reply from the script (%d values for %d requests, %v)", len(vals), m, err)
		return
	}
	p.a1, p.a2 = vals[0] == 1, vals[1] == 1
	p.sec, p.nsec = vals[2], vals[3]
	p.d1, p.d2 = vals[4:4+m], vals[4+m:]
	switch {
	case !take:
	case level == 2 && p.a1:
		p.charged = 2
	case p.a2:
		p.charged = 1
	}
}

// partDecisions sets out[i], the Decision of reqs[i], from the debts its
// part's script decided it against: the first pass's, or the second's for
// an enforcing request when second (the contract's two-pass rule); an
// in-flight cap's by gcra.Acquire, a bucket's by gcra.Decide. A negative
// debt is a reply the scripts never give: an error.
func partDecisions(parts []*part, reqs []limiter.Request, out []limiter.Decision, second bool) error {
	for _, p := range parts {
		for j, i := range p.idx {
			d := p.d1[j]
			if second && !reqs[i].DryRun {
				d = p.d2[j]
			}
			if d < 0 {
				return fmt.Errorf("limiter/redis: unexpected reply from the script: debt %d", d)
			}
			if reqs[i].Limit.MaxInFlight != 0 {
				out[i], _ = gcra.Acquire(d, reqs[i].Limit, reqs[i].Cost)
			} else {
				out[i], _ = gcra.Decide(d, 0, reqs[i].Limit, reqs[i].Cost)
			}
		}
	}
	return nil
}

// refund gives back, in parallel on every part that charged more than
// final, the difference: everything (final 0) or the dry-run requests'
// charges (from 2 to 1). Each refund is sent once and never retried (a
// replayed refund would give back twice); one that fails strands its
// charge, counted in l.lostRefunds. It runs under its own timeout, even
// when ctx is done: a charge of a call that did not pass must not stay.
// ids is nil for a call of token buckets alone; for a call with in-flight
// caps it holds each request's lease member id (inflight.go), and the
// leases beyond final are released too (refundCapsPart).
func (l *Limiter) refund(ctx context.Context, reqs []limiter.Request, names []string, ids []uint64, parts []*part, final int) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	defer cancel()
	var todo []*part
	for _, p := range parts {
		if p.err == nil && p.charged > final {
			todo = append(todo, p)
		}
	}
	l.each(todo, func(p *part) {
		l.refunds.Add(1)
		var err error
		if ids == nil {
			err = l.refundPart(rctx, reqs, names, p, final)
		} else {
			err = l.refundCapsPart(rctx, reqs, names, ids, p, final)
		}
		if err != nil {
			l.lostRefunds.Add(1)
		}
	})
}

// refundPart gives back what p charged beyond level final: per bucket, c
// = its debt after the charged pass minus its debt after pass final (its
// debt before the call when final is 0), with w = its debt after the
// charged pass, both as of p's decision time.
func (l *Limiter) refundPart(ctx context.Context, reqs []limiter.Request, names []string, p *part, final int) error {
	type bucket struct{ base, hi, lo int64 }
	var order []string
	buckets := map[string]*bucket{}
	for pass := 1; pass <= 2; pass++ {
		for j, i := range p.idx {
			if pass == 2 && reqs[i].DryRun {
				continue
			}
			d := p.d1[j]
			if pass == 2 {
				d = p.d2[j]
			}
			charge, _ := chargeCeiling(&reqs[i])
			b := buckets[names[i]]
			if b == nil {
				b = &bucket{base: d, hi: -1, lo: -1}
				buckets[names[i]] = b
				order = append(order, names[i])
			}
			// The debt after the last request of the pass on this bucket.
			if (pass == 1) == (p.charged == 2) {
				b.hi = d + charge
			} else if final == 1 {
				b.lo = d + charge
			}
		}
	}
	var keys, argv []any
	for _, k := range order {
		b := buckets[k]
		lo := b.base
		if final == 1 && b.lo >= 0 {
			lo = b.lo
		}
		if b.hi > lo {
			keys = append(keys, k)
			argv = append(argv, b.hi-lo, b.hi)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	args := make([]any, 0, headArgs+len(keys)+3+len(argv))
	args = append(args, nil, nil, int64(len(keys)))
	args = append(args, keys...)
	args = append(args, l.mode(true, l.localNow()), p.sec, p.nsec)
	args = append(args, argv...)
	_, err := run(ctx, l.client, &refundS, args, false)
	return err
}
