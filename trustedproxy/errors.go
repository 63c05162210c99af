package trustedproxy

import (
	"errors"
	"fmt"
)

// ErrMalformedPeer is returned by [Resolver.Resolve] when remoteAddr is not
// an address in one of the forms documented on [Resolver.Resolve] (for
// example "" or "@" from a Unix socket listener). The returned error wraps
// it, so test with errors.Is. Nothing is read from the headers in that case.
var ErrMalformedPeer = errors.New("trustedproxy: malformed peer address")

// ErrMalformedEntry is the [ChainError.Err] of a forwarding-header entry that
// is not a single IP address (empty element, host name, "unknown", port
// without brackets on IPv6, a comma in a single-address header, ...). The
// walk fails closed on it: the entry is never skipped and the resolver never
// falls back to the peer. errors.Is(err, ErrMalformedEntry) works through
// [*ChainError].
var ErrMalformedEntry = errors.New("trustedproxy: malformed forwarding entry")

// ErrChainTooLong is the [ChainError.Err] when the walk would have to examine
// more than [MaxHops] entries of a list header, all of them trusted so far.
// The resolver fails closed rather than pick a client.
var ErrChainTooLong = errors.New("trustedproxy: forwarding chain too long")

// ChainError reports a forwarding header written by a trusted peer that
// cannot be resolved to a client. Err is [ErrMalformedEntry] or
// [ErrChainTooLong]; Unwrap returns it.
//
// Value is attacker-controlled: it holds at most 64 bytes of the offending
// entry, after trimming spaces and tabs, and is quoted by Error.
type ChainError struct {
	// Header is the canonical name of the header read, e.g. "X-Forwarded-For".
	Header string
	// Position is the 0-based position of the entry in the merged chain
	// (leftmost = 0); for a single-address header, the index of the header
	// line that was read.
	Position int
	// Value is the offending entry, truncated to 64 bytes.
	Value string
	// Err is ErrMalformedEntry or ErrChainTooLong.
	Err error
}

// Error returns e.g.
// `trustedproxy: malformed forwarding entry: X-Forwarded-For position 1 "garbage"`.
func (e *ChainError) Error() string {
	return fmt.Sprintf("%v: %s position %d %q", e.Err, e.Header, e.Position, e.Value)
}

// Unwrap returns e.Err.
func (e *ChainError) Unwrap() error { return e.Err }
