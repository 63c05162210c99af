package middleware

import (
	"errors"
	"reflect"
	"testing"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
)

// TestReleaseClearsScratch: a scratch goes back to the pool holding
// nothing of its evaluation (no principal value, key, result or error),
// and the bytes it appended stay with the request's arena.
func TestReleaseClearsScratch(t *testing.T) {
	var out arena
	sc := getScratch(&out)
	start := len(sc.b)
	sc.b = limitkey.Key{Policy: "p", Parts: []limitkey.Part{{Dimension: limitkey.DimAccount, Value: "alice"}}}.AppendTo(sc.b)
	key := sc.str(start)
	sc.parts[0] = limitkey.Part{Dimension: limitkey.DimAccount, Value: "alice"}
	sc.policies[0] = PolicyResult{Policy: "p", Key: key, Decision: DecisionPassed, Err: errors.New("x")}
	sc.reqs[0] = limiter.Request{Key: key, Cost: 1}
	sc.decs[0] = limiter.Decision{Allowed: true, Remaining: 3}
	sc.idx[0] = 1
	sc.release(&out)
	if v := reflect.ValueOf(sc).Elem(); !v.IsZero() {
		t.Errorf("released scratch is not cleared: %+v", *sc)
	}
	if got := string(out.bytes()); got != "p|account=alice" || key != got {
		t.Errorf("arena holds %q, key %q; want both p|account=alice", got, key)
	}
}
