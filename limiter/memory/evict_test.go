package memory

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratekey/ratekey/internal/clocktest"

	"github.com/ratekey/ratekey/limiter"
)

// TestEviction: at MaxKeys, states whose bucket is full again are evicted;
// a state in debt never is (evicting it would hand its owner a fresh bucket,
// the Envoy local dynamic descriptor failure); with nothing evictable a new
// key fails with ErrCapacity and nothing is charged.
func TestEviction(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 2, Now: clk.Time})
	li := lim(1, time.Second, 2)
	take := func(key string, cost int64) (limiter.Decision, error) {
		d, err := l.Take(t.Context(), nil, []limiter.Request{{Key: key, Limit: li, Cost: cost}})
		if err != nil {
			return limiter.Decision{}, err
		}
		return d[0], nil
	}
	type D = limiter.Decision
	steps := []struct {
		at      time.Duration
		key     string
		cost    int64
		want    D
		wantErr error
		wantLen int
	}{
		{0, "abuser", 2, D{Allowed: true, ResetAfter: 2 * time.Second}, nil, 1},           // in debt until 2s
		{0, "b", 1, D{Allowed: true, Remaining: 1, ResetAfter: time.Second}, nil, 2},      // in debt until 1s
		{0, "c", 1, D{}, limiter.ErrCapacity, 2},                                          // nothing evictable
		{500 * ms, "c", 1, D{}, limiter.ErrCapacity, 2},                                   // still nothing
		{500 * ms, "b", 1, D{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms}, nil, 2}, // existing keys still work; b in debt until 2s
		{1999 * ms, "c", 1, D{}, limiter.ErrCapacity, 2},
		{1999 * ms, "abuser", 2, D{Remaining: 1, RetryAfter: 1 * ms, ResetAfter: 1 * ms}, nil, 2},  // debt kept: not reset
		{2 * time.Second, "c", 1, D{Allowed: true, Remaining: 1, ResetAfter: time.Second}, nil, 1}, // both full: both evicted
		{2 * time.Second, "abuser", 2, D{Allowed: true, ResetAfter: 2 * time.Second}, nil, 2},      // a new, full bucket: equivalent
		{2 * time.Second, "d", 1, D{}, limiter.ErrCapacity, 2},
		{3 * time.Second, "d", 1, D{Allowed: true, Remaining: 1, ResetAfter: time.Second}, nil, 2},                // c full at 3s: evicted; abuser (debt until 4s) kept
		{3 * time.Second, "abuser", 2, D{Remaining: 1, RetryAfter: time.Second, ResetAfter: time.Second}, nil, 2}, // debt kept
	}
	for i, s := range steps {
		clk.Set(s.at)
		got, err := take(s.key, s.cost)
		if s.wantErr != nil {
			if !errors.Is(err, s.wantErr) {
				t.Errorf("step %d (t=%v %s): err = %v; want %v", i+1, s.at, s.key, err, s.wantErr)
			}
		} else if err != nil || got != s.want {
			t.Errorf("step %d (t=%v %s): got %+v, %v; want %+v", i+1, s.at, s.key, got, err, s.want)
		}
		if n := l.len(); n != s.wantLen {
			t.Errorf("step %d: Len = %d; want %d", i+1, n, s.wantLen)
		}
		checkCount(t, l)
	}
}

// TestEvictionAllOrNothing: ErrCapacity for one new key of a call charges
// none of the call's buckets.
func TestEvictionAllOrNothing(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 2, Now: clk.Time})
	li := lim(1, time.Second, 3)
	mustTake(t, l, limiter.Request{Key: "a", Limit: li, Cost: 1}, limiter.Request{Key: "b", Limit: li, Cost: 1})
	d, err := l.Take(t.Context(), nil, []limiter.Request{
		{Key: "a", Limit: li, Cost: 1},
		{Key: "new", Limit: li, Cost: 1},
	})
	if !errors.Is(err, limiter.ErrCapacity) || d != nil {
		t.Fatalf("got %v, %v; want nil, ErrCapacity", d, err)
	}
	if got := err.Error(); got != "limiter: store full, no state evictable: retry after 1s (2 buckets tracked, all still refilling)" {
		t.Errorf("error text %q", got)
	}
	if r := remaining(t, l, "a", li); r != 2 {
		t.Errorf("remaining a = %d; want 2 (not charged)", r)
	}
	// Peek predicts the same failure (the debug endpoint must not promise PASSED).
	if _, err := l.Peek(t.Context(), nil, []limiter.Request{{Key: "new", Limit: li, Cost: 1}}); !errors.Is(err, limiter.ErrCapacity) {
		t.Errorf("Peek of a new key at capacity: err = %v, want ErrCapacity", err)
	}
	// A call that needs two new slots while only one frees up fails whole.
	clk.Set(time.Second) // a and b full again (TAT = 1s)
	mustTake(t, l, limiter.Request{Key: "a", Limit: li, Cost: 3})
	_, err = l.Take(t.Context(), nil, []limiter.Request{{Key: "x", Limit: li, Cost: 1}, {Key: "y", Limit: li, Cost: 1}})
	if !errors.Is(err, limiter.ErrCapacity) {
		t.Fatalf("two new keys, one slot: err = %v; want ErrCapacity", err)
	}
	if r := remaining(t, l, "a", li); r != 0 {
		t.Errorf("remaining a = %d; want 0 (still in debt)", r)
	}
	// One new key fits in b's slot.
	mustTake(t, l, limiter.Request{Key: "x", Limit: li, Cost: 1}, limiter.Request{Key: "x", Limit: li, Cost: 1})
	if r := remaining(t, l, "x", li); r != 1 || l.len() != 2 {
		t.Errorf("remaining x = %d, Len %d; want 1, 2", r, l.len())
	}
}

// TestEvictionOfCallKey: a sweep may evict a full state that the current
// call is about to charge; the call then re-inserts it.
func TestEvictionOfCallKey(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 2, Now: clk.Time})
	li := lim(1, time.Second, 3)
	mustTake(t, l, limiter.Request{Key: "a", Limit: li, Cost: 1}, limiter.Request{Key: "b", Limit: li, Cost: 1})
	clk.Set(time.Second) // both full
	mustTake(t, l, limiter.Request{Key: "b", Limit: li, Cost: 1}, limiter.Request{Key: "c", Limit: li, Cost: 2})
	if n := l.len(); n != 2 {
		t.Errorf("Len = %d; want 2 (b and c)", n)
	}
	if rb, rc := remaining(t, l, "b", li), remaining(t, l, "c", li); rb != 2 || rc != 1 {
		t.Errorf("remaining b, c = %d, %d; want 2, 1", rb, rc)
	}
}

// TestMaxKeysBound: with several shards, Len never exceeds MaxKeys, full
// states make room, and a flood of new keys while everyone is in debt gets
// ErrCapacity instead of evicting.
func TestMaxKeysBound(t *testing.T) {
	clk := clocktest.NewManualClock()
	const maxKeys = 4096
	l := New(Options{MaxKeys: maxKeys, Now: clk.Time})
	if len(l.shards) < 2 {
		t.Fatalf("want several shards, got %d", len(l.shards))
	}
	li := lim(1, time.Second, 1) // each admitted key is in debt for 1s
	admitted, refused := 0, 0
	for i := range 3 * maxKeys {
		_, err := l.Take(t.Context(), nil, []limiter.Request{{Key: fmt.Sprintf("k%d", i), Limit: li, Cost: 1}})
		switch {
		case err == nil:
			admitted++
		case errors.Is(err, limiter.ErrCapacity):
			refused++
		default:
			t.Fatal(err)
		}
		if n := l.len(); n > maxKeys {
			t.Fatalf("Len = %d > MaxKeys", n)
		}
	}
	if admitted != maxKeys || refused != 2*maxKeys {
		t.Errorf("frozen clock: admitted %d, refused %d", admitted, refused)
	}
	// A second later every bucket is full again: new keys replace them.
	clk.Advance(time.Second)
	for i := range maxKeys / 2 {
		if _, err := l.Take(t.Context(), nil, []limiter.Request{{Key: fmt.Sprintf("n%d", i), Limit: li, Cost: 1}}); err != nil {
			t.Fatalf("new key %d after refill: %v", i, err)
		}
	}
	if n := l.len(); n > maxKeys {
		t.Errorf("Len = %d > MaxKeys", n)
	}
	checkCount(t, l)
}

// TestEvictionAcrossShards: with several shards, room is found in any
// shard, exactly as many new keys fit as states were full, and no state in
// debt is evicted.
func TestEvictionAcrossShards(t *testing.T) {
	clk := clocktest.NewManualClock()
	const maxKeys = 4096
	l := New(Options{MaxKeys: maxKeys, Now: clk.Time})
	if len(l.shards) != 4 {
		t.Fatalf("%d shards; want 4", len(l.shards))
	}
	short, long := lim(1, time.Second, 1), lim(1, time.Hour, 1)
	for i := range maxKeys {
		li := short
		if i%2 == 0 {
			li = long
		}
		mustTake(t, l, limiter.Request{Key: fmt.Sprintf("old%d", i), Limit: li, Cost: 1})
	}
	clk.Advance(time.Second) // the short half is full again
	admitted := 0
	for i := range maxKeys {
		_, err := l.Take(t.Context(), nil, []limiter.Request{{Key: fmt.Sprintf("new%d", i), Limit: long, Cost: 1}})
		switch {
		case err == nil:
			admitted++
		case !errors.Is(err, limiter.ErrCapacity):
			t.Fatal(err)
		}
	}
	if admitted != maxKeys/2 || l.len() != maxKeys {
		t.Errorf("admitted %d new keys, Len %d; want %d, %d", admitted, l.len(), maxKeys/2, maxKeys)
	}
	for i := 0; i < maxKeys; i += 2 {
		if d := mustPeek(t, l, limiter.Request{Key: fmt.Sprintf("old%d", i), Limit: long, Cost: 1})[0]; d.Allowed {
			t.Fatalf("old%d (in debt) was handed a fresh bucket", i)
		}
	}
	checkCount(t, l)
}

// checkCount checks that Len agrees with the shards' maps.
func checkCount(t *testing.T, l *Limiter) {
	t.Helper()
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += l.shards[i].live
		l.shards[i].mu.Unlock()
	}
	if n != l.len() {
		t.Errorf("shards hold %d keys; Len says %d", n, l.len())
	}
}

// TestPeekPredictsCapacity: Peek says what Take would do when a new key
// finds the store full of states in debt (ErrCapacity), and passes again
// once a state is full and evictable. Peek itself evicts nothing.
func TestPeekPredictsCapacity(t *testing.T) {
	clk := clocktest.NewManualClock()
	l := New(Options{MaxKeys: 1, Now: clk.Time})
	li := lim(1, time.Second, 2)
	mustTake(t, l, limiter.Request{Key: "a", Limit: li, Cost: 1}) // in debt until 1s
	newKey := []limiter.Request{{Key: "b", Limit: li, Cost: 1}}
	if _, err := l.Peek(t.Context(), nil, newKey); !isCapacity(err) {
		t.Fatalf("Peek new key in a full store: err = %v, want ErrCapacity", err)
	}
	if _, err := l.Take(t.Context(), nil, newKey); !isCapacity(err) {
		t.Fatalf("Take agrees: err = %v", err)
	}
	// An existing key still peeks normally.
	if d := mustPeek(t, l, limiter.Request{Key: "a", Limit: li, Cost: 1})[0]; !d.Allowed || d.Remaining != 0 {
		t.Errorf("Peek existing key = %+v", d)
	}
	// A rejected request needs no room: Peek reports the rejection, not the store.
	if d := mustPeek(t, l, limiter.Request{Key: "b", Limit: li, Cost: 3})[0]; d.Allowed || !d.Never {
		t.Errorf("Peek never-satisfiable new key = %+v", d)
	}
	clk.Set(time.Second) // a is full again: evictable
	if d := mustPeek(t, l, newKey...)[0]; !d.Allowed {
		t.Errorf("Peek after a is full = %+v", d)
	}
	if n := l.len(); n != 1 {
		t.Errorf("Peek evicted: Len = %d, want 1", n)
	}
}
