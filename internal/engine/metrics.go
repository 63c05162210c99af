package engine

import "time"

// Metrics is what the engine reports to a metrics system: the part of
// middleware.Metrics (which documents each method) about decisions,
// stores, slots, settlement, adaptive caps and queues. Implementations
// are safe for concurrent use and never block.
type Metrics interface {
	Decision(policy, decision string)
	StoreCall(store, operation string, d time.Duration, err error)
	FailOpen(policy string)
	Fallback(policy string)
	CachedRejection(policy string)
	InFlight(policy string, delta int)
	Settled(policy string, cost int64, debt bool)
	Adaptive(policy, operation string, limit int64, baseline, latency time.Duration)
	Queued(policy string)
	Dequeued(policy string, waited time.Duration, abandoned bool)
}
