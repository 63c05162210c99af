package memory

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

// capacityWait returns the RetryAfter of a CapacityError, failing the test
// on any other outcome.
func capacityWait(t *testing.T, what string, err error) time.Duration {
	t.Helper()
	var ce *limiter.CapacityError
	if !errors.As(err, &ce) || !errors.Is(err, limiter.ErrCapacity) {
		t.Fatalf("%s: err = %v; want a CapacityError wrapping ErrCapacity", what, err)
	}
	return ce.RetryAfter
}

// TestCapacityRetryAfter: a full store's error says exactly when the
// earliest state is full again (evictable), Take and Peek alike, and at
// that instant the new key is admitted.
func TestCapacityRetryAfter(t *testing.T) {
	clk := clocktest.NewManualClock()
	const maxKeys = 3
	l := New(Options{MaxKeys: maxKeys, Now: clk.Time})
	li := lim(1, time.Second, 60) // an empty bucket refills in 60 s
	for i := range maxKeys {
		mustTake(t, l, limiter.Request{Key: fmt.Sprintf("k%d", i), Limit: li, Cost: 60}) // TAT 60 s
	}
	newKey := []limiter.Request{{Key: "new", Limit: li, Cost: 1}}
	check := func(at, want time.Duration) {
		t.Helper()
		clk.Set(at)
		_, err := l.Take(t.Context(), nil, newKey)
		if got := capacityWait(t, fmt.Sprintf("Take at %v", at), err); got != want {
			t.Errorf("Take at %v: RetryAfter = %v; want %v", at, got, want)
		}
		_, err = l.Peek(t.Context(), nil, newKey)
		if got := capacityWait(t, fmt.Sprintf("Peek at %v", at), err); got != want {
			t.Errorf("Peek at %v: RetryAfter = %v; want %v", at, got, want)
		}
	}
	check(0, 60*time.Second)
	check(59*time.Second+500*ms, 500*ms)
	check(60*time.Second-1, 1)
	clk.Set(60 * time.Second)
	if d := mustTake(t, l, newKey...)[0]; !d.Allowed {
		t.Errorf("new key at 60 s = %+v; want admitted", d)
	}
	checkCount(t, l)
}

// TestCapacityRetryAfterEarliestWins: with states refilling at different
// times, the wait is until the earliest of them, and follows it when that
// state is charged again or evicted; a call needing two slots waits for
// the second earliest.
func TestCapacityRetryAfterEarliestWins(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 3, Now: clk.Time})
	li := lim(1, time.Second, 60)
	take := func(key string, cost int64) {
		t.Helper()
		mustTake(t, l, limiter.Request{Key: key, Limit: li, Cost: cost})
	}
	take("a", 60) // TAT 60 s
	take("b", 20) // TAT 20 s
	take("c", 45) // TAT 45 s
	wait := func(keys ...string) time.Duration {
		t.Helper()
		var reqs []limiter.Request
		for _, k := range keys {
			reqs = append(reqs, limiter.Request{Key: k, Limit: li, Cost: 1})
		}
		_, err := l.Take(t.Context(), nil, reqs)
		return capacityWait(t, fmt.Sprint(keys), err)
	}
	if got := wait("x"); got != 20*time.Second {
		t.Errorf("one new key: RetryAfter = %v; want 20s (b)", got)
	}
	if got := wait("x", "y"); got != 45*time.Second {
		t.Errorf("two new keys: RetryAfter = %v; want 45s (b, then c)", got)
	}
	if got := wait("x", "y", "z", "w"); got != 0 {
		t.Errorf("four new keys, store of three: RetryAfter = %v; want 0 (never fits: not counted)", got)
	}
	// b charged again at 10 s: 10 + max(0, 20-10) + 30 = TAT 50 s; c (45 s) is now the earliest.
	clk.Set(10 * time.Second)
	take("b", 30)
	if got := wait("x"); got != 35*time.Second {
		t.Errorf("after b's charge: RetryAfter = %v; want 35s (c at 45s)", got)
	}
	// At 45 s c is full again: x takes its slot; then the earliest is b at 50 s.
	clk.Set(45 * time.Second)
	take("x", 60) // TAT 105 s
	if got := wait("y"); got != 5*time.Second {
		t.Errorf("after c's eviction: RetryAfter = %v; want 5s (b at 50s)", got)
	}
	checkCount(t, l)
}

// TestCapacityRetryAfterAcrossShards: MaxKeys bounds the whole store, so
// the earliest state of any shard makes room for a key of any shard; the
// cached earliest state of each shard is followed when charged.
func TestCapacityRetryAfterAcrossShards(t *testing.T) {
	clk := clocktest.NewManualClock()
	const maxKeys = 4096
	l := New(Options{MaxKeys: maxKeys, Now: clk.Time})
	if len(l.shards) != 4 {
		t.Fatalf("%d shards; want 4", len(l.shards))
	}
	li := lim(1, time.Second, 3600)
	for i := range maxKeys {
		cost := int64(3600)
		if i == 1234 {
			cost = 100 // the earliest, in one shard
		}
		mustTake(t, l, limiter.Request{Key: fmt.Sprintf("k%d", i), Limit: li, Cost: cost})
	}
	for i := range 50 { // new keys in every shard
		_, err := l.Take(t.Context(), nil, []limiter.Request{{Key: fmt.Sprintf("new%d", i), Limit: li, Cost: 1}})
		if got := capacityWait(t, "new key", err); got != 100*time.Second {
			t.Fatalf("new%d: RetryAfter = %v; want 100s", i, got)
		}
	}
	mustTake(t, l, limiter.Request{Key: "k1234", Limit: li, Cost: 1000}) // TAT 1100 s
	_, err := l.Take(t.Context(), nil, []limiter.Request{{Key: "new", Limit: li, Cost: 1}})
	if got := capacityWait(t, "after the charge", err); got != 1100*time.Second {
		t.Errorf("after the earliest state's charge: RetryAfter = %v; want 1100s", got)
	}
	clk.Set(1100 * time.Second)
	mustTake(t, l, limiter.Request{Key: "new", Limit: li, Cost: 1})
	checkCount(t, l)
}

// TestCapacityRetryAfterManyNewKeys: a call needing more slots than the
// exact count covers (maxNeed) waits until every state is full again.
func TestCapacityRetryAfterManyNewKeys(t *testing.T) {
	clk := clocktest.NewManualClock()
	const maxKeys = 10
	l := New(Options{MaxKeys: maxKeys, Now: clk.Time})
	li := lim(1, time.Second, 60)
	for i := range maxKeys {
		mustTake(t, l, limiter.Request{Key: fmt.Sprintf("k%d", i), Limit: li, Cost: int64(i + 1)}) // TATs 1..10 s
	}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {maxNeed, maxNeed * time.Second}, {maxNeed + 1, maxKeys * time.Second}} {
		var reqs []limiter.Request
		for i := range tc.n {
			reqs = append(reqs, limiter.Request{Key: fmt.Sprintf("new%d", i), Limit: li, Cost: 1})
		}
		_, err := l.Take(t.Context(), nil, reqs)
		if got := capacityWait(t, fmt.Sprintf("%d new keys", tc.n), err); got != tc.want {
			t.Errorf("%d new keys: RetryAfter = %v; want %v", tc.n, got, tc.want)
		}
	}
}
