package middleware

import "sync/atomic"

// arenaSize is the bytes an arena holds before it spills to the heap:
// two policies' keys (a network's, 33 bytes; a tenant's account's
// operation's, 70 to 100), the network key value and the RateLimit field
// value (55 for two policies) fit (RateLimit-Policy's value is usually the
// configuration's, which takes none: see policyField). 232, so that the
// request state and its request copy fill Go's 896-byte size class.
const arenaSize = 232

// arena is append-only memory for the strings of one request that outlive
// its evaluation: the encoded keys (the limiter may keep them; logs and the
// Record show them) and the response field values (the response header
// holds them until it is written, which may be after the handler returns).
// So it is never pooled: it lives in the request state, for as long as
// anything refers to the request. Bytes once handed out are never
// rewritten; when an append outgrows buf, the new bytes go to a new array
// and the old one lives on for the strings that point into it.
//
// One evaluation at a time appends to a request's arena: the rate limiter
// claims it first, and an evaluation that finds it claimed (the request
// passed to handlers running concurrently) gets an arena of its own.
type arena struct {
	b      []byte // the bytes handed out so far; nil until first use
	buf    [arenaSize]byte
	fields [3][1]string // value slices: RateLimit-Policy, RateLimit, RateLimit-Decision
	busy   atomic.Bool  // claimed by an evaluation
	taken  [3]bool      // which of fields a response header was given
}

// The response fields whose value slices an arena holds.
const (
	fieldPolicy = iota
	fieldRateLimit
	fieldDecision
)

// claimArena returns rs's arena, claimed, or a new one when rs is nil or
// its arena is claimed already. Give it back with release.
func claimArena(rs *requestState) *arena {
	if rs != nil && rs.out.busy.CompareAndSwap(false, true) {
		return &rs.out
	}
	return new(arena)
}

// release gives a claimed arena back.
func (a *arena) release() { a.busy.Store(false) }

// bytes returns the arena's bytes, to append to; give the result back
// with keep.
func (a *arena) bytes() []byte {
	if a.b == nil {
		return a.buf[:0]
	}
	return a.b
}

// keep records b (bytes' result, appended to) as the bytes handed out.
func (a *arena) keep(b []byte) { a.b = b }

// field returns the value slice for response field i the first time, and
// nil afterwards (a second evaluation of the request, after
// PreAuthHandler, adds a line of its own): a slice a header was given is
// never written again.
func (a *arena) field(i int) *[1]string {
	if a.taken[i] {
		return nil
	}
	a.taken[i] = true
	return &a.fields[i]
}
