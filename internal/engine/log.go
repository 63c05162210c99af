package engine

import (
	"log/slog"
	"math/rand/v2"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// Log writes a line per non-PASSED decision of the request: REJECTED,
// DELAYED, the dry-run decisions and ERROR at Info or Warn (bounded per
// interval unless LogEveryDecision: see logLine), SKIPPED at Debug. Field
// names match the debug JSON.
func (st *State[R]) Log(in *Input[R], ev *decide.Evaluation) {
	sampled := st.SamplePassed > 0 && rand.Float64() < st.SamplePassed
	for i := range ev.Policies {
		res := &ev.Policies[i]
		level, logged := logLevel(res, ev, sampled)
		if !logged || !st.Logger.Enabled(in.Context, level) || !st.logLine(res, level) {
			continue
		}
		attrs := []slog.Attr{
			slog.String("policy", res.Policy),
			slog.String("decision", string(res.Decision)),
			slog.String("key", res.Key),
			slog.String("operation", ev.Operation),
			slog.Int64("cost", res.Cost),
			slog.Int64("remaining", max(res.Remaining, 0)),
			slog.String("store", res.Store),
		}
		if in.Network.IsValid() {
			attrs = append(attrs, slog.String("client", in.Client.String()), slog.String("network", in.Network.String()))
		}
		attrs = res.AppendLogAttrs(attrs, ev.Abandoned)
		st.Logger.LogAttrs(in.Context, level, "ratekey decision", attrs...)
	}
}

// logLevel returns the level of res's decision line, and whether it is
// written at all (a PASSED line only when sampled).
func logLevel(res *decide.PolicyResult, ev *decide.Evaluation, sampled bool) (slog.Level, bool) {
	switch {
	case res.Decision == decide.DecisionPassed:
		return slog.LevelInfo, sampled
	case res.Decision == decide.DecisionSkipped:
		return slog.LevelDebug, true
	case res.Decision == decide.DecisionError && !ev.Abandoned:
		return slog.LevelWarn, true
	case res.Missing == limitkey.DimNetwork:
		return slog.LevelError, true // ClientAddress is not mounted in front: a wiring bug
	}
	return slog.LevelInfo, true
}

// Observe counts ev's decisions, and its fail-open store errors, in the
// metrics.
func (st *State[R]) Observe(ev *decide.Evaluation) {
	if st.Metrics == nil {
		return
	}
	for i := range ev.Policies {
		res := &ev.Policies[i]
		st.Metrics.Decision(res.Policy, string(res.Decision))
		if res.Cached {
			st.Metrics.CachedRejection(res.Policy)
		}
		if res.FailMode() == string(policy.OnStoreErrorAllow) && !ev.Abandoned {
			st.Metrics.FailOpen(res.Policy)
		}
	}
}
