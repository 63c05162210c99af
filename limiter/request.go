package limiter

// Request asks a [Limiter] to spend Cost tokens from the bucket named Key,
// shaped by Limit.
//
// The store keeps one state per Key and takes the shape from each request,
// so a configuration change applies from the next request on. Two requests
// with the same Key share one bucket whatever their Limits.
type Request struct {
	// Key names the bucket: an encoded identity.Key, opaque to the limiter,
	// compared byte for byte. It is not empty. It may be logged and stored
	// (in Redis, say), so it never holds a secret.
	Key string
	// Limit is the bucket's rate and capacity; it must pass
	// [Limit.Validate].
	Limit Limit
	// Cost is the number of tokens this request spends; >= 1.
	Cost int64
}

// validate checks r and returns a reason, or nil.
func (r Request) validate() error {
	switch {
	case r.Key == "":
		return errEmptyKey
	case r.Cost < 1:
		return errCost
	}
	return r.Limit.Validate()
}
