package policy_test

import (
	"fmt"
	"time"

	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
	"github.com/ratekey/ratekey/policy"
)

// Validate fills each policy's defaults and names every problem by its
// field, as a config file writes it.
func ExampleValidate() {
	perAccount := policy.Policy{
		Name:  "per-account",
		Key:   []limitkey.Dimension{limitkey.DimTenant, limitkey.DimAccount},
		Limit: limiter.Limit{Rate: limiter.Rate{Count: 10, Per: time.Second}, Burst: 20},
	}
	ps, err := policy.Validate([]policy.Policy{perAccount}, policy.Rules{})
	fmt.Println(ps[0].Cost, ps[0].Status, ps[0].OnMissing, ps[0].OnStoreError, err)

	tooBig := perAccount
	tooBig.Cost = 21
	_, err = policy.Validate([]policy.Policy{tooBig}, policy.Rules{})
	fmt.Println(err)
	// Output:
	// 1 429 reject deny <nil>
	// policies[0] ("per-account").cost: 21 exceeds burst 20, so no request could ever pass
}

// Diff says what a reload changes: a new burst gives the policy's buckets
// a new shape (they restart full); a new cost keeps them.
func ExampleDiff() {
	old := []policy.Policy{
		{Name: "per-client", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 5}},
		{Name: "uploads", Key: []limitkey.Dimension{limitkey.DimNetwork}, Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 5}},
	}
	changed := []policy.Policy{old[0], old[1]}
	changed[0].Limit.Burst = 10
	changed[1].Cost = 2
	for _, c := range policy.Diff(old, changed) {
		fmt.Println(c.Policy, c.Change, c.Detail)
	}
	// Output:
	// per-client restarted burst 5 -> 10
	// uploads updated cost 1 -> 2
}
