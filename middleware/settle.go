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
// bytes it sent), before it returns, with its request's context (or one
// derived from it): that context names the reservations of the evaluation
// that let the handler run, and of the phases around it (PreAuthHandler's,
// around Handler's), never those of another evaluation of the same request
// running beside it. When the handler returns (or panics,
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
	scope, _ := ctx.Value(settleKey).(*settleScope)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if scope != nil && scope.open == nil {
		return errSettled
	}
	var buf [4]*engine.Settlement
	open := buf[:0]
	for ; scope != nil; scope = scope.outer {
		if scope.open != nil {
			open = append(open, scope.open)
		}
	}
	return engine.Report(open, policy, cost)
}

// settleKey is the context key of a handler's *settleScope.
const settleKey ctxKey = 1

// settleScope is what ReportCost may report on from one handler's context:
// the reservations of the evaluation that let the handler run (open; nil
// once the handler has returned and they are settled) and the scope of
// the phase around it (outer: PreAuthHandler's, around Handler's). Each
// evaluation that reserves gives its handler a scope of its own, so that
// evaluations of one request run at once by a handler (each with its own
// handler) never settle each other's reservations, and a report made
// after a handler returned is refused even while an outer phase's handler
// still runs. It is the handler's context layer (one allocation, for
// settling requests only); every access to open is under the request
// state's mutex.
type settleScope struct {
	context.Context
	open  *engine.Settlement
	outer *settleScope
}

// Value returns the scope itself for settleKey, and asks the parent
// context for any other key.
func (c *settleScope) Value(key any) any {
	if key == settleKey {
		return c
	}
	return c.Context.Value(key)
}

// openSettle opens the reservations of the evaluation in sc (ev's) to
// ReportCost, for a request that goes on to its handler: it gives r a
// request state if it has none, and a context whose scope holds them
// (sc.scope). It returns the handler's request and its state.
func openSettle(r *http.Request, rs *requestState, sc *scratch, ev *decide.Evaluation) (*http.Request, *requestState) {
	if rs == nil {
		r, rs = ensureState(r)
	}
	outer, _ := r.Context().Value(settleKey).(*settleScope)
	sc.scope = &settleScope{Context: r.Context(), open: sc.OpenSettlement(ev), outer: outer}
	return r.WithContext(sc.scope), rs
}

// settle closes sc's scope to ReportCost (the handler returned) and
// settles its reservations (see engine.State.Settle), then the Record's
// copies of the results (from index base of its Policies; -1: none).
func (st *rateLimitState) settle(r *http.Request, rs *requestState, sc *scratch, ev *decide.Evaluation, base int) {
	rs.mu.Lock()
	sc.scope.open = nil
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
