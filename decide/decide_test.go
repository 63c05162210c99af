package decide_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/policy"
)

// TestRank: the order in which a request's Decision sums its policies'
// up, highest first, with an ERROR ranking by whether it refuses.
func TestRank(t *testing.T) {
	order := []struct {
		d       decide.Decision
		refuses bool
		want    int
	}{
		{decide.DecisionRejected, true, 8},
		{decide.DecisionError, true, 7},
		{decide.DecisionDelayed, false, 6},
		{decide.DecisionError, false, 5},
		{decide.DecisionRejectedDryRun, false, 4},
		{decide.DecisionDelayedDryRun, false, 3},
		{decide.DecisionPassed, false, 2},
		{decide.DecisionSkipped, false, 1},
		{"", false, 0},
		{"MAYBE", true, 0},
	}
	for _, tt := range order {
		if got := tt.d.Rank(tt.refuses); got != tt.want {
			t.Errorf("%q.Rank(%v) = %d, want %d", tt.d, tt.refuses, got, tt.want)
		}
	}
}

// TestFailModeAndRetryAfter: the fail mode and Retry-After each kind of
// outcome calls for.
func TestFailModeAndRetryAfter(t *testing.T) {
	bucket := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 2}
	cap := limiter.Limit{MaxInFlight: 4}
	full := &limiter.CapacityError{RetryAfter: 2500 * time.Millisecond}
	tests := []struct {
		name     string
		res      decide.PolicyResult
		failMode string
		secs     int64
		ok       bool
	}{
		{"passed", decide.PolicyResult{Decision: decide.DecisionPassed, Limit: bucket}, "", 0, false},
		{"rejected", decide.PolicyResult{Decision: decide.DecisionRejected, Limit: bucket, RetryAfter: 1200 * time.Millisecond}, "", 2, true},
		{"rejected, under a second", decide.PolicyResult{Decision: decide.DecisionRejected, Limit: bucket, RetryAfter: time.Nanosecond}, "", 1, true},
		{"dry run rejected", decide.PolicyResult{Decision: decide.DecisionRejectedDryRun, DryRun: true, Limit: bucket, RetryAfter: time.Second}, "", 1, true},
		{"never", decide.PolicyResult{Decision: decide.DecisionRejected, Limit: bucket, Never: true}, "", 0, false},
		{"missing dimension", decide.PolicyResult{Decision: decide.DecisionRejected, Limit: bucket, Missing: "account"}, "", 0, false},
		{"invalid cost", decide.PolicyResult{Decision: decide.DecisionRejected, Limit: bucket, InvalidCost: true}, "", 0, false},
		{"in flight without retry_after", decide.PolicyResult{Decision: decide.DecisionRejected, Limit: cap}, "", 0, false},
		{"in flight with retry_after", decide.PolicyResult{Decision: decide.DecisionRejected, Limit: cap, RetryAfter: 3 * time.Second}, "", 3, true},
		{"error, deny", decide.PolicyResult{Decision: decide.DecisionError, Err: errors.New("down"), OnStoreError: policy.OnStoreErrorDeny}, "deny", 1, true},
		{"error, deny, store full", decide.PolicyResult{Decision: decide.DecisionError, Err: full, OnStoreError: policy.OnStoreErrorDeny}, "deny", 3, true},
		{"error, allow", decide.PolicyResult{Decision: decide.DecisionError, Err: errors.New("down"), OnStoreError: policy.OnStoreErrorAllow}, "allow", 0, false},
		{"error, local fallback failed too", decide.PolicyResult{Decision: decide.DecisionError, Err: errors.New("down"), OnStoreError: policy.OnStoreErrorLocal}, "deny", 1, true},
		{"error, abandoned", decide.PolicyResult{Decision: decide.DecisionError, Abandoned: true, Err: errors.New("context canceled"), OnStoreError: policy.OnStoreErrorDeny}, "", 0, false},
		{"error, dry run", decide.PolicyResult{Decision: decide.DecisionError, DryRun: true, Err: errors.New("down"), OnStoreError: policy.OnStoreErrorDeny}, "dry_run", 0, false},
	}
	for _, tt := range tests {
		if got := tt.res.FailMode(); got != tt.failMode {
			t.Errorf("%s: FailMode() = %q, want %q", tt.name, got, tt.failMode)
		}
		if secs, ok := tt.res.RetryAfterSeconds(); secs != tt.secs || ok != tt.ok {
			t.Errorf("%s: RetryAfterSeconds() = %d, %v; want %d, %v", tt.name, secs, ok, tt.secs, tt.ok)
		}
	}
}

// TestAppendLogAttrs: the attributes of a decision line beyond its
// policy, key and store, for each kind of outcome.
func TestAppendLogAttrs(t *testing.T) {
	bucket := limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: 2, MaxDelay: time.Second}
	tests := []struct {
		name      string
		res       decide.PolicyResult
		abandoned bool
		want      string
	}{
		{"rejected", decide.PolicyResult{Decision: decide.DecisionRejected, Limit: bucket, Cost: 1, RetryAfter: 2 * time.Second}, false,
			"retry_after_seconds=2"},
		{"over max_delay", decide.PolicyResult{Decision: decide.DecisionRejected, Limit: bucket, Cost: 1, Remaining: 1, RetryAfter: 2 * time.Second}, false,
			"retry_after_seconds=2 error=the wait would exceed max_delay max_delay_seconds=1"},
		{"delayed, abandoned", decide.PolicyResult{Decision: decide.DecisionDelayed, Limit: bucket, Delay: 500 * time.Millisecond}, true,
			"delay_seconds=0.5 outcome=client_timeout"},
		{"settled override, dry run", decide.PolicyResult{Decision: decide.DecisionPassed, DryRun: true, Settle: true, Cost: 5, Returned: true, Settled: 3, Override: "plan=pro"}, false,
			"dry_run=true reserved=5 settled=3 override=plan=pro"},
		{"store error", decide.PolicyResult{Decision: decide.DecisionError, Err: errors.New("down"), OnStoreError: policy.OnStoreErrorAllow}, false,
			"error=down fail_mode=allow"},
		{"store error, abandoned", decide.PolicyResult{Decision: decide.DecisionError, Err: errors.New("context canceled")}, true,
			"error=the request ended before the limiter answered outcome=client_timeout"},
		{"skipped", decide.PolicyResult{Decision: decide.DecisionSkipped, SkippedReason: "no verified principal carries an account"}, false,
			"skipped_reason=no verified principal carries an account"},
	}
	for _, tt := range tests {
		var parts []string
		for _, a := range tt.res.AppendLogAttrs(nil, tt.abandoned) {
			parts = append(parts, a.String())
		}
		if got := strings.Join(parts, " "); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := (&decide.PolicyResult{}).AppendLogAttrs([]slog.Attr{slog.String("policy", "p")}, false); len(got) != 1 {
		t.Errorf("a PASSED result appended %v, want nothing", got[1:])
	}
}

// A policy result as the debug endpoint shows it: the JSON names are a
// public contract.
func ExamplePolicyResult_MarshalJSON() {
	res := decide.PolicyResult{
		Policy: "per-account", Key: "per-account|tenant=acme|account=alice", Decision: decide.DecisionRejected,
		Cost: 1, Limit: limiter.Limit{Rate: limiter.Rate{Count: 10, Per: time.Minute}, Burst: 5},
		RetryAfter: 5500 * time.Millisecond, Store: "memory", Override: "plan=pro",
	}
	b, _ := res.MarshalJSON()
	fmt.Println(string(b))
	secs, _ := res.RetryAfterSeconds()
	fmt.Println("Retry-After:", secs)
	// Output:
	// {"name":"per-account","key":"per-account|tenant=acme|account=alice","decision":"REJECTED","dry_run":false,"cost":1,"rate":"10/m","burst":5,"remaining":0,"retry_after_seconds":6,"store":"memory","fail_mode":null,"delay_after":5,"delay_seconds":null,"skipped_reason":null,"error":null,"override":"plan=pro","max_in_flight":null,"in_flight":null,"cached":false,"slot":null,"fallback":false,"prefetched":false,"reserved":null,"settled":null,"adaptive_limit":null,"class":null}
	// Retry-After: 6
}
