package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/policy"
)

// Reserve, then settle (Policy.Settle): a settling policy's request
// reserves its cost at admission; its handler reports the actual cost
// (Report); when the handler returns, Settle settles each reservation at
// the cost reported (clamped to MaxCost), or keeps it when nothing was
// reported. See the rule of package limiter ("Reserve, then settle").

// Settlement is one evaluation's reservations while its handler runs:
// what a report of the actual cost (middleware.ReportCost) may settle. It
// lives in the evaluation's Scratch; the transport hands it to the
// handler's reports until the handler returns, and guards every access
// with the request's mutex, so that a report from another goroutine
// either lands before the handler returns or is refused.
type Settlement struct {
	ents []settleEntry
	buf  [3]settleEntry
}

// settleEntry is one settling policy's reservation: the policy, the
// index j of its request in the scratch's held requests, and the cost
// reported, if any.
type settleEntry struct {
	policy   string
	j        int
	reported int64
	has      bool
}

// maxCost returns the most a request of p settles at under limit l (the
// policy's or an override's): MaxCost, or l's burst when it is 0; 0 for
// a policy that does not settle.
func maxCost(p *policy.Policy, l limiter.Limit) int64 {
	switch {
	case !p.Settle:
		return 0
	case p.MaxCost != 0:
		return p.MaxCost
	}
	return l.Burst
}

// Reserved reports whether the evaluation in sc reserved tokens to settle
// when the handler returns.
func (sc *Scratch) Reserved() bool { return sc.reserved }

// OpenSettlement lists the reservations of the evaluation in sc (ev's),
// for a request that goes on to its handler, and returns them, for the
// transport to report on (Report) until the handler returns.
func (sc *Scratch) OpenSettlement(ev *decide.Evaluation) *Settlement {
	s := &sc.settle
	s.ents = s.buf[:0]
	for j, i := range sc.heldIdx {
		if sc.heldDecs[j].Reservation != 0 {
			s.ents = append(s.ents, settleEntry{policy: ev.Policies[i].Policy, j: j})
		}
	}
	return s
}

// Report records cost, the actual cost of a request, for the settling
// policy named policy, or for every one when policy is "", in the open
// settlements of the handler that reports (its own phase's first, then
// the phases around it): see middleware.ReportCost for the rule. A report
// that cannot be honoured (a second one for a policy; no reservation of
// the policy, or none at all) is an error and changes nothing. The caller
// holds the lock that guards the settlements.
func Report(open []*Settlement, policy string, cost int64) error {
	found := false
	for _, s := range open {
		for i := range s.ents {
			e := &s.ents[i]
			if policy != "" && e.policy != policy {
				continue
			}
			if e.has {
				return fmt.Errorf("ratekey: policy %s: a cost (%d) was reported already for this request; this report (%d) is ignored", quote.Value(e.policy), e.reported, cost)
			}
			found = true
		}
	}
	if !found {
		if policy == "" {
			return errors.New("ratekey: no settling policy reserved tokens for this request")
		}
		return fmt.Errorf("ratekey: policy %s has no reservation open for this request (no policy of that name applies, it does not settle, it did not charge the request, or its handler has returned)", quote.Value(policy))
	}
	for _, s := range open {
		for i := range s.ents {
			if e := &s.ents[i]; policy == "" || e.policy == policy {
				e.reported, e.has = cost, true
			}
		}
	}
	return nil
}

// actual sets sc.actual (or a larger slice it returns) to the cost each
// held request settles at: the cost reported, clamped to its policy's
// MaxCost, or its reservation (for requests without one, their Cost:
// nothing to settle). The settlement is closed: nothing reports on it.
func (st *State[R]) actual(ctx context.Context, sc *Scratch, ev *decide.Evaluation) []int64 {
	actual := sc.actual[:0]
	for j := range sc.heldReqs {
		actual = append(actual, sc.heldReqs[j].Cost)
	}
	for _, e := range sc.settle.ents {
		if !e.has {
			continue
		}
		res := &ev.Policies[sc.heldIdx[e.j]]
		actual[e.j] = e.reported
		if e.reported > res.MaxCost {
			actual[e.j] = res.MaxCost
			st.Logger.LogAttrs(ctx, slog.LevelWarn, "ratekey settle: reported cost above max_cost, clamped (a defect of the handler)",
				slog.String("policy", res.Policy), slog.String("key", res.Key), slog.String("operation", ev.Operation),
				slog.Int64("reported", e.reported), slog.Int64("max_cost", res.MaxCost))
		}
	}
	return actual
}

// Settle settles the reservations of the evaluation in sc (ev's), once,
// when the handler has returned and the transport has closed sc's
// Settlement to reports (under the lock Report runs under): the store
// call (only when some cost differs from its reservation), on a context
// that outlives ctx, the request's (the client may be gone: the cost is
// owed all the same), never retried (a resend would settle twice; see
// [limiter.Limiter]); then each settling result's Settled and Returned,
// and the metrics.
func (st *State[R]) Settle(ctx context.Context, sc *Scratch, ev *decide.Evaluation) {
	actual := st.actual(ctx, sc, ev)
	changed := false
	for j := range actual {
		changed = changed || sc.heldDecs[j].Reservation != 0 && actual[j] != sc.heldReqs[j].Cost
	}
	if changed {
		st.settleStore(sc.detach(ctx), sc, ev, actual)
	}
	for _, e := range sc.settle.ents {
		res := &ev.Policies[sc.heldIdx[e.j]]
		res.Settled, res.Returned = actual[e.j], true
		if st.Metrics != nil {
			st.Metrics.Settled(res.Policy, res.Settled, res.Settled > res.Cost)
		}
	}
}

// settleStore makes the store call of Settle.
func (st *State[R]) settleStore(ctx context.Context, sc *Scratch, ev *decide.Evaluation, actual []int64) {
	var start time.Time
	if st.Metrics != nil {
		start = time.Now()
	}
	err := sc.heldStore.Settle(ctx, sc.heldReqs, sc.heldDecs, actual)
	name := st.store
	if sc.heldStore != st.Limiter {
		name = st.fallbackStore
	}
	if st.Metrics != nil {
		st.Metrics.StoreCall(name, "settle", time.Since(start), err)
	}
	if err != nil {
		st.Logger.LogAttrs(ctx, slog.LevelWarn, "ratekey settle failed (outcome unknown; not retried)",
			slog.String("operation", ev.Operation), slog.String("store", name), slog.String("error", err.Error()))
	}
}
