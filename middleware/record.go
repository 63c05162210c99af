package middleware

import (
	"context"
	"net/http"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/trustedproxy"
)

// Record is the decision record of one request: how its client address was
// derived, which principal it carries (never a credential), its operation
// and, per policy, its key, cost, decision, remaining tokens, retry-after,
// limit, store and fail-mode path. The debug endpoint answers with the same
// value, as JSON: its field names are a public contract, the rate
// limiter's log lines use the same names, and it never holds a token,
// signature, API key or other secret.
//
// A Record exists for a request only when [Recorder] (or [WithRecord]) put
// one in its context; [ClientAddress], [Authenticate] and [RateLimiter]
// then fill their parts as the request passes them. A Record is written by
// the request's own goroutine as it passes the middlewares; read it after
// the handler returns (an access logger) or from the handler itself.
type Record struct {
	// Peer is the TCP peer as the server saw it (http.Request.RemoteAddr).
	Peer string `json:"peer"`
	// Client is the derived client address, null when the derivation failed
	// or did not run.
	Client *string `json:"client"`
	// Network is the client's network key (address masked to the prefix), null on failure.
	Network *string `json:"network"`
	// Derivation explains how the client was chosen: header read, hops
	// walked with their verdicts, the reason, and the error if any.
	Derivation trustedproxy.Derivation `json:"derivation"`
	// Principal is the verified principal, null when none was established
	// (anonymous requests included: Authentication says "anonymous").
	Principal *limitkey.Principal `json:"principal"`
	// Authentication is the credential check's outcome.
	Authentication DebugAuthentication `json:"authentication"`
	// Operation is the request's operation (method and route template).
	Operation string `json:"operation"`
	// Limited is false when the rate limiter does not run for this route;
	// Policies is then empty.
	Limited bool `json:"limited"`
	// Decision sums up the request's decision (see [decide.Evaluation].Decision);
	// "" when no policy applies.
	Decision decide.Decision `json:"decision"`
	// DelaySeconds is how long the request waited (or would wait) before
	// proceeding, for DELAYED; null otherwise.
	DelaySeconds *float64 `json:"delay_seconds"`
	// Outcome is "client_timeout" when the request ended before the
	// limiter answered or during its delay (see [decide.Evaluation].Abandoned);
	// empty otherwise.
	Outcome string `json:"outcome,omitempty"`
	// Policies holds each applicable policy's key and decision, in
	// evaluation order (the pre-auth policies first in a live Record); see
	// [decide.PolicyResult.MarshalJSON] for their JSON.
	Policies []decide.PolicyResult `json:"policies"`
	// RoundTrips is how many round trips to a shared store the request's
	// limiter calls took, both phases together: 0 for the memory store and
	// for rejections a local deny cache answered, 1 per call within one
	// Redis slot, 2 or 3 per call across Cluster slots.
	RoundTrips int `json:"round_trips"`
	// Replicas is how many processes share the limiter store's budgets
	// without a shared store, each enforcing its share of every limit
	// (the memory store's Replicas; the limits the policies state are this
	// process's shares): 1 for the whole limit, 0 when the rate limiter
	// did not run.
	Replicas int `json:"replicas"`
}

// Recorder is middleware that puts an empty [Record] in the request context
// for the ratekey middlewares after it to fill; handlers read it with
// [RecordFrom]. Mount it first. A logger that wraps the whole chain creates
// the Record itself with [WithRecord] instead, so it can read it after the
// handler returns. Safe for concurrent use.
func Recorder(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, _ := WithRecord(r.Context())
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// WithRecord returns a context holding a new, empty Record (its Policies a
// non-nil empty slice, its authentication outcome "not_reached"), and the
// Record. The ratekey middlewares after it fill it. An operation fixed in
// ctx by [WithOperation] is kept.
func WithRecord(ctx context.Context) (context.Context, *Record) {
	// Until Authenticate records its outcome, none was reached: the
	// request may be refused before it, or its route may have none.
	rec := &Record{Policies: []decide.PolicyResult{}, Authentication: DebugAuthentication{Outcome: outcomeNotReached}}
	parent := stateFrom(ctx)
	ctx, st := withState(ctx)
	st.record = rec
	if parent != nil && parent.opFixed {
		st.op, st.opFixed = parent.op, true // WithOperation's, kept
	}
	return ctx, rec
}

// RecordFrom returns the request's Record, or nil when no [Recorder] or
// [WithRecord] put one in ctx.
func RecordFrom(ctx context.Context) *Record {
	if st := stateFrom(ctx); st != nil {
		return st.record
	}
	return nil
}

// recordDerivation fills the client-address part of rec.
func (rec *Record) recordDerivation(peer string, res *trustedproxy.Result, err error) {
	rec.Peer = peer
	rec.Derivation = res.Derivation
	if err == nil {
		c, n := res.Client.String(), res.Network.String()
		rec.Client, rec.Network = &c, &n
	}
}

// recordAuth fills the authentication part of rec.
func (rec *Record) recordAuth(out *authOutcome) {
	rec.Authentication = describeAuth(out)
	if out.ok && out.principal.Method != limitkey.MethodAnonymous {
		p := out.principal
		rec.Principal = &p
	}
}

// recordEvaluation fills the rate-limit part of rec. A second evaluation of
// the same request (pre-auth policies, then the others) adds its policies,
// keeps the weightier decision (see rank: the first evaluation let the
// request through, or there would be no second) and adds its delay: the
// phases wait one after the other.
func (rec *Record) recordEvaluation(ev *decide.Evaluation) {
	rec.Operation = ev.Operation
	if !rec.Limited || ev.Decision.Rank(!ev.Allowed) > rec.Decision.Rank(false) {
		rec.Decision = ev.Decision
	}
	rec.Limited = true
	if ev.Delay > 0 {
		s := ev.Delay.Seconds()
		if rec.DelaySeconds != nil {
			s += *rec.DelaySeconds
		}
		rec.DelaySeconds = &s
	}
	if ev.Abandoned {
		rec.Outcome = "client_timeout" // the decision log's "outcome" alike
	}
	rec.RoundTrips += ev.RoundTrips
	rec.Replicas = ev.Replicas
	rec.Policies = append(rec.Policies, ev.Policies...)
}
