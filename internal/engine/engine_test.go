package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/internal/engine"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limiter/memory"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// job is a request of a transport that is not HTTP: a queue consumer's
// job, whose region is server-side data and whose cost is its items.
type job struct {
	region string
	items  int64
}

// TestEngineWithoutHTTP: the decision core decides requests of any
// transport: keys from the verified principal, the operation and a custom
// dimension read from the transport's own value, costs from a function of
// it, all-or-nothing charging, and a cost function's failure as an invalid
// cost. The expected values are written out.
func TestEngineWithoutHTTP(t *testing.T) {
	store := memory.New(memory.Options{})
	perMinute := limiter.Rate{Count: 6, Per: time.Minute}
	st, err := engine.New(engine.Config[job]{
		Limiter: store,
		Logger:  slog.New(slog.DiscardHandler),
		Policies: []policy.Policy{
			{Name: "per-region", Key: []limitkey.Dimension{"region"}, Limit: limiter.Limit{Rate: perMinute, Burst: 10}, Cost: 1},
			{Name: "per-account-items", Key: []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount, limitkey.DimOperation},
				Limit: limiter.Limit{Rate: perMinute, Burst: 6}},
		},
		Custom: map[limitkey.Dimension]func(job) (string, bool){"region": func(j job) (string, bool) { return j.region, j.region != "" }},
		Costs: map[string]func(job) (int64, error){"per-account-items": func(j job) (int64, error) {
			if j.items == 0 {
				return 0, errors.New("a job without items")
			}
			return j.items, nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st.Logs = engine.NewLogSampler()
	alice := limitkey.Principal{Issuer: "https://id.example", Tenant: "acme", Account: "alice", Method: limitkey.MethodJWT}
	decideJob := func(j job) decide.Evaluation {
		in := engine.Input[job]{Request: j, Context: context.Background(), Operation: "reports.export", Principal: &alice}
		var sc engine.Scratch
		sc.Init(nil)
		return st.Evaluate(&in, true, engine.PhaseAll, &sc)
	}
	type want struct {
		decision    decide.Decision
		allowed     bool
		keys        [2]string
		costs       [2]int64
		remaining   [2]int64
		invalidCost bool
	}
	tests := []struct {
		job  job
		want want
	}{
		{job{"eu", 4}, want{decide.DecisionPassed, true,
			[2]string{"per-region|region=eu", "per-account-items|tenant=acme|account=alice|operation=reports.export"}, [2]int64{1, 4}, [2]int64{9, 2}, false}},
		// 3 items do not fit the 2 left: nothing is charged, per-region's token included
		// (its Remaining is the would-be 8).
		{job{"eu", 3}, want{decide.DecisionRejected, false,
			[2]string{"per-region|region=eu", "per-account-items|tenant=acme|account=alice|operation=reports.export"}, [2]int64{1, 3}, [2]int64{8, 2}, false}},
		{job{"us", 2}, want{decide.DecisionPassed, true,
			[2]string{"per-region|region=us", "per-account-items|tenant=acme|account=alice|operation=reports.export"}, [2]int64{1, 2}, [2]int64{9, 0}, false}},
		{job{"us", 0}, want{decide.DecisionRejected, false,
			[2]string{"per-region|region=us", "per-account-items|tenant=acme|account=alice|operation=reports.export"}, [2]int64{1, 0}, [2]int64{8, 0}, true}},
	}
	for _, tt := range tests {
		ev := decideJob(tt.job)
		if ev.Decision != tt.want.decision || ev.Allowed != tt.want.allowed || len(ev.Policies) != 2 {
			t.Fatalf("%+v: decision %s, allowed %v, %d policies; want %s, %v, 2", tt.job, ev.Decision, ev.Allowed, len(ev.Policies), tt.want.decision, tt.want.allowed)
		}
		for i, res := range ev.Policies {
			if res.Key != tt.want.keys[i] || res.Cost != tt.want.costs[i] || res.Index != i {
				t.Errorf("%+v: %s key %q cost %d index %d; want %q, %d, %d", tt.job, res.Policy, res.Key, res.Cost, res.Index, tt.want.keys[i], tt.want.costs[i], i)
			}
			if res.Key != "" && !res.InvalidCost && res.Remaining != tt.want.remaining[i] {
				t.Errorf("%+v: %s remaining %d, want %d", tt.job, res.Policy, res.Remaining, tt.want.remaining[i])
			}
		}
		if got := ev.Policies[1].InvalidCost; got != tt.want.invalidCost {
			t.Errorf("%+v: InvalidCost %v, want %v (error %v)", tt.job, got, tt.want.invalidCost, ev.Policies[1].Err)
		}
	}
}
