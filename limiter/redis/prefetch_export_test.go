package redis

// PrefetchStats is what a Limiter's prefetch has done, in tokens
// (RefundedNs in ns of the buckets' timelines): see prefetcher.
type PrefetchStats struct {
	Fetches, Charged, Admitted, Held, Expired, SentBack, RefundedNs, Lost int64
}

// Prefetch returns l's prefetch counters and the tokens it holds now.
func Prefetch(l *Limiter) PrefetchStats {
	p := l.pre
	return PrefetchStats{
		Fetches: p.fetches.Load(), Charged: p.charged.Load(), Admitted: p.admitted.Load(),
		Held: l.heldTokens(), Expired: p.expired.Load(), SentBack: p.sentBack.Load(),
		RefundedNs: p.refundedNs.Load(), Lost: p.lost.Load(),
	}
}
