package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/engine"
)

// Reserve, then settle (Policy.Settle): a settling policy's request
// reserves its cost at admission; its handler reports the actual cost with
// ReportCost; when the handler returns, the Handler settles each
// reservation at the cost reported (clamped to MaxCost), or keeps it when
// nothing was reported (the decision core's rule: engine.State.Settle).
// This file links the open settlements to the request's state.

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
	return engine.Report(rs.settle, policy, cost)
}

// openSettle opens the reservations of the evaluation in sc (ev's) to
// ReportCost, for a request that goes on to its handler: it makes them
// the request state's innermost settlement, giving r a request state
// first if it has none. It returns r and its state.
func openSettle(r *http.Request, rs *requestState, sc *scratch, ev *decide.Evaluation) (*http.Request, *requestState) {
	if rs == nil {
		r, rs = ensureState(r)
	}
	s := sc.OpenSettlement(ev)
	rs.mu.Lock()
	s.Next, rs.settle = rs.settle, s
	rs.mu.Unlock()
	sc.settle = s
	return r, rs
}

// settle closes sc's settlement to ReportCost (the handler returned) and
// settles it (see engine.State.Settle), then the Record's copies of the
// results (from index base of its Policies; -1: none).
func (st *rateLimitState) settle(r *http.Request, rs *requestState, sc *scratch, ev *decide.Evaluation, base int) {
	rs.mu.Lock()
	for p := &rs.settle; *p != nil; p = &(*p).Next {
		if *p == sc.settle {
			*p = sc.settle.Next
			break
		}
	}
	rs.settled = true
	rs.mu.Unlock()
	st.eng.Settle(r.Context(), &sc.Scratch, ev)
	if base < 0 || rs.record == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i := range ev.Policies {
		if res := &ev.Policies[i]; res.Returned {
			rs.record.Policies[base+i].Settled, rs.record.Policies[base+i].Returned = res.Settled, true
		}
	}
}
