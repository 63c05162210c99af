package identity

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/limitkey"
)

// Verification cache defaults for [JWTConfig].
const (
	// defaultJWTCacheSize is the number of successful verifications a
	// [JWTAuthenticator] remembers when JWTConfig.CacheSize is zero (5 to
	// 20 MB for tokens of a typical size; each entry keeps its token, at
	// most maxTokenBytes).
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
// Key: a keyed 64-bit hash of the token (hash/maphash, seed drawn per
// authenticator), then a full comparison. The hash picks the shard and the
// slot; a hit also requires the presented token to equal, byte for byte,
// the copy of the token kept in the slot. Every byte of the token (header,
// claims and signature) takes part, so a token differing in one byte
// misses, and two tokens whose hashes collide (by chance, or through the
// forceCollisions test hook) never share an entry: the second one misses,
// is verified in full and takes the slot over. The seed is secret and Go
// maps seed their own bucket hashing per map, so nobody can aim tokens at
// one shard or bucket (a tenant minting tokens for its own issuer cannot
// evict another tenant's entries any faster than by filling the whole
// cache).
//
// Why the token and not a digest: the previous key, SHA-256 of the token,
// was collision resistant without keeping the token, but hashing every
// token with it was 11% of the request path; maphash is an order of
// magnitude cheaper and is not collision resistant, so a digest of it
// would only make a wrong answer improbable. A second independent 64-bit
// hash would make it improbable enough, never impossible; the comparison
// makes it impossible. The price is a copy of the token in memory for as
// long as its slot holds it: until another token takes the slot over (in a
// full shard, an entry that can no longer be served is evicted as soon as
// the CLOCK hand reaches it; in a shard with room, nothing is evicted) or
// JWTAuthenticator.Close wipes the cache. That copy is as secret as the
// token and is handled so:
//   - it is kept in a secretBytes, which prints as a fixed redaction on
//     its own (fmt, encoding/json, log/slog) and as an address inside a
//     slot, a shard or the cache, so not even a careless %v in a future
//     debug line could show it; nothing in the package prints a slot, an
//     entry or the cache;
//   - it is never returned, logged or compared except against the
//     presented token (with ==: a comparison only runs once the secret-
//     seeded 64-bit hashes are equal, which nobody without the seed can
//     arrange, so its timing tells nothing);
//   - its bytes are zeroed when the slot is taken over by another token
//     and by wipe (Close), so an evicted token does not linger in freed
//     memory.
// Memory: each entry holds its token (at most maxTokenBytes, 8 KiB; a
// typical JWT is 0.3 to 1.5 KiB) beside the Principal, so the default
// 10 000 entries take 5 to 20 MB, and at worst CacheSize × 8 KiB (a slot
// keeps the largest token it has held).
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

// cacheKey is the keyed hash of one token (verifyCache.key).
type cacheKey uint64

// verifyCache is a bounded map from a token to its cacheEntry. Safe for
// concurrent use.
type verifyCache struct {
	seed   maphash.Seed // the token hash's key
	ttl    time.Duration
	mask   uint64
	shards []cacheShard
	// forceCollisions makes every token hash to the same key (tests only:
	// set before first use). Entries then still answer only their own
	// token.
	forceCollisions bool
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

// cacheSlot holds one entry, the token it answers for and its CLOCK
// reference bit.
type cacheSlot struct {
	key cacheKey
	tok secretBytes // a copy of the token; a hit requires equality
	ent cacheEntry
	ref atomic.Bool // set by hits under the read lock, cleared by the hand
}

// cacheEntry is one remembered successful verification.
type cacheEntry struct {
	p   limitkey.Principal
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
	if c.forceCollisions {
		return 0
	}
	return cacheKey(maphash.String(c.seed, token))
}

// shard returns the shard of k.
func (c *verifyCache) shard(k cacheKey) *cacheShard {
	return &c.shards[uint64(k)&c.mask]
}

// get returns the Principal cached for token, whose key is k, if the entry
// may be served now.
func (c *verifyCache) get(k cacheKey, token string, env *jwtEnv) (limitkey.Principal, bool) {
	now, ok := unixNano(env.now())
	if !ok {
		return limitkey.Principal{}, false
	}
	sh := c.shard(k)
	sh.mu.RLock()
	i, found := sh.index[k]
	if !found {
		sh.mu.RUnlock()
		return limitkey.Principal{}, false
	}
	s := &sh.slots[i]
	if !s.tok.equal(token) || !s.ent.servable(now, env) {
		sh.mu.RUnlock()
		return limitkey.Principal{}, false
	}
	p := s.ent.p
	if !s.ref.Load() { // write only when it changes: hot entries stay shared
		s.ref.Store(true)
	}
	sh.mu.RUnlock()
	return p, true
}

// put remembers a successful verification of token, whose key is k. The
// entry is served from the later of the verification instant, nbf and
// iat, until the earlier of exp and the verification instant plus the TTL;
// an entry that could never be served is not stored, nor is a token that is
// not a b64token (RFC 6750 §2.1; every caller checked it, and
// JWTAuthenticator.Authenticate relies on every cached token being one).
func (c *verifyCache) put(k cacheKey, token string, p limitkey.Principal, v verified, env *jwtEnv) {
	if !isB64Token(token) {
		return
	}
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
	if i, found := sh.index[k]; found { // the same token from a concurrent miss, or a collision
		s := &sh.slots[i]
		s.tok.set(token)
		s.ent = e
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
	s.tok.set(token)
	s.key, s.ent = k, e
	s.ref.Store(false)
	sh.index[k] = int32(i)
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

// wipe zeroes every token copy and empties the cache, which stays usable.
func (c *verifyCache) wipe() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for j := range sh.slots {
			sh.slots[j].tok.set("")
		}
		clear(sh.slots)
		sh.slots = sh.slots[:0]
		clear(sh.index)
		sh.hand = 0
		sh.mu.Unlock()
	}
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
	if e.st.res != nil && !e.st.res.inForce(env.now()) {
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
