package engine

import (
	"github.com/ratekey/ratekey/limiter"
)

// A store shared by several processes without a shared store (the memory
// store's Options.Replicas) enforces each limit's share,
// [limiter.Limit.Share]. The RateLimiter states that share wherever it
// states a limit (RateLimit-Policy and RateLimit, the problem body, the
// log, [decide.PolicyResult].Limit and the debug record, whose Replicas says how
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

// share returns this process's share of l (l itself for one process).
// Only limits that passed shareProblems are shared, so it cannot fail.
func (st *State[R]) share(l limiter.Limit) limiter.Limit {
	s, err := l.Share(st.replicas)
	if err != nil {
		return l
	}
	return s
}
