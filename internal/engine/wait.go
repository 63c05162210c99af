package engine

import (
	"context"
	"time"

	"github.com/ratekey/ratekey/decide"
)

// wait blocks a DELAYED request for d on a timer (the monotonic clock; a
// testing/synctest bubble's in tests), or until ctx is done, returning
// ctx.Err() then.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Delay waits out ev's Delay (see wait), marking ev Abandoned when ctx
// ends first, and reports the wait to the metrics: each DELAYED policy's
// queue holds the request while it waits (Queued, then Dequeued).
func (st *State[R]) Delay(ctx context.Context, ev *decide.Evaluation) {
	if st.Metrics == nil {
		if wait(ctx, ev.Delay) != nil {
			ev.Abandoned = true
		}
		return
	}
	st.queue(ev, 0, true)
	start := time.Now()
	if wait(ctx, ev.Delay) != nil {
		ev.Abandoned = true
	}
	st.queue(ev, time.Since(start), false)
}

// queue reports to the metrics that ev's request joins (join true) or
// leaves, having waited waited, the queue of each of its DELAYED policies.
func (st *State[R]) queue(ev *decide.Evaluation, waited time.Duration, join bool) {
	for i := range ev.Policies {
		res := &ev.Policies[i]
		switch {
		case res.Decision != decide.DecisionDelayed:
		case join:
			st.Metrics.Queued(res.Policy)
		default:
			st.Metrics.Dequeued(res.Policy, waited, ev.Abandoned)
		}
	}
}
