// Package redis is a [limiter.Limiter] whose buckets live in Redis, so that
// every process of a service spends one shared budget per key. It runs on
// github.com/redis/go-redis/v9 with the caller's client (single node,
// Sentinel failover, Cluster, Ring), so TLS, authentication and pooling
// stay the caller's. It needs Redis 6.2 or later (SET ... PXAT).
//
// # One script per call
//
// Take and Peek make one round trip: EVALSHA of one Lua script (EVAL, which
// also loads it, when the server answers NOSCRIPT, e.g. after a restart).
// A call of one request, the common case, runs a smaller script with the
// same rule and the same writes, specialised to one bucket. The script
// reads the server's clock with TIME, reads the state of every bucket of
// the call, decides every request with the GCRA decision rule of package
// [limiter] (rate, burst, cost, delay_after, max_delay, Never) and the dry-run
// two-pass rule of the [limiter.Limiter] contract, and, for a Take whose
// decisions say so, writes the new states with their expiry, all in one
// atomic step: no other client sees a partial charge, there is no
// GET-then-SET race, no client clock and no separate EXPIRE. All the
// policies of one HTTP request are one call, so they are decided and
// charged all-or-nothing. A rejected request writes nothing: it neither
// spends budget nor extends the expiry.
//
// The script returns, per request, the debt (TAT minus now, in ns) the
// request was decided against; the Go side computes the [limiter.Decision]
// with the same Go code as limiter/memory, so decisions are those of
// limiter/memory bit for bit (the conformance suite in limiter/limitertest checks it).
//
// # Keys and values
//
// A bucket is named by its Key and its limit shape (emission interval and
// burst; see [limiter.Request]), both in the Redis key:
//
//	<Prefix><Burst>x<Interval in ns>ns:<key part>
//	ratekey:3x500000000ns:per-account|tenant=acme|account=alice
//
// The key part is the request's Key itself when it has at most
// [Options.MaxKeyLen] bytes (default 256). A longer Key becomes its first
// MaxKeyLen-64 bytes, "#", and the 64 hex digits of HMAC-SHA256(HashSecret,
// Key): exactly MaxKeyLen+1 bytes, so a hashed key part never equals a raw
// one, and a Redis key never exceeds len(Prefix) + 42 + MaxKeyLen+1 bytes.
// The shape segment is all digits between fixed separators, and a Prefix
// may not end in a digit ([New] refuses one), so under one Prefix the name
// is injective. Deployments sharing a Redis share no bucket as long as
// neither's Prefix begins with the other's: then their names differ within
// the shorter Prefix. (Otherwise they can meet when the rest of the longer
// Prefix reads as a shape segment: "app:" with burst 1 at 1/s and Key
// "3x1000000000ns:k", and "app:1x1000000000ns:" with burst 3 at 1/s and
// Key "k", both name "app:1x1000000000ns:3x1000000000ns:k".) Keys come from identity.Key encodings, which never hold a
// secret; this package stores them as given.
//
// The value is a string: the bucket's theoretical arrival time (TAT) in
// decimal nanoseconds since the Unix epoch on the Redis server's clock, e.g.
// "1796021755172450000". Its expiry is set in the same SET, with PXAT = the
// TAT rounded up to a whole millisecond: the key disappears exactly when
// the bucket is full again (a missing key and a full bucket decide alike),
// never earlier. (PXAT is "PX = time until the bucket is full, rounded up"
// written as an absolute time: a relative PX would be added to Redis's own
// millisecond clock, which is truncated and, in recent versions, sampled when the
// script starts, and could expire a state up to a millisecond early.)
//
// # Exact arithmetic
//
// Lua numbers are doubles, exact on integers up to 2^53. The script never
// holds an absolute time in one number: TIME gives seconds and
// microseconds, a stored TAT is split at its ninth digit from the right,
// and only differences (debts, at most the window) are computed as single
// numbers; integer division uses math.fmod, which is exact. Charges
// (Cost × Interval) and ceilings (see the decision rule of [limiter]) are computed in
// Go in int64. So every value is an exact integer as long as the window
// Burst × Interval is at most 2^53-1 ns ([MaxWindow], about 104 days): Take
// and Peek refuse a larger window with [limiter.ErrInvalidRequest] (the
// memory store accepts up to 292 years). A debt above 2^53-1 ns, which a
// server clock stepping far backwards could produce, is clamped to 2^53-1:
// the request is still rejected, with a RetryAfter computed from the clamp.
// Server time has microsecond resolution; decisions are exact at it.
//
// The server's clock is the limiter's clock. If it steps backwards by S (an
// NTP step, a VM restored from a snapshot), every bucket in debt at that
// moment stays in debt S longer, since its stored TAT is S further ahead of
// the new clock: its client is rejected for up to S plus one window. Run
// Redis hosts with a clock that slews rather than steps (chrony and
// systemd-timesyncd slew small offsets), or delete the prefix's keys after
// a large step back (every bucket is then full).
//
// # Cluster and Ring
//
// A script may only touch keys of one hash slot. On a *redis.ClusterClient
// or *redis.Ring, [New] therefore requires a Prefix with a hash tag (e.g.
// "ratekey:{rl}:"), which puts every bucket in one slot: every call then
// works, all-or-nothing, at the price of serving all rate-limit traffic
// from one shard (with its replicas for failover). The tests run the
// conformance suite through a ClusterClient on a one-node cluster (which
// enforces slots like any cluster) and through a Sentinel failover client;
// a multi-node cluster, failover itself, and Ring (accepted on the same
// rule) are not tested.
//
// # Memory and eviction
//
// A key lives only while its bucket refills: at most the window, which is
// also the bound on the number of keys (the buckets touched within one
// window). If the server may reach maxmemory, prefer maxmemory-policy
// volatile-ttl, which evicts the states closest to full first (those that
// carry the least information, as in the memory store's eviction), or
// noeviction, under which a Take fails with Redis's OOM error and the
// caller's fail mode applies (a Peek, which writes nothing, still works).
// An LRU or random policy may evict the state of a client in debt and hand
// it a full bucket.
//
// # Errors and time-outs
//
// Each call runs under context.WithTimeout([Options.Timeout], default
// 100ms), which bounds the wait for a pooled connection, the write and the
// read; for the read to honour it, go-redis needs ContextTimeoutEnabled
// (New checks). Any Redis error or time-out returns a non-nil error and
// never a decision: the outcome is unknown (the script may have run), and
// the caller applies its fail mode (on_store_error in the middleware). A
// Take is never replayed by go-redis after a failed attempt (a replay could
// charge twice); a Peek may be. The script fails, and writes nothing, if a
// bucket key holds something other than a decimal TAT.
package redis
