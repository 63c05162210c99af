package trustedproxy

import (
	"errors"
	"fmt"
)

// ErrMalformedPeer is returned by [Resolver.Resolve] when remoteAddr is not
// an address in one of the forms documented on [Resolver.Resolve]. The
// returned error wraps it, so test with errors.Is. Nothing is read from the
// headers in that case. A Unix-socket peer ("", "@..." or "/...") that no
// rule accepts gets an error wrapping both ErrMalformedPeer and
// [ErrUnixPeer]; a peer that is an address no connection can come from
// (unspecified, multicast, limited broadcast) gets [ErrNonSourcePeer],
// which wraps ErrMalformedPeer.
var ErrMalformedPeer = errors.New("trustedproxy: malformed peer address")

// ErrNonSourcePeer is returned when remoteAddr parses as an address that
// can never be the source of a TCP connection: unspecified (0.0.0.0, ::,
// also written ::ffff:0.0.0.0), multicast (224.0.0.0/4, ff00::/8) or the
// limited broadcast 255.255.255.255. Such a peer says nothing about who
// sent the request (a listener or a layer in front of the handler reported
// a placeholder), so it is refused whatever the trusted sets contain, and
// no header is read. It wraps [ErrMalformedPeer], so code that only knows
// v0 errors treats it as a malformed peer; Derivation.Reason is
// [ReasonMalformedPeer].
var ErrNonSourcePeer = fmt.Errorf("%w: not a source address", ErrMalformedPeer)

// ErrUnixPeer is returned, together with [ErrMalformedPeer] (one error wraps
// both), when the peer is a Unix-domain socket and either no rule lists
// "unix" in its From (Unix-socket peers are trusted only by explicit opt-in),
// or a rule accepted it but the resolution would have chosen the peer itself
// as the client (no forwarding header, every hop trusted): a socket has no
// address to key a client by. Derivation.Reason tells the cases apart.
var ErrUnixPeer = errors.New("trustedproxy: Unix-socket peer")

// ErrMalformedEntry is the [ChainError.Err] of a forwarding-header entry that
// is not a single IP address (empty element, host name, port without
// brackets on IPv6, a comma in a single-address header, an RFC 7239
// forwarded-element that breaks the grammar, repeats a parameter or has no
// for parameter, ...). The walk fails closed on it: the entry is never
// skipped and the resolver never falls back to the peer.
// errors.Is(err, ErrMalformedEntry) works through [*ChainError], and also
// matches [ErrUnknownNode] and [ErrNonSourceEntry].
var ErrMalformedEntry = errors.New("trustedproxy: malformed forwarding entry")

// ErrUnknownNode is the [ChainError.Err] of an entry that names no address on
// purpose: RFC 7239 §6 "unknown" or an obfuscated node "_xyz" (in Forwarded
// for= values and, with the same spelling, in X-Forwarded-For). The walk
// cannot tell whether such a hop is trusted, so it stops with this error. It
// wraps [ErrMalformedEntry], so code that only knows v0 errors treats it as a
// malformed entry.
var ErrUnknownNode = fmt.Errorf("%w: unknown or obfuscated node", ErrMalformedEntry)

// ErrNonSourceEntry is the [ChainError.Err] of an entry that is an address
// no connection can come from: unspecified (0.0.0.0, ::, also written
// ::ffff:0.0.0.0), multicast (224.0.0.0/4, ff00::/8) or the limited
// broadcast 255.255.255.255 (RFC 1122 §3.2.1.3, RFC 4291 §2.5.2 and §2.7).
// No proxy can have received the request from such an address, so the
// entry is as malformed as a host name: the walk fails closed on it,
// whether or not a trusted set contains it, and a single-address header
// holding one fails the same way. [ChainError.Detail] says which kind
// ("unspecified address", "multicast address", "limited broadcast
// address"). It wraps [ErrMalformedEntry]; Derivation.Reason is
// [ReasonMalformedEntry] and the hop's verdict [VerdictMalformed].
var ErrNonSourceEntry = fmt.Errorf("%w: not a source address", ErrMalformedEntry)

// ErrChainTooLong is the [ChainError.Err] when the walk would have to examine
// more than [MaxHops] entries of a list header, all of them trusted so far.
// The resolver fails closed rather than pick a client.
var ErrChainTooLong = errors.New("trustedproxy: forwarding chain too long")

// ErrMissingHeader is returned when a trusted peer sent no value in its
// rule's forwarding header and [Config.MissingHeader] is
// [MissingHeaderReject]. With the default ([MissingHeaderPeer]) the peer is
// the client and Derivation.Reason is [ReasonHeaderAbsent] instead.
var ErrMissingHeader = errors.New("trustedproxy: trusted peer sent no forwarding header")

// ErrHeaderAlias is returned when [Config.Aliases] is [AliasesReject] and a
// trusted peer's request carries a header whose name differs from the
// rule's forwarding header only by case or by '_' in place of '-'
// ("X_Forwarded_For", "X-Forwarded_For", a non-canonical key in a
// hand-built http.Header). Such aliases are never read; this error lets an
// operator refuse requests that some other component (CGI-style stacks fold
// '_' and '-' together) might read differently.
var ErrHeaderAlias = errors.New("trustedproxy: forwarding header alias")

// ChainError reports a forwarding header written by a trusted peer that
// cannot be resolved to a client. Err is [ErrMalformedEntry],
// [ErrUnknownNode], [ErrNonSourceEntry] or [ErrChainTooLong]; Unwrap
// returns it.
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
	// Value is the offending entry, truncated to 64 bytes: the raw for=
	// value of an RFC 7239 element, or the whole element when the element
	// itself is malformed.
	Value string
	// Detail says what is wrong when the entry's text alone does not (RFC
	// 7239 syntax errors, repeated parameters, a missing for parameter,
	// the kind of address [ErrNonSourceEntry] refused); "" otherwise.
	// Fixed text, never request bytes.
	Detail string
	// Err is ErrMalformedEntry, ErrUnknownNode, ErrNonSourceEntry or
	// ErrChainTooLong.
	Err error
}

// Error returns e.g.
// `trustedproxy: malformed forwarding entry: X-Forwarded-For position 1 "garbage"`,
// followed by ": " and Detail when Detail is set.
func (e *ChainError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%v: %s position %d %q: %s", e.Err, e.Header, e.Position, e.Value, e.Detail)
	}
	return fmt.Sprintf("%v: %s position %d %q", e.Err, e.Header, e.Position, e.Value)
}

// Unwrap returns e.Err.
func (e *ChainError) Unwrap() error { return e.Err }
