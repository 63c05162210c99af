package middleware

import (
	"net/http"
	"strings"
	"sync"

	"github.com/ratekey/ratekey/internal/engine"
)

// scratch is one evaluation's working memory: the decision core's
// ([engine.Scratch]: the policy results, limiter requests and decisions,
// key parts, and B, the append-only bytes of an [arena] that receive
// encoded keys, dimension values and response field values), plus the
// HTTP side's.
//
// The Handler's evaluations take their scratch from a pool and release it
// before the request goes on: nothing of it outlives the evaluation (the
// strings are the arena's, which is not pooled), and release clears it,
// so no principal, key or result of one request is left in it for the
// next. Check's evaluation is returned to its caller, so it gets memory
// of its own (newScratch).
type scratch struct {
	engine.Scratch
	// answer wraps the ResponseWriter of a request an adaptive cap times,
	// to learn its status (see serveTimed) without an allocation.
	answer statusWriter
	// scope is the handler's view of the evaluation's reservations
	// (openSettle), nil when it reserved none.
	scope *settleScope
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// getScratch returns a cleared scratch from the pool, appending to out.
// Give it back with release.
func getScratch(out *arena) *scratch {
	sc := scratchPool.Get().(*scratch)
	sc.Init(out.bytes())
	return sc
}

// release gives sc's appended bytes back to out, clears sc and returns it
// to the pool. Nothing may use sc, nor the Evaluation that lives in it,
// afterwards.
func (sc *scratch) release(out *arena) {
	out.keep(sc.B)
	sc.drop()
}

// drop clears sc and returns it to the pool without giving its bytes back
// to an arena (the arena kept them already, and may have handed out more
// since). Nothing may use sc afterwards.
func (sc *scratch) drop() {
	*sc = scratch{}
	scratchPool.Put(sc)
}

// newScratch returns a core scratch and an arena of its own, never
// pooled, for an evaluation that outlives the call (Check).
func newScratch() *engine.Scratch {
	m := &struct {
		sc  engine.Scratch
		out arena
	}{}
	m.sc.Init(m.out.bytes())
	return &m.sc
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
