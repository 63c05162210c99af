package identity

import (
	"crypto/sha256"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Verification cache defaults for [JWTConfig].
const (
	// defaultJWTCacheSize is the number of successful verifications a
	// [JWTAuthenticator] remembers when JWTConfig.CacheSize is zero (a few
	// MB at most).
	defaultJWTCacheSize = 10000
	// defaultJWTCacheTTL is the longest a cached verification is reused
	// when JWTConfig.CacheTTL is zero; the token's exp usually ends an
	// entry sooner.
	defaultJWTCacheTTL = 5 * time.Minute
)

// maxCacheSize bounds JWTConfig.CacheSize (slot positions are int32).
const maxCacheSize = 1 << 26

// The verification cache remembers successful verifications so that a
// client presenting the same bearer token on every request pays for one
// signature check, not one per request. Its safety argument is written on
// JWTAuthenticator ("Verification cache"); the mechanics are here.
//
// Key: SHA-256(token). Every byte of the token (header, claims and
// signature) feeds the key, so a token differing in one byte misses, and
// SHA-256 is collision resistant, so no other token can be found that
// shares a key. The shard is chosen by a keyed hash of the key
// (hash/maphash, seed drawn per authenticator) and Go maps seed their own
// bucket hashing per map, so nobody can aim tokens at one shard or bucket
// (a tenant minting tokens for its own issuer cannot evict another
// tenant's entries any faster than by filling the whole cache). The token
// itself is never stored: only the 32-byte digest, the Principal (whose
// strings are fresh copies made by the JSON decoder, not slices of the
// token) and validity data.
//
// Value: the Principal and when it may be served (cacheEntry.servable).
//
// Structure: 16 shards (1 below 256 entries), each a map from key to a slot
// in a fixed-capacity array, guarded by an RWMutex; hits take the read lock
// only. The shard capacities add up to the configured size exactly (shards
// fill independently, so a full cache holds a little less: about 98% at the
// default size). When a shard is full, an insert replaces a victim chosen
// by the CLOCK (second-chance) algorithm: a hit sets the slot's reference
// bit, the hand clears set bits and stops at the first slot whose bit is
// clear or whose entry can no longer be served. Each cleared bit pays for
// one earlier hit, so eviction is O(1) amortized; entries inserted and
// never hit again (a flood of distinct tokens) are evicted before entries
// in use. Failed verifications are never inserted, so invalid tokens evict
// nothing.

// cacheKey is the SHA-256 of one token.
type cacheKey [sha256.Size]byte

// verifyCache is a bounded map from cacheKey to cacheEntry. Safe for
// concurrent use.
type verifyCache struct {
	seed   maphash.Seed // shard selection
	ttl    time.Duration
	mask   uint64
	shards []cacheShard
}

// cacheShard is one lock's worth of the cache.
type cacheShard struct {
	mu    sync.RWMutex
	index map[cacheKey]int32 // key → position in slots
	slots []cacheSlot        // len ≤ max; grows up to max, then recycled
	max   int
	hand  int      // CLOCK hand: next slot to consider for eviction
	_     [64]byte // keep neighbouring shards' locks off one cache line
}

// cacheSlot holds one entry and its CLOCK reference bit.
type cacheSlot struct {
	key cacheKey
	ent cacheEntry
	ref atomic.Bool // set by hits under the read lock, cleared by the hand
}

// cacheEntry is one remembered successful verification.
type cacheEntry struct {
	p   Principal
	st  *issuerState // the issuer record whose key verified the token
	gen uint64       // st.jwks's snapshot generation then (0: static keys)
	// The entry is served at an instant now of JWTConfig.Now (Unix
	// nanoseconds, wall clock, as golang-jwt compares) iff lo ≤ now < hi.
	lo, hi int64
}

// newVerifyCache returns a cache of at most size entries (size > 0), each
// served for at most ttl after its verification.
func newVerifyCache(size int, ttl time.Duration) *verifyCache {
	n := 1
	if size >= 256 {
		n = 16
	}
	c := &verifyCache{seed: maphash.MakeSeed(), ttl: ttl, mask: uint64(n - 1), shards: make([]cacheShard, n)}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.max = size / n
		if i < size%n {
			sh.max++
		}
		sh.index = make(map[cacheKey]int32)
	}
	return c
}

// key returns the cache key of token.
func (c *verifyCache) key(token string) cacheKey {
	// A read-only view of the token's bytes: no copy, nothing retained.
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token)))
}

// shard returns the shard of k, chosen by a keyed hash.
func (c *verifyCache) shard(k *cacheKey) *cacheShard {
	if c.mask == 0 {
		return &c.shards[0]
	}
	return &c.shards[maphash.Bytes(c.seed, k[:])&c.mask]
}

// get returns the Principal cached under k if the entry may be served now.
func (c *verifyCache) get(k *cacheKey, env *jwtEnv) (Principal, bool) {
	now, ok := unixNano(env.now())
	if !ok {
		return Principal{}, false
	}
	sh := c.shard(k)
	sh.mu.RLock()
	i, found := sh.index[*k]
	if !found {
		sh.mu.RUnlock()
		return Principal{}, false
	}
	s := &sh.slots[i]
	if !s.ent.servable(now, env) {
		sh.mu.RUnlock()
		return Principal{}, false
	}
	p := s.ent.p
	if !s.ref.Load() { // write only when it changes: hot entries stay shared
		s.ref.Store(true)
	}
	sh.mu.RUnlock()
	return p, true
}

// put remembers a successful verification of the token whose key is k.
// The entry is served from the later of the verification instant, nbf and
// iat, until the earlier of exp and the verification instant plus the TTL;
// an entry that could never be served is not stored.
func (c *verifyCache) put(k *cacheKey, p Principal, v verified, env *jwtEnv) {
	at := env.now()
	lo, hi := at, at.Add(c.ttl)
	if v.nbf.After(lo) {
		lo = v.nbf
	}
	if v.iat.After(lo) {
		lo = v.iat
	}
	if v.exp.Before(hi) {
		hi = v.exp
	}
	now, ok0 := unixNano(at)
	loN, ok1 := unixNano(lo)
	hiN, ok2 := unixNano(hi)
	if !ok0 || !ok1 || !ok2 || hiN <= loN {
		return
	}
	e := cacheEntry{p: p, st: v.st, gen: v.gen, lo: loN, hi: hiN}

	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, found := sh.index[*k]; found { // a concurrent miss got here first
		sh.slots[i].ent = e
		return
	}
	var i int
	if n := len(sh.slots); n < sh.max {
		if n == cap(sh.slots) {
			grown := make([]cacheSlot, n, min(max(2*n, 16), sh.max))
			copy(grown, sh.slots)
			sh.slots = grown
		}
		sh.slots = sh.slots[:n+1]
		i = n
	} else {
		i = sh.victim(now, env)
		delete(sh.index, sh.slots[i].key)
	}
	s := &sh.slots[i]
	s.key, s.ent = *k, e
	s.ref.Store(false)
	sh.index[*k] = int32(i)
}

// victim advances the CLOCK hand to the first slot whose entry can no
// longer be served or has not been hit since the hand last passed, clearing
// reference bits on the way, and returns it. The shard is full and locked.
// It stops within len(slots)+1 steps: after one turn every bit is clear.
func (sh *cacheShard) victim(now int64, env *jwtEnv) int {
	for {
		i := sh.hand
		if sh.hand++; sh.hand == len(sh.slots) {
			sh.hand = 0
		}
		s := &sh.slots[i]
		if !s.ref.Load() || !s.ent.servable(now, env) {
			return i
		}
		s.ref.Store(false)
	}
}

// len returns the number of entries (tests).
func (c *verifyCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += len(sh.index)
		sh.mu.RUnlock()
	}
	return n
}

// servable reports whether e may answer for its token at now (Unix
// nanoseconds of JWTConfig.Now): now is inside [lo, hi), the issuer's JWK
// Set still has the generation whose key verified the token, and, for a
// record from the IssuerResolver, the resolver cache still holds that
// record unexpired (on the resolver's clock, as the uncached path checks
// it). Any other case is a miss and the token is verified again.
func (e *cacheEntry) servable(now int64, env *jwtEnv) bool {
	if now < e.lo || now >= e.hi {
		return false
	}
	if e.st.jwks != nil && e.st.jwks.gen() != e.gen {
		return false
	}
	if e.st.res != nil && !e.st.res.inForce(env.clk.Now()) {
		return false
	}
	return true
}

// unixNano is t.UnixNano, or false for instants it cannot represent
// (before 1678 or after 2262); such instants are never cached.
func unixNano(t time.Time) (int64, bool) {
	const limit = math.MaxInt64 / int64(time.Second)
	if s := t.Unix(); s <= -limit || s >= limit {
		return 0, false
	}
	return t.UnixNano(), true
}
