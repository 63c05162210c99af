package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/policy"
)

// Reserve, then settle (Policy.Settle): a settling policy's request
// reserves its cost at admission; its handler reports the actual cost with
// ReportCost; when the handler returns, the Handler settles each
// reservation at the cost reported (clamped to MaxCost), or keeps it when
// nothing was reported. See the rule of package limiter ("Reserve, then
// settle").

// settlement is one phase's reservations while its handler runs: what
// ReportCost may report on. It lives in the phase's scratch; the request
// state points at the innermost open one (next: an outer phase's, still
// open), and every access is under the request state's mutex, so that a
// report from another goroutine either lands before the handler returns
// or is refused.
type settlement struct {
	next *settlement
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

var (
	errNoState = errors.New("ratekey: no rate limiter reserved tokens for this request (ReportCost takes the context of a request behind RateLimiter.Handler)")
	errSettled = errors.New("ratekey: the request's handler has returned and its costs are settled; a later report is ignored")
)

// ReportCost reports the actual cost, in tokens, of the request whose
// context is ctx to its settling policies ([policy.Policy].Settle): to the policy
// named policy, or, when policy is "", to every settling policy that
// reserved tokens for the request (when they count the same units). A
// handler behind [RateLimiter.Handler] (or [RateLimiter.PreAuthHandler])
// calls it once it knows the cost (an LLM's usage, a query's rows, the
// bytes it sent), before it returns. When the handler returns (or panics,
// or gives up because its client went away), each reservation is settled
// at the cost reported, clamped to the policy's MaxCost (a defect of the
// handler, logged at Warn), and a reservation with nothing reported stands
// as the cost. The RateLimit response fields, written before the handler
// runs, describe the reservation.
//
// Every report that cannot be honoured returns an error and changes
// nothing, so that no request is ever charged twice: a negative cost; a
// policy with no reservation for this request (it does not settle, did not
// apply, skipped or rejected it, failed, or ctx is not a request's behind
// the rate limiter); a second report for a policy (the first stands; with
// policy "", nothing is reported if any of them was); a report after the
// handler returned (the costs were settled then). Safe for concurrent use:
// goroutines of one handler may report, and a late one gets the error.
func ReportCost(ctx context.Context, policy string, cost int64) error {
	if cost < 0 {
		return fmt.Errorf("ratekey: cost %d is negative (a cost is a whole number of tokens, at least 0)", cost)
	}
	rs := stateFrom(ctx)
	if rs == nil {
		return errNoState
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.settle == nil && rs.settled {
		return errSettled
	}
	found := false
	for s := rs.settle; s != nil; s = s.next {
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
		return fmt.Errorf("ratekey: policy %s has no reservation open for this request (it does not settle, did not charge the request, or its handler has returned)", quote.Value(policy))
	}
	for s := rs.settle; s != nil; s = s.next {
		for i := range s.ents {
			if e := &s.ents[i]; policy == "" || e.policy == policy {
				e.reported, e.has = cost, true
			}
		}
	}
	return nil
}

// openSettle opens the reservations of the evaluation in sc (ev's) to
// ReportCost, for a request that goes on to its handler: it lists them in
// sc.settle and makes it the request state's innermost settlement, giving
// r a request state first if it has none. It returns r and its state.
func openSettle(r *http.Request, rs *requestState, sc *scratch, ev *Evaluation) (*http.Request, *requestState) {
	if rs == nil {
		r, rs = ensureState(r)
	}
	s := &sc.settle
	s.ents = s.buf[:0]
	for j, i := range sc.heldIdx {
		if sc.heldDecs[j].Reservation != 0 {
			s.ents = append(s.ents, settleEntry{policy: ev.Policies[i].Policy, j: j})
		}
	}
	rs.mu.Lock()
	s.next, rs.settle = rs.settle, s
	rs.mu.Unlock()
	return r, rs
}

// closeSettle closes sc's settlement to ReportCost (the handler returned)
// and sets sc.actual (or a larger slice it returns) to the cost each held
// request settles at: the cost reported, clamped to its policy's MaxCost,
// or its reservation (for requests without one, their Cost: nothing to
// settle).
func (st *rateLimitState) closeSettle(r *http.Request, rs *requestState, sc *scratch, ev *Evaluation) []int64 {
	rs.mu.Lock()
	for p := &rs.settle; *p != nil; p = &(*p).next {
		if *p == &sc.settle {
			*p = sc.settle.next
			break
		}
	}
	rs.settled = true
	rs.mu.Unlock()
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
		if e.reported > res.maxCost {
			actual[e.j] = res.maxCost
			st.Logger.LogAttrs(r.Context(), slog.LevelWarn, "ratekey settle: reported cost above max_cost, clamped (a defect of the handler)",
				slog.String("policy", res.Policy), slog.String("key", res.Key), slog.String("operation", ev.Operation),
				slog.Int64("reported", e.reported), slog.Int64("max_cost", res.maxCost))
		}
	}
	return actual
}

// settle settles the reservations of the evaluation in sc, once, when
// the handler has returned: the store call (only when some cost differs
// from its reservation), on a context that outlives r's (the client may
// be gone: the cost is owed all the same), never retried (a resend would
// settle twice; see [limiter.Limiter]); then each settling result's
// Settled, the metrics, and the Record's copies (from index base of its
// Policies; -1: none).
func (st *rateLimitState) settle(r *http.Request, rs *requestState, sc *scratch, ev *Evaluation, base int) {
	actual := st.closeSettle(r, rs, sc, ev)
	changed := false
	for j := range actual {
		changed = changed || sc.heldDecs[j].Reservation != 0 && actual[j] != sc.heldReqs[j].Cost
	}
	if changed {
		ctx := sc.detach(r.Context())
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
	for _, e := range sc.settle.ents {
		res := &ev.Policies[sc.heldIdx[e.j]]
		res.Settled, res.settled = actual[e.j], true
		if st.Metrics != nil {
			st.Metrics.Settled(res.Policy, res.Settled, res.Settled > res.Cost)
		}
	}
	if base >= 0 && rs.record != nil {
		rs.mu.Lock()
		for _, e := range sc.settle.ents {
			i := sc.heldIdx[e.j]
			rs.record.Policies[base+i].Settled, rs.record.Policies[base+i].settled = actual[e.j], true
		}
		rs.mu.Unlock()
	}
}
