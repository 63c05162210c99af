package redis

// PrefetchStats is what a Limiter's prefetch has done, in tokens
// (RefundedNs in ns of the buckets' timelines): see prefetcher. Held is
// the live tokens held now, Pending the expired ones whose refund is due.
type PrefetchStats struct {
	Fetches, Charged, Admitted, Held, Pending, Expired, SentBack, RefundedNs, Lost, Dropped int64
}

// Prefetch returns l's prefetch counters and the tokens it holds now.
func Prefetch(l *Limiter) PrefetchStats {
	p := l.pre
	held, pending := l.heldTokens()
	return PrefetchStats{
		Fetches: p.fetches.Load(), Charged: p.charged.Load(), Admitted: p.admitted.Load(),
		Held: held, Pending: pending, Expired: p.expired.Load(), SentBack: p.sentBack.Load(),
		RefundedNs: p.refundedNs.Load(), Lost: p.lost.Load(), Dropped: p.dropped.Load(),
	}
}
