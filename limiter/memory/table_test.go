package memory

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestTableAgainstMap drives the open-addressing table and a Go map with
// the same random puts, gets and evictions, over hashes crowded into few
// home slots (so probe runs wrap around the end and deletions shift them
// back), and checks they always agree.
func TestTableAgainstMap(t *testing.T) {
	for _, spread := range []uint64{4, 64, math.MaxUint32} {
		rng := rand.New(rand.NewPCG(1, spread))
		var tb table
		ref := map[uint64]int64{}
		hash := func() uint64 {
			// High 32 bits pick the home slot: keep few distinct ones.
			return rng.Uint64N(spread)<<32 | rng.Uint64N(8)
		}
		for step := range 20_000 {
			switch op := rng.IntN(10); {
			case op < 6:
				h, tat := hash(), rng.Int64N(1000)
				_, had := ref[norm(h)]
				if isNew := tb.put(h, tat); isNew == had {
					t.Fatalf("spread %d step %d: put(%#x) new=%v; map had it: %v", spread, step, h, isNew, had)
				}
				ref[norm(h)] = tat
			case op < 9:
				h := hash()
				got, ok := tb.get(h)
				want, wok := ref[norm(h)]
				if got != want || ok != wok {
					t.Fatalf("spread %d step %d: get(%#x) = %d, %v; map %d, %v", spread, step, h, got, ok, want, wok)
				}
			default:
				now := rng.Int64N(1000)
				removed, low := tb.evict(now)
				wantRemoved, wantLow := 0, int64(math.MaxInt64)
				for h, tat := range ref {
					if tat <= now {
						delete(ref, h)
						wantRemoved++
					} else {
						wantLow = min(wantLow, tat)
					}
				}
				if removed != wantRemoved || low != wantLow {
					t.Fatalf("spread %d step %d: evict(%d) = %d, %d; map %d, %d", spread, step, now, removed, low, wantRemoved, wantLow)
				}
			}
			if tb.n != len(ref) {
				t.Fatalf("spread %d step %d: %d entries; map %d", spread, step, tb.n, len(ref))
			}
		}
		// Every entry is still reachable.
		for h, want := range ref {
			if got, ok := tb.get(h); !ok || got != want {
				t.Fatalf("spread %d: lost %#x", spread, h)
			}
		}
	}
}

// TestTableLoad: the table grows by half when more than 4/5 full, so its
// load stays within [0.53, 0.8] once past the minimum size.
func TestTableLoad(t *testing.T) {
	var tb table
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 100_000 {
		tb.put(rng.Uint64(), int64(i))
		if load := float64(tb.n) / float64(len(tb.slots)); load > 0.8 || (len(tb.slots) > 1000 && load < 0.53) {
			t.Fatalf("%d entries in %d slots: load %.3f", tb.n, len(tb.slots), load)
		}
	}
}
