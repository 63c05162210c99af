package middleware

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
)

// scratch is one evaluation's working memory: the policy results, limiter
// requests and decisions, key parts, and b, the append-only bytes of an
// [arena] that receive encoded keys, dimension values and response field
// values. Strings handed out over b (see str) stay valid for as long as
// anything refers to them: b is never rewritten, and when an append
// outgrows it the old array lives on for the strings that point into it.
//
// The Handler's evaluations take their scratch from a pool and release it
// before the request goes on: nothing of it outlives the evaluation (the
// strings are the arena's, which is not pooled), and release clears it,
// so no principal, key or result of one request is left in it for the
// next. Check's evaluation is returned to its caller, so it gets memory
// of its own (newScratch).
type scratch struct {
	policies [3]PolicyResult // more policies per phase spill to the heap
	reqs     [3]limiter.Request
	idx      [3]int
	decs     [3]limiter.Decision
	parts    [4]limitkey.Part
	b        []byte
	// heldReqs and heldDecs are the limiter call's requests and Decisions
	// when it took in-flight slots (slots) or reserved tokens to settle
	// (reserved), nil otherwise (heldIdx maps them to the policies): kept
	// until the handler returns, which releases the slots
	// (rateLimitState.releaseSlots) and settles the reservations
	// (rateLimitState.settle).
	heldReqs        []limiter.Request
	heldDecs        []limiter.Decision
	heldIdx         []int
	heldStore       limiter.Limiter // the store that holds them: Limiter or Fallback
	slots, reserved bool
	// settle is what the handler reports of the reservations (see
	// ReportCost), and actual the costs they settle at.
	settle settlement
	actual [3]int64
	// after is the request's context without its cancellation, for the
	// store calls made once the handler returns (see detached).
	after detached
	// capBuf while they are few; those taken are released with the
	// store's slots (releaseSlots).
	caps   []heldCap
	capBuf [2]heldCap
	// answer wraps the ResponseWriter of a request an adaptive cap times,
	// to learn its status (see serveTimed) without an allocation.
	answer statusWriter
}

// detached is a context without the cancellation of its parent, whose
// values it keeps: context.WithoutCancel, which allocates (16 bytes per
// call), held in the scratch instead. The store calls made when the
// handler returns (Release, Settle) run on it: the client may be gone,
// and the slot must be freed, the cost settled, all the same. Nothing
// keeps it after those calls return (it is never done, so no context
// derived from it registers with it).
type detached struct{ parent context.Context }

// detach returns sc's detached view of ctx.
func (sc *scratch) detach(ctx context.Context) context.Context {
	sc.after.parent = ctx
	return &sc.after
}

func (*detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detached) Done() <-chan struct{}       { return nil }
func (*detached) Err() error                  { return nil }
func (d *detached) Value(key any) any         { return d.parent.Value(key) }
func (d *detached) String() string            { return fmt.Sprint(d.parent) + ".WithoutCancel" }

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// getScratch returns a cleared scratch from the pool, appending to out.
// Give it back with release.
func getScratch(out *arena) *scratch {
	sc := scratchPool.Get().(*scratch)
	sc.b = out.bytes()
	sc.caps = sc.capBuf[:0]
	return sc
}

// release gives sc's appended bytes back to out, clears sc and returns it
// to the pool. Nothing may use sc, nor the Evaluation that lives in it,
// afterwards.
func (sc *scratch) release(out *arena) {
	out.keep(sc.b)
	*sc = scratch{}
	scratchPool.Put(sc)
}

// drop clears sc and returns it to the pool without giving its bytes back
// to an arena (the arena kept them already, and may have handed out more
// since). Nothing may use sc afterwards.
func (sc *scratch) drop() {
	*sc = scratch{}
	scratchPool.Put(sc)
}

// newScratch returns a scratch and an arena of its own, never pooled, for
// an evaluation that outlives the call (Check).
func newScratch() *scratch {
	m := &struct {
		sc  scratch
		out arena
	}{}
	m.sc.b = m.out.bytes()
	m.sc.caps = m.sc.capBuf[:0]
	return &m.sc
}

// str returns the bytes appended to sc.b since start as a string, without
// copying them.
func (sc *scratch) str(start int) string {
	if len(sc.b) == start {
		return ""
	}
	return unsafe.String(&sc.b[start], len(sc.b)-start)
}

// addField adds a response field value, using slot as the value slice
// when the field is new and slot is not nil (one []string allocation saved
// per field). When the field exists (after PreAuthHandler) the value joins
// its list on the same line: RFC 9651 §4.2 reads several lines as one
// list, but a client reading only the first line (Go's Header.Get) would
// miss the policies of the second. key is canonical.
func addField(h http.Header, key, value string, slot *[1]string) {
	if v := h[key]; len(v) > 0 {
		h[key] = []string{strings.Join(v, ", ") + ", " + value} // a new slice: v may be an arena's slot
		return
	}
	if slot == nil {
		h[key] = []string{value}
		return
	}
	slot[0] = value
	h[key] = slot[:]
}
