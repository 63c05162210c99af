package memory

import (
	"math"
	"math/rand/v2"
	"testing"
)

// put is what a locked call does to charge or track a bucket: revive an
// evicted cell, store into a live one, or reserve room and insert.
func (s *shard) put(h uint64, tat int64) (isNew bool) {
	if t := s.tab.Load(); t != nil {
		if k := t.find(h); k >= 0 {
			c := &t.cells[k]
			old := c.tat.Load()
			c.tat.Store(tat)
			s.lower(tat, c) // random TATs may go down, unlike charges
			if old == tomb {
				s.live++
				return true
			}
			return false
		}
	}
	s.reserve(1)
	s.insert(h, tat)
	return true
}

// get returns h's TAT and whether h is tracked.
func (s *shard) get(h uint64) (int64, bool) {
	t := s.tab.Load()
	if t == nil {
		return 0, false
	}
	k := t.find(h)
	if k < 0 {
		return 0, false
	}
	v := t.cells[k].tat.Load()
	return v, v != tomb
}

// TestTableAgainstMap drives a shard's table and a Go map with the same
// random puts, gets, sweeps and earliest-TAT queries, over hashes crowded into few home cells (so
// probe runs wrap around the end, and evicted cells are revived and
// rebuilt away), and checks they always agree.
func TestTableAgainstMap(t *testing.T) {
	for _, spread := range []uint64{4, 64, math.MaxUint32} {
		rng := rand.New(rand.NewPCG(1, spread))
		var s shard
		s.init()
		ref := map[uint64]int64{}
		hash := func() uint64 {
			// High 32 bits pick the home cell: keep few distinct ones.
			return norm(rng.Uint64N(spread)<<32 | rng.Uint64N(8))
		}
		for step := range 20_000 {
			switch op := rng.IntN(10); {
			case op < 6:
				h, tat := hash(), rng.Int64N(1000)
				_, had := ref[h]
				if isNew := s.put(h, tat); isNew == had {
					t.Fatalf("spread %d step %d: put(%#x) new=%v; map had it: %v", spread, step, h, isNew, had)
				}
				ref[h] = tat
			case op < 8:
				h := hash()
				got, ok := s.get(h)
				want, wok := ref[h]
				if got != want && ok || ok != wok {
					t.Fatalf("spread %d step %d: get(%#x) = %d, %v; map %d, %v", spread, step, h, got, ok, want, wok)
				}
			case op < 9:
				// earliest is exact whether it trusts the hint or visits.
				want := int64(math.MaxInt64)
				for _, tat := range ref {
					want = min(want, tat)
				}
				if got, ok := s.earliest(); ok != (len(ref) > 0) || ok && (got != want || s.hint.Load() != want) {
					t.Fatalf("spread %d step %d: earliest = %d, hint %d; map %d", spread, step, got, s.hint.Load(), want)
				}
			default:
				now := rng.Int64N(1000)
				removed := s.sweep(now)
				wantRemoved, wantLow := int64(0), int64(math.MaxInt64)
				for h, tat := range ref {
					if tat <= now {
						delete(ref, h)
						wantRemoved++
					} else {
						wantLow = min(wantLow, tat)
					}
				}
				// A sweep that skips the shard (now below the hint) leaves the
				// hint a lower bound; one that visits makes it exact.
				skipped := removed == 0 && now < s.hint.Load()
				if hint := s.hint.Load(); removed != wantRemoved || hint > wantLow || !skipped && hint != wantLow {
					t.Fatalf("spread %d step %d: sweep(%d) = %d, hint %d; map %d, %d", spread, step, now, removed, s.hint.Load(), wantRemoved, wantLow)
				}
			}
			if s.live != len(ref) {
				t.Fatalf("spread %d step %d: %d entries; map %d", spread, step, s.live, len(ref))
			}
			if tb := s.tab.Load(); tb != nil && s.used*5 > len(tb.cells)*4 {
				t.Fatalf("spread %d step %d: %d of %d cells used", spread, step, s.used, len(tb.cells))
			}
		}
		// Every entry is still reachable.
		for h, want := range ref {
			if got, ok := s.get(h); !ok || got != want {
				t.Fatalf("spread %d: lost %#x", spread, h)
			}
		}
	}
}

// TestTableLoad: while buckets are only added, the table grows by half when
// more than 4/5 full, so its load stays within [0.53, 0.8] once past the
// minimum size.
func TestTableLoad(t *testing.T) {
	var s shard
	s.init()
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 100_000 {
		s.put(norm(rng.Uint64()), int64(i))
		n := len(s.tab.Load().cells)
		if load := float64(s.live) / float64(n); load > 0.8 || (n > 1000 && load < 0.53) {
			t.Fatalf("%d entries in %d cells: load %.3f", s.live, n, load)
		}
	}
}

// TestSwapKeepsAConcurrentCharge: a lock-free charge (a compare-and-swap
// of the cell by decideOne) that lands between swap's read of a cell and
// its write is not lost: swap reads again and hands the charged TAT to
// its caller (a rebuild copies it; an eviction keeps it), rather than
// overwriting it with a decision made on the stale one.
func TestSwapKeepsAConcurrentCharge(t *testing.T) {
	for _, tt := range []struct {
		name string
		next func(v int64) int64
		want int64 // the cell's TAT after the swap
	}{
		{"freeze (rebuild)", func(int64) int64 { return frozen }, frozen},
		{"evict at now=150", func(v int64) int64 {
			if v <= 150 {
				return tomb
			}
			return v
		}, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c cell
			c.tat.Store(100)
			calls := 0
			got := c.swap(func(v int64) int64 {
				if calls++; calls == 1 && !c.tat.CompareAndSwap(100, 200) {
					t.Fatal("the concurrent charge could not land")
				}
				return tt.next(v)
			})
			if got != 200 || c.tat.Load() != tt.want {
				t.Errorf("swap returned %d and left %d; want 200 (the charged TAT) and %d", got, c.tat.Load(), tt.want)
			}
		})
	}
}
