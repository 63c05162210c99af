// Package prefetchbooks holds the books of limiter/redis's prefetch, for
// the tests that check them (the package's own, the demo's fleet test,
// through internal/redistest): they are no public API.
package prefetchbooks

// Books is what a limiter/redis Limiter's prefetch (Options.Prefetch) has
// done since New, over all its buckets, in tokens (RefundedNs in ns of the
// buckets' timelines), for checking the books:
// when no call is in flight, Charged = Admitted + Held + Pending +
// SentBack + Dropped, exactly.
type Books struct {
	// Fetches is the script calls that fetched a batch.
	Fetches int64
	// Charged is the tokens those fetches charged the shared buckets.
	Charged int64
	// Admitted is the tokens admitted from batches (by the fetch or from a
	// hold); requests decided by Redis per call are not counted.
	Admitted int64
	// Held is the live tokens held now.
	Held int64
	// Pending is the expired tokens whose refund is due with the next
	// fetch.
	Pending int64
	// Expired is the tokens of batches that expired or were pushed out
	// unused.
	Expired int64
	// SentBack is the tokens whose refund was sent (with a fetch or by
	// Flush).
	SentBack int64
	// RefundedNs is what Redis gave back for them, in ns: a refund is
	// capped (never past a full bucket), so it may give back less than was
	// sent.
	RefundedNs int64
	// Lost is the tokens of refunds sent in a call that failed (outcome
	// unknown); they are counted in SentBack too.
	Lost int64
	// Dropped is the tokens never sent back (a full list of pending
	// refunds, a replaced hold, a tentative take whose batch was flushed
	// meanwhile): an under-admission.
	Dropped int64
}

// Add returns the field-by-field sum of a and b: the books of several
// Limiters (several processes) taken together.
func Add(a, b Books) Books {
	return Books{
		Fetches: a.Fetches + b.Fetches, Charged: a.Charged + b.Charged, Admitted: a.Admitted + b.Admitted,
		Held: a.Held + b.Held, Pending: a.Pending + b.Pending, Expired: a.Expired + b.Expired,
		SentBack: a.SentBack + b.SentBack, RefundedNs: a.RefundedNs + b.RefundedNs,
		Lost: a.Lost + b.Lost, Dropped: a.Dropped + b.Dropped,
	}
}

// Of returns the books of l, a *redis.Limiter; limiter/redis sets it when
// it is linked in.
var Of func(l any) Books
