package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratekey/ratekey/internal/gcra"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/limiter"
)

// The defaults and bounds of [Options], stated in its field docs.
const (
	defaultPrefix    = "ratekey:"
	defaultTimeout   = 100 * time.Millisecond
	defaultMaxKeyLen = 256
	// minMaxKeyLen is the smallest MaxKeyLen accepted: a hashed key part
	// keeps MaxKeyLen-64 readable bytes, at least 32.
	minMaxKeyLen = hashHexLen + 32
	maxPrefixLen = 128
)

// maxWindow is the largest window (Burst × Interval, [gcra.Window]) the
// Redis store accepts: 2^53 - 1 ns, about 104 days and 6 hours. Larger
// windows are refused with [limiter.ErrInvalidRequest], because the
// script's arithmetic (Lua numbers are doubles) is exact only up to 2^53,
// and the one-request script replies -1 - debt, which must stay within it;
// see the package documentation.
const maxWindow = gcra.MaxWindow

// ErrTimeout is wrapped by the error of a call that got no answer from
// Redis within [Options.Timeout] (while the caller's context was still
// live). The outcome of a Take is then unknown: it may have charged. Test
// with errors.Is.
var ErrTimeout = errors.New("limiter/redis: no reply within the timeout")

// Options configures [New]. The zero value is usable with every client.
// Every process that shares budgets must use the same Prefix, MaxKeyLen,
// HashSecret and HashTag, or its keys name other buckets.
type Options struct {
	// Prefix starts every Redis key; "" means "ratekey:". At most 128
	// bytes, without '{' or '}': the hash tag ratekey writes right after
	// it decides each key's Redis Cluster slot (see the package
	// documentation), so a brace in the prefix is refused rather than
	// allowed to pick the slot of every key. Deployments that share a
	// Redis but not their budgets use different Prefixes ("app:us:" and
	// "app:eu:"): names under two different Prefixes never meet.
	Prefix string
	// HashTag names a key dimension (for instance "tenant"; a dimension
	// name as in package identity: ^[a-z][a-z0-9_]{0,31}$) whose value
	// chooses the hash tag, and so the Cluster slot, of every key that has
	// it: all the buckets of one tenant then share a slot, so a request's
	// policies that all carry the tenant are one atomic script even on a
	// Cluster. Keys without the dimension, and every key when HashTag is
	// "", take their tag from a hash of the whole key and spread evenly
	// over the slots. On a single server it changes only the key names.
	HashTag string
	// Timeout bounds each Take and Peek (context.WithTimeout around the one
	// round trip, including waiting for a pooled connection); 0 means
	// 100 ms; negative is an error. A call that times out
	// returns an error wrapping [ErrTimeout]. For the bound to hold, the
	// client must be built with ContextTimeoutEnabled: New refuses a
	// *redis.Client, *redis.ClusterClient or *redis.Ring without it.
	Timeout time.Duration
	// MaxKeyLen bounds the key part of a Redis key (the request's Key),
	// in bytes; 0 means 256; otherwise at least 96 (so that a hashed key
	// part keeps at least 32 readable bytes). A longer Key is replaced by its first MaxKeyLen-64
	// bytes (readable in redis-cli), "#", and the hex HMAC-SHA256 of the
	// whole Key under HashSecret.
	MaxKeyLen int
	// HashSecret keys the HMAC-SHA256 of over-long keys. nil (the
	// default) is the empty HMAC key: names stay collision-resistant
	// (SHA-256) and identical in every process, but anyone can compute
	// them; set a secret shared by the processes to keep hashed keys
	// unguessable. (A random per-process secret would split the shared
	// budget of every long key, so there is none.) New copies it.
	HashSecret []byte
	// MaxBatch bounds micro-batching: concurrent Take and Peek calls bound
	// for one server (one master of a Cluster) are sent together in one
	// pipeline of at most MaxBatch script calls, each still its own
	// atomic script, as soon as a connection is free (no timer), and each
	// caller still waits at most until its own deadline. 0 means 64; 1
	// turns batching off (every call its own round trip on the caller's
	// goroutine); negative is an error. Calls across Cluster slots and
	// calls through a *redis.Ring are never batched. See the package
	// documentation ("Batching").
	MaxBatch int
	// DenyCache is the number of entries of the local deny cache, which
	// answers the one-request calls of a bucket Redis rejected, without a
	// round trip, until Redis could next admit one (Decision.Cached is
	// then true), and then lets one call through to ask. 0 means 4096;
	// negative turns it off. Each entry holds a Key and about 80 bytes;
	// the cache never grows past its size. See the package documentation
	// ("The deny cache") for when it is stricter than Redis, and by how
	// much.
	DenyCache int
	// Prefetch is K, the most tokens a fetch takes from a bucket for this
	// process to hold, in tokens: a request of a Take on a token bucket
	// without delay shaping (DelayAfter 0 or Burst, no MaxDelay lowering
	// the ceiling), not a dry run, of cost <= K, is admitted from the
	// tokens the process holds for its bucket when there are enough
	// (Decision.Prefetched, no round trip), else by one script call that
	// takes up to a batch (at most K, twice the bucket's local demand over
	// one hold) and charges the shared bucket for all of it. Every local
	// admission was paid in Redis first (admitted <= charged <= burst +
	// rate·t from the start); a held token is spent at most PrefetchHold
	// after its fetch was sent, so over any interval t at most burst +
	// rate·(t + H) is admitted. Held tokens are unavailable to other
	// processes until spent, expired or given back ([Limiter.Flush]). 0
	// (the default) turns it off; negative is an error. See the package
	// documentation ("Prefetch").
	Prefetch int64
	// PrefetchHold is the most time a prefetched token is held, from the
	// moment its fetch was sent: H = min(PrefetchHold, the bucket's
	// window Burst × interval). Unused tokens are given back with the
	// bucket's next fetch (or by Flush). 0 means 50 ms; negative is an
	// error; ignored when Prefetch is 0.
	PrefetchHold time.Duration
}

// Limiter is a [limiter.Limiter] whose buckets live in Redis, shared by
// every process that uses the same Redis, [Options.Prefix], MaxKeyLen,
// HashSecret and HashTag. A Take or Peek whose buckets share one Redis
// Cluster slot (every call on a single server) is one round trip: one Lua
// script (a smaller one for a call of one request), run by EVALSHA (EVAL
// when the server does not have it yet), that reads the server's TIME,
// decides every request of the call with the decision rule of package
// [limiter] including the dry-run two-pass rule, and writes the new states
// with their expiry in the same atomic step. A call whose buckets span
// several slots of a Cluster is decided and charged slot by slot and
// refunded if any slot rejects: see the package documentation for that
// contract and its bounds.
//
// Decisions equal those of the memory store for the same state and time:
// the script returns, per request, the debt (TAT minus now, ns) the request
// was decided against, and the Go side computes the Decision with the
// same Go code as the memory store.
//
// A Limiter holds no per-key state in the process except, on a Cluster or
// Ring client, a fixed table of 4096 hints (the last known fill of the
// buckets whose keys hash there) that orders the slots of a call, and
// the leases of the in-flight slots it holds. It starts no goroutine that
// outlives a call, except one renewer while it holds in-flight slots or
// has leases to cancel (it returns when it has neither). Create it with [New]. It is
// safe for concurrent use by multiple goroutines; concurrent calls are
// serialised by Redis, slot by slot.
type Limiter struct {
	client  goredis.UniversalClient
	names   keyNamer
	timeout time.Duration
	shard   shardMode

	// hints[keyHash(Key) % hintSize] is 1 + the last known fill of the
	// buckets whose keys hash there (Remaining × 255 / Burst), 0 when
	// unknown: the order of a cross-slot call, nothing else.
	hints [hintSize]atomic.Uint32

	// Test clock (export_test.go): now, when set, replaces the server's
	// TIME; ttlSlack (ms) is then added to each relative expiry.
	now      func() time.Duration
	ttlSlack int64

	// For the tests (export_test.go): refunds sent, and those that failed.
	refunds, lostRefunds atomic.Int64

	// Batching (batch.go): the most calls per pipeline (1: off), the
	// queue of a single server, and the queues of a Cluster's masters
	// (*redis.Client of the master -> *batcher).
	maxBatch int
	single   batcher
	masters  sync.Map

	// deny is the deny cache (deny.go), nil when off; epoch is the origin
	// of its local clock.
	deny  *denyCache
	epoch time.Time

	// In-flight caps (inflight.go): the lease tag, the slot ids handed
	// out, and the leases held and renewed.
	leases leases

	// pre is the table of prefetched tokens (prefetch.go), nil when off.
	pre *prefetcher
}

// shardMode says how a client spreads keys over servers.
type shardMode uint8

const (
	oneServer shardMode = iota // *redis.Client, failover, unknown types
	bySlot                     // *redis.ClusterClient: group by hash slot
	byTag                      // *redis.Ring: group by hash tag
)

// hintSize is the number of hint cells of a sharded Limiter.
const hintSize = 4096

// New returns a Limiter that keeps its buckets in the Redis behind client
// (a *redis.Client, including a Sentinel failover client, a
// *redis.ClusterClient or a *redis.Ring). New does no I/O: an unreachable
// server shows up as errors from Take and Peek, never at start-up. The
// caller keeps ownership of client (closing it is the caller's job).
//
// New fails if client is nil; if opts is invalid (see [Options]); if the
// client is a *redis.Client, *redis.ClusterClient or *redis.Ring whose
// options lack ContextTimeoutEnabled (go-redis would then ignore the
// per-call deadline while reading, and Timeout would bound nothing); and
// if it is a *redis.AutoPipeliner (what a client's AutoPipeline and
// AsyncAutoPipeline return): a command queued in go-redis's
// auto-pipeliner no longer honours its context (with the server paused, a
// call with a 100 ms timeout returned success after 1.6 s), so Timeout
// would bound nothing. Pass the client itself: the Limiter batches its
// own calls, under each caller's deadline.
func New(client goredis.UniversalClient, opts Options) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("limiter/redis: nil client")
	}
	names, err := newKeyNamer(opts)
	if err != nil {
		return nil, err
	}
	shard, err := shardOf(client)
	if err != nil {
		return nil, err
	}
	timeout, err := orDefault("timeout", opts.Timeout, defaultTimeout)
	if err != nil {
		return nil, err
	}
	maxBatch := opts.MaxBatch
	switch {
	case maxBatch == 0:
		maxBatch = defaultMaxBatch
	case maxBatch < 0:
		return nil, fmt.Errorf("limiter/redis: max batch %d, want >= 1 (1 turns batching off, 0 means %d)", maxBatch, defaultMaxBatch)
	}
	hold, err := orDefault("prefetch hold", opts.PrefetchHold, defaultPrefetchHold)
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, names: names, timeout: timeout, shard: shard, maxBatch: maxBatch, epoch: time.Now()}
	switch k := opts.Prefetch; {
	case k < 0:
		return nil, fmt.Errorf("limiter/redis: prefetch %d, want >= 0 (0 turns it off)", k)
	case k > 0:
		l.pre = newPrefetcher(k, hold)
	}
	switch n := opts.DenyCache; {
	case n == 0:
		l.deny = newDenyCache(defaultDenyCache, timeout, l.localNow)
	case n > 0:
		l.deny = newDenyCache(n, timeout, l.localNow)
	}
	return l, nil
}

// orDefault returns d, or def when d is 0, or an error naming the option
// when d is negative.
func orDefault(option string, d, def time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return def, nil
	case d < 0:
		return 0, fmt.Errorf("limiter/redis: %s %v, want > 0 (or 0 for the default %v)", option, d, def)
	}
	return d, nil
}

// newKeyNamer returns the namer of opts' keys (Prefix, HashTag, MaxKeyLen,
// HashSecret), or why they are refused.
func newKeyNamer(opts Options) (keyNamer, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = defaultPrefix
	}
	if len(prefix) > maxPrefixLen {
		return keyNamer{}, fmt.Errorf("limiter/redis: prefix of %d bytes, want at most %d", len(prefix), maxPrefixLen)
	}
	if strings.ContainsAny(prefix, "{}") {
		return keyNamer{}, fmt.Errorf("limiter/redis: prefix %s holds '{' or '}': ratekey writes each key's hash tag right after the prefix, and a brace in it would choose the Cluster slot instead (drop the braces: keys spread over the slots by themselves, or set HashTag)", quote.Value(prefix))
	}
	var dim string
	if opts.HashTag != "" {
		if !dimensionName(opts.HashTag) {
			return keyNamer{}, fmt.Errorf("limiter/redis: hash tag %s is not a dimension name (^[a-z][a-z0-9_]{0,31}$, e.g. \"tenant\")", quote.Value(opts.HashTag))
		}
		dim = "|" + opts.HashTag + "="
	}
	maxKey := opts.MaxKeyLen
	switch {
	case maxKey == 0:
		maxKey = defaultMaxKeyLen
	case maxKey < minMaxKeyLen:
		return keyNamer{}, fmt.Errorf("limiter/redis: max key length %d, want at least %d (or 0 for the default %d)", maxKey, minMaxKeyLen, defaultMaxKeyLen)
	}
	return keyNamer{prefix: prefix, maxKey: maxKey, secret: append([]byte(nil), opts.HashSecret...), dim: dim}, nil
}

// shardOf returns how the buckets of client spread (one server, Cluster
// slots, Ring tags), or why the client is refused: an auto-pipeliner, or
// a client without ContextTimeoutEnabled.
func shardOf(client goredis.UniversalClient) (shardMode, error) {
	ctxTimeout, shard := true, oneServer // unknown client type: cannot check, documented
	switch c := client.(type) {
	case *goredis.AutoPipeliner:
		return shard, errors.New("limiter/redis: the client is a go-redis auto-pipeliner (AutoPipeline, AsyncAutoPipeline), which does not honour a command's context once it is queued, so no timeout would hold; pass the client it came from: the Limiter batches its own calls, each under its caller's deadline")
	case *goredis.Client:
		ctxTimeout = c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		ctxTimeout, shard = c.Options().ContextTimeoutEnabled, bySlot
	case *goredis.Ring:
		ctxTimeout, shard = c.Options().ContextTimeoutEnabled, byTag
	}
	if !ctxTimeout {
		return shard, errors.New("limiter/redis: the client must be created with ContextTimeoutEnabled: true, or go-redis ignores the per-call timeout while waiting for a reply")
	}
	return shard, nil
}

// Take decides reqs at the Redis server's current time, appends their
// decisions to dst and charges as the [limiter.Limiter] contract says, in
// one atomic script. Besides ctx.Err() and [limiter.ErrInvalidRequest]
// (which it also returns for a limit whose window exceeds 2^53-1 ns), it
// fails with an error wrapping [ErrTimeout] when Redis does not answer
// within [Options.Timeout], and with the go-redis error (connection
// refused, READONLY, OOM, ...) otherwise; after any of these the outcome is
// unknown (the script may have run) and go-redis does not replay the call.
// On a *redis.ClusterClient, an error that shows a dead or moved master
// (refused, reset, a timeout, CLUSTERDOWN, ...) also makes go-redis reload
// its slot map in the background, so that the calls after it reach the
// replica that took the master's slots over (every key decided again
// within 0.3 s of its promotion, in the tests) rather than the dead master
// until go-redis's own reload, a minute after the last.
// In-flight requests take their slots as leases in the same script (see
// "In-flight caps: leases" in the package documentation; the leases of a
// call whose outcome is unknown are cancelled once Redis answers again).
// No requests:
// no round trip. Safe for concurrent use.
func (l *Limiter) Take(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	n0 := len(dst)
	dst, rounds, err := l.run(ctx, dst, reqs, true)
	return withRoundTrips(dst, n0, rounds), err
}

// Peek appends the decisions Take would return now to dst, by the same
// script in a mode that writes nothing: it charges nothing, creates no
// state and extends no expiry. Its errors are those of Take; go-redis may
// retry a Peek that failed (it is read-only). Safe for concurrent use.
func (l *Limiter) Peek(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request) ([]limiter.Decision, error) {
	n0 := len(dst)
	dst, rounds, err := l.run(ctx, dst, reqs, false)
	return withRoundTrips(dst, n0, rounds), err
}

// withRoundTrips sets the RoundTrips of the Decisions a call appended to
// dst after its first n0 (none when it failed: dst is then nil).
func withRoundTrips(dst []limiter.Decision, n0, rounds int) []limiter.Decision {
	if len(dst) > n0 {
		for i := range dst[n0:] {
			dst[n0+i].RoundTrips = rounds
		}
	}
	return dst
}

// Argument layout of the script call: "evalsha", sha, numkeys, KEYS, then
// ARGV: the mode, and argsPerReq per request (see gcraScript; oneScript
// takes the same).
const (
	headArgs   = 3
	argsPerReq = 2
)

// run is Take (take) or Peek; it also returns the number of sequential
// round trips the call took (0 when it made none).
func (l *Limiter) run(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request, take bool) ([]limiter.Decision, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if err := gcra.ValidateAll(reqs); err != nil {
		return nil, 0, err
	}
	if hasInFlight(reqs) {
		// A copy: a refund of caps may outlive the call on a goroutine,
		// which would otherwise make every caller's reqs escape.
		return l.runInFlight(ctx, dst, slices.Clone(reqs), take) // inflight.go
	}
	for i := range reqs {
		if w := gcra.Window(reqs[i].Limit); w > maxWindow {
			return nil, 0, fmt.Errorf("%w: request %d: window %v (burst × interval) exceeds the Redis store's limit of 2^53-1 ns (%v)", limiter.ErrInvalidRequest, i, w, maxWindow)
		}
	}
	if dst == nil {
		dst = []limiter.Decision{} // non-nil, without allocating
	}
	if len(reqs) == 0 {
		return dst, 0, nil
	}
	if l.pre != nil && !settles(reqs) {
		// A call with a settling request is decided by Redis: its
		// Reservation is the shared bucket's TAT (see Limiter.Settle).
		if len(reqs) == 1 && l.pre.serves(&reqs[0]) {
			if d, rounds, ok, err := l.prefetched(ctx, &reqs[0], take, nil); ok || err != nil {
				if err != nil {
					return nil, rounds, err
				}
				return append(dst, d), rounds, nil
			}
		} else if len(reqs) > 1 && take {
			if out, rounds, ok, err := l.mixed(ctx, dst, reqs); ok {
				return out, rounds, err
			}
		}
	}
	return l.direct(ctx, dst, reqs, take)
}

// direct is run for reqs (valid, without in-flight caps, at least one)
// decided by Redis, without prefetch: the deny cache's answer for a call
// of one request, else one script call (split by slot or tag across a
// Cluster's masters when its buckets fall on several).
func (l *Limiter) direct(ctx context.Context, dst []limiter.Decision, reqs []limiter.Request, take bool) ([]limiter.Decision, int, error) {
	var deadline time.Time
	var probe chan struct{} // the deny cache's probe this call is
	if len(reqs) == 1 && l.deny != nil {
		d, answered, dl, ch, err := l.denyFirst(ctx, &reqs[0])
		if answered || err != nil {
			if err != nil {
				return nil, 0, err
			}
			return append(dst, d), 0, nil
		}
		deadline, probe = dl, ch
	}
	if deadline.IsZero() {
		deadline = l.deadline(ctx)
	}
	names, groups, slot, split := l.group(reqs)
	if split {
		// A copy: the split path hands reqs to goroutines, and
		// would otherwise make every caller's reqs escape.
		n0 := len(dst)
		dst, rounds, err := l.runSplit(ctx, dst, slices.Clone(reqs), names, groups, take)
		if err == nil && l.shard == bySlot {
			for i := range reqs {
				dst[n0+i].HashSlot = int(groups[i]) + 1
			}
		}
		return dst, rounds, err
	}
	c, slot := l.newCall(reqs, names, slot, take, deadline)
	cmd, err, reuse := l.dispatch(ctx, c, len(reqs), deadline, take)
	if err != nil {
		if reuse {
			putCall(c)
		}
		if probe != nil {
			l.deny.abandon(&reqs[0], probe)
		}
		return nil, 1, err
	}
	defer putCall(c) // after decide has read the reply
	return l.decided(dst, reqs, cmd, c.sent, slot, take, probe)
}

// denyFirst asks the deny cache about r, a call's only request: answered
// with its Decision (a cached rejection), or not, with the call's deadline
// (taken after the check: a local answer reads no other clock) and the
// probe the call is, if it is one (after yielding until the last reply's
// round trip has passed).
func (l *Limiter) denyFirst(ctx context.Context, r *limiter.Request) (d limiter.Decision, answered bool, deadline time.Time, probe chan struct{}, err error) {
	d, v, ch := l.deny.check(r)
	if v == denyHit {
		return d, true, deadline, nil, nil
	}
	deadline = l.deadline(ctx)
	if v == denyWait {
		if d, v, ch, err = l.waitProbe(ctx, r, deadline, ch); err != nil {
			return d, false, deadline, nil, err
		}
		if v == denyHit {
			return d, true, deadline, nil, nil
		}
	}
	if v != denyProbe {
		return d, false, deadline, nil, nil
	}
	// At most the last reply's round trip (see denyCache.check): mostly
	// tens of µs, below time.Sleep's resolution (about 1 ms on the
	// benchmark machine), so yield until it has passed.
	if w := min(d.RetryAfter, time.Until(deadline)); w >= time.Millisecond {
		time.Sleep(w)
	} else if w > 0 {
		for end := time.Now().Add(w); time.Now().Before(end); {
			runtime.Gosched()
		}
	}
	return d, false, deadline, ch, nil
}

// group names the buckets of a call of several requests on a Cluster or
// a Ring (names nil otherwise: newCall names them) and groups them by the
// slot (or the tag's hash) they fall in: split when they fall in several,
// else slot is the call's Cluster slot (-1 when unknown yet or not a
// ClusterClient).
func (l *Limiter) group(reqs []limiter.Request) (names []string, groups []uint32, slot int, split bool) {
	slot = -1
	if l.shard == oneServer || len(reqs) == 1 {
		return nil, nil, slot, false
	}
	names = make([]string, len(reqs))
	groups = make([]uint32, len(reqs))
	for i := range reqs {
		var h uint32
		names[i], h = l.names.name(&reqs[i])
		groups[i] = h
		if l.shard == bySlot {
			groups[i] = uint32(slotOf(h))
		}
		split = split || groups[i] != groups[0]
	}
	if l.shard == bySlot && !split {
		slot = int(groups[0])
	}
	return names, groups, slot, split
}

// newCall returns the script call of reqs (in one slot), with its
// arguments set: the buckets' names (names, or named here, which also
// gives the Cluster slot), charges and ceilings, the mode and the count.
func (l *Limiter) newCall(reqs []limiter.Request, names []string, slot int, take bool, deadline time.Time) (*call, int) {
	n := len(reqs)
	settle := take && settles(reqs) // the script then returns its time (see gcraScript)
	c := getCall(headArgs + n + 1 + argsPerReq*n + btoi(settle))
	c.s, c.take, c.deadline = &many, take, deadline
	if n == 1 {
		c.s = &one
	}
	c.args[2] = int64(n) // n < 256: boxing it does not allocate
	if l.now != nil {
		// The test clock's time is the script's; otherwise c.sent is set
		// when the call is written (exec, resend).
		c.sent = l.localNow()
	}
	c.args[headArgs+n] = l.mode(take, c.sent)
	for i := range reqs {
		r := &reqs[i]
		var name string
		if names != nil {
			name = names[i]
		} else {
			var h uint32
			name, h = l.names.name(r)
			if l.shard == bySlot {
				slot = slotOf(h)
			}
		}
		charge, ceiling := chargeCeiling(r)
		c.setArgs(i, n, name, charge, ceiling)
	}
	if settle {
		c.args[len(c.args)-1] = "t"
	}
	return c, slot
}

// dispatch sends c, a call of n requests: through its master's batcher
// when batching is on, else on the caller's goroutine under the call's
// deadline. reuse false: c is still owned by the batcher (not to be put
// back).
func (l *Limiter) dispatch(ctx context.Context, c *call, n int, deadline time.Time, take bool) (cmd *goredis.Cmd, err error, reuse bool) {
	var tctx context.Context
	if l.maxBatch > 1 && l.shard != byTag {
		bctx := ctx
		if l.shard == bySlot {
			// MasterForKey may load the slot map: under the deadline.
			var cancel context.CancelFunc
			tctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
			bctx = tctx
		}
		if b := l.batcherFor(bctx, c.names0(n)); b != nil {
			return l.submit(ctx, b, c)
		}
	}
	if tctx == nil {
		var cancel context.CancelFunc
		tctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	c.resend(l)
	if cmd, err = run(tctx, l.client, c.s, c.args, !take); err != nil {
		err = l.fail(ctx, tctx, err)
	}
	return cmd, err, true
}

// decided appends the Decisions of reqs that cmd's reply gives (checking
// that the script charged exactly when every enforcing request was
// allowed), with the call's Cluster slot, and reports a call of one
// request to the deny cache (sent: when the call was sent, local time).
func (l *Limiter) decided(dst []limiter.Decision, reqs []limiter.Request, cmd *goredis.Cmd, sent int64, slot int, take bool, probe chan struct{}) ([]limiter.Decision, int, error) {
	n0 := len(dst)
	dst = append(dst, make([]limiter.Decision, len(reqs))...) // no allocation when dst has room
	out := dst[n0:]
	charged, debt, err := decide(cmd, reqs, out, take && settles(reqs))
	if err == nil && charged != enforcingOK(reqs, out) {
		err = errDisagree
	}
	if err != nil {
		if probe != nil {
			l.deny.abandon(&reqs[0], probe)
		}
		return nil, 1, err
	}
	if slot >= 0 {
		for i := range out {
			out[i].HashSlot = slot + 1
		}
	}
	if len(reqs) == 1 && l.deny != nil {
		l.deny.done(&reqs[0], sent, l.localNow(), &out[0], debt, take && out[0].Allowed, nil, probe)
	}
	return dst, 1, nil
}

// settles reports whether reqs holds a settling request.
func settles(reqs []limiter.Request) bool {
	return slices.ContainsFunc(reqs, func(r limiter.Request) bool { return r.Settle })
}

// btoi returns 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitProbe waits while another call of r's bucket is its probe (ch, from
// denyCache.check's denyWait), for a call of r alone whose deadline is
// deadline: the probe's reply may say the bucket is in debt again. It waits
// for that reply, and for the next probe's if that one's reply does not say
// so (a waiter that went to Redis on its own would be one more call the
// cache is there to save: with 16 callers on one key, giving up after 3
// probes sent 3.3 such calls per emission interval), but for no more than
// half the time left to deadline. On a flooded key each probe admits and
// the bound admits again one emission interval later, so a waiter that the
// scheduler wakes that late finds the next probe in flight, and the next:
// waiting until its deadline, 126 to 157 calls per second failed with a
// time-out after waiting for up to 17 probes that admitted others
// (TestDenyCacheFloodNoErrors). At the cut-off the call decides on its own:
// the cached rejection if the bound rejects it by then, else a call to
// Redis (the probe, when none is in flight, else one beside it), with half
// its time left. It returns the verdict of its last check, never denyWait
// (d is the rejection of a denyHit; ch the probe of a denyProbe, which the
// call now is), or ctx's error if ctx ends first (nothing was sent).
func (l *Limiter) waitProbe(ctx context.Context, r *limiter.Request, deadline time.Time, ch chan struct{}) (d limiter.Decision, v int, _ chan struct{}, _ error) {
	cutoff := time.NewTimer(time.Until(deadline) / 2)
	defer cutoff.Stop()
	for {
		select {
		case <-ch:
		case <-ctx.Done():
			return d, 0, nil, ctx.Err()
		case <-cutoff.C:
			if d, v, ch = l.deny.check(r); v == denyWait {
				v, ch = denyMiss, nil // alongside the probe, reporting to none
			}
			return d, v, ch, nil
		}
		if d, v, ch = l.deny.check(r); v != denyWait {
			return d, v, ch, nil
		}
	}
}

// deadline returns the deadline of a call starting now: Timeout from now,
// or ctx's if earlier.
func (l *Limiter) deadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(l.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return deadline
}

// errDisagree is returned when the script's charge and the Go decision
// rule disagree: a script and a Go side out of step, so nothing the script
// says can be trusted.
var errDisagree = errors.New("limiter/redis: the script's charge disagrees with the Go decision rule; outcome unknown")

// enforcingOK reports whether every enforcing decision of out is allowed:
// the contract charges exactly then.
func enforcingOK(reqs []limiter.Request, out []limiter.Decision) bool {
	for i := range reqs {
		if !reqs[i].DryRun && !out[i].Allowed {
			return false
		}
	}
	return true
}

// mode returns ARGV[1] of a script call: "1" (take) or "0" (peek), with
// the test clock's time now (l.localNow()) and expiry slack when one is
// set.
func (l *Limiter) mode(take bool, now int64) any {
	if l.now == nil {
		// Constants: boxing them into an any does not allocate.
		if take {
			return "1"
		}
		return "0"
	}
	m := "0"
	if take {
		m = "1"
	}
	return fmt.Sprintf("%s %d %d %d", m, now/1e9, now%1e9, l.ttlSlack)
}

// chargeCeiling returns the script arguments of r: its charge in ns (-1 if
// it can never fit) and its ceiling in ns, negated for a dry run.
func chargeCeiling(r *limiter.Request) (charge, ceiling int64) {
	charge = -1 // never fits
	ceiling = int64(gcra.Ceiling(r.Limit))
	if t := int64(r.Limit.Rate.Interval()); r.Cost <= r.Limit.Burst && r.Cost*t <= ceiling {
		charge = r.Cost * t
	}
	if r.DryRun {
		ceiling = -ceiling
	}
	return charge, ceiling
}

// decide sets out[i] to the Decision of reqs[i] from the debts in the
// reply of the script (oneScript for one request, gcraScript otherwise)
// and reports whether the script charged (for a Peek: would charge), and,
// for one request, the debt it was decided against. With settle, the call
// asked for the script's time too (see gcraScript), and each settling
// request the call charged gets its Reservation.
func decide(cmd *goredis.Cmd, reqs []limiter.Request, out []limiter.Decision, settle bool) (bool, int64, error) {
	if len(reqs) == 1 {
		return decideOne(cmd, &reqs[0], &out[0], settle)
	}
	vals, err := cmd.Slice()
	want := len(reqs) + 1
	if settle {
		want += 2
	}
	if err != nil || len(vals) != want {
		return false, 0, fmt.Errorf("limiter/redis: unexpected reply from the script (%d values for %d requests, %v)", len(vals), len(reqs), err)
	}
	charged, _ := vals[0].(int64)
	var at int64
	if settle {
		sec, _ := vals[len(reqs)+1].(int64)
		nsec, _ := vals[len(reqs)+2].(int64)
		if at = replyTime(sec, nsec); at < 0 {
			return false, 0, fmt.Errorf("limiter/redis: unexpected reply from the script: time %v %v", vals[len(reqs)+1], vals[len(reqs)+2])
		}
	}
	for i := range reqs {
		debt, ok := vals[i+1].(int64)
		if !ok || debt < 0 {
			return false, 0, fmt.Errorf("limiter/redis: unexpected reply from the script: debt %v", vals[i+1])
		}
		out[i], _ = gcra.Decide(debt, 0, reqs[i].Limit, reqs[i].Cost)
		// Charged: every request (1), or the enforcing ones (2).
		if settle && (charged == 1 || charged == 2 && !reqs[i].DryRun) {
			reserve(&reqs[i], &out[i], at, debt)
		}
	}
	return charged >= 1, 0, nil
}

// decideOne is decide for a call of one request (oneScript's reply).
func decideOne(cmd *goredis.Cmd, r *limiter.Request, out *limiter.Decision, settle bool) (bool, int64, error) {
	var d, at int64
	var err error
	if settle {
		var txt string
		if txt, err = cmd.Text(); err == nil {
			d, at, err = parseTimed(txt)
		}
	} else {
		d, err = cmd.Int64()
	}
	if err != nil {
		return false, 0, fmt.Errorf("limiter/redis: unexpected reply from the script: %v", err)
	}
	charged := d >= 0
	if !charged {
		d = -1 - d
	}
	*out, _ = gcra.Decide(d, 0, r.Limit, r.Cost)
	if settle && charged {
		reserve(r, out, at, d)
	}
	return charged, d, nil
}

// parseTimed parses oneScript's reply to a settling call, "d sec nsec":
// the integer reply d and the time of the decision (ns since the epoch of
// the script's clock).
func parseTimed(reply string) (d, at int64, err error) {
	var v [3]int64
	txt := reply
	for i := range v {
		f, rest, _ := strings.Cut(txt, " ")
		if v[i], err = strconv.ParseInt(f, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("reply %q", reply)
		}
		txt = rest
	}
	if at = replyTime(v[1], v[2]); at < 0 || txt != "" {
		return 0, 0, fmt.Errorf("reply %q", reply)
	}
	return v[0], at, nil
}

// replyTime returns the time of a script's reply, (sec, nsec), in ns since
// the epoch of the script's clock; -1 for values out of range.
func replyTime(sec, nsec int64) int64 {
	if sec < 0 || nsec < 0 || nsec >= 1e9 {
		return -1
	}
	return sec*1e9 + nsec
}

// reserve sets the Reservation of d, the Decision of r, when r settles and
// the call charged it (d is Allowed): the TAT its charge left, at + debt +
// charge, with at the time of the decision and debt the one r was decided
// against (ns).
func reserve(r *limiter.Request, d *limiter.Decision, at, debt int64) {
	if r.Settle && d.Allowed {
		d.Reservation = at + debt + r.Cost*int64(r.Limit.Rate.Interval())
	}
}

// fail turns a go-redis error of a call under tctx (ctx with the
// Timeout) into the error Take and Peek return.
func (l *Limiter) fail(ctx, tctx context.Context, err error) error {
	return l.failTimed(ctx, tctx.Err() != nil, err)
}

// failTimed is fail for a call whose deadline (the Timeout's, or ctx's)
// has passed when timedOut.
func (l *Limiter) failTimed(ctx context.Context, timedOut bool, err error) error {
	l.reroute(err)
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(dl) {
		// The caller's deadline has passed, and go-redis's read deadline
		// (the same instant) fired before the context's timer: name it.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		if errors.Is(err, cerr) {
			return fmt.Errorf("limiter/redis: %w (outcome unknown)", cerr)
		}
		return fmt.Errorf("limiter/redis: %w (outcome unknown): %w", cerr, err)
	}
	var ne net.Error
	if timedOut || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (%v; outcome unknown): %w", ErrTimeout, l.timeout, err)
	}
	return fmt.Errorf("limiter/redis: outcome unknown: %w", err)
}

// reroute asks a Cluster client to reload its slot map when err (of a
// call it routed) shows that the master it sent the call to may be dead or
// no longer serve the slot: a network error (connection refused or reset,
// EOF, a timeout: a master killed, paused or cut off), or a CLUSTERDOWN,
// MASTERDOWN, READONLY or MOVED reply. go-redis reloads on its own only
// after MOVED and READONLY, and otherwise once its map is a minute old
// (ClusterStateReloadInterval): a dead master's slots were sent to it for
// 56 s after its replica had taken them over (issue 24). The reload is
// go-redis's ClusterClient.ReloadState: it returns at once, runs in the
// background, at most one at a time per client and, while errors keep
// asking, one every 200 ms or so (each a CLUSTER SLOTS to one node that
// answers). Nothing is resent: a call that failed stays failed (its
// outcome unknown), and the calls after the reload go where the new map
// says. A cancelled context, another client type or another error does
// nothing. Safe for concurrent use.
func (l *Limiter) reroute(err error) {
	cc, ok := l.client.(*goredis.ClusterClient)
	if !ok || err == nil || errors.Is(err, context.Canceled) {
		return
	}
	var ne net.Error // context.DeadlineExceeded is one too
	_, moved := goredis.IsMovedError(err)
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || moved ||
		goredis.IsClusterDownError(err) || goredis.IsMasterDownError(err) || goredis.IsReadOnlyError(err) {
		cc.ReloadState(context.Background())
	}
}
