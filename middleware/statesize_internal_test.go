package middleware

import (
	"math"
	"reflect"
	"runtime"
	"testing"
)

// stateSink keeps TestRequestStateSize's allocations on the heap.
var stateSink []*stateRequest

// TestRequestStateSize: the request state and its request copy, which
// every request allocates (once: stateRequest) and zeroes, take Go's
// 896-byte size class (the next is 1024 bytes), with an arena of
// arenaSize bytes. Measured, not computed from the type's size: an object
// of more than 512 bytes with pointers carries an 8-byte malloc header.
//
// TotalAlloc counts every goroutine's allocations, so the size is the
// least of a few rounds: another goroutine can only add to a round.
func TestRequestStateSize(t *testing.T) {
	const n, rounds = 64, 5
	got := uint64(math.MaxUint64)
	for range rounds {
		stateSink = make([]*stateRequest, 0, n)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			stateSink = append(stateSink, new(stateRequest))
		}
		runtime.ReadMemStats(&after)
		got = min(got, (after.TotalAlloc-before.TotalAlloc)/n)
	}
	stateSink = nil
	if got > 896 {
		t.Errorf("a stateRequest takes %d bytes (its type %d, requestState %d); want at most 896 (reorder its fields, or shrink arenaSize %d)",
			got, reflect.TypeFor[stateRequest]().Size(), reflect.TypeFor[requestState]().Size(), arenaSize)
	}
}
