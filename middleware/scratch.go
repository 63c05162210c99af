package middleware

import (
	"net/http"
	"unsafe"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/limiter"
)

// scratch is one evaluation's working memory, allocated once per evaluation:
// the policy results, limiter requests and decisions, key parts, and an
// append-only byte buffer that holds encoded keys, dimension values and
// response field values. Strings handed out over the buffer (see str) stay
// valid for as long as anything refers to them: the buffer is never
// rewritten, and when an append outgrows it the old array lives on for the
// strings that point into it.
type scratch struct {
	policies [3]PolicyResult // more policies per phase spill to the heap
	reqs     [3]limiter.Request
	idx      [3]int
	decs     [3]limiter.Decision
	parts    [4]identity.Part
	fields   [3][1]string // RateLimit-Policy, RateLimit, RateLimit-Decision
	b        []byte
	buf      [256]byte
}

func newScratch() *scratch {
	sc := &scratch{}
	sc.b = sc.buf[:0]
	return sc
}

// str returns the bytes appended to sc.b since start as a string, without
// copying them.
func (sc *scratch) str(start int) string {
	if len(sc.b) == start {
		return ""
	}
	return unsafe.String(&sc.b[start], len(sc.b)-start)
}

// addField adds a response field value, reusing slot as the value slice
// when the field is new (one []string allocation saved per field), and
// appending a line when it exists (after PreAuthHandler). key is canonical.
func addField(h http.Header, key, value string, slot *[1]string) {
	if v := h[key]; len(v) > 0 {
		h[key] = append(v, value)
		return
	}
	slot[0] = value
	h[key] = slot[:]
}
