package trustedproxy

import (
	"errors"
	"fmt"
)

// ErrMalformedPeer is returned by [Resolver.Resolve] and [Resolver.Explain]
// when remoteAddr cannot key a client: it is not an address in one of the
// forms documented on [Resolver.Resolve]; or it is an address no connection
// can come from (unspecified, multicast, limited broadcast; the text says
// "not a source address"); or it is a Unix-socket peer ("", "@..." or
// "/...") that no rule accepts, or that a rule accepts but that would be
// the client itself (the text says "Unix-socket peer"). The returned error
// wraps it, so test with errors.Is; Derivation.Reason tells the cases
// apart (malformed_peer, unix_peer_untrusted). Nothing is read from the
// headers of an unusable peer.
var ErrMalformedPeer = errors.New("trustedproxy: malformed peer address")

// errNonSourcePeer is returned when remoteAddr parses as an address that
// can never be the source of a TCP connection: unspecified (0.0.0.0, ::,
// also written ::ffff:0.0.0.0), multicast (224.0.0.0/4, ff00::/8) or the
// limited broadcast 255.255.255.255. Such a peer says nothing about who
// sent the request (a listener or a layer in front of the handler reported
// a placeholder), so it is refused whatever the trusted sets contain, and
// no header is read. It wraps [ErrMalformedPeer]; Derivation.Reason is
// malformed_peer.
var errNonSourcePeer = fmt.Errorf("%w: not a source address", ErrMalformedPeer)

// errUnixPeer is returned, together with [ErrMalformedPeer] (one error wraps
// both), when the peer is a Unix-domain socket and either no rule lists
// "unix" in its From (Unix-socket peers are trusted only by explicit opt-in),
// or a rule accepted it but the resolution would have chosen the peer itself
// as the client (no forwarding header, every hop trusted): a socket has no
// address to key a client by. Derivation.Reason tells the cases apart.
var errUnixPeer = errors.New("trustedproxy: Unix-socket peer")

// ErrMalformedEntry is the [ChainError.Err] of a forwarding-header entry that
// is not a single IP address (empty element, host name, port without
// brackets on IPv6, a comma in a single-address header, an RFC 7239
// forwarded-element that breaks the grammar, repeats a parameter or has no
// for parameter, ...). The walk fails closed on it: the entry is never
// skipped and the resolver never falls back to the peer.
// errors.Is(err, ErrMalformedEntry) works through [*ChainError], and also
// matches the error of an "unknown" or obfuscated node (Derivation.Reason
// unknown_node) and of an entry that is an address no connection can come
// from (unspecified, multicast, limited broadcast: [ChainError.Detail]
// names the kind; Derivation.Reason malformed_entry).
var ErrMalformedEntry = errors.New("trustedproxy: malformed forwarding entry")

// errUnknownNode is the [ChainError.Err] of an entry that names no address on
// purpose: RFC 7239 §6 "unknown" or an obfuscated node "_xyz" (in Forwarded
// for= values and, with the same spelling, in X-Forwarded-For). The walk
// cannot tell whether such a hop is trusted, so it stops with this error. It
// wraps [ErrMalformedEntry], so code that tests for malformed entries
// treats it as one; Derivation.Reason (unknown_node) and the hop's verdict
// (unknown) tell it apart.
var errUnknownNode = fmt.Errorf("%w: unknown or obfuscated node", ErrMalformedEntry)

// errNonSourceEntry is the [ChainError.Err] of an entry that is an address
// no connection can come from: unspecified (0.0.0.0, ::, also written
// ::ffff:0.0.0.0), multicast (224.0.0.0/4, ff00::/8) or the limited
// broadcast 255.255.255.255 (RFC 1122 §3.2.1.3, RFC 4291 §2.5.2 and §2.7).
// No proxy can have received the request from such an address, so the
// entry is as malformed as a host name: the walk fails closed on it,
// whether or not a trusted set contains it, and a single-address header
// holding one fails the same way. [ChainError.Detail] says which kind
// ("unspecified address", "multicast address", "limited broadcast
// address"). It wraps [ErrMalformedEntry]; Derivation.Reason is
// malformed_entry and the hop's verdict malformed.
var errNonSourceEntry = fmt.Errorf("%w: not a source address", ErrMalformedEntry)

// ErrChainTooLong is the [ChainError.Err] when the walk would have to examine
// more than [MaxHops] entries of a list header, all of them trusted so far.
// The resolver fails closed rather than pick a client.
var ErrChainTooLong = errors.New("trustedproxy: forwarding chain too long")

// ErrMissingHeader is returned when a trusted peer sent no value in its
// rule's forwarding header and [Config.RejectMissingHeader] is set. By
// default the peer is the client instead; Derivation.Reason is
// "trusted_peer_without_header" either way.
var ErrMissingHeader = errors.New("trustedproxy: trusted peer sent no forwarding header")

// ErrHeaderAlias is returned when [Config.RejectAliases] is set and a
// trusted peer's request carries a header whose name differs from the
// rule's forwarding header only by case or by '_' in place of '-'
// ("X_Forwarded_For", "X-Forwarded_For", a non-canonical key in a
// hand-built http.Header). Such aliases are never read; this error lets an
// operator refuse requests that some other component (CGI-style stacks fold
// '_' and '-' together) might read differently.
var ErrHeaderAlias = errors.New("trustedproxy: forwarding header alias")

// ChainError reports a forwarding header written by a trusted peer that
// cannot be resolved to a client. Err is [ErrMalformedEntry],
// [ErrChainTooLong], or an error wrapping ErrMalformedEntry for an
// "unknown" or obfuscated node and for an address no connection can come
// from (Detail names the kind); Unwrap returns it.
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
	// the kind of non-source address refused: "unspecified address",
	// "multicast address", "limited broadcast address"); "" otherwise.
	// Fixed text, never request bytes.
	Detail string
	// Err is ErrMalformedEntry, ErrChainTooLong, or an error wrapping
	// ErrMalformedEntry for an unknown node or a non-source address; test
	// it with errors.Is.
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
