package decide

// Decision is the outcome of one policy for one request (and, in
// [Evaluation.Decision], of the whole request), in nginx limit_req's
// vocabulary ($limit_req_status) plus ratekey's own SKIPPED and ERROR. The
// strings are a public contract: they appear in the debug JSON, the logs
// and the optional RateLimit-Decision response field.
type Decision string

const (
	// DecisionPassed: the bucket had room; the request spends its cost and
	// proceeds at once.
	DecisionPassed Decision = "PASSED"
	// DecisionDelayed: the bucket had room, but the request dips below the
	// policy's delay_after part of the burst: it spends its cost at once and
	// waits until it conforms to the rate (nginx limit_req without nodelay).
	DecisionDelayed Decision = "DELAYED"
	// DecisionRejected: no room now (or never, or a required dimension is
	// missing); nothing is charged.
	DecisionRejected Decision = "REJECTED"
	// DecisionDelayedDryRun: a dry-run policy would have delayed the
	// request; it proceeds at once, and the policy's bucket is charged as
	// in enforcing mode.
	DecisionDelayedDryRun Decision = "DELAYED_DRY_RUN"
	// DecisionRejectedDryRun: a dry-run policy would have rejected the
	// request; it proceeds, and the policy's bucket is not charged (as in
	// enforcing mode, where a rejection charges nothing).
	DecisionRejectedDryRun Decision = "REJECTED_DRY_RUN"
	// DecisionSkipped: the request lacks a key dimension and the policy's
	// on_missing is skip; SkippedReason says which.
	DecisionSkipped Decision = "SKIPPED"
	// DecisionError: the limiter could not decide; the policy's
	// on_store_error chose the outcome.
	DecisionError Decision = "ERROR"
)

// Rank orders decisions as a request's [Evaluation.Decision] sums its
// policies' up: the request's Decision is its policies' of highest rank
// and, across the two phases of the live HTTP chain, its evaluations'.
// refuses tells an ERROR failing closed, which refuses the request (see
// [PolicyResult.FailMode]: "deny"), from one failing open or in dry run,
// which lets it through (an evaluation's own ERROR refuses when it is not
// Allowed). From highest: REJECTED, ERROR refusing, DELAYED, ERROR letting
// through, REJECTED_DRY_RUN, DELAYED_DRY_RUN, PASSED, SKIPPED, and 0 for ""
// or an unknown string. Safe for concurrent use.
func (d Decision) Rank(refuses bool) int {
	switch d {
	case DecisionRejected:
		return 8
	case DecisionError:
		if refuses {
			return 7
		}
		return 5
	case DecisionDelayed:
		return 6
	case DecisionRejectedDryRun:
		return 4
	case DecisionDelayedDryRun:
		return 3
	case DecisionPassed:
		return 2
	case DecisionSkipped:
		return 1
	}
	return 0
}
