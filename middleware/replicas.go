package middleware

import (
	"fmt"

	"github.com/ratekey/ratekey/limiter"
)

// A store shared by several processes without a shared store (the memory
// store's Options.Replicas) enforces each limit's share,
// [limiter.Limit.Share]. The RateLimiter states that share wherever it
// states a limit (RateLimit-Policy and RateLimit, the problem body, the
// log, [PolicyResult].Limit and the debug record, whose Replicas says how
// many), and hands the store the configured limit, which names the
// bucket: a reload that changes the count keeps every bucket's debt.

// replicator is implemented by a store that enforces a share of every
// limit: *memory.Limiter.
type replicator interface{ Replicas() int }

// replicasOf returns how many processes share the budgets of store l: its
// Replicas, or 1.
func replicasOf(l limiter.Limiter) int64 {
	if r, ok := l.(replicator); ok {
		return int64(max(r.Replicas(), 1))
	}
	return 1
}

// shareProblems checks that limit l, with fixed cost (0 for a cost
// function), keeps at least one token or slot per process when n share
// it, and that the cost fits the share (else no request could ever pass).
func shareProblems(l limiter.Limit, cost, n int64) []fieldProblem {
	if n <= 1 {
		return nil
	}
	field, whole := "burst", l.Burst
	if l.MaxInFlight != 0 {
		field, whole = "max_in_flight", l.MaxInFlight
	}
	s, err := l.Share(n)
	switch {
	case err != nil && whole < n:
		return []fieldProblem{{field, fmt.Sprintf("%d shared by %d replicas is %d per process, below one: raise it to at least %d or run fewer replicas", whole, n, whole/n, n)}}
	case err != nil:
		return []fieldProblem{{"rate", fmt.Sprintf("%v shared by %d replicas does not fit a period", l.Rate, n)}}
	}
	per := s.Burst
	if l.MaxInFlight != 0 {
		per = s.MaxInFlight
	}
	if cost > per {
		return []fieldProblem{{"cost", fmt.Sprintf("%d exceeds the %s of %d per process (%d shared by %d replicas), so no request could ever pass", cost, field, per, whole, n)}}
	}
	return nil
}

// sharesErrors checks every limit of policy i (its own, and each
// override's) against n replicas (the store's, or the Fallback's): each keeps a share (shareProblems),
// and the share's waits stay within MaxWait (a share refills N times
// slower, so its delays are N times longer: waitProblems on the share).
// nil when they all pass.
func (st *rateLimitState) sharesErrors(i int, p *Policy, n int64) []error {
	var errs []error
	check := func(where string, l limiter.Limit, cost int64) {
		probs := shareProblems(l, cost, n)
		if len(probs) == 0 && n > 1 && l.MaxInFlight == 0 {
			s, _ := l.Share(n)
			for _, pr := range waitProblems(s, max(cost, 1), p.DryRun, st.MaxWait, p.CostFunc != nil) {
				pr.text = fmt.Sprintf("its share over %d replicas (%v, burst %d): %s", n, s.Rate, s.Burst, pr.text)
				probs = append(probs, pr)
			}
		}
		for _, pr := range probs {
			errs = append(errs, fmt.Errorf("%s.%s: %s", where, pr.field, pr.text))
		}
	}
	check(p.ref(i), p.Limit, p.Cost)
	for j := range p.Overrides {
		l, cost := p.complete(&p.Overrides[j])
		check(fmt.Sprintf("%s.overrides[%d]", p.ref(i), j), l, cost)
	}
	return errs
}

// share returns this process's share of l (l itself for one process).
// Only limits that passed shareProblems are shared, so it cannot fail.
func (st *rateLimitState) share(l limiter.Limit) limiter.Limit {
	s, err := l.Share(st.replicas)
	if err != nil {
		return l
	}
	return s
}
