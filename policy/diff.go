package policy

import (
	"fmt"
	"strings"

	"github.com/ratekey/ratekey/internal/quote"
)

// Change is one line of [Diff]'s report.
type Change struct {
	// Policy is the policy's name.
	Policy string
	// Change is what happened to it, one of four strings (a public
	// contract: the demo's reload log and output print them):
	//   - "added": a policy of that name is new; its buckets start full.
	//   - "removed": the policy is gone; its states expire or are evicted.
	//   - "restarted": the rate's interval (one token every Per/Count) or
	//     the burst changed, so the buckets have a new shape and start
	//     full (the old states are left to expire); 1/s written 60/m is
	//     the same shape, an update.
	//   - "updated": other settings changed (key, cost, delay_after,
	//     max_delay, dry_run, status, operations, fail modes, overrides,
	//     settle, max_cost, an OverrideFunc set or removed); budgets are
	//     kept. A changed key list names other buckets: they start full;
	//     so do the buckets of an override whose rate or burst changed
	//     (its tenants, plans or accounts only).
	Change string
	// Detail names the changed settings, e.g. "burst 3 -> 5".
	Detail string
}

// Diff compares two policy lists by name (each name once, as [Validate]
// requires) and returns one change per policy added, removed, restarted
// or updated, in the order old then new; unchanged policies (which keep
// their budgets) are not listed. An OverrideFunc is compared by whether
// it is set: functions cannot be compared. old and new are not modified;
// safe for concurrent use.
func Diff(old, new []Policy) []Change {
	var out []Change
	old, new = withDefaults(old), withDefaults(new)
	byName := map[string]*Policy{}
	for i := range new {
		byName[new[i].Name] = &new[i]
	}
	seen := map[string]bool{}
	for i := range old {
		o := &old[i]
		seen[o.Name] = true
		n := byName[o.Name]
		if n == nil {
			out = append(out, Change{Policy: o.Name, Change: "removed"})
			continue
		}
		var diffs []string
		note := func(field string, a, b any) {
			if fmt.Sprint(a) != fmt.Sprint(b) {
				diffs = append(diffs, fmt.Sprintf("%s %v -> %v", field, a, b))
			}
		}
		note("rate", o.Limit.Rate, n.Limit.Rate)
		note("burst", o.Limit.Burst, n.Limit.Burst)
		note("max_in_flight", o.Limit.MaxInFlight, n.Limit.MaxInFlight)
		note("lease", o.Limit.Lease, n.Limit.Lease)
		note("min_in_flight", o.Limit.MinInFlight, n.Limit.MinInFlight)
		note("max_in_flight_ceiling", o.Limit.MaxInFlightCeiling, n.Limit.MaxInFlightCeiling)
		note("priorities", o.Priorities, n.Priorities)
		note("reserved", o.Reserved, n.Reserved)
		note("limit_log_factor", o.LimitLogFactor, n.LimitLogFactor)
		note("retry_after", o.RetryAfter, n.RetryAfter)
		kind := "updated"
		if o.Limit.Rate.Interval() != n.Limit.Rate.Interval() || o.Limit.Burst != n.Limit.Burst {
			kind = "restarted"
		}
		if ot, nt := o.overridesText(), n.overridesText(); ot != nt {
			diffs = append(diffs, fmt.Sprintf("overrides %s -> %s", ot, nt))
		}
		note("key", o.Key, n.Key)
		note("cost", o.Cost, n.Cost)
		if o.Limit.DelayAfter != n.Limit.DelayAfter { // shown as tokens: 0 means the whole burst
			diffs = append(diffs, fmt.Sprintf("delay_after %d -> %d", delayAfter(o.Limit), delayAfter(n.Limit)))
		}
		note("max_delay", o.Limit.MaxDelay, n.Limit.MaxDelay)
		note("dry_run", o.DryRun, n.DryRun)
		note("pre_auth", o.PreAuth, n.PreAuth)
		note("status", o.Status, n.Status)
		note("operations", o.Operations, n.Operations)
		note("on_missing", o.OnMissing, n.OnMissing)
		note("on_store_error", o.OnStoreError, n.OnStoreError)
		note("settle", o.Settle, n.Settle)
		note("override_func", o.OverrideFunc != nil, n.OverrideFunc != nil) // set or not: a function cannot be compared
		note("max_cost", o.MaxCost, n.MaxCost)
		if len(diffs) > 0 {
			out = append(out, Change{Policy: o.Name, Change: kind, Detail: strings.Join(diffs, ", ")})
		}
	}
	for i := range new {
		if !seen[new[i].Name] {
			out = append(out, Change{Policy: new[i].Name, Change: "added"})
		}
	}
	return out
}

// overridesText renders p's Overrides, completed, for [Diff]:
// [tenant=acme 100/s burst 200 cost 1, plan=pro ...]. A reload that changes
// an override's rate or burst gives its tenants fresh buckets (see
// [Override]); the policy's other buckets are kept.
func (p *Policy) overridesText() string {
	var b strings.Builder
	b.WriteByte('[')
	for j := range p.Overrides {
		o := &p.Overrides[j]
		l, cost := p.complete(o)
		if j > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v burst %d cost %d", quote.Value(o.String()), l.Rate, l.Burst, cost)
		if l.DelayAfter != 0 {
			fmt.Fprintf(&b, " delay_after %d", l.DelayAfter)
		}
		if l.MaxDelay != 0 {
			fmt.Fprintf(&b, " max_delay %v", l.MaxDelay)
		}
	}
	b.WriteByte(']')
	return b.String()
}
