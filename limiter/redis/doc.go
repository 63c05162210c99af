// Package redis is a [limiter.Limiter] whose buckets live in Redis, so that
// every process of a service spends one shared budget per key. It runs on
// github.com/redis/go-redis/v9 with the caller's client (single node,
// Sentinel failover, Cluster with buckets spread over its slots, Ring), so TLS, authentication and pooling
// stay the caller's. It needs Redis 6.2 or later (SET ... PXAT).
//
// # One script per call
//
// A Take or Peek on one server (or within one Cluster slot, see below)
// makes one round trip: EVALSHA of one Lua script (EVAL, which
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
// charged all-or-nothing (across Cluster slots, with refunds: see "Calls
// across slots"). A rejected request writes nothing: it neither
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
// burst; see [limiter.Request]), both in the Redis key, after a hash tag
// that ratekey chooses:
//
//	<Prefix>{<tag>}<Burst>x<Interval in ns>ns:<key part>
//	ratekey:{f33feb73}3x500000000ns:per-account|tenant=acme|account=alice
//
// The tag is 8 hex digits of a 32-bit hash (FNV-1a 64 with a SplitMix64
// finalizer, no seed: the same in every process) of the whole Key, or,
// with [Options.HashTag] set to a dimension (say "tenant"), of that
// dimension's part of the Key ("tenant=acme") when the Key has it. A
// Prefix holds no brace ([New] refuses one), so this tag is the key's
// Redis Cluster hash tag whatever the key part holds: a brace inside a Key
// (operation=GET /v1/reports/{id}) never chooses the slot. Keys spread
// evenly over the 16384 slots; with HashTag, all the buckets of one tenant
// share a slot. The hash places load, nothing else: anyone can compute it.
//
// The key part is the request's Key itself when it has at most
// [Options.MaxKeyLen] bytes (default 256). A longer Key becomes its first
// MaxKeyLen-64 bytes, "#", and the 64 hex digits of HMAC-SHA256(HashSecret,
// Key): exactly MaxKeyLen+1 bytes, so a hashed key part never equals a raw
// one, and a Redis key never exceeds len(Prefix) + 52 + MaxKeyLen+1 bytes.
// The first '{' ends the Prefix and the shape segment is all digits
// between fixed separators, so the name is injective, and names under two
// different Prefixes never meet: deployments sharing a Redis share no
// bucket. Keys come from limitkey.Key encodings, which never hold a
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
// Burst × Interval is at most 2^53-1 ns (about 104 days): Take
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
// On a *redis.ClusterClient, the requests of a call are grouped by the
// slot of their keys, computed in the client (CRC16/XMODEM of the tag
// modulo 16384, as the Redis Cluster specification's "Keys distribution
// model" says). A call whose keys share one slot (every call of one
// request, and with HashTag every call whose policies all carry the
// dimension) is one script on the slot's master, as on a single server:
// one round trip, atomic. (On a *redis.Ring the grouping is by tag; on any
// other client, one server, every call is one script.)
//
// # Calls across slots
//
// A script runs on one master and may only touch one slot's keys, so a
// call across slots cannot be one atomic step. It is decided and charged
// slot by slot, and refunded if any slot rejects:
//
//  1. The parts (one per slot) are ordered most selective first: the part
//     holding the bucket last seen emptiest (a fixed table of 4096 hints,
//     indexed by a hash of the Key, holds each bucket's last known
//     Remaining/Burst), ties going to the later policy.
//  2. Round 1: the first part's script decides its requests (both passes
//     of the dry-run rule) and charges them if they fit. If they do not,
//     nothing has been charged: round 2 only reads the other parts (for
//     their Decisions), in parallel, and the call is rejected. Two round
//     trips, no refund.
//  3. Round 2: the other parts, in parallel (one per master), decide and
//     charge at the level the first part reached (all requests, or only
//     the enforcing ones when a dry-run request did not fit).
//  4. Round 3, only if some part rejected (or charged less than others):
//     every part that charged more than the call may is refunded, in
//     parallel, once. A refund is never retried: a replay would give back
//     twice and over-admit.
//
// The Decisions are those of the contract, each part's decided at its own
// master's TIME (one process's clock never matters).
//
// # Refunds and the bounds they keep
//
// A refund of a bucket charged c ns, whose TAT the charge left at TAT1,
// moves the TAT back by r = min(c, TAT1 - now), the part of the charge
// that has not refilled yet, and never further (a key gone since is left
// alone). Compared with the state the bucket would have had without the
// charge (TATc), the real one after any later charges is TATc + Δ with Δ
// shrinking from c only when a later charge finds the bucket's debt below
// Δ: Δ >= min(c, TAT1 - s) at every later instant s, since the TAT never
// decreases below TAT1 meanwhile. So r <= Δ: after its refund a bucket is
// never fuller than had the refunded charge not happened, and it admits
// only what a GCRA bucket admits: no bucket ever admits more than
// burst + rate·t over any interval t. (Moving the TAT back by c, as a
// naive refund would, can over-admit: a refund that arrives after the
// bucket refilled would add tokens it never lost.)
//
// What it costs, and its bounds:
//
//   - Over-rejection: between a part's charge and its refund (at most one
//     round trip plus the refund's, bounded by 2 × Timeout), another
//     request can be rejected by the charge that is about to be given
//     back. Only calls across slots whose first part fits and a later one
//     rejects open this window; ordering the most selective part first
//     makes them rare.
//   - A refund lost to a failure (time-out, a master down) strands at most
//     that request's cost on that bucket, which refills within cost ×
//     interval: never an over-admission.
//   - A call across slots whose round 2 fails (a master down) returns an
//     error, like any store error, after refunding the parts that charged.
//
// Round trips of a Take: 1 for a call within one slot; 2 across slots; 3
// when a later part rejects (the refund). A Peek across slots reads every
// part in parallel: 1. Each round runs its parts in parallel,
// under one Timeout for the decision rounds and its own for the refund.
//
// Why this design. Envoy's rate-limit service groups a request's
// descriptors per slot and pipelines increments with no atomicity: a
// request rejected by one limit still charges the others (envoyproxy/
// ratelimit issue 1060), so a broad limit drains because a narrow one
// rejects. nginx reserves every zone of a request and then commits, in
// shared memory where a reservation costs nothing; across masters that
// would be a round trip to reserve and another to commit on every request,
// admitted or not. Charging slot by slot with exact, capped refunds keeps
// nginx's all-or-nothing outcome (a rejected request keeps no charge once
// its refund lands), costs one round trip more than a single slot, and
// pays a third only on rejections that the ordering did not catch first.
//
// On a Ring the same grouping applies by tag (TestConformanceRing runs the
// conformance suite, in-flight caps included, on two shards). A Ring moves
// keys when a shard leaves it: that shard's buckets start full on another,
// and a cap's leases there are not counted until the shard returns (a
// lease taken meanwhile is released in vain and expires after its lease
// period). A Cluster fails over instead, keeping keys in their slots.
//
// # Reserve, then settle
//
// A settling request ([limiter.Request].Settle) is decided and charged as
// any other; the call's script also returns the time it decided at (one
// more argument and two more reply values, only for a Take that holds a
// settling request), and the request's [limiter.Decision].Reservation is
// the TAT its charge left on the server's clock (ns since the epoch).
// [Limiter.Settle] then sends, only for the requests whose actual cost
// differs from the reservation, one settle script per server (per Cluster
// slot, in parallel, across slots), batched with the other calls bound for
// that server, where the settles that wait together are merged (see
// "Batching"): a debt moves the bucket's TAT forward unconditionally (its
// debt may pass the window, clamped at 2^53-1 ns), a refund moves it back
// by the part of the reservation not yet refilled (TAT1 - now, the rule of
// "Refunds and the bounds they keep"), never past full. A settle is sent
// once: go-redis does not replay it, the batcher resends only what the
// server answered NOSCRIPT (which ran nothing), and an error leaves the
// outcome unknown (TestSettleNotResent: a settle whose reply was cut ran
// once). Prefetch never serves a call with a settling request (its
// reservation must be the shared bucket's), and a refund lowers the deny
// cache's bound of the bucket by the refund's most, so the cache stays a
// lower bound.
//
// A settle applies whole or not at all: the script reads every bucket of
// a settle before it writes any, and a bucket whose state is not a decimal
// TAT (a key of another type, which GET refuses with WRONGTYPE, or another
// string) fails that settle alone, with none of its buckets changed
// (TestSettleMergeNotTAT); the settles merged with it are applied as if it
// were not there.
//
// # Batching
//
// Concurrent calls share round trips. A call of one slot (every call on a
// single server) that finds nothing in flight to its server (its Cluster
// master, found with MasterForKey) goes at once, on the caller's goroutine,
// as one script call. A call that finds the server busy joins the server's
// queue, and sender goroutines (2 per server, up to 4 while a full pipeline's
// worth waits) send the queue as go-redis pipelines of at most
// [Options.MaxBatch] (default 64) script calls, taking whatever is queued
// the moment one of them is free: there is no timer, so a
// caller alone pays nothing and a burst of callers shares a few round trips.
// Each call is still its own EVALSHA, atomic on its own, with its own reply
// and error, but for settles ([Limiter.Settle]): the settles of one
// pipeline that share a slot (every one on a single server) leave as one
// settle script that carries all their buckets, each settle's buckets
// and arguments after the one before, and whose reply holds one result
// per settle (the buckets it changed, or -1 for a bucket that is not a
// decimal TAT), which goes to that settle's caller alone. Settles are
// independent and commute per bucket, so merging changes no outcome, only
// the script calls: 64 callers that each reserve and settle at another
// cost make 1.08 script calls per request, not 2 (TestSettleMerge pins
// three queued settles to one call). The merged call is never replayed
// either; a NOSCRIPT reply resends it whole, and any other error reaches
// every caller merged in it, outcome unknown. Every caller waits for its reply or for its own deadline (its
// context's, or Timeout), whichever comes first, and then returns at once:
// a caller whose deadline passes before its reply gets its error (outcome
// unknown: the call may still run), whatever the rest of its pipeline does
// (a settle merged with others still runs with them: TestSettleMerge).
// A pipeline runs until 1 ms after the latest deadline of its callers, so no
// call outlives its caller's deadline by more than that. A pipeline holding
// a Take is never replayed by go-redis. When the server answers NOSCRIPT
// (after a restart or SCRIPT FLUSH), only those calls are sent again, the
// first of each script by EVAL (which loads it) and the rest by EVALSHA
// after it on the same connection. Calls across slots and calls through a
// *redis.Ring are not batched. Context values of a batched caller do not
// reach go-redis hooks (the pipeline runs under its own context).
//
// go-redis's own auto-pipelining (the *redis.AutoPipeliner that a
// client's AutoPipeline and AsyncAutoPipeline return) does not honour a
// command's context once the command is queued: with the server paused, a
// call with a 100 ms timeout returned success after 1.6 s. [New] refuses
// one; pass the client it came from.
//
// # The deny cache
//
// A bucket Redis rejected stays in debt until a known instant, and a
// rejection charges nothing, so answering its requests locally changes no
// budget. After the script rejects a call of one request (one policy), the
// Limiter records, in a fixed table of [Options.DenyCache] entries (default
// 4096; an insertion replaces the entry of its set that ran out first), a
// lower bound of the bucket's TAT on the process's monotonic clock: the
// time the call was sent plus the debt the script decided against (Redis
// decided later than the call was sent, so the bound is never later than
// Redis's TAT). Later one-request calls of that bucket (same Key, burst and
// interval) are decided locally against that bound with the same Go rule,
// for their own cost and limit, and while it rejects them they return that
// rejection with [limiter.Decision] Cached set, without a round trip (no
// allocation, well under a microsecond). Since the bound is never later
// than Redis's TAT, such a rejection is one Redis would give too, and its
// RetryAfter is never longer than Redis's. When the bound admits, one call
// goes to Redis as the bucket's probe, once the bound counted from the
// previous reply's arrival allows it (at most one round trip after the
// send-time bound), and the others wait for its reply, which refreshes the
// bound, for at most half the time left to their deadline; then each
// decides on its own: the cached rejection if the bound still rejects it
// (read at the time taken under the cache's lock), else its own call to
// Redis. So an over-limit call gets a rejection, never an error, while
// Redis answers (TestDenyCacheFloodNoErrors). A flooded bucket so costs Redis
// about 1.5 calls per emission interval per process (1.35 measured). Calls of several
// requests always go to Redis (a rejected one's answer refreshes nothing).
//
// What can make the cache stricter than Redis, and by how much: the bound
// is a lower bound only while the bucket's debt can only grow. Three things
// shrink it (a settle's refund lowers the bound with it, see "Reserve, then
// settle"): a refund of the cross-slot protocol (see Refunds), a bucket
// state lost or deleted in Redis (an eviction, FLUSHDB, a failover or
// restart that lost writes), and a jump forward of the server's clock. Then
// the process keeps rejecting the bucket's one-request calls until its bound
// says otherwise: at most the RetryAfter Redis gave (Cost × interval, at
// most the window Burst × interval), and only in the processes that had
// seen the rejection. A reload that raises a limit does not: a new rate or
// burst names another bucket (and so another entry), and a new delay_after
// or max_delay is applied by the local decision itself. With the cache on,
// a process also answers 429 for a bucket known to be in debt while Redis
// is unreachable, instead of the store error.
//
// # Prefetch
//
// With [Options.Prefetch] K > 0, a request of a Take on a token bucket
// without delay shaping (DelayAfter 0 or Burst, no MaxDelay lowering the
// ceiling), not a dry run, of cost <= K, is served from tokens the
// process holds for its bucket when it holds enough ([limiter.Decision]
// Prefetched, no round trip), else by one script call that takes a batch
// (as many tokens as fit, up to twice the bucket's local demand over the
// last hold lifetime, at least the cost, at most K) and charges the
// shared bucket for all of it; the other calls wait for that fetch (at
// most half their time). A bucket new to the process, or quiet, fetches
// its cost only. Dry runs, delay shaping, cost > K and in-flight caps are
// decided per call as without it.
//
// Hold lifetime. The tokens of a fetch are spent only before (the local
// time the fetch was sent) + H, H = min([Options.PrefetchHold], default
// 50 ms, the bucket's window). The send precedes Redis's decision, so
// every token is admitted within H of being charged. The bounds, for the
// bucket shared by every process:
//
//   - every admission was paid in Redis first: from the start, admitted
//     <= charged - refunded <= burst + rate·t;
//   - over any interval of length t, admitted <= burst + rate·(t + H):
//     the tokens admitted in it were charged within [start - H, end].
//
// Unused tokens of an expired batch are given back by the bucket's next
// fetch, in the same script before it takes (the capped refund of
// "Refunds and the bounds they keep", sent once, never retried: a fetch
// that fails counts them lost), or by [Limiter.Flush]; a bucket that is
// not asked again gets them back as it refills (at most one window).
// Under-admission is at most the tokens held across processes (at most K
// each, live or expired and not yet given back) for at most H plus the
// time until the bucket's next fetch.
//
// Dry buckets. A fetch that comes back short (the bucket could not give
// the batch asked for: it is empty, or nearly) leaves the bucket's hold
// dry: until the bucket has refilled m = min(max(min(batch/2, K/2,
// H/interval), cost), burst) tokens, counted from the reply's arrival (at
// most max(H, cost × interval) after it), a Take that finds too few tokens held is rejected locally
// (Cached, no round trip, nothing charged, RetryAfter until the dry spell
// ends) instead of waiting for fetches run back to back, each of which
// would get one round trip's worth of tokens. A hot bucket then fetches
// about K/2 tokens per script call, a quiet one (batch = its cost) its
// cost, as the deny cache would. It never over-admits (it admits nothing
// more; it delays fetches). What it costs: the tokens that refill in
// Redis during a dry spell (at most m per process) wait there for that
// process's next fetch (other processes may take them first), so from the
// start the bucket's admissions trail burst + rate·t by at most m per
// process beyond the held tokens, each token delayed by at most m ×
// interval; none is lost (m <= burst: the bucket does not overflow
// meanwhile), and no process starves (each dry spell ends, and the next
// fetch takes what fits).
//
// Calls of several requests (the middleware sends all of a request's
// policies in one Take): each request prefetch serves whose hold has its
// cost is taken tentatively from the hold; a bucket short of tokens but
// hot (its cost asked for within the last H by other calls) fetches first
// (one round trip of its own, tentative too; a dry one rejects the call
// locally); the rest go to Redis in one call (the usual all-or-nothing
// script, or a fetch when one request prefetch serves is left). If that call fails or rejects, or a bucket's
// own fetch rejected (the others are then only peeked), nothing is
// charged: the tentative tokens go back to the batches they came from
// (spent later if still within H, else given back), so all-or-nothing
// holds; a tentative token whose batch was given back meanwhile (Flush)
// is lost, an under-admission, never an over-admission.
//
// # In-flight caps: leases
//
// An in-flight cap (limiter.Limit.MaxInFlight) holds its slots as leases
// with an expiry on the server's clock, so that a process that dies
// mid-request cannot hold them for ever. The cap of a key is one sorted
// set, prefix + "{tag}" + "c:" + key part (the bucket's tag, so that with
// HashTag a tenant's caps and buckets share a slot), whose members are the
// leases, "<limiter tag>:<slot id>:<cost>" scored by their expiry in ms of
// the server's TIME (always TIME, even under the test clock: a lease
// measures whether its holder is alive), plus one member "" scored by
// minus the slots held.
//
//   - Acquire: the script that decides the call's token buckets decides
//     its caps too (the same two passes of the dry-run rule: a dry-run
//     request holds its slots exactly when enforcing mode would, as nginx
//     limit_conn_dry_run still counts), after purging the cap's expired
//     leases; a charge adds one lease per in-flight request (ZADD, expiry
//     now + Limit.Lease, default 60 s) and moves the key's expiry to its
//     latest lease (PEXPIREAT). One round trip per call within a slot,
//     all-or-nothing across both kinds; across slots, the protocol of
//     "Calls across slots", where giving a slot back is the ZREM of its
//     lease. [limiter.Decision].Slot is the lease's slot id.
//   - Release: one more round trip, ZREM of the lease (its cost given
//     back; the key deleted when nothing is held), sent once and never
//     retried. A lease already gone (expired, or released before) frees
//     nothing, so a second Release of a Decision frees no other request's
//     slot.
//   - Renewal: while a Limiter holds leases, one goroutine renews each of
//     them about every lease/3 (ZADD XX to now + lease; a lease that has
//     expired already is not revived, its slot may be someone else's),
//     the leases of one key due together in one script call, at most 4
//     calls at a time, and returns when the last is released. A renewal
//     that fails is tried again a second later. A lease is released by
//     the Limiter that took it (its members carry that Limiter's tag).
//   - What a crash costs: a process killed while holding slots (or cut
//     from Redis for a whole lease) stops renewing them, and each is freed
//     at most one lease after its last renewal (TestInFlightKill: a 1 s
//     lease freed 940 ms after kill -9).
//   - Cancel: a Take whose outcome is unknown (its reply timed out: a
//     stalled Redis runs its queued script when it resumes) and a Release
//     or refund that failed leave leases no request holds. The Limiter
//     cancels them in the background, sending the release again (100 ms
//     after a failure, doubling to a second) until Redis answers; a
//     cancel that finds no lease leaves a tombstone member,
//     "<limiter tag>:<slot id>:x:0", for one lease, and an acquire that
//     finds its own tombstone charges nothing (its reply is the error
//     "ratekey: call cancelled", read by nobody), so the order in which
//     the two reach Redis does not matter. TestStalledAcquireCancelled:
//     three acquires timed out on a Redis stopped by SIGSTOP held their
//     slots for the whole 60 s lease before; now they are free 5-20 ms
//     after SIGCONT. A call that failed to dial sent nothing and is not
//     cancelled. At most 65 536 cancels wait in a Limiter's queue; beyond
//     that their leases expire within one lease.
//     The other way, a failover whose new master lacks the latest writes
//     (Redis replication is asynchronous) or a key evicted under
//     maxmemory loses leases: their slots count as free while their
//     requests still run, as such a loss can refill a bucket.
//
// A call with an in-flight request is not batched (it goes on the
// caller's goroutine, one script per slot), and the deny cache is neither
// asked nor told about it: it caches token-bucket rejections only.
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
