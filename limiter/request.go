package limiter

// Request asks a [Limiter] to spend Cost tokens from the bucket named Key,
// shaped by Limit.
//
// The store keeps one state per bucket and takes the limit from each
// request, so a configuration change applies from the next request on. A
// bucket is named by Key together with the shape of Limit: its emission
// interval (Rate.Interval) and Burst. Two requests with the same Key and
// shape share one bucket; a request whose shape differs finds a bucket of
// its own, so a policy whose rate or burst is changed (on a config reload)
// starts from full buckets, while a change of DelayAfter or MaxDelay keeps
// the state. The old state is evicted or expires as any idle one does.
//
// An in-flight request (Limit.MaxInFlight > 0) asks for Cost slots of the
// key's in-flight counter instead. The counter is named by Key alone, apart
// from every bucket of that Key: a changed MaxInFlight applies at once to
// the key's requests already running, and their releases still find it.
type Request struct {
	// Key names the bucket: an encoded limitkey.Key, opaque to the limiter,
	// compared byte for byte. It is not empty. It may be logged and stored
	// (in Redis, say), so it never holds a secret.
	Key string
	// Limit is the bucket's rate and capacity; it must pass
	// [Limit.Validate].
	Limit Limit
	// Cost is the number of tokens this request spends (for an in-flight
	// cap, the slots it holds); >= 1.
	Cost int64
	// DryRun asks for accounting without enforcement (nginx
	// limit_req_dry_run): the request is decided exactly as an enforcing
	// one, and charged exactly when enforcing mode would charge it (every
	// request of the call, dry run or not, is Allowed), but its rejection
	// does not stop the enforcing requests of the call from being charged;
	// see the [Limiter] contract. The caller never rejects or delays on its
	// Decision.
	DryRun bool
	// Settle makes Cost a reservation: an estimate, charged by Take under
	// the usual rule, that [Limiter.Settle] replaces with the actual cost
	// once the work is done (a refund below it, a debt above it). A Take
	// that charges the request sets its Decision's Reservation. A dry-run
	// request may settle too (its bucket evolves as in enforcing mode).
	// Token buckets only: Take refuses a settling in-flight request with
	// [ErrInvalidRequest].
	Settle bool
}
