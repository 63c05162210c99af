package middleware

import (
	"context"
	"testing"
	"time"
)

// TestStateIsAContextLayer: the request state answers its own key and
// passes everything else (values, deadline, cancellation) to its parent.
func TestStateIsAContextLayer(t *testing.T) {
	type otherKey struct{}
	deadline := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.WithValue(context.Background(), otherKey{}, "v"), deadline)
	ctx, st := withState(parent)
	if got := stateFrom(ctx); got != st {
		t.Fatalf("stateFrom = %p, want %p", got, st)
	}
	if v := ctx.Value(otherKey{}); v != "v" {
		t.Errorf("parent value = %v, want v", v)
	}
	if d, ok := ctx.Deadline(); !ok || !d.Equal(deadline) {
		t.Errorf("deadline = %v, %v; want %v", d, ok, deadline)
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the parent did not reach a context derived from the state")
	}
	if ctx.Err() != context.Canceled || child.Err() != context.Canceled {
		t.Errorf("errors %v, %v; want context.Canceled", ctx.Err(), child.Err())
	}
	if stateFrom(parent) != nil || stateFrom(context.Background()) != nil {
		t.Error("a context without a request state returned one")
	}
}
