package trustedproxy

import "net/netip"

// Result is the outcome of one [Resolver.Resolve] or [Resolver.Explain]
// call.
//
// On success Client is valid and canonical (Is4In6() false, Zone() ""), and
// Network is Client masked to the configured prefix length for its family,
// so Network.Contains(Client) is always true. On error both are the zero
// value and Derivation (with Error set) explains what went wrong.
type Result struct {
	// Client is the canonical client address.
	Client netip.Addr
	// Network is netip.PrefixFrom(Client, bits).Masked(), bits being
	// Config.IPv4Prefix or Config.IPv6Prefix by the family of Client after
	// unmapping.
	Network netip.Prefix
	// Derivation says how Client was chosen.
	Derivation Derivation
}

// Derivation explains one resolution: the peer seen, whether it is trusted,
// the rule that matched it, the header consulted, every hop examined with
// its verdict, the hop chosen and the reason. JSON field names are a public
// contract (the debug endpoint prints them): fields are added, never
// renamed.
//
// Values copied from the request (Peer when unparsable, Hop.Value) are
// attacker-controlled and truncated to 64 bytes. A Derivation is a plain
// value owned by the caller (its Hops alias the buffer given to
// [Resolver.Explain], if any); nothing in the Resolver keeps it.
type Derivation struct {
	// Peer is the canonical TCP peer address without port (also when it
	// is refused as an address no connection can come from), or the raw remoteAddr truncated
	// to 64 bytes when it could not be parsed.
	Peer string `json:"peer"`
	// PeerTrusted reports whether Peer is in the trusted set of some rule.
	PeerTrusted bool `json:"peer_trusted"`
	// Rule is the index into Config.Rules of the rule the peer matched, or
	// -1 when no rule matched.
	Rule int `json:"rule"`
	// Header is the canonical name of the header consulted: set only when
	// the peer is trusted and its rule names a header.
	Header string `json:"header,omitempty"`
	// Hops lists the header entries actually examined, in walk order
	// (rightmost first for a list header; one entry for a single-address
	// header). Entries left of the chosen client are never examined and
	// never listed. nil (JSON null) when no header value was examined.
	Hops []Hop `json:"hops"`
	// Chosen is the index into Hops of the client, or -1 when the client
	// is the peer or the resolution failed (or when Hops was not built:
	// see [Resolver.Resolve]).
	Chosen int `json:"chosen"`
	// Reason says why the client is what it is (or why the resolution
	// failed); it is part of the debug JSON and the label of anomaly
	// counters, and its values are a public contract (docs/compatibility.md
	// lists them). A successful resolution says "peer_untrusted" (no rule
	// matches the peer, which is the client; no header read),
	// "no_header_configured" (the peer's rule names no header; the client
	// is the peer), "trusted_peer_without_header" (the trusted peer sent no
	// value in its rule's header: the client is the peer, or
	// [ErrMissingHeader] with Config.RejectMissingHeader; reported either
	// way, as a misconfiguration or a health check usually is),
	// "first_untrusted_hop" (the first entry of the list header, right to
	// left, not in the trusted set), "hop_count" (the n-th untrusted entry
	// of a rule with Hops n >= 2), "all_hops_trusted" (every entry trusted:
	// the client is the peer, never the leftmost entry) or
	// "single_address_header" (the value of the single-address header). A
	// failure says "malformed_entry" ([ErrMalformedEntry], also for an
	// address no connection can come from), "unknown_node"
	// (an "unknown" or obfuscated node, [ErrMalformedEntry]), "header_alias" ([ErrHeaderAlias]),
	// "chain_too_long" ([ErrChainTooLong]), "malformed_peer"
	// ([ErrMalformedPeer]) or "unix_peer_untrusted" (a Unix-socket peer no
	// rule accepts, [ErrMalformedPeer]); to act on a failure, test the
	// error with errors.Is.
	Reason string `json:"reason"`
	// Error is the text of the error Resolve returned, if any.
	Error string `json:"error,omitempty"`
}

// Hop is one forwarding-header entry examined by the walk.
type Hop struct {
	// Position is the 0-based position of the entry in the merged chain
	// (all lines of the header joined in wire order, split on the commas
	// that separate list elements, which for Forwarded excludes commas
	// inside quoted strings; leftmost = 0; header lines holding only spaces
	// and tabs contribute no entry). For a single-address header, the
	// index of the line read.
	Position int `json:"position"`
	// Value is the raw entry, spaces and tabs trimmed, truncated to 64
	// bytes: for Forwarded, the for= value as written (quotes included),
	// or the whole element when the element is malformed.
	// Attacker-controlled.
	Value string `json:"value"`
	// Address is the canonical address parsed from Value, "" when malformed
	// (including an address no connection can come from).
	Address string `json:"address,omitempty"`
	// Verdict is what the walk concluded about this entry, one of (a
	// public contract, listed in docs/compatibility.md): "trusted" (in the
	// rule's trusted set; the walk continued left), "counted" (not in the
	// set, but the rule's Hops count vouches for it; the walk continued
	// left), "client" (the first untrusted address, or the value of a
	// single-address header), "malformed" (not an address, or an address
	// no connection can come from; the walk failed closed) and "unknown"
	// ("unknown" or an obfuscated node, RFC 7239 §6; the walk failed
	// closed). It is for display: to act on an outcome, use the error and
	// Derivation.Reason.
	Verdict string `json:"verdict"`
}

// The verdicts of a [Hop] (Hop.Verdict).
const (
	// verdictTrusted: the entry is in the rule's trusted set; the walk
	// continued left.
	verdictTrusted = "trusted"
	// verdictCounted: the entry is not in the trusted set but the rule's
	// Hops count vouches for it as a proxy; the walk continued left.
	verdictCounted = "counted"
	// verdictClient: the entry is the client (first untrusted address, or
	// the value of a single-address header).
	verdictClient = "client"
	// verdictMalformed: the entry is not an address, or is an address no
	// connection can come from (unspecified, multicast, 255.255.255.255);
	// the walk failed closed.
	verdictMalformed = "malformed"
	// verdictUnknown: the entry is "unknown" or an obfuscated node
	// (RFC 7239 §6); the walk failed closed.
	verdictUnknown = "unknown"
)

// The reasons of a [Derivation] (Derivation.Reason).
const (
	// reasonPeerUntrusted: no rule matches the peer, it is the client; no
	// header was read.
	reasonPeerUntrusted = "peer_untrusted"
	// reasonNoHeaderConfigured: the peer is trusted but its rule names no
	// header; the client is the peer.
	reasonNoHeaderConfigured = "no_header_configured"
	// reasonHeaderAbsent: the peer is trusted but sent no value in its
	// rule's header (no line, or only lines of spaces and tabs). With
	// Config.RejectMissingHeader false (the default) the client is the
	// peer; with true Resolve returns [ErrMissingHeader]. Reported either
	// way: a trusted proxy that forwards without the header is usually a
	// misconfiguration (or a health check) and should be counted.
	reasonHeaderAbsent = "trusted_peer_without_header"
	// reasonFirstUntrustedHop: the client is the first entry of the list
	// header, walking right to left, that is not in the rule's trusted set.
	reasonFirstUntrustedHop = "first_untrusted_hop"
	// reasonHopCount: the rule has Hops n >= 2 and the client is the n-th
	// entry, walking right to left, that is not in the rule's trusted set;
	// the n-1 before it were trusted by count (verdict "counted").
	reasonHopCount = "hop_count"
	// reasonAllHopsTrusted: every entry of the list header is trusted (by
	// address or by count); the client is the peer (documented choice:
	// never the leftmost entry; see the package documentation).
	reasonAllHopsTrusted = "all_hops_trusted"
	// reasonSingleAddressHeader: the client is the value of the
	// single-address header sent by the trusted peer.
	reasonSingleAddressHeader = "single_address_header"
	// reasonMalformedEntry: a header entry reached by the walk is not an
	// address, or is an unspecified, multicast or broadcast address;
	// Resolve returned a *ChainError wrapping ErrMalformedEntry (Err is
	// errNonSourceEntry in the second case).
	reasonMalformedEntry = "malformed_entry"
	// reasonUnknownNode: a header entry reached by the walk is "unknown" or
	// an obfuscated node; Resolve returned a *ChainError wrapping
	// errUnknownNode.
	reasonUnknownNode = "unknown_node"
	// reasonHeaderAlias: Config.RejectAliases is set and the trusted peer's
	// request carries an alias of its rule's header; Resolve returned an
	// error wrapping ErrHeaderAlias.
	reasonHeaderAlias = "header_alias"
	// reasonChainTooLong: more than MaxHops entries would have had to be
	// examined; Resolve returned a *ChainError wrapping ErrChainTooLong.
	reasonChainTooLong = "chain_too_long"
	// reasonMalformedPeer: remoteAddr is not an address, or is an
	// unspecified, multicast or broadcast address; Resolve returned an
	// error wrapping ErrMalformedPeer (errNonSourcePeer in the second
	// case).
	reasonMalformedPeer = "malformed_peer"
	// reasonUnixPeerUntrusted: remoteAddr is a Unix-domain socket ("",
	// "@..." or "/...") and no rule lists "unix"; Resolve returned an
	// error wrapping errUnixPeer and ErrMalformedPeer.
	reasonUnixPeerUntrusted = "unix_peer_untrusted"
)
