package engine

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
)

// Scratch is one evaluation's working memory: the policy results, limiter
// requests and decisions, key parts, and B, the append-only bytes that
// receive encoded keys and dimension values (and, from the transport,
// response field values). Strings handed out over B (see Str) stay valid
// for as long as anything refers to them: B is never rewritten, and when
// an append outgrows it the old array lives on for the strings that
// point into it.
//
// A transport pools its Scratch values and clears one before reuse, so
// that no principal, key or result of one request is left in it for the
// next; an evaluation returned to a caller (middleware's Check) gets one
// of its own. The zero value, after Init, is ready.
type Scratch struct {
	policies [3]decide.PolicyResult // more policies per phase spill to the heap
	reqs     [3]limiter.Request
	idx      [3]int
	decs     [3]limiter.Decision
	parts    [4]limitkey.Part
	// B receives the strings that outlive the evaluation (see Str): its
	// transport's append-only bytes, which it may append to as well.
	B []byte
	// heldReqs and heldDecs are the limiter call's requests and Decisions
	// when it took in-flight slots (slots) or reserved tokens to settle
	// (reserved), nil otherwise (heldIdx maps them to the policies): kept
	// until the handler returns, which releases the slots
	// (State.ReleaseSlots) and settles the reservations
	// (State.Settle).
	heldReqs        []limiter.Request
	heldDecs        []limiter.Decision
	heldIdx         []int
	heldStore       limiter.Limiter // the store that holds them: Limiter or Fallback
	slots, reserved bool
	// settle is what the handler reports of the reservations (see
	// ReportCost), and actual the costs they settle at.
	settle Settlement
	actual [3]int64
	// after is the request's context without its cancellation, for the
	// store calls made once the handler returns (see detached).
	after detached
	// capBuf while they are few; those taken are released with the
	// store's slots (ReleaseSlots).
	caps   []heldCap
	capBuf [2]heldCap
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
func (sc *Scratch) detach(ctx context.Context) context.Context {
	sc.after.parent = ctx
	return &sc.after
}

func (*detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detached) Done() <-chan struct{}       { return nil }
func (*detached) Err() error                  { return nil }
func (d *detached) Value(key any) any         { return d.parent.Value(key) }
func (d *detached) String() string            { return fmt.Sprint(d.parent) + ".WithoutCancel" }

// Init readies a cleared sc for an evaluation whose strings append to b
// (an arena's bytes: see the B field).
func (sc *Scratch) Init(b []byte) {
	sc.B = b
	sc.caps = sc.capBuf[:0]
}

// Str returns the bytes appended to sc.B since start as a string, without
// copying them.
func (sc *Scratch) Str(start int) string {
	if len(sc.B) == start {
		return ""
	}
	return unsafe.String(&sc.B[start], len(sc.B)-start)
}
