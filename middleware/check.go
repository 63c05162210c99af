package middleware

import (
	"net/http"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/engine"
)

// Check evaluates every policy that applies to r. With charge true, the
// request's cost is spent all-or-nothing (if any enforcing policy rejects,
// none is charged; dry-run policies follow the [limiter.Limiter] rule);
// with charge false nothing is spent (the debug endpoint's would-be
// decision). An in-flight policy's slot is taken and released again before
// Check returns: only the Handler holds slots, while the handler runs; a
// settling policy's reservation stands as the cost (only the Handler
// settles, when the handler returns). Check neither waits nor writes: the
// Handler does. It reads the client address and principal that
// [ClientAddress] and [Authenticate] stored in r's context, and the
// configuration current when it starts (see [RateLimiter.Reload]). Safe
// for concurrent use.
func (rl *RateLimiter) Check(r *http.Request, charge bool) decide.Evaluation {
	st := rl.state.Load()
	sc := newScratch()
	rs := stateFrom(r.Context())
	in := inputOf(r, rs, st.fixedOr(rs, r))
	ev := st.eng.Evaluate(&in, charge, engine.PhaseAll, sc)
	st.eng.ReleaseSlots(r.Context(), sc, &ev, false)
	return ev
}

// check is Check without charging, for phase ph (the debug endpoint's
// would-be decisions): it takes no slot.
func (st *rateLimitState) check(r *http.Request, ph engine.Phase) decide.Evaluation {
	rs := stateFrom(r.Context())
	in := inputOf(r, rs, st.fixedOr(rs, r))
	return st.eng.Evaluate(&in, false, ph, newScratch())
}

// fixedOr returns the operation [WithOperation] fixed in rs (which may be
// nil), or else the one st names for r, without keeping it in rs.
func (st *rateLimitState) fixedOr(rs *requestState, r *http.Request) string {
	if rs != nil {
		rs.mu.Lock()
		op, fixed := rs.op, rs.opFixed
		rs.mu.Unlock()
		if fixed {
			return op
		}
	}
	return st.Operation(r)
}

// inputOf returns what the decision core knows of r: its request state
// rs's client and principal (rs may be nil: none) and operation op.
func inputOf(r *http.Request, rs *requestState, op string) engine.Input[*http.Request] {
	in := engine.Input[*http.Request]{Request: r, Context: r.Context(), Operation: op}
	if rs == nil {
		return in
	}
	if rs.hasPrincipal {
		in.Principal = &rs.principal
	}
	if rs.hasClient {
		in.Client, in.Network = rs.client.client, rs.client.network
	}
	return in
}
