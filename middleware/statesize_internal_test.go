package middleware

import (
	"reflect"
	"testing"
)

// TestRequestStateSize: the request state, which every request allocates
// and zeroes, fits Go's 896-byte size class (the next is 1024 bytes), with
// an arena of arenaSize bytes.
func TestRequestStateSize(t *testing.T) {
	if got := reflect.TypeFor[requestState]().Size(); got > 896 {
		t.Errorf("requestState is %d bytes; want at most 896 (reorder its fields, or shrink arenaSize %d)", got, arenaSize)
	}
}
