package memory

import (
	"math"
	"runtime"
	"sync/atomic"
)

// table is an open-addressing hash table from a bucket's 64-bit hash to its
// TAT, read and charged without locks: linear probing over 16-byte cells,
// grown by half (or rebuilt at its size) when more than 4/5 of its cells are
// used. Its load therefore stays between about 0.53 and 0.8 while buckets
// are only added, so a tracked bucket costs 20 to 30 bytes (nginx documents
// 128 bytes per limit_req state; a Go map[uint64]int64 costs about 38). The
// cell is chosen from the hash's high 32 bits (the low bits pick the shard)
// by multiply-shift, so the size need not be a power of two. Hashes are
// keyed and uniformly spread; 0 marks an empty cell (a hash of 0 is stored as
// 1, see [norm]).
//
// Concurrency. Only the holder of the shard's mutex inserts, evicts or
// replaces the table; anyone may find a bucket and charge it:
//
//   - A cell's hash is written once, from 0 to its bucket, after its TAT, so
//     a reader that finds the hash reads that bucket's TAT and never
//     another's, and probe runs never break (nothing is ever moved out of a
//     run while the table is in use).
//   - A TAT changes only by compare-and-swap from the value a decision was
//     made on, so a charge is never lost and never applied to a state the
//     decision did not see.
//   - Evicting a bucket swaps its TAT for [tomb]; the cell keeps its hash
//     until the table is rebuilt, and only that bucket can revive it.
//   - Rebuilding swaps every TAT of the old table for [frozen] before
//     copying it, so a charge on the old table either lands before the copy
//     or fails and is retried on the new one.
//   - A call deciding several buckets at once holds their cells by swapping
//     each TAT for [busy] (see [hold]) and writes the results back.
//
// Readers that meet a sentinel go to the shard's mutex.
type table struct {
	cells []cell
}

// cell is one slot: a bucket's hash (0 while empty) and its TAT in
// nanoseconds on the limiter's clock, or one of the sentinels below.
type cell struct {
	h   atomic.Uint64
	tat atomic.Int64
}

// Sentinel TATs. A real TAT is clamped to at least minTAT (see [stored]);
// any TAT at or below the clock means a full bucket, so the clamp changes
// no decision.
const (
	tomb   = math.MinInt64     // evicted: the bucket is not tracked
	frozen = math.MinInt64 + 1 // the table was replaced: use the shard's new one
	busy   = math.MinInt64 + 2 // held by a call deciding several buckets
	minTAT = math.MinInt64 + 3
)

// stored returns tat as a cell may hold it: at least minTAT.
func stored(tat int64) int64 { return max(tat, minTAT) }

// minTable is the smallest table, in cells.
const minTable = 16

// norm maps the reserved empty marker to a valid hash.
func norm(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// home returns the first cell probed for h.
func (t *table) home(h uint64) int {
	return int((h >> 32) * uint64(len(t.cells)) >> 32)
}

// find returns the index of h's cell (live, evicted or held), or -1. Safe
// without the shard's mutex.
func (t *table) find(h uint64) int {
	n := len(t.cells)
	if n == 0 {
		return -1
	}
	for i := t.home(h); ; {
		switch t.cells[i].h.Load() {
		case h:
			return i
		case 0:
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// insert places a bucket that has no cell in the first empty cell of its
// probe run: the TAT first, then the hash that makes it visible. It returns
// the cell. The caller holds the shard's mutex and has made room (a table
// is never full).
func (t *table) insert(h uint64, tat int64) *cell {
	for i := t.home(h); ; {
		c := &t.cells[i]
		if c.h.Load() == 0 {
			c.tat.Store(tat)
			c.h.Store(h)
			return c
		}
		if i++; i == len(t.cells) {
			i = 0
		}
	}
}

// evict swaps the TAT of every bucket that is full at now (TAT <= now) for
// tomb and returns how many it evicted, the lowest TAT left (math.MaxInt64
// when none) and its cell (nil when none). A held cell is waited for. The
// caller holds the shard's mutex and holds no cell of this table.
func (t *table) evict(now int64) (evicted int, low int64, lowCell *cell) {
	low = math.MaxInt64
	for i := range t.cells {
		c := &t.cells[i]
		if c.h.Load() == 0 {
			continue
		}
		v := c.swap(func(v int64) int64 {
			if v != tomb && v <= now {
				return tomb
			}
			return v
		})
		switch {
		case v == tomb:
		case v <= now:
			evicted++
		case v < low:
			low, lowCell = v, c
		}
	}
	return evicted, low, lowCell
}

// lowest returns the lowest TAT of the tracked buckets (math.MaxInt64 when
// none) and its cell (nil when none). A held cell is waited for. The caller
// holds the shard's mutex and holds no cell of this table.
func (t *table) lowest() (low int64, lowCell *cell) {
	low = math.MaxInt64
	for i := range t.cells {
		c := &t.cells[i]
		if c.h.Load() == 0 {
			continue
		}
		if v := c.load(); v != tomb && v < low {
			low, lowCell = v, c
		}
	}
	return low, lowCell
}

// smallest merges the tracked TATs of t into best[:n], the lowest TATs
// seen so far in ascending order, keeping at most len(best) of them, and
// returns the new n. A held cell is waited for. The caller holds the
// shard's mutex and holds no cell of this table.
func (t *table) smallest(best []int64, n int) int {
	for i := range t.cells {
		c := &t.cells[i]
		if c.h.Load() == 0 {
			continue
		}
		v := c.load()
		if v == tomb || n == len(best) && v >= best[n-1] {
			continue
		}
		if n < len(best) {
			n++
		}
		j := n - 1
		for ; j > 0 && best[j-1] > v; j-- {
			best[j] = best[j-1]
		}
		best[j] = v
	}
	return n
}

// highest returns the highest TAT of the tracked buckets (math.MinInt64
// when none). A held cell is waited for. The caller holds the shard's mutex
// and holds no cell of this table.
func (t *table) highest() int64 {
	high := int64(math.MinInt64)
	for i := range t.cells {
		c := &t.cells[i]
		if c.h.Load() != 0 {
			if v := c.load(); v != tomb {
				high = max(high, v)
			}
		}
	}
	return high
}

// full counts the buckets that are full at now (TAT <= now), which a sweep
// would evict; a held cell is counted as not full. The caller holds the
// shard's mutex.
func (t *table) full(now int64) int {
	n := 0
	for i := range t.cells {
		c := &t.cells[i]
		if v := c.tat.Load(); c.h.Load() != 0 && v > busy && v <= now {
			n++
		}
	}
	return n
}

// rebuild freezes t and returns a table of size cells holding its tracked
// buckets, and how many there are. The caller holds the shard's mutex and
// holds no cell of t; size must leave room for them.
func (t *table) rebuild(size int) (*table, int) {
	nt := &table{cells: make([]cell, size)}
	live := 0
	for i := range t.cells {
		c := &t.cells[i]
		h := c.h.Load()
		if h == 0 {
			continue
		}
		if v := c.swap(func(int64) int64 { return frozen }); v != tomb {
			nt.insert(h, v)
			live++
		}
	}
	return nt, live
}

// swap replaces c's TAT v with next(v), waiting while another call holds
// the cell, and returns v. The caller holds the shard's mutex and no cell
// of the table, so the only holders are calls that never wait while
// holding.
func (c *cell) swap(next func(v int64) int64) int64 {
	for spin := 0; ; spin++ {
		v := c.tat.Load()
		if v == busy {
			backoff(spin)
			continue
		}
		if c.tat.CompareAndSwap(v, next(v)) {
			return v
		}
	}
}

// load returns c's TAT, waiting while another call holds the cell. The
// caller holds the shard's mutex and no cell of the table, so the cell is
// not frozen and its only holders are calls that never wait while holding.
func (c *cell) load() int64 {
	for spin := 0; ; spin++ {
		if v := c.tat.Load(); v != busy {
			return v
		}
		backoff(spin)
	}
}

// hold swaps c's TAT for busy, waiting while another call holds it, and
// returns the TAT it held (possibly tomb). The caller holds the shard's
// mutex, so the table is current and the cell cannot be frozen; the only
// other holders are calls that never wait while holding.
func hold(c *cell) int64 {
	for spin := 0; ; spin++ {
		v := c.tat.Load()
		if v != busy && c.tat.CompareAndSwap(v, busy) {
			return v
		}
		backoff(spin)
	}
}

// maxSpin is how many times a call without the shard's mutex retries a
// held cell before taking the mutex instead.
const maxSpin = 64

// backoff yields the processor after a few spins, so a waiter does not
// starve the holder it waits for.
func backoff(spin int) {
	if spin >= maxSpin {
		runtime.Gosched()
	}
}
