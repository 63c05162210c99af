package middleware

import (
	"reflect"
	"testing"
)

// TestRequestStateSize: the request state and its request copy, which
// every request allocates (once: stateRequest) and zeroes, fit Go's
// 896-byte size class (the next is 1024 bytes), with an arena of
// arenaSize bytes.
func TestRequestStateSize(t *testing.T) {
	if got := reflect.TypeFor[stateRequest]().Size(); got > 896 {
		t.Errorf("stateRequest is %d bytes (requestState %d); want at most 896 (reorder its fields, or shrink arenaSize %d)",
			got, reflect.TypeFor[requestState]().Size(), arenaSize)
	}
}
