package middleware

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/engine"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// TestReleaseClearsScratch: a scratch goes back to the pool holding
// nothing of its evaluation (no principal value, key, result or limiter
// request), and the bytes it appended stay with the request's arena.
func TestReleaseClearsScratch(t *testing.T) {
	var out arena
	sc := getScratch(&out)
	start := len(sc.B)
	sc.B = limitkey.Key{Policy: "p", Parts: []limitkey.Part{{Dimension: limitkey.DimAccount, Value: "alice"}}}.AppendTo(sc.B)
	key := sc.Str(start)
	pr := limitkey.Principal{Account: "alice"}
	in := engine.Input[*http.Request]{Context: context.Background(), Operation: "GET /", Principal: &pr}
	st, err := engine.New(engine.Config[*http.Request]{Limiter: memory.New(memory.Options{}),
		Policies: []policy.Policy{{Name: "p", Key: []limitkey.Dimension{limitkey.DimAccount}, Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 3}}}})
	if err != nil {
		t.Fatal(err)
	}
	if ev := st.Evaluate(&in, true, engine.PhaseAll, &sc.Scratch); ev.Decision != decide.DecisionPassed {
		t.Fatalf("decision %s, want PASSED", ev.Decision)
	}
	sc.release(&out)
	if v := reflect.ValueOf(sc).Elem(); !v.IsZero() {
		t.Errorf("released scratch is not cleared: %+v", *sc)
	}
	if got := string(out.bytes()); got != "p|account=alicep|account=alice" || key != "p|account=alice" {
		t.Errorf("arena holds %q, key %q; want the key twice (appended here, then by the evaluation), and p|account=alice", got, key)
	}
}
