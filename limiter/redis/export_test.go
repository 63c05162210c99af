package redis

import (
	"context"
	"time"

	"github.com/ratekey/ratekey/limiter"

	goredis "github.com/redis/go-redis/v9"
)

// testTTLSlack is added (ms) to every expiry under a test clock: the test
// clock and Redis's real expiry clock move at unrelated speeds, so a state
// must outlive the real time a test takes. An expired and a merely full
// state decide alike (debt 0), so the slack changes no decision.
const testTTLSlack = int64(time.Hour / time.Millisecond)

// NewWithTestClock is New with the script's time taken from now (its
// reading as nanoseconds since the Unix epoch, >= 0: a test clock such as
// clocktest.ManualClock.Time) instead of the server's TIME, for the
// conformance suite. Only this package's tests can reach it.
func NewWithTestClock(client goredis.UniversalClient, opts Options, now func() time.Time) (*Limiter, error) {
	l, err := New(client, opts)
	if err != nil {
		return nil, err
	}
	l.now = func() time.Duration { return time.Duration(now().UnixNano()) }
	l.ttlSlack = testTTLSlack
	return l, nil
}

// The bounds of Options, for the tests of New.
const (
	DefaultMaxKeyLen = defaultMaxKeyLen
	MinMaxKeyLen     = minMaxKeyLen
	MaxPrefixLen     = maxPrefixLen
)

// ScriptSHA and OneScriptSHA are the SHA-1s EVALSHA names the scripts by:
// the general one and the one for calls of one request.
var ScriptSHA, OneScriptSHA = many.sha.(string), one.sha.(string)

// TakeRounds is Take that also returns the number of sequential round
// trips the call took.
func TakeRounds(l *Limiter, ctx context.Context, reqs []limiter.Request) ([]limiter.Decision, int, error) {
	return l.run(ctx, nil, reqs, true)
}

// Refunds returns the number of parts refunded, and how many of those
// refunds failed.
func Refunds(l *Limiter) (sent, lost int64) { return l.refunds.Load(), l.lostRefunds.Load() }

// Slot returns the Redis Cluster slot of r's bucket, computed client-side.
func (l *Limiter) Slot(r limiter.Request) int {
	_, h := l.names.name(&r)
	return slotOf(h)
}

// CRC16 is the CRC16/XMODEM of the slot computation.
var CRC16 = crc16

// CancelNext cancels, ahead of it, the lease that l's next Take with an
// in-flight cap would take for r: a cancel that reaches Redis before the
// acquire it cancels (they travel on different connections).
func CancelNext(l *Limiter, ctx context.Context, r limiter.Request) error {
	name, h := l.names.name(&r)
	_, err := l.releaseRefs(ctx, []leaseRef{l.refOf(name, l.groupOf(h), l.leases.seq.Load()+1, &r)}, true)
	return err
}

// Cancels returns the number of cancels l has queued, and how many it
// dropped (the queue was full).
func Cancels(l *Limiter) (queued int, dropped int64) {
	l.leaseTag()
	l.leases.mu.Lock()
	defer l.leases.mu.Unlock()
	return len(l.leases.cancels), l.leases.dropped.Load()
}

// Queued returns the number of calls waiting in l's one-server queue.
func Queued(l *Limiter) int {
	l.single.mu.Lock()
	defer l.single.mu.Unlock()
	return len(l.single.queue)
}

// KeyName returns the Redis key of r's bucket.
func (l *Limiter) KeyName(r limiter.Request) string {
	name, _ := l.names.name(&r)
	return name
}

// RedisKey returns the name of the Redis key of r's bucket (see redisKey).
func RedisKey(l *Limiter, r limiter.Request) string { return l.redisKey(r) }

// MaxWindow is the largest window the store accepts (see maxWindow).
const MaxWindow = maxWindow

// redisKey returns the name of the Redis key that holds the state of r's
// bucket (see the package documentation for the layout). r must be a
// request Take would accept (a non-empty Key, Cost >= 1, a Limit that
// passes [limiter.Limit.Validate]).
func (l *Limiter) redisKey(r limiter.Request) string {
	name, _ := l.names.name(&r)
	return name
}
