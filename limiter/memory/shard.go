package memory

import (
	"math"
	"sync"
	"sync/atomic"
)

// shard is one lock's worth of bucket states.
type shard struct {
	mu sync.Mutex
	// tats maps a bucket (the keyed hash of key and limit shape) to its
	// theoretical arrival time, in nanoseconds on the limiter's clock.
	// Guarded by mu.
	tats table
	// hint is a lower bound of every TAT in tats (math.MaxInt64 when
	// empty): no state of this shard can be evicted before the clock
	// reaches it, so a store full of clients in debt refuses new keys
	// without visiting them. Inserting lowers it; charging only raises
	// TATs, so it stays a lower bound; a sweep makes it exact. Written
	// under mu; read without it to skip shards cheaply.
	hint atomic.Int64
	_    [40]byte // keep hot shards on separate cache lines
}

func (s *shard) init() {
	s.hint.Store(math.MaxInt64)
}

// put stores a bucket's TAT, lowering the hint if the bucket is new (a
// charge only raises a TAT, so the hint stays a lower bound without it).
// Callers hold s.mu.
func (s *shard) put(bucket uint64, tat int64) {
	if s.tats.put(bucket, tat) && tat < s.hint.Load() {
		s.hint.Store(tat)
	}
}

// sweep evicts every state whose bucket is full again (TAT <= now: it
// carries no information, an unknown key being a full bucket) and returns how
// many it evicted. It visits the whole shard, but only when the hint says
// something may be evictable, and it evicts every full state at once, so the
// visits are paid for by the evictions. A state still refilling is never
// evicted: that would hand its owner a fresh bucket. Callers hold s.mu.
func (s *shard) sweep(now int64) int64 {
	if now < s.hint.Load() {
		return 0
	}
	evicted, low := s.tats.evict(now)
	s.hint.Store(low)
	return int64(evicted)
}
