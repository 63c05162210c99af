package memory

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

var _ limiter.Limiter = (*Limiter)(nil)

func TestRejectedConsumesNothing(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{Now: clk.Time})
	li := lim(1, time.Second, 3)
	mustTake(t, l, limiter.Request{Key: "k", Limit: li, Cost: 2}) // 1 left
	for range 5 {
		d := mustTake(t, l, limiter.Request{Key: "k", Limit: li, Cost: 2})[0]
		if want := (limiter.Decision{Remaining: 1, RetryAfter: time.Second, ResetAfter: 2 * time.Second}); d != want {
			t.Fatalf("repeated rejection: got %+v; want %+v", d, want)
		}
	}
	// The one token is still there.
	d := mustTake(t, l, limiter.Request{Key: "k", Limit: li, Cost: 1})[0]
	if want := (limiter.Decision{Allowed: true, Remaining: 0, ResetAfter: 3 * time.Second}); d != want {
		t.Errorf("after rejections: got %+v; want %+v", d, want)
	}
}

func TestNeverTracksNoKey(t *testing.T) {
	l := New(Options{Now: clocktest.NewManualClock().Time})
	d := mustTake(t, l, limiter.Request{Key: "k", Limit: lim(1, time.Second, 2), Cost: 3})[0]
	if want := (limiter.Decision{Remaining: 2, Never: true}); d != want {
		t.Errorf("got %+v; want %+v", d, want)
	}
	if n := l.len(); n != 0 {
		t.Errorf("Len after a Never = %d; want 0", n)
	}
}

// TestAllOrNothing: several policies on one request; one rejects, none is
// charged (nginx across limit_req zones; unlike Envoy RLS issue 1060).
func TestAllOrNothing(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{Now: clk.Time})
	account := limiter.Request{Key: "account=a", Limit: lim(1, time.Second, 5), Cost: 1}
	tenant := limiter.Request{Key: "tenant=t", Limit: lim(10, time.Second, 10), Cost: 1}
	op := limiter.Request{Key: "op=GET /x", Limit: lim(1, time.Minute, 2), Cost: 1}

	type D = limiter.Decision
	// Two calls charge all three.
	for i, want := range [][]D{
		{{Allowed: true, Remaining: 4, ResetAfter: time.Second}, {Allowed: true, Remaining: 9, ResetAfter: 100 * ms}, {Allowed: true, Remaining: 1, ResetAfter: time.Minute}},
		{{Allowed: true, Remaining: 3, ResetAfter: 2 * time.Second}, {Allowed: true, Remaining: 8, ResetAfter: 200 * ms}, {Allowed: true, Remaining: 0, ResetAfter: 2 * time.Minute}},
	} {
		got := mustTake(t, l, account, tenant, op)
		for j := range want {
			if got[j] != want[j] {
				t.Errorf("call %d, request %d: got %+v; want %+v", i+1, j, got[j], want[j])
			}
		}
	}
	// The third: op rejects. The others report what they would do, and
	// nothing is charged.
	want := []D{
		{Allowed: true, Remaining: 2, ResetAfter: 3 * time.Second},
		{Allowed: true, Remaining: 7, ResetAfter: 300 * ms},
		{Remaining: 0, RetryAfter: time.Minute, ResetAfter: 2 * time.Minute},
	}
	for round := range 3 {
		got := mustTake(t, l, account, tenant, op)
		for j := range want {
			if got[j] != want[j] {
				t.Errorf("rejected call %d, request %d: got %+v; want %+v", round, j, got[j], want[j])
			}
		}
	}
	if got, want := remaining(t, l, account.Key, account.Limit), int64(3); got != want {
		t.Errorf("account remaining = %d; want %d (unchanged)", got, want)
	}
	if got, want := remaining(t, l, tenant.Key, tenant.Limit), int64(8); got != want {
		t.Errorf("tenant remaining = %d; want %d (unchanged)", got, want)
	}
	// A rejected call with a new key tracks nothing.
	fresh := limiter.Request{Key: "account=new", Limit: account.Limit, Cost: 1}
	before := l.len()
	if d := mustTake(t, l, fresh, op); d[0].Allowed != true || d[1].Allowed {
		t.Fatalf("got %+v; want fresh allowed, op rejected", d)
	}
	if l.len() != before {
		t.Errorf("Len went from %d to %d after a rejected call", before, l.len())
	}
	// The first request rejecting blocks the later ones too.
	got := mustTake(t, l, op, account)
	if got[0].Allowed || !got[1].Allowed {
		t.Fatalf("got %+v", got)
	}
	if r := remaining(t, l, account.Key, account.Limit); r != 3 {
		t.Errorf("account remaining = %d; want 3", r)
	}
}

// TestSameKeyTwice: two requests on one key in one call are charged in
// order within the atomic step; the second sees the first's charge.
func TestSameKeyTwice(t *testing.T) {
	clk := clocktest.NewManualClock()
	li := lim(1, time.Second, 3)
	type D = limiter.Decision
	tests := []struct {
		name      string
		costs     []int64
		want      []D
		remaining int64 // after the call
	}{
		{"both fit", []int64{1, 2},
			[]D{{Allowed: true, Remaining: 2, ResetAfter: time.Second}, {Allowed: true, Remaining: 0, ResetAfter: 3 * time.Second}}, 0},
		{"second does not fit after first", []int64{2, 2},
			[]D{{Allowed: true, Remaining: 1, ResetAfter: 2 * time.Second}, {Remaining: 1, RetryAfter: time.Second, ResetAfter: 2 * time.Second}}, 3},
		{"first rejected, second sees no charge", []int64{4, 3},
			[]D{{Remaining: 3, Never: true}, {Allowed: true, Remaining: 0, ResetAfter: 3 * time.Second}}, 3},
		{"three times", []int64{1, 1, 1},
			[]D{{Allowed: true, Remaining: 2, ResetAfter: time.Second}, {Allowed: true, Remaining: 1, ResetAfter: 2 * time.Second}, {Allowed: true, Remaining: 0, ResetAfter: 3 * time.Second}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(Options{Now: clk.Time})
			var reqs []limiter.Request
			for _, c := range tc.costs {
				reqs = append(reqs, limiter.Request{Key: "k", Limit: li, Cost: c})
			}
			reqs = append(reqs, limiter.Request{Key: "other", Limit: li, Cost: 1}) // another key between/after
			got := mustTake(t, l, reqs...)
			for i := range tc.want {
				if got[i] != tc.want[i] {
					t.Errorf("request %d: got %+v; want %+v", i, got[i], tc.want[i])
				}
			}
			if r := remaining(t, l, "k", li); r != tc.remaining {
				t.Errorf("remaining after = %d; want %d", r, tc.remaining)
			}
			if tc.remaining == 3 { // nothing was charged: a Peek now sees the same
				if d := mustPeek(t, l, reqs...); !slices.Equal(d[:len(tc.want)], tc.want) {
					t.Errorf("Peek after an uncharged call = %+v; want %+v", d, tc.want)
				}
			}
		})
	}
}

// TestPeekNeverCharges: Peek returns what Take would, charges nothing and
// tracks no key.
func TestPeekNeverCharges(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{Now: clk.Time})
	a := limiter.Request{Key: "a", Limit: lim(2, time.Second, 3), Cost: 1}
	b := limiter.Request{Key: "b", Limit: lim(1, time.Second, 1), Cost: 1}
	for range 10 {
		d := mustPeek(t, l, a, b, a)
		want := []limiter.Decision{
			{Allowed: true, Remaining: 2, ResetAfter: 500 * ms},
			{Allowed: true, Remaining: 0, ResetAfter: time.Second},
			{Allowed: true, Remaining: 1, ResetAfter: time.Second},
		}
		if !slices.Equal(d, want) {
			t.Fatalf("Peek = %+v; want %+v", d, want)
		}
	}
	if n := l.len(); n != 0 {
		t.Fatalf("Len after Peeks = %d; want 0", n)
	}
	peeked := mustPeek(t, l, a, b, a)
	taken := mustTake(t, l, a, b, a)
	if !slices.Equal(peeked, taken) {
		t.Errorf("Peek %+v != Take %+v", peeked, taken)
	}
	clk.Advance(250 * ms)
	for range 3 {
		if r := remaining(t, l, "a", a.Limit); r != 1 {
			t.Fatalf("remaining a = %d; want 1", r)
		}
	}
	// Peek on a rejected call matches Take too.
	peeked = mustPeek(t, l, a, b)
	taken = mustTake(t, l, a, b)
	if !slices.Equal(peeked, taken) || taken[1].Allowed {
		t.Errorf("Peek %+v, Take %+v; want equal, b rejected", peeked, taken)
	}
}

func TestErrors(t *testing.T) {
	l := New(Options{Now: clocktest.NewManualClock().Time})
	ok := lim(1, time.Second, 1)
	bad := []struct {
		name string
		reqs []limiter.Request
		want string
	}{
		{"empty key", []limiter.Request{{Key: "", Limit: ok, Cost: 1}}, "limiter: invalid request: request 0: empty key"},
		{"zero cost", []limiter.Request{{Key: "a", Limit: ok, Cost: 1}, {Key: "b", Limit: ok, Cost: 0}}, "limiter: invalid request: request 1: cost must be at least 1"},
		{"zero limit", []limiter.Request{{Key: "a", Limit: limiter.Limit{}, Cost: 1}}, "limiter: invalid request: request 0: limiter: invalid limit: rate count 0, want >= 1"},
	}
	for _, tc := range bad {
		for _, op := range []struct {
			name string
			f    func(context.Context, []limiter.Decision, []limiter.Request) ([]limiter.Decision, error)
		}{{"Take", l.Take}, {"Peek", l.Peek}} {
			d, err := op.f(context.Background(), nil, tc.reqs)
			if d != nil || !errors.Is(err, limiter.ErrInvalidRequest) || err.Error() != tc.want {
				t.Errorf("%s %s: got %v, %v; want nil, %q wrapping ErrInvalidRequest", op.name, tc.name, d, err, tc.want)
			}
		}
	}
	if l.len() != 0 {
		t.Errorf("Len after invalid requests = %d", l.len())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, err := l.Take(ctx, nil, []limiter.Request{{Key: "a", Limit: ok, Cost: 1}}); d != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Take with a cancelled context: %v, %v; want nil, context.Canceled", d, err)
	}
	if l.len() != 0 {
		t.Errorf("Len after a cancelled Take = %d", l.len())
	}

	for _, op := range []func(context.Context, []limiter.Decision, []limiter.Request) ([]limiter.Decision, error){l.Take, l.Peek} {
		d, err := op(context.Background(), nil, nil)
		if err != nil || d == nil || len(d) != 0 {
			t.Errorf("no requests: got %#v, %v; want an empty non-nil slice", d, err)
		}
	}
}

func TestNewOptions(t *testing.T) {
	tests := []struct {
		maxKeys    int
		wantShards int
		wantTotal  int
	}{
		{0, 256, defaultMaxKeys},
		{1, 1, 1},
		{2047, 1, 2047},
		{2048, 2, 2048},
		{5000, 4, 5000},
		{1 << 20, 256, 1 << 20},
		{1_000_003, 256, 1_000_003},
	}
	for _, tc := range tests {
		l := New(Options{MaxKeys: tc.maxKeys})
		if len(l.shards) != tc.wantShards || l.maxKeys != int64(tc.wantTotal) {
			t.Errorf("MaxKeys %d: %d shards, bound %d; want %d shards, bound %d", tc.maxKeys, len(l.shards), l.maxKeys, tc.wantShards, tc.wantTotal)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("New with negative MaxKeys did not panic")
		}
	}()
	New(Options{MaxKeys: -1})
}

func TestDefaultClockIsMonotonic(t *testing.T) {
	l := New(Options{})
	a := l.now()
	b := l.now()
	if a < 0 || b < a {
		t.Errorf("default clock went %v then %v", a, b)
	}
}
