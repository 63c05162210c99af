package redis_test

import (
	"context"
	"testing"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/internal/redistest"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	rkredis "github.com/ratekey/ratekey/limiter/redis"
)

// TestOneRequestScriptAtMaxWindowDebt: the one-request script returns
// -1 - d for a call that does not charge, which must be exact at the
// largest debt, a bucket of window MaxWindow emptied at this instant (with
// MaxWindow 2^53, -1 - 2^53 was not a double: Lua rounded it, Go read the
// debt 1ns short and admitted what the script had rejected). Both scripts
// must decide it as the memory store does.
func TestOneRequestScriptAtMaxWindowDebt(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	clk := clocktest.NewManualClock()
	rl, err := rkredis.NewWithTestClock(client, rkredis.Options{Prefix: "adv-maxwin:", Timeout: testTimeout, DenyCache: -1}, clk.Time) // every decision from the script
	if err != nil {
		t.Fatal(err)
	}
	ml := memory.New(memory.Options{Now: clk.Time})
	ctx := context.Background()
	// T = 1ns, Burst = MaxWindow: window = MaxWindow exactly (accepted).
	li := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: 1}, Burst: int64(rkredis.MaxWindow)}
	clk.Set(1_000_000_000)
	empty := []limiter.Request{{Key: "k", Limit: li, Cost: li.Burst}} // empties the bucket: debt MaxWindow
	for _, l := range []limiter.Limiter{rl, ml} {
		if d, err := l.Take(ctx, nil, empty); err != nil || !d[0].Allowed {
			t.Fatalf("%T: emptying Take: %+v, %v", l, d, err)
		}
	}
	one := []limiter.Request{{Key: "k", Limit: li, Cost: 1}}
	want, err := ml.Take(ctx, nil, one)
	if err != nil || want[0].Allowed {
		t.Fatalf("memory: %+v, %v; want rejected", want, err)
	}
	if got, err := rl.Peek(ctx, nil, one); err != nil || verdicts(got)[0] != want[0] {
		t.Errorf("redis Peek of one request = %+v, %v; want %+v (memory store)", got, err, want[0])
	}
	if got, err := rl.Take(ctx, nil, one); err != nil || verdicts(got)[0] != want[0] {
		t.Errorf("redis Take of one request = %+v, %v; want %+v (memory store)", got, err, want[0])
	}
	// The general script, for comparison: exact.
	two := []limiter.Request{one[0], {Key: "other", Limit: li, Cost: 1, DryRun: true}}
	if got, err := rl.Peek(ctx, nil, two); err != nil || verdicts(got)[0] != want[0] {
		t.Errorf("redis Peek of two requests = %+v, %v; want %+v first", got, err, want[0])
	}
}
