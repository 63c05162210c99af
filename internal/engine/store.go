package engine

import (
	"context"
	"time"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limiter"
)

// decideAll asks the store to decide reqs, the requests of the policies
// ev.Policies[idx[j]] (Take when charge, else Peek), and fills their
// results. While the store cannot decide, the policies whose OnStoreError
// is local are decided on the Fallback store instead (decideFallback);
// the others get ERROR and their fail mode.
func (st *State[R]) decideAll(ctx context.Context, sc *Scratch, ev *decide.Evaluation, idx []int, reqs []limiter.Request, charge bool) {
	var decs []limiter.Decision
	var err error
	if ask, probe := st.breaker.ask(); ask {
		decs, err = st.call(ctx, st.Limiter, st.store, sc.decs[:0], reqs, charge)
		if err != nil && ctx.Err() != nil {
			// The request ended (the client went away, or its deadline
			// passed) before the limiter answered: not a store failure,
			// so no fail mode applies and nothing is admitted.
			ev.Abandoned = true
			st.fill(sc, ev, idx, reqs, nil, err, charge, st.Limiter)
			for _, i := range idx {
				ev.Policies[i].Abandoned = true
			}
			return
		}
		if err != nil || answered(decs) {
			st.recordStore(err, probe)
		}
	} else {
		err = errStoreDown
	}
	if err != nil && st.Fallback != nil {
		st.decideFallback(ctx, sc, ev, idx, reqs, charge, err)
		return
	}
	st.fill(sc, ev, idx, reqs, decs, err, charge, st.Limiter)
}

// answered reports whether the store itself gave decs: not every one of
// them answered locally (limiter/redis's deny cache, Cached, or its held
// tokens, Prefetched), which says nothing of whether the store answers.
func answered(decs []limiter.Decision) bool {
	for i := range decs {
		if !decs[i].Cached && !decs[i].Prefetched {
			return true
		}
	}
	return false
}

// call runs one Take or Peek on store l (named name), reporting it to the
// metrics (an abandoned call with a nil error: the store did not fail).
func (st *State[R]) call(ctx context.Context, l limiter.Limiter, name string, dst []limiter.Decision, reqs []limiter.Request, charge bool) ([]limiter.Decision, error) {
	var start time.Time
	if st.Metrics != nil {
		start = time.Now()
	}
	op := "peek"
	var decs []limiter.Decision
	var err error
	if charge {
		op = "take"
		decs, err = l.Take(ctx, dst, reqs)
	} else {
		decs, err = l.Peek(ctx, dst, reqs)
	}
	if st.Metrics != nil {
		storeErr := err
		if ctx.Err() != nil {
			storeErr = nil
		}
		st.Metrics.StoreCall(name, op, time.Since(start), storeErr)
	}
	return decs, err
}

// fill sets the results of the policies ev.Policies[idx[j]] from store
// l's decisions decs of reqs, or from its error err (ERROR: their fail
// mode applies), and what ev learns from them: Charged, Delay, RoundTrips
// and, when they took in-flight slots, what releases them (sc).
func (st *State[R]) fill(sc *Scratch, ev *decide.Evaluation, idx []int, reqs []limiter.Request, decs []limiter.Decision, err error, charge bool, l limiter.Limiter) {
	allEnforcing, all := true, true
	for j := range decs {
		all = all && decs[j].Allowed
		allEnforcing = allEnforcing && (decs[j].Allowed || reqs[j].DryRun)
	}
	ev.Charged = charge && err == nil && allEnforcing
	if err == nil {
		// In-flight slots to release, reservations to settle (see held).
		for j := range decs {
			sc.slots = sc.slots || decs[j].Slot != 0
			sc.reserved = sc.reserved || decs[j].Reservation != 0
		}
		if sc.slots || sc.reserved {
			sc.heldReqs, sc.heldDecs, sc.heldIdx, sc.heldStore = reqs, decs, idx, l
		}
	}
	for j, i := range idx {
		res := &ev.Policies[i]
		if err != nil {
			res.Decision = decide.DecisionError
			res.Err = err
			continue
		}
		st.fillOne(res, ev, &decs[j], ev.Charged && (all || !res.DryRun))
	}
}

// fillOne sets res from its decision d; charged says whether d's charge
// stands.
func (st *State[R]) fillOne(res *decide.PolicyResult, ev *decide.Evaluation, d *limiter.Decision, charged bool) {
	res.Remaining, res.RetryAfter, res.ResetAfter, res.Never, res.Delay = d.Remaining, d.RetryAfter, d.ResetAfter, d.Never, d.Delay
	if res.Limit.MaxInFlight != 0 {
		res.RetryAfter = 0
		if !d.Allowed {
			// No store can tell when a running request ends: only the
			// policy's own retry_after says when to come back.
			res.RetryAfter = st.Policies[res.Index].RetryAfter
		}
	}
	res.Cached, res.HashSlot, res.InFlight = d.Cached, d.HashSlot, d.InFlight
	res.Prefetched = d.Prefetched
	ev.RoundTrips = max(ev.RoundTrips, d.RoundTrips)
	res.Charged = charged
	switch {
	case !d.Allowed && res.DryRun:
		res.Decision = decide.DecisionRejectedDryRun
	case !d.Allowed:
		res.Decision = decide.DecisionRejected
	case d.Delay > 0 && res.DryRun:
		res.Decision = decide.DecisionDelayedDryRun
	case d.Delay > 0:
		res.Decision = decide.DecisionDelayed
		ev.Delay = max(ev.Delay, d.Delay)
	default:
		res.Decision = decide.DecisionPassed
	}
}
