package middleware

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekey/ratekey/decide"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/policy"
)

// TestRateLimitFieldsList: one item per advertised policy, in order, with
// dry-run and undecided policies left out, for one, two and three items;
// RateLimit-Policy is the configuration's value, taking no bytes, exactly
// when the advertised items are the configuration's (known), and built
// otherwise: fewer policies decided, another limit (an override's), none
// known.
func TestRateLimitFieldsList(t *testing.T) {
	st := &rateLimitState{}
	mk := func(name string, burst int64, decision decide.Decision, dryRun bool) decide.PolicyResult {
		p := policy.Policy{Name: name, Limit: limiter.Limit{Rate: limiter.Rate{Count: 1, Per: time.Second}, Burst: burst}}
		st.items = append(st.items, policyItem(p.Name, p.Limit))
		return decide.PolicyResult{Policy: name, Index: len(st.items) - 1, Key: name + "|k", Limit: p.Limit, Cost: 1, Remaining: burst - 1, ResetAfter: time.Second,
			Decision: decision, DryRun: dryRun, Charged: true}
	}
	all := []decide.PolicyResult{
		mk("a", 2, decide.DecisionPassed, false),
		mk("dry", 9, decide.DecisionPassed, true),
		mk("b", 3, decide.DecisionDelayed, false),
		mk("skipped", 9, decide.DecisionSkipped, false),
		mk("c", 4, decide.DecisionRejected, false),
	}
	item := func(i int) string { return st.items[i] }
	tests := []struct {
		n         int      // policies of all
		known     []string // the configuration's items
		pol, curr string
		polBytes  bool // the RateLimit-Policy value takes bytes
	}{
		{1, nil, `"a";q=2;w=2`, `"a";r=1;t=1`, false},
		{1, []string{item(0)}, `"a";q=2;w=2`, `"a";r=1;t=1`, false},
		{3, nil, `"a";q=2;w=2, "b";q=3;w=3`, `"a";r=1;t=1, "b";r=2;t=1`, true},
		{3, []string{item(0), item(2)}, `"a";q=2;w=2, "b";q=3;w=3`, `"a";r=1;t=1, "b";r=2;t=1`, false},
		{3, []string{item(0), item(2), item(3)}, `"a";q=2;w=2, "b";q=3;w=3`, `"a";r=1;t=1, "b";r=2;t=1`, true},
		{3, []string{item(0), `"b";q=7;w=7`}, `"a";q=2;w=2, "b";q=3;w=3`, `"a";r=1;t=1, "b";r=2;t=1`, true},
		{5, nil, `"a";q=2;w=2, "b";q=3;w=3, "c";q=4;w=4`, `"a";r=1;t=1, "b";r=2;t=1, "c";r=3;t=1`, true},
		{5, []string{item(0), item(2), item(3), item(4)}, `"a";q=2;w=2, "b";q=3;w=3, "c";q=4;w=4`, `"a";r=1;t=1, "b";r=2;t=1, "c";r=3;t=1`, true},
		{5, []string{item(0), item(2), item(4)}, `"a";q=2;w=2, "b";q=3;w=3, "c";q=4;w=4`, `"a";r=1;t=1, "b";r=2;t=1, "c";r=3;t=1`, false},
	}
	for _, tt := range tests {
		h := http.Header{}
		var out arena
		sc := getScratch(&out)
		known := &policyField{items: tt.known, value: strings.Join(tt.known, ", ")}
		st.setRateLimitFields(h, &decide.Evaluation{Policies: all[:tt.n]}, &sc.Scratch, &out, known)
		sc.release(&out)
		if got := h.Values("RateLimit-Policy"); len(got) != 1 || got[0] != tt.pol {
			t.Errorf("%d policies, known %q: RateLimit-Policy %q, want %q", tt.n, tt.known, got, tt.pol)
		}
		if got := h.Values("RateLimit"); len(got) != 1 || got[0] != tt.curr {
			t.Errorf("%d policies, known %q: RateLimit %q, want %q", tt.n, tt.known, got, tt.curr)
		}
		if used, want := len(out.bytes()), len(tt.curr); (used > want) != tt.polBytes {
			t.Errorf("%d policies, known %q: %d bytes used for %d of RateLimit; want RateLimit-Policy to take bytes: %v", tt.n, tt.known, used, want, tt.polBytes)
		}
	}
}

// BenchmarkRateLimitFields: the two response fields of a request that
// passed two policies.
func BenchmarkRateLimitFields(b *testing.B) {
	lim := limiter.Limit{Rate: limiter.Rate{Count: 1000000, Per: time.Second}, Burst: 1000000}
	ev := &decide.Evaluation{Policies: []decide.PolicyResult{
		{Policy: "per-network", Index: 0, Key: "k1", Limit: lim, Cost: 1, Remaining: 999999, ResetAfter: time.Microsecond, Decision: decide.DecisionPassed, Charged: true},
		{Policy: "per-account", Index: 1, Key: "k2", Limit: lim, Cost: 1, Remaining: 999999, ResetAfter: time.Microsecond, Decision: decide.DecisionPassed, Charged: true},
	}}
	st := &rateLimitState{items: []string{policyItem("per-network", lim), policyItem("per-account", lim)}}
	known := &policyField{items: st.items}
	known.value = strings.Join(known.items, ", ")
	h, out := http.Header{}, new(arena)
	b.ReportAllocs()
	for b.Loop() {
		clear(h)
		*out = arena{}
		sc := getScratch(out)
		st.setRateLimitFields(h, ev, &sc.Scratch, out, known)
		sc.release(out)
	}
}

// TestWindowSeconds: the "w" of RateLimit-Policy is Burst ÷ Rate, exactly,
// rounded up to whole seconds (draft-ietf-httpapi-ratelimit-headers: a
// client pacing itself at q per w must stay within the limit).
func TestWindowSeconds(t *testing.T) {
	r := func(n int64, per time.Duration) limiter.Rate { return limiter.Rate{Count: n, Per: per} }
	for _, tt := range []struct {
		l    limiter.Limit
		want int64
	}{
		{limiter.Limit{Rate: r(3, time.Second), Burst: 3}, 1}, // not 2: the interval's rounding is not the window's
		{limiter.Limit{Rate: r(9, time.Second), Burst: 9}, 1},
		{limiter.Limit{Rate: r(7, time.Minute), Burst: 7}, 60},
		{limiter.Limit{Rate: r(3, time.Second), Burst: 4}, 2}, // 1.33 s
		{limiter.Limit{Rate: r(1, time.Second), Burst: 3}, 3},
		{limiter.Limit{Rate: r(2, time.Minute), Burst: 1}, 30},
		{limiter.Limit{Rate: r(5, time.Second), Burst: 1}, 1}, // 0.2 s
		{limiter.Limit{Rate: r(1, time.Hour), Burst: 1}, 3600},
		{limiter.Limit{Rate: r(1_000_000, time.Second), Burst: 1_000_000}, 1},
		{limiter.Limit{Rate: r(1, time.Hour), Burst: math.MaxInt64}, 9223372037}, // saturates, as Window does
		{limiter.Limit{Rate: r(1, time.Second), Burst: 0}, 0},
	} {
		if got := windowSeconds(tt.l); got != tt.want {
			t.Errorf("windowSeconds(%v burst %d) = %d; want %d", tt.l.Rate, tt.l.Burst, got, tt.want)
		}
	}
}
