package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/ratekey/ratekey/decide"
)

// Held reports whether the evaluation in sc took in-flight slots (of a
// store or of an adaptive cap) or reserved tokens: they must be released
// and settled when the handler returns (see ReleaseSlots and Settle).
func (sc *Scratch) Held() bool { return sc.heldDecs != nil || sc.capsTaken() }

// capsTaken reports whether the evaluation in sc took a slot of an
// adaptive cap.
func (sc *Scratch) capsTaken() bool {
	for j := range sc.caps {
		if sc.caps[j].taken {
			return true
		}
	}
	return false
}

// CountSlots adds delta to the in-flight gauge of each policy whose slot
// the evaluation in sc holds.
func (st *State[R]) CountSlots(sc *Scratch, ev *decide.Evaluation, delta int) {
	if st.Metrics == nil {
		return
	}
	for j, i := range sc.heldIdx {
		if sc.slots && sc.heldDecs[j].Slot != 0 {
			st.Metrics.InFlight(ev.Policies[i].Policy, delta)
		}
	}
	for j := range sc.caps {
		if sc.caps[j].taken {
			st.Metrics.InFlight(ev.Policies[sc.caps[j].idx].Policy, delta)
		}
	}
}

// ReleaseSlots releases the in-flight slots the evaluation in sc holds,
// once (it forgets them), on a context that outlives ctx, the request's
// (the handler has returned, or the request does not go on): the client may
// be gone, and the slot must be freed all the same. counted says whether
// the in-flight gauge counted them. A failed release is logged and
// reported as a store error; it is not retried (a retry could free a slot
// another request holds: see [limiter.Limiter]); a shared store's lease
// frees it.
func (st *State[R]) ReleaseSlots(ctx context.Context, sc *Scratch, ev *decide.Evaluation, counted bool) {
	if !sc.slots && !sc.capsTaken() {
		return
	}
	if counted {
		st.CountSlots(sc, ev, -1)
	}
	st.releaseAdaptive(ctx, sc, ev, true)
	if !sc.slots {
		return
	}
	var start time.Time
	if st.Metrics != nil {
		start = time.Now()
	}
	ctx = sc.detach(ctx)
	err := sc.heldStore.Release(ctx, sc.heldReqs, sc.heldDecs)
	if st.Metrics != nil {
		name := st.store
		if sc.heldStore != st.Limiter {
			name = st.fallbackStore
		}
		st.Metrics.StoreCall(name, "release", time.Since(start), err)
	}
	if err != nil {
		st.Logger.LogAttrs(ctx, slog.LevelWarn, "ratekey in-flight release failed",
			slog.String("operation", ev.Operation), slog.String("store", st.store), slog.String("error", err.Error()))
	}
	sc.slots = false
}
