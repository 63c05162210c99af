package memory

import (
	"math"
	"sync"
	"sync/atomic"
)

// shard is one mutex's worth of bucket states.
type shard struct {
	// mu serialises the changes to the table's shape: inserting,
	// evicting, rebuilding. Charging a tracked bucket does not take it.
	mu sync.Mutex
	// tab maps a bucket (the keyed hash of key and limit shape) to its
	// TAT; nil until the first insert. Replaced under mu; read without
	// it.
	tab atomic.Pointer[table]
	// live counts the tracked buckets, used the cells with a hash (live
	// or evicted). Guarded by mu.
	live, used int
	// hint is a lower bound of every TAT in tab (math.MaxInt64 when
	// empty): no state of this shard can be evicted before the clock
	// reaches it, so a store full of clients in debt refuses new keys
	// without visiting them. Inserting lowers it; charging only raises
	// TATs, so it stays a lower bound; a sweep makes it exact. Written
	// under mu; read without it to skip shards cheaply.
	hint atomic.Int64
	// low is the cell that held the hint's value when the hint was last
	// made exact (by a sweep, a visit of [shard.earliest], or an insert or
	// revival that lowered it), or nil. While low still holds the hint,
	// the hint is exact: TATs only rise and only the holder of mu inserts.
	// Guarded by mu.
	low *cell
	_   [16]byte // keep hot shards on separate cache lines
}

func (s *shard) init() {
	s.hint.Store(math.MaxInt64)
}

// reserve makes sure n more buckets can be inserted without a rebuild:
// when the table would be more than 4/5 used, it is rebuilt without its
// evicted cells, at its size if the tracked buckets then fill at most half
// of it, else grown by half as often as needed. Callers hold s.mu and no
// cell of the table.
func (s *shard) reserve(n int) {
	t := s.tab.Load()
	size := 0
	if t != nil {
		size = len(t.cells)
	}
	if (s.used+n)*5 <= size*4 {
		return
	}
	want := s.live + n
	if want*2 > size {
		for want*5 > size*4 {
			size = max(minTable, size+size/2)
		}
	}
	nt := &table{cells: make([]cell, size)}
	live := 0
	if t != nil {
		nt, live = t.rebuild(size)
	}
	s.live, s.used = live, live
	s.low = nil // a cell of the old table
	s.tab.Store(nt)
}

// insert tracks a new bucket with the given TAT, lowering the hint. The
// caller holds s.mu and has reserved room.
func (s *shard) insert(h uint64, tat int64) {
	c := s.tab.Load().insert(h, tat)
	s.live++
	s.used++
	s.lower(tat, c)
}

// lower lowers the hint to tat, the TAT just stored in c, if it is lower.
// Callers hold s.mu.
func (s *shard) lower(tat int64, c *cell) {
	if tat < s.hint.Load() {
		s.hint.Store(tat)
		s.low = c
	}
}

// sweep evicts every state whose bucket is full again (TAT <= now: it
// carries no information, an unknown key being a full bucket) and returns how
// many it evicted. It visits the whole shard, but only when the hint says
// something may be evictable, and it evicts every full state at once, so the
// visits are paid for by the evictions. A state still refilling is never
// evicted: that would hand its owner a fresh bucket. Callers hold s.mu and
// no cell of the table.
func (s *shard) sweep(now int64) int64 {
	t := s.tab.Load()
	if t == nil || now < s.hint.Load() {
		return 0
	}
	evicted, low, c := t.evict(now)
	s.live -= evicted
	s.hint.Store(low)
	s.low = c
	return int64(evicted)
}

// earliest returns the lowest TAT the shard tracks, current as of the call,
// and makes the hint exact; it reports false when the shard tracks none. It
// visits the table only when the cell that held the lowest TAT when the
// hint was last made exact no longer holds it (it was charged, evicted or
// rebuilt, or no visit has been made since a sweep found nothing): a store
// full of clients in debt answers repeated calls with one load per shard
// until one of them is charged. A visit costs one load per cell of the
// table (at most about 1.9 per tracked bucket of the shard). Callers hold
// s.mu and no cell of the table.
func (s *shard) earliest() (int64, bool) {
	h := s.hint.Load()
	if s.low != nil && s.low.load() == h {
		return h, true
	}
	t := s.tab.Load()
	if t == nil || s.live == 0 {
		return 0, false
	}
	low, c := t.lowest()
	s.hint.Store(low)
	s.low = c
	return low, c != nil
}
